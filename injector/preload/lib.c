/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle of libaiprof.so: the constructor (run by dlopen() on a thread the injector
 * created, or at start under LD_PRELOAD) creates the ring memfd, installs the hooks and
 * starts the control thread. Every failure leaves the library idle; nothing here may
 * crash, block for long or print.
 *
 * One instance per process: a second copy (the injector loads the library from a fresh
 * memfd each time, so the loader sees a new object) finds the live ring through
 * /proc/self/fd, says so in a LIB_STATUS event and stays inert. After fork() the child's
 * copy goes dormant (idle, no ring, no patching); the injector loads no second copy into
 * such a child (attach/inject.c): it wakes the inherited copy with aiprof_rearm(), which
 * gives it a ring and a control thread of its own.
 *
 * At the end of a window the injector releases the ring and the copy goes dormant the same
 * way (lib__go_dormant): its control thread exits and the ring's fd is closed, so nothing of
 * ours runs in the process or holds anything of it but the idle GOT hooks and the mapped
 * library; the next window wakes it with aiprof_rearm().
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

/* fstat and memfd_create through the system call: their libc functions need glibc 2.33 and
 * 2.27, and this library loads down to 2.17 (glibc_compat.h). x86-64's struct stat is the
 * kernel's. */
static int fd_stat(int fd, struct stat *st)
{
	return (int)syscall(SYS_fstat, fd, st);
}

static int ring_memfd(const char *name, unsigned int flags)
{
	return (int)syscall(SYS_memfd_create, name, flags);
}

static struct aiprof_ring_hdr g_idle_hdr;       /* enabled stays 0 forever */
struct aiprof_ring_hdr *g_hdr = &g_idle_hdr;
uint32_t g_pid;
bool g_active;

struct aiprof_ring_hdr *g_ring;                 /* the ring we own, NULL if none */
static int g_ring_fd = -1;
static bool g_rearmable;                       /* dormant: a forked child's, or released */
static bool g_forked;                           /* dormant because of fork(), not a release */
bool g_preloaded;                               /* loaded by LD_PRELOAD: never released */
static void *g_ring_spare;                      /* a let-go ring's address, reused by the next */
static uint32_t g_last_generation;              /* the let-go ring's: the next ring goes on
						 * from there, so that what the hooks and the
						 * call-site caches sent in it is sent again */
static const char *g_rearm_error;
static dev_t g_ring_dev;                        /* identity of the memfd behind g_ring_fd */
static ino_t g_ring_ino;
static uint64_t g_ring_bytes;

static __thread struct tls g_tls;

struct tls *tls_get(void)
{
	struct tls *t = &g_tls;

	if (unlikely(!t->tid))
		t->tid = (uint32_t)syscall(SYS_gettid);
	return t;
}

bool rec_begin_slow(struct rec *r, struct aiprof_ring_hdr *h, uint32_t collector)
{
	struct tls *t;

	if (!(atomic_load_explicit(&h->collectors, memory_order_relaxed) & collector))
		return false;
	t = tls_get();
	if (t->depth)
		return false;
	t->depth++;
	r->h = h;
	r->tls = t;
	r->clk = clk_get();
	r->t0 = clk_ticks(r->clk);
	return true;
}

int emit_string(struct aiprof_ring_hdr *h, uint16_t type, uint32_t id, const char *s,
		size_t len)
{
	uint64_t ts = clk_mono_ns();
	struct tls *t = tls_get();
	size_t off = 0;

	if (len > UINT16_MAX)
		len = UINT16_MAX;
	do {
		struct aiprof_event *e = ring__reserve(h);
		size_t n = len - off < AIPROF_STR_CHUNK ? len - off : AIPROF_STR_CHUNK;

		if (!e)
			return -ENOSPC;
		e->type = type;
		e->api = AIPROF_API_NONE;
		e->tid = t->tid;
		e->pid = g_pid;
		e->flags = 0;
		e->ts = ts;
		e->dur = 0;
		memset(&e->u, 0, sizeof(e->u));
		e->u.str.id = id;
		e->u.str.offset = (uint16_t)off;
		e->u.str.total = (uint16_t)len;
		memcpy(e->u.str.s, s + off, n);
		ring__commit(h, e);
		off += n;
	} while (off < len);
	return 0;
}

void lib_status(const char *fmt, ...)
{
	struct aiprof_ring_hdr *h = __atomic_load_n(&g_ring, __ATOMIC_ACQUIRE);
	char buf[512];
	va_list ap;
	int n;

	if (!h)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf))
		n = sizeof(buf) - 1;
	(void)emit_string(h, AIPROF_EV_LIB_STATUS, 0, buf, (size_t)n);
}

/* ---- finding a live ring of another copy ----------------------------------------- */

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static bool fd_is_ring(int dirfd, const char *name)
{
	static const char want[] = "/memfd:" AIPROF_RING_MEMFD " (deleted)";
	char link[64];
	ssize_t n = readlinkat(dirfd, name, link, sizeof(link));

	return n == (ssize_t)(sizeof(want) - 1) && memcmp(link, want, sizeof(want) - 1) == 0;
}

