/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "elfsym.h"
#include "launch_stacks.h"
#include "ring.h"
#include "session.h"
#include "target.h"
#include "timeutil.h"

struct session {
	pid_t pid;
	struct aiprof_ring_hdr *hdr;
	size_t map_len;
	uint32_t nslots;        /* the ring's geometry, checked once when it was mapped */
	uint64_t tail;          /* the consumer's position: ours, not the header's */
	bool recording;
};

/* ---- event store -------------------------------------------------------------------- */

void event_store__clear(struct event_store *s)
{
	for (size_t i = 0; i < s->nstrings; i++)
		free(s->strings[i]);
	free(s->strings);
	free(s->string_total);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/*
 * A chunk of a string, from the target's ring: untrusted. The first chunk of an id fixes
 * its length; a chunk that disagrees with it, lies outside it, or would take the strings
 * past their budget is counted in `rejected` and dropped.
 */
static void store_string_chunk(struct event_store *s, const struct aiprof_ev_str *c)
{
	size_t len;

	if (c->id == 0 || c->id > EVENT_STORE_MAX_STRING_ID || c->total == 0 || c->offset >= c->total)
		goto reject;
	if (c->id >= s->nstrings) {
		size_t n = s->nstrings ? s->nstrings : 64;
		char **ns;
		uint16_t *nt;

		while (n <= c->id)
			n *= 2;
		ns = realloc(s->strings, n * sizeof(*ns));
		if (!ns)
			goto oom;
		s->strings = ns;
		memset(s->strings + s->nstrings, 0, (n - s->nstrings) * sizeof(*ns));
		nt = realloc(s->string_total, n * sizeof(*nt));
		if (!nt)
			goto oom;  /* strings[] grew, nstrings did not: consistent */
		s->string_total = nt;
		memset(s->string_total + s->nstrings, 0, (n - s->nstrings) * sizeof(*nt));
		s->nstrings = n;
	}
	if (!s->strings[c->id]) {
		if (s->string_bytes + c->total + 1 > EVENT_STORE_STRING_BYTES)
			goto reject;
		s->strings[c->id] = calloc(1, (size_t)c->total + 1);
		if (!s->strings[c->id])
			goto oom;
		s->string_total[c->id] = c->total;
		s->string_bytes += (size_t)c->total + 1;
	} else if (s->string_total[c->id] != c->total) {
		goto reject;
	}
	len = (size_t)c->total - c->offset;
	if (len > AIPROF_STR_CHUNK)
		len = AIPROF_STR_CHUNK;
	memcpy(s->strings[c->id] + c->offset, c->s, len);
	return;
reject:
	s->rejected++;
	return;
oom:
	s->store_drops++;
}

void event_store__add(struct event_store *s, const struct aiprof_event *e)
{
	if (e->type == AIPROF_EV_NONE || e->type >= AIPROF_EV__MAX || e->api >= AIPROF_API__MAX) {
		s->rejected++;
		return;
	}
	if (e->type == AIPROF_EV_STRING) {
		store_string_chunk(s, &e->u.str);
		return;
	}
	size_t max = s->max_events ? s->max_events : EVENT_STORE_MAX_EVENTS;

	if (s->n >= max) {
		s->store_drops++;       /* bounded, whatever the window's length */
		return;
	}
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 4096;

		if (ncap > max)
			ncap = max;     /* never more memory than the cap allows */
		struct aiprof_event *nv = realloc(s->v, ncap * sizeof(*nv));

		if (!nv) {
			s->store_drops++;
			return;
		}
		s->v = nv;
		s->cap = ncap;
	}
	memcpy(&s->v[s->n++], e, sizeof(*e));
}

/*
 * Kernel names come mangled from CUPTI and the driver (cuFuncGetName, cuKernelGetName), while
 * a launch through a host stub is named by the symboliser, demangled: after the window every
 * string that is a whole mangled C++ name is replaced by its demangled form, so a kernel and
 * its launch carry one name. Call stacks ("hex,hex,...") never start with "_Z".
 */
