/* SPDX-License-Identifier: MIT */
/*
 * The control thread ("aiprof-ctl"). The injector writes enabled / collectors /
 * generation / heartbeat_ns in the ring header, bumps `ctl` and FUTEX_WAKEs it (a shared
 * futex: the word lives in a MAP_SHARED memfd). We wait on `ctl` with a 1 s timeout and,
 * on every wake-up:
 *  - re-anchor the TSC clock;
 *  - rescan modules if dl_iterate_phdr's adds/subs counters moved (covers dlopen()s our
 *    hook could not patch at once, and dlopen()s through pointers we never saw);
 *  - if enabled with a heartbeat older than 5 s (the injector died) set enabled = 0;
 *  - on idle -> enabled (or a new generation): verify the GOT, start CUPTI if asked,
 *    publish lib_state = RECORDING; on enabled -> idle: flush CUPTI, lib_state = IDLE;
 *  - when the injector released the ring (`release`, after its last drain), or vanished
 *    (idle with no heartbeat for IDLE_RELEASE_NS), go dormant (lib.c) and exit: after a
 *    window no thread of ours is left in the process.
 * lib_state is written after the work it announces, so an injector that waits for
 * IDLE after disabling knows that the final CUPTI records are in the ring.
 */
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

#define HEARTBEAT_STALE_NS  (5ull * 1000 * 1000 * 1000)
#define CUPTI_RETRY_NS      (5ull * 1000 * 1000 * 1000)
#define IDLE_RELEASE_NS     (30ull * 1000 * 1000 * 1000)

static void futex_wait_shared(_Atomic uint32_t *word, uint32_t val, long timeout_ns)
{
	struct timespec ts = { .tv_sec = timeout_ns / 1000000000L,
			       .tv_nsec = timeout_ns % 1000000000L };

	/* shared (no FUTEX_PRIVATE_FLAG): the injector wakes it from another process */
	syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

struct ctl_state {
	struct aiprof_ring_hdr *h;
	bool recording;
	uint32_t generation;
	uint64_t cupti_tried_ns;
	uint64_t busy_ns;       /* when an injector was last seen: recording, or a heartbeat */
};

static void on_start(struct ctl_state *s, uint32_t gen, uint32_t collectors)
{
	struct aiprof_ring_hdr *h = s->h;
	int r;

	r = patch__rescan(true);
	if (r < 0 && r != -EBUSY)
		lib_status("rescan before recording: %s", strerror(-r));
	if (collectors & AIPROF_COLLECT_CUPTI) {
		cupti__enable(h);
		s->cupti_tried_ns = clk_mono_ns();
	}
	atomic_store_explicit(&h->lib_state, AIPROF_LIB_RECORDING, memory_order_release);
	lib_status("recording: generation %u, collectors 0x%x, %u GOT slots in %u modules, "
		   "CUPTI %s", gen, collectors, atomic_load(&h->hooks_patched),
		   atomic_load(&h->modules_seen),
		   atomic_load(&h->cupti_state) == AIPROF_CUPTI_ACTIVE ? "active" : "off");
}

static void on_stop(struct ctl_state *s, const char *why)
{
	struct aiprof_ring_hdr *h = s->h;

	cupti__disable(h);
	atomic_store_explicit(&h->lib_state, AIPROF_LIB_IDLE, memory_order_release);
	lib_status("idle: %s", why);
}

/* true when the copy should go dormant now (the window is over, nobody will read) */
static bool control_step(struct ctl_state *s)
{
	struct aiprof_ring_hdr *h = s->h;
	uint32_t en, gen, collectors;
	uint64_t now;

	clk__calibrate();
	if (patch__modules_changed())
		(void)patch__rescan(true);

	en = atomic_load_explicit(&h->enabled, memory_order_acquire);
	now = clk_mono_ns();
	if (en) {
		uint64_t hb = atomic_load_explicit(&h->heartbeat_ns, memory_order_acquire);

		if (hb + HEARTBEAT_STALE_NS < now) {
			uint32_t one = 1;

			if (atomic_compare_exchange_strong(&h->enabled, &one, 0)) {
				en = 0;
				lib_status("injector heartbeat is %llu ms old: recording stopped",
					   (unsigned long long)(hb ? (now - hb) / 1000000 : now / 1000000));
			} else {
				en = atomic_load(&h->enabled);
			}
		}
	}
	gen = atomic_load_explicit(&h->generation, memory_order_acquire);
	collectors = atomic_load_explicit(&h->collectors, memory_order_acquire);

	if (en && (!s->recording || gen != s->generation)) {
		on_start(s, gen, collectors);
		s->recording = true;
	} else if (!en && s->recording) {
		on_stop(s, "disabled");
		s->recording = false;
	} else if (en && (collectors & AIPROF_COLLECT_CUPTI) &&
		   atomic_load(&h->cupti_state) == AIPROF_CUPTI_UNKNOWN &&
		   now - s->cupti_tried_ns > CUPTI_RETRY_NS) {
		/* CUDA was not initialised yet when recording started: try again */
		cupti__enable(h);
		s->cupti_tried_ns = now;
	}
	s->generation = gen;
	if (!s->busy_ns || en || now < s->busy_ns ||
	    atomic_load_explicit(&h->heartbeat_ns, memory_order_relaxed) + HEARTBEAT_STALE_NS > now)
		s->busy_ns = now;
	if (en || g_preloaded)
		return false;
	/* released after the last drain; or the injector is gone (no heartbeat for long) */
	return atomic_load_explicit(&h->release, memory_order_acquire) ||
	       now - s->busy_ns > IDLE_RELEASE_NS;
}

static void *control_main(void *arg)
{
	struct ctl_state s = { .h = arg };
	struct timespec warmup = { 0, 60 * 1000 * 1000 };

	atomic_store_explicit(&s.h->stays_live, g_preloaded, memory_order_relaxed);
	atomic_store_explicit(&s.h->ctl_tid, (uint32_t)syscall(SYS_gettid), memory_order_release);

	/* the launch stacks' unwinder, ready before the first recording (a launch before it
	 * is walked by frame pointers) */
	callstack__load_unwinder();
	nanosleep(&warmup, NULL);       /* first TSC calibration needs an interval */
	for (;;) {
		uint32_t ctl = atomic_load_explicit(&s.h->ctl, memory_order_acquire);

		if (control_step(&s))
			break;
		futex_wait_shared(&s.h->ctl, ctl, 1000L * 1000 * 1000);
	}
	lib_status("released: the control thread exits, the ring is let go");
	lib__go_dormant();
	return NULL;
}

int control__start(struct aiprof_ring_hdr *h)
{
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t t;
	int r;

	r = pthread_attr_init(&attr);
	if (r)
		return -r;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 1 << 20);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread inherits: all blocked */
	r = pthread_create(&t, &attr, control_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (r == 0)
		pthread_setname_np(t, "aiprof-ctl");    /* named before we return */
	return -r;
}