/* Returns an fd of this process's live ring (magic set, lib_pid == us), or -1. */
static int live_ring_find(uint32_t pid)
{
	char buf[4096];
	int dirfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int found = -1;

	if (dirfd < 0)
		return -1;
	for (;;) {
		long n = syscall(SYS_getdents64, dirfd, buf, sizeof(buf));

		if (n <= 0)
			break;
		for (long off = 0; off < n && found < 0;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			struct aiprof_ring_hdr *h;
			struct stat st;
			int fd;

			off += d->d_reclen;
			if (d->d_name[0] < '0' || d->d_name[0] > '9' || !fd_is_ring(dirfd, d->d_name))
				continue;
			fd = 0;
			for (const char *p = d->d_name; *p >= '0' && *p <= '9'; p++)
				fd = fd * 10 + (*p - '0');
			if (fd == dirfd || fd_stat(fd, &st) < 0 || st.st_size < AIPROF_RING_HDR_SIZE)
				continue;
			h = mmap(NULL, AIPROF_RING_HDR_SIZE, PROT_READ, MAP_SHARED, fd, 0);
			if (h == MAP_FAILED)
				continue;
			if (atomic_load_explicit((_Atomic uint64_t *)&h->magic,
						 memory_order_acquire) == AIPROF_RING_MAGIC &&
			    h->lib_pid == pid)
				found = fd;
			munmap(h, AIPROF_RING_HDR_SIZE);
		}
		if (found >= 0)
			break;
	}
	close(dirfd);
	return found;
}