void event_store__demangle(struct event_store *s)
{
	for (size_t i = 1; i < s->nstrings; i++) {
		char *d = s->strings[i] ? symbol_demangle(s->strings[i]) : NULL;

		if (!d)
			continue;
		s->string_bytes += strlen(d) + 1;
		s->string_bytes -= strlen(s->strings[i]) + 1;
		free(s->strings[i]);
		s->strings[i] = d;
	}
}

const char *event_store__string(const struct event_store *s, uint32_t id)
{
	if (id == 0 || id >= s->nstrings)
		return NULL;
	return s->strings[id];
}

/* ---- finding and mapping the ring --------------------------------------------------- */

static int ns_pid_of(pid_t pid, pid_t *ret)
{
	char path[64], line[256];
	FILE *f;
	int r = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) == 0) {
			char *p = line + 6, *last = NULL, *tok;

			/* the last field is the pid in the innermost namespace */
			for (tok = p; *tok;) {
				while (*tok == ' ' || *tok == '\t')
					tok++;
				if (*tok >= '0' && *tok <= '9')
					last = tok;
				while (*tok && *tok != ' ' && *tok != '\t')
					tok++;
			}
			if (last) {
				*ret = (pid_t)strtol(last, NULL, 10);
				r = 0;
			}
			break;
		}
	}
	fclose(f);
	return r;
}

static int try_map_ring(pid_t pid, const char *fdname, pid_t nspid, struct session **ret)
{
	struct aiprof_ring_hdr probe;
	struct session *s = NULL;
	char path[PATH_MAX];
	struct stat st;
	void *mem;
	size_t len;
	int fd, r, seals;

	snprintf(path, sizeof(path), "/proc/%d/fd/%s", pid, fdname);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe)) {
		r = -EIO;
		goto out;
	}
	if (probe.magic != AIPROF_RING_MAGIC) {
		r = -EAGAIN; /* still being initialised */
		goto out;
	}
	if (probe.version != AIPROF_RING_VERSION || probe.event_size != AIPROF_EVENT_SIZE ||
	    probe.nslots == 0 || (probe.nslots & (probe.nslots - 1)) || probe.nslots > (1u << 24)) {
		r = -EPROTO;
		goto out;
	}
	if (nspid > 0 && probe.lib_pid != (uint32_t)nspid) {
		r = -ESTALE; /* a ring inherited across fork(): not this process's */
		goto out;
	}
	len = AIPROF_RING_BYTES(probe.nslots);
	/*
	 * The memfd is the target's: it could shrink it under our mapping (SIGBUS here). The
	 * library seals it against shrinking; a ring without that seal gets it now, or is
	 * refused. Its size must hold the slots the header claims.
	 */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (!(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) ||
	    fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size < len) {
		r = -EBADMSG;
		goto out;
	}
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		munmap(mem, len);
		r = -ENOMEM;
		goto out;
	}
	s->pid = pid;
	s->hdr = mem;
	s->map_len = len;
	s->nslots = probe.nslots;
	s->tail = atomic_load_explicit(&s->hdr->tail, memory_order_relaxed);
	*ret = s;
	r = 0;
out:
	close(fd);
	return r;
}

static int find_ring(pid_t pid, struct session **ret)
{
	char path[64], target[256];
	struct dirent *de;
	pid_t nspid = 0;
	int r = -ENOENT;
	DIR *d;

	(void)ns_pid_of(pid, &nspid);
	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char link[PATH_MAX];
		ssize_t n;
		int q;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "/proc/%d/fd/%s", pid, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strncmp(target, "/memfd:" AIPROF_RING_MEMFD, strlen("/memfd:" AIPROF_RING_MEMFD)))
			continue;
		q = try_map_ring(pid, de->d_name, nspid, ret);
		if (q == 0) {
			r = 0;
			break;
		}
		if (r == -ENOENT || q == -EPROTO || q == -EBADMSG)
			r = q;
	}
	closedir(d);
	return r;
}

