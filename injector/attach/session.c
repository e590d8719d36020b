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

#include "procstat.h"
#include "readfile.h"
#include "ring.h"
#include "timeutil.h"
#include "target/python.h"
#include "target/target.h"
#include "session.h"

struct session {
	pid_t pid;
	struct aiprof_ring_hdr *hdr;
	size_t map_len;
	uint32_t nslots;        /* the ring's geometry, checked once when it was mapped */
	uint64_t tail;          /* the consumer's position: ours, not the header's */
	bool recording;
	bool orphan;            /* the process exec'd: no library answers any more */
	bool released;          /* session__release() was called */
	int release_err;        /* and what it returned */
};

/* ---- finding and mapping the ring --------------------------------------------------- */

static int ns_pid_of(pid_t pid, pid_t *ret)
{
	char path[64], buf[4096];
	const char *v, *last = NULL;
	size_t len;
	ssize_t got;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	got = readfile_buf(path, buf, sizeof(buf));
	if (got < 0)
		return (int)got;
	v = procstatus_value(buf, (size_t)got, "NSpid", &len);
	if (!v)
		return -ENOENT;
	/* the last field is the pid in the innermost namespace */
	for (size_t i = 0; i < len; i++)
		if (v[i] >= '0' && v[i] <= '9' && (i == 0 || v[i - 1] == ' ' || v[i - 1] == '\t'))
			last = v + i;
	if (!last)
		return -ENOENT;
	*ret = (pid_t)strtol(last, NULL, 10);
	return 0;
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

void session__orphan(struct session *s)
{
	s->orphan = true;
}

bool session__live(pid_t pid)
{
	struct session *s = NULL;

	if (find_ring(pid, &s) < 0)
		return false;
	munmap(s->hdr, s->map_len);
	free(s);
	return true;
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

/*
 * Lets the launch hooks of the library behind ring h record Python frames too, when pid
 * runs a CPython whose offsets aiprof knows and has checked (target/python.h); clears that
 * otherwise. Called before recording starts. 0, or a negative errno (-ENOENT: no CPython).
 */
static int arm_python(struct aiprof_ring_hdr *h, pid_t pid)
{
	const struct py_offsets *b;
	struct py_proc *py = NULL;
	char why[256];
	int r;

	atomic_store_explicit(&h->py_valid, 0, memory_order_release);
	r = py_proc__new(pid, why, sizeof(why), &py);
	if (r < 0)
		return r;
	b = &py_proc__offsets(py)->bpf;
	h->py = (struct aiprof_py_walk){
		.ts_cframe = b->ts_cframe, .cframe_current_frame = b->cframe_current_frame,
		.ts_current_frame = b->ts_current_frame, .fr_code = b->fr_code,
		.fr_previous = b->fr_previous, .fr_instr = b->fr_instr, .fr_owner = b->fr_owner,
		.fr_is_entry = b->fr_is_entry, .code_mask = b->code_mask,
	};
	atomic_store_explicit(&h->py_valid, 1, memory_order_release);
	py_proc__free(py);
	return 0;
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
	(void)arm_python(s->hdr, s->pid);
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
	/* an exited process never answers, nor one that exec'd: what it left in the ring is
	 * drained below */
	while (!s->orphan &&
	       atomic_load_explicit(&s->hdr->lib_state, memory_order_acquire) != AIPROF_LIB_IDLE &&
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

pid_t session__ctl_tid(struct session *s, uint64_t wait_ns)
{
	uint64_t deadline = now_monotonic_ns() + wait_ns;
	uint32_t ns;

	while (!(ns = atomic_load_explicit(&s->hdr->ctl_tid, memory_order_acquire)) &&
	       now_monotonic_ns() < deadline && !target_exited(s->pid))
		sleep_ns(500 * NSEC_PER_USEC);
	return ns ? proc_host_tid(s->pid, ns) : 0;
}

int session__release(struct session *s)
{
	uint64_t deadline;

	session__stop(s, NULL);
	if (s->released)
		return s->release_err;
	s->released = true;
	if (atomic_load_explicit(&s->hdr->stays_live, memory_order_relaxed))
		return s->release_err = -EALREADY;     /* LD_PRELOAD put it there: it stays */
	atomic_store_explicit(&s->hdr->release, 1, memory_order_release);
	kick(s);
	s->release_err = -ESRCH;
	if (s->orphan)
		return s->release_err;
	deadline = now_monotonic_ns() + 500 * NSEC_PER_MSEC;
	for (;;) {
		if (atomic_load_explicit(&s->hdr->lib_state, memory_order_acquire) ==
		    AIPROF_LIB_RELEASED)
			return s->release_err = 0;
		if (target_exited(s->pid))
			return s->release_err;
		if (now_monotonic_ns() >= deadline)
			return s->release_err = -ETIMEDOUT;
		sleep_ns(500 * NSEC_PER_USEC);
	}
}

void session__free(struct session *s)
{
	if (!s)
		return;
	(void)session__release(s);
	munmap(s->hdr, s->map_len);
	free(s);
}
