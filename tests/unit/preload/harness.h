/* SPDX-License-Identifier: MIT */
/*
 * The tests' stand-in for the injector: loads libaiprof.so into the test process, finds
 * its ring the way the injector does (readlink of /proc/self/fd/N), and drives the
 * control protocol (enabled / collectors / generation / heartbeat, ctl + FUTEX_WAKE).
 * Header-only so each test program stays one file.
 */
#ifndef AIPROF_TEST_HARNESS_H
#define AIPROF_TEST_HARNESS_H

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "event.h"
#include "ring.h"

/*
 * ASan/LSan builds (make SAN=1): GCC 12's __tls_get_addr interceptor mistakes some
 * dynamic TLS blocks (a dlopened library's __thread data, here libaiprof's) for glibc
 * 2.19 ones and LeakSanitizer's tracer then crashes at exit ("Tracer caught signal
 * 11"; google/sanitizers#1322, fixed in GCC 14 / LLVM 17). Not interposing
 * __tls_get_addr avoids it; nothing else about the checks changes.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "intercept_tls_get_addr=0";
}

static inline uint64_t h_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void h_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Directory of the test executable ($(BUILD)/tests/unit). */
static inline const char *h_exe_dir(void)
{
	static char dir[PATH_MAX];

	if (!dir[0]) {
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
		char *slash;

		if (n <= 0)
			abort();
		dir[n] = '\0';
		slash = strrchr(dir, '/');
		*slash = '\0';
	}
	return dir;
}

/* Path of a file relative to the build directory ($(BUILD)/...). */
static inline const char *h_build_path(const char *rel, char *buf, size_t len)
{
	snprintf(buf, len, "%s/../../%s", h_exe_dir(), rel);
	return buf;
}

static inline void *h_load_lib(void)
{
	char path[PATH_MAX];
	void *h = dlopen(h_build_path("libaiprof.so", path, sizeof(path)), RTLD_NOW | RTLD_LOCAL);

	if (!h)
		fprintf(stderr, "dlopen libaiprof.so: %s\n", dlerror());
	return h;
}

/* Number of ring memfds in /proc/self/fd; the first one's fd in *fd_out. */
static inline int h_ring_fds(int *fd_out)
{
	static const char want[] = "/memfd:" AIPROF_RING_MEMFD " (deleted)";
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[64], link[128];
		ssize_t l;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		l = readlink(path, link, sizeof(link) - 1);
		if (l < 0)
			continue;
		link[l] = '\0';
		if (strcmp(link, want) == 0) {
			if (n++ == 0 && fd_out)
				*fd_out = atoi(de->d_name);
		}
	}
	closedir(d);
	return n;
}

static _Atomic int h_beat_paused;
static struct aiprof_ring_hdr *h_ring_cached;

static inline void *h_beat_main(void *arg)
{
	struct aiprof_ring_hdr *h = arg;

	for (;;) {
		if (!atomic_load(&h_beat_paused))
			atomic_store(&h->heartbeat_ns, h_mono_ns());
		h_sleep_ms(200);
	}
	return NULL;
}

/* Maps the library's ring from outside, as the injector does; starts a heartbeat. */
static inline struct aiprof_ring_hdr *h_ring(void)
{
	struct aiprof_ring_hdr *h;
	struct stat st;
	pthread_t t;
	int fd = -1;

	if (h_ring_cached)
		return h_ring_cached;
	if (h_ring_fds(&fd) < 1 || fstat(fd, &st) < 0)
		return NULL;
	h = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return NULL;
	if (h->magic != AIPROF_RING_MAGIC || AIPROF_RING_BYTES(h->nslots) != (uint64_t)st.st_size)
		return NULL;
	atomic_store(&h->heartbeat_ns, h_mono_ns());
	pthread_create(&t, NULL, h_beat_main, h);
	pthread_detach(t);
	h_ring_cached = h;
	return h;
}

static inline void h_kick(struct aiprof_ring_hdr *h)
{
	atomic_fetch_add(&h->ctl, 1);
	syscall(SYS_futex, &h->ctl, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static inline int h_wait_state(struct aiprof_ring_hdr *h, uint32_t state, long timeout_ms)
{
	for (long waited = 0; waited < timeout_ms; waited += 2) {
		if (atomic_load(&h->lib_state) == state)
			return 0;
		h_sleep_ms(2);
	}
	return -ETIMEDOUT;
}

static inline int h_enable(struct aiprof_ring_hdr *h, uint32_t collectors)
{
	atomic_store(&h->heartbeat_ns, h_mono_ns());
	atomic_store(&h->collectors, collectors);
	atomic_fetch_add(&h->generation, 1);
	atomic_store(&h->attached_pid, (uint32_t)getpid());
	atomic_store(&h->enabled, 1);
	/* a new generation may arrive while already RECORDING: wait for the library */
	atomic_store(&h->lib_state, AIPROF_LIB_IDLE);
	h_kick(h);
	return h_wait_state(h, AIPROF_LIB_RECORDING, 5000);
}

static inline int h_disable(struct aiprof_ring_hdr *h)
{
	atomic_store(&h->enabled, 0);
	h_kick(h);
	return h_wait_state(h, AIPROF_LIB_IDLE, 5000);
}

/* Pops everything; copies API events (not STRING / LIB_STATUS unless `all`) to `out`. */
static inline size_t h_drain(struct aiprof_ring_hdr *h, struct aiprof_event *out, size_t max,
			     bool all)
{
	struct aiprof_event e;
	size_t n = 0;

	while (ring__pop(h, &e)) {
		if (!all && (e.type == AIPROF_EV_STRING || e.type == AIPROF_EV_LIB_STATUS))
			continue;
		if (n < max)
			out[n] = e;
		n++;
	}
	return n;
}

/* Whether [a, a+len) lies inside the module that contains `in_module`. */
static inline bool h_same_module(const void *a, const void *in_module)
{
	Dl_info x, y;

	return dladdr(a, &x) && dladdr(in_module, &y) && x.dli_fbase == y.dli_fbase;
}

#endif