int session__open(pid_t pid, uint64_t wait_ns, struct session **ret)
{
	uint64_t deadline = now_monotonic_ns() + wait_ns;
	int r;

	for (;;) {
		r = find_ring(pid, ret);
		if (r == 0 || r == -EPROTO || r == -EBADMSG || r == -ESRCH || now_monotonic_ns() >= deadline)
			return r;
		sleep_ns(1 * NSEC_PER_MSEC);
	}
}

const struct aiprof_ring_hdr *session__hdr(const struct session *s)
{
	return s->hdr;
}

/* ---- control -------------------------------------------------------------------------- */

static void kick(struct session *s)
{
	atomic_fetch_add_explicit(&s->hdr->ctl, 1, memory_order_release);
	/* shared futex: the library's control thread waits on this word in its mapping */
	syscall(SYS_futex, &s->hdr->ctl, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void session__heartbeat(struct session *s)
{
	atomic_store_explicit(&s->hdr->heartbeat_ns, now_monotonic_ns(), memory_order_relaxed);
}

int session__start(struct session *s, uint32_t collectors)
{
	struct aiprof_event e;

	/* events left by an injector that died mid-window belong to nobody */
	for (uint64_t i = 0; i < 2ull * s->nslots && ring__pop_at(s->hdr, s->nslots, &s->tail, &e); i++)
		;
	atomic_store_explicit(&s->hdr->drops, 0, memory_order_relaxed);
	session__heartbeat(s);
	atomic_store_explicit(&s->hdr->collectors, collectors, memory_order_relaxed);
	/* Python frames in the launch stacks when the target runs a CPython we can read */
	(void)launch_stacks_arm_python(s->hdr, s->pid);
	atomic_store_explicit(&s->hdr->attached_pid, (uint32_t)getpid(), memory_order_relaxed);
	atomic_fetch_add_explicit(&s->hdr->generation, 1, memory_order_relaxed);
	atomic_store_explicit(&s->hdr->enabled, 1, memory_order_release);
	kick(s);
	s->recording = true;
	return 0;
}

size_t session__drain(struct session *s, struct event_store *store)
{
	struct aiprof_event e;
	size_t n = 0;

	/* at most two rings' worth a call: a producer that refills the ring as fast as we drain
	 * it (or fakes committed slots) cannot keep the consumer here */
	while (n < 2ull * s->nslots && ring__pop_at(s->hdr, s->nslots, &s->tail, &e)) {
		event_store__add(store, &e);
		n++;
	}
	return n;
}

void session__stop(struct session *s, struct event_store *store)
{
	uint64_t deadline;

	if (!s->recording)
		return;
	atomic_store_explicit(&s->hdr->enabled, 0, memory_order_release);
	atomic_store_explicit(&s->hdr->attached_pid, 0, memory_order_relaxed);
	kick(s);
	s->recording = false;
	/*
	 * The library answers with lib_state=IDLE once it has flushed what it buffers
	 * (CUPTI); a producer that saw enabled=1 just before may still be writing its slot.
	 */
	deadline = now_monotonic_ns() + 1000 * NSEC_PER_MSEC;
	/* an exited process never answers: what it left in the ring is drained below */
	while (atomic_load_explicit(&s->hdr->lib_state, memory_order_acquire) != AIPROF_LIB_IDLE &&
	       now_monotonic_ns() < deadline && !target_exited(s->pid)) {
		if (store)
			session__drain(s, store);
		sleep_ns(500 * NSEC_PER_USEC);
	}
	deadline = now_monotonic_ns() + 50 * NSEC_PER_MSEC;
	do {
		if (store)
			session__drain(s, store);
		if (atomic_load_explicit(&s->hdr->head, memory_order_relaxed) == s->tail)
			break;
		sleep_ns(200 * NSEC_PER_USEC);
	} while (now_monotonic_ns() < deadline);
	if (store)
		store->drops = atomic_load_explicit(&s->hdr->drops, memory_order_relaxed);
}

void session__free(struct session *s)
{
	if (!s)
		return;
	session__stop(s, NULL);
	munmap(s->hdr, s->map_len);
	free(s);
}