/* Tells the live instance's ring that a second copy was loaded and stays inert. */
static void note_second_copy(int fd)
{
	struct aiprof_ring_hdr *h;
	struct stat st;
	char msg[160];
	int n;

	if (fd_stat(fd, &st) < 0)
		return;
	h = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return;
	if (h->nslots && (h->nslots & (h->nslots - 1)) == 0 &&
	    AIPROF_RING_BYTES(h->nslots) <= (uint64_t)st.st_size) {
		n = snprintf(msg, sizeof(msg),
			     "libaiprof build %016llx loaded again; build %016llx is active, the "
			     "new copy stays inert", (unsigned long long)aiprof_preload_build,
			     (unsigned long long)h->lib_build);
		if (n > 0)
			(void)emit_string(h, AIPROF_EV_LIB_STATUS, 0, msg,
					  (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	}
	munmap(h, (size_t)st.st_size);
}

/* ---- ring creation ---------------------------------------------------------------- */

static int ring_create(void)
{
	uint64_t bytes = AIPROF_RING_BYTES(AIPROF_RING_SLOTS);
	struct stat st;
	void *p;
	int fd, r;

	fd = ring_memfd(AIPROF_RING_MEMFD, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0) {
		r = -errno;
		goto fail;
	}
	/* the injector maps it too: it must never shrink under that mapping (SIGBUS there) */
	(void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
	/* over the placeholder a released ring left (a hook may still hold its address): one
	 * address for every window, never a new one each time */
	p = mmap(g_ring_spare, bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED | (g_ring_spare ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto fail;
	}
	g_ring_spare = NULL;
	ring__init(p, AIPROF_RING_SLOTS, g_pid, aiprof_preload_build);
	if (fd_stat(fd, &st) == 0) {
		g_ring_dev = st.st_dev;
		g_ring_ino = st.st_ino;
	}
	g_ring_fd = fd;
	g_ring_bytes = bytes;
	__atomic_store_n(&g_ring, (struct aiprof_ring_hdr *)p, __ATOMIC_RELEASE);
	return 0;
fail:
	close(fd);
	return r;
}

/* ---- fork ------------------------------------------------------------------------- */

/* Whether fd is still our memfd: the program may have closed it and reused the number. */
static bool ring_fd_is_ours(int fd)
{
	struct stat st;

	return fd >= 0 && fd_stat(fd, &st) == 0 && st.st_dev == g_ring_dev &&
	       st.st_ino == g_ring_ino;
}

/*
 * Runs in the child with only the forking thread alive; async-signal-safe calls only.
 * The parent's ring is replaced, at the same address, by private zeroed memory, so a
 * hook that was mid-event on this thread finishes into memory nobody reads (a zeroed
 * header still yields an in-bounds slot). The child stays idle and never patches.
 */
/*
 * Lets go of ring, ours until now: its pages are replaced, at the same address, by private
 * zeroed memory (a hook that loaded its address just before finishes its event there, read by
 * nobody), and its fd is closed; the next ring goes on from its generation and takes its
 * address. Async-signal-safe: the fork child calls it.
 */
static void ring_let_go(struct aiprof_ring_hdr *ring)
{
	if (ring) {
		g_last_generation = atomic_load_explicit(&ring->generation, memory_order_relaxed);
		if (mmap(ring, g_ring_bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
			g_ring_spare = ring;
	}
	if (ring_fd_is_ours(g_ring_fd))
		close(g_ring_fd);
	g_ring_fd = -1;
}

static void atfork_child(void)
{
	struct aiprof_ring_hdr *ring = g_ring;

	__atomic_store_n(&g_hdr, &g_idle_hdr, __ATOMIC_RELEASE);
	g_active = false;
	g_pid = (uint32_t)getpid();
	g_tls.tid = 0;
	atomic_store_explicit(&g_cupti_active, 0, memory_order_relaxed);
	__atomic_store_n(&g_ring, NULL, __ATOMIC_RELEASE);
	ring_let_go(ring);
	patch__atfork_child();
	hostmem__atfork_child();
	cupti__atfork_child();
	g_forked = true;
	__atomic_store_n(&g_rearmable, true, __ATOMIC_RELEASE);
}

void lib__go_dormant(void)
{
	struct aiprof_ring_hdr *ring = g_ring;

	/* from here the hooks see the idle header */
	__atomic_store_n(&g_hdr, &g_idle_hdr, __ATOMIC_RELEASE);
	patch__set_dormant();
	g_active = false;
	__atomic_store_n(&g_ring, NULL, __ATOMIC_RELEASE);
	if (ring)
		atomic_store_explicit(&ring->lib_state, AIPROF_LIB_RELEASED, memory_order_release);
	ring_let_go(ring);
	g_forked = false;
	__atomic_store_n(&g_rearmable, true, __ATOMIC_RELEASE);
}

/* With a ring of our own: the hooks patched, the control thread started, the ring published
 * to the hooks. */
static int go_live(void)
{
	int r;

	g_active = true;
	r = patch__rescan(true);
	if (r < 0)
		lib_status("hook installation incomplete: %s", strerror(-r));
	r = control__start(g_ring);
	if (r < 0) {
		lib_status("cannot start the control thread (%s): staying idle", strerror(-r));
		return r;
	}
	__atomic_store_n(&g_hdr, g_ring, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Wakes the dormant copy a forked child inherited: a ring of its own, its hooks patched
 * again (the GOT slots it inherited already point at them) and a control thread. The
 * injector calls it in place of dlopen() on the loader thread it starts in the child, so
 * it has dlopen()'s signature: non-NULL when awake, NULL with aiprof_rearm_error() saying
 * why. Never a second ring, never twice for one fork.
 */
__attribute__((visibility("default"))) void *aiprof_rearm(const char *unused, int flags)
{
	int fd;

	(void)unused;
	(void)flags;
	if (!__atomic_exchange_n(&g_rearmable, false, __ATOMIC_ACQ_REL)) {
		g_rearm_error = "libaiprof.so is not a forked child's dormant copy, nor one an "
				"injector released";
		return NULL;
	}
	g_pid = (uint32_t)getpid();
	fd = live_ring_find(g_pid);
	if (fd >= 0) {
		close(fd);
		g_rearm_error = "another copy of libaiprof.so already records this process";
		return NULL;
	}
	if (ring_create() < 0) {
		g_rearm_error = "cannot create the ring (memfd_create or mmap refused)";
		return NULL;
	}
	/* generations go on across rings: a call site cached in an earlier one is no
	 * longer taken as sent */
	atomic_store_explicit(&g_ring->generation, g_last_generation + 1, memory_order_relaxed);
	intern__forget_sent();
	if (g_forked)
		cupti__rearm_child();
	patch__rearm();
	if (go_live() < 0) {
		g_active = false;
		g_rearm_error = "cannot start the control thread";
		return NULL;
	}
	lib_status("libaiprof build %016llx woken in %s pid %u: %u GOT slots hooked",
		   (unsigned long long)aiprof_preload_build,
		   g_forked ? "forked child" : "released", g_pid,
		   atomic_load(&g_ring->hooks_patched));
	return g_ring;
}

__attribute__((visibility("default"))) const char *aiprof_rearm_error(void)
{
	return g_rearm_error;
}

/* ---- constructor ------------------------------------------------------------------ */

__attribute__((constructor)) static void aiprof_ctor(void)
{
	static int once;
	int fd;

	if (__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL))
		return;
	g_pid = (uint32_t)getpid();
	{
		/* put there by the user with LD_PRELOAD: stays live between windows */
		const char *pre = getenv("LD_PRELOAD");

		g_preloaded = pre && strstr(pre, "libaiprof");
	}

	fd = live_ring_find(g_pid);
	if (fd >= 0) {
		note_second_copy(fd);
		return;
	}
	if (ring_create() < 0)
		return;                 /* no ring: nothing to report to, stay idle */
	clk__init();
	patch__init();
	if (pthread_atfork(NULL, NULL, atfork_child) != 0) {
		lib_status("pthread_atfork failed: staying idle");
		return;
	}
	if (go_live() < 0)
		return;
	lib_status("libaiprof build %016llx ready: pid %u, %u modules, %u GOT slots hooked",
		   (unsigned long long)aiprof_preload_build, g_pid,
		   atomic_load(&g_ring->modules_seen), atomic_load(&g_ring->hooks_patched));
}
