/* SPDX-License-Identifier: MIT */
/*
 * Cost of a hooked call, side by side in one process: a do-nothing cudaLaunchKernel
 * (libbench_cuda.so) called from libbench_caller.so through its PLT
 *   1. before libaiprof.so is loaded                      (unhooked)
 *   2. after: GOT slot patched, library idle              (hooked, idle)
 *   3. recording, a consumer thread draining the ring     (hooked, recording)
 *      - without the call stack at the launch (--collectors ...,no-launch-stacks), and
 *        with it from this program's call chain (~6 frames) and from 32 frames deeper,
 *        so the cost of the frame-pointer walk and its interning shows side by side
 *      - a new call site at every launch (each from another depth, in a fresh session):
 *        what a site not seen before costs, walked by CFI (the process's libgcc_s,
 *        loaded here as any C++ program has it) and by frame pointers, next to the same
 *        launches without a call stack
 * plus a never-hooked call through a function pointer, measured in between, as a check
 * that the machine did not change speed. Each figure is the best of several rounds.
 * Recording is timed in bursts of half a ring, so no call takes the drop path; the
 * reader (a consumer thread) drains between bursts or during them (see drain_mode).
 * Targets: idle <= 5 ns added per call, recording <= 50 ns.
 *
 * The library reads the TSC where the kernel's clock source is the TSC; the run is
 * repeated in a child with AIPROF_CLOCK=vdso (clock_gettime) for comparison.
 *
 *   bench_hooks [-n calls_per_round (500000)] [-r rounds (15)] [--no-vdso]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "../unit/preload/harness.h"

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
void bench_launch_plt(long n);
void bench_launch_ptr(long n, launch_fn fn);

static struct aiprof_ring_hdr *g_h;
static _Atomic int g_consume;
static _Atomic int g_spin;              /* 1: drain continuously; 0: drain when asked */
static _Atomic int g_drain_req;

static void pin_to(int cpu);

static void *consumer_main(void *arg)
{
	struct aiprof_event e;

	pin_to(1);
	while (atomic_load_explicit(&g_consume, memory_order_relaxed)) {
		if (!atomic_load(&g_spin) && !atomic_load(&g_drain_req)) {
			h_sleep_ms(0);
			continue;
		}
		while (ring__pop(g_h, &e))
			;
		atomic_store(&g_drain_req, 0);
	}
	return NULL;
}

static double ns_per_call(void (*fn)(long), long n)
{
	uint64_t t0 = h_mono_ns();

	fn(n);
	return (double)(h_mono_ns() - t0) / (double)n;
}

static launch_fn g_real;
static int g_depth;                     /* extra frames below each recorded burst */

/* n launches from `depth` frames further down the stack (no tail calls: real frames) */
__attribute__((noinline)) static void deep_launch(int depth, long n)
{
	if (depth > 0)
		deep_launch(depth - 1, n);
	else
		bench_launch_plt(n);
	__asm__ volatile("" ::: "memory");
}

static void ptr_loop(long n)
{
	bench_launch_ptr(n, g_real);
}

enum drain_mode {
	DRAIN_SAME_CORE,        /* this thread empties the ring between bursts */
	DRAIN_POLLING,          /* the consumer thread empties it between bursts */
	DRAIN_SPINNING,         /* the consumer thread drains during the burst */
};

/*
 * Recording, in bursts of half a ring so that no call takes the (cheaper) drop path.
 * SAME_CORE measures the hook itself: the slots' cache lines stay on this core.
 * POLLING is what an injector that drains every few ms causes: each slot's lines were
 * last written by the reader's core, so the producer fetches them back (two cache
 * lines per event). SPINNING is the worst case: the reader polls the very slot the
 * producer is writing. The last two are cross-core cache traffic, which on a VM costs
 * more, and more variably, than the hook's own work.
 */
static double recording_ns_per_call(long n, enum drain_mode mode)
{
	long burst = AIPROF_RING_SLOTS / 2, done = 0;
	uint64_t spent = 0;

	atomic_store(&g_spin, mode == DRAIN_SPINNING);
	while (done < n) {
		struct aiprof_event e;
		uint64_t t0;

		/* the library may add a status line after a drain: until truly empty */
		do {
			if (mode == DRAIN_SAME_CORE) {
				while (ring__pop(g_h, &e))
					;
				continue;
			}
			atomic_store(&g_drain_req, 1);
			while (atomic_load(&g_drain_req))
				;
		} while (ring__pending(g_h) != 0);
		t0 = h_mono_ns();
		deep_launch(g_depth, burst);
		spent += h_mono_ns() - t0;
		done += burst;
	}
	atomic_store(&g_spin, 0);
	return (double)spent / (double)done;
}

static double best_rec(long n, int rounds, enum drain_mode mode)
{
	double b = 1e30;

	for (int r = 0; r < rounds; r++) {
		double v = recording_ns_per_call(n, mode);

		if (v < b)
			b = v;
	}
	return b;
}

#define SITE_DEPTHS 128

struct site_cost {
	double ns;              /* per launch, best round */
	size_t walks, cfi;      /* stacks sent, of which unwound by CFI (text starting '@') */
};

struct site_run {
	uint32_t collectors;
	int rounds;
	struct site_cost cost;
};

/*
 * One launch from each of SITE_DEPTHS depths in a fresh session, so that every launch is
 * a call site the library has not seen: its walk, interning and string, per launch.
 * On a thread of its own, whose CFI budget (a 20 ms burst per thread) is untouched; few
 * rounds, so it lasts (a CFI walk past it would be by frame pointers, which the count of
 * '@' stacks would show).
 */
static void *new_site_thread(void *arg)
{
	struct site_run *run = arg;
	struct site_cost c = { .ns = 1e30 };
	struct aiprof_event e;
	uint32_t collectors = run->collectors;
	int rounds = run->rounds;

	for (int r = 0; r < rounds; r++) {
		uint64_t t0, dt;

		if (h_enable(g_h, collectors) < 0) {
			run->cost.ns = -1;
			return NULL;
		}
		while (ring__pop(g_h, &e))
			;
		t0 = h_mono_ns();
		for (int d = 0; d < SITE_DEPTHS; d++)
			deep_launch(d, 1);
		dt = h_mono_ns() - t0;
		if ((double)dt / SITE_DEPTHS < c.ns)
			c.ns = (double)dt / SITE_DEPTHS;
		while (ring__pop(g_h, &e))
			if (e.type == AIPROF_EV_STRING && e.u.str.offset == 0 && e.u.str.total > 0 &&
			    e.u.str.id >= 1) {
				c.walks++;
				c.cfi += e.u.str.s[0] == '@';
			}
	}
	run->cost = c;
	return NULL;
}

static struct site_cost new_site_cost(uint32_t collectors, int rounds)
{
	struct site_run run = { .collectors = collectors, .rounds = rounds };
	pthread_t th;

	if (pthread_create(&th, NULL, new_site_thread, &run) != 0)
		return (struct site_cost){ .ns = -1 };
	pthread_join(th, NULL);
	return run.cost;
}

/* Keeps the measuring thread and the reader on different CPUs, if there are two. */
static void pin_to(int cpu)
{
	cpu_set_t set;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static double best(void (*fn)(long), long n, int rounds)
{
	double b = 1e30;

	for (int r = 0; r < rounds; r++) {
		double v = ns_per_call(fn, n);

		if (v < b)
			b = v;
	}
	return b;
}

static int run(long n, int rounds, const char *clock_name)
{
	double unhooked, idle, rec, rec_poll, rec_spin, rec_nostack, rec_deep, ptr_before, ptr_after;
	struct site_cost site_none, site_fp, site_cfi;
	uint64_t drops0, recorded0;
	pthread_t consumer;
	void *lib;

	g_real = (launch_fn)dlsym(RTLD_DEFAULT, "cudaLaunchKernel");
	if (!g_real) {
		fprintf(stderr, "bench_hooks: cudaLaunchKernel not found\n");
		return 1;
	}
	pin_to(0);
	bench_launch_plt(n / 10);               /* warm up, resolve the PLT slot */
	unhooked = best(bench_launch_plt, n, rounds);
	ptr_before = best(ptr_loop, n, rounds);

	lib = h_load_lib();
	g_h = lib ? h_ring() : NULL;
	if (!g_h) {
		fprintf(stderr, "bench_hooks: cannot load libaiprof.so or find its ring\n");
		return 1;
	}
	h_sleep_ms(150);                        /* first TSC calibration */
	bench_launch_plt(n / 10);
	idle = best(bench_launch_plt, n, rounds);

	atomic_store(&g_consume, 1);
	pthread_create(&consumer, NULL, consumer_main, NULL);
	if (h_enable(g_h, AIPROF_COLLECT_CUDA) < 0) {
		fprintf(stderr, "bench_hooks: library did not start recording\n");
		return 1;
	}
	drops0 = atomic_load(&g_h->drops);
	recorded0 = atomic_load(&g_h->recorded);
	/*
	 * Same-core rounds first (once the reader thread has drained, it may still be
	 * finishing a pop when this thread would start popping again), the three variants
	 * in turn, round by round, so that each sees the same machine.
	 */
	rec = rec_deep = rec_nostack = 1e30;
	for (int i = 0; i < rounds; i++) {
		double v;

		if (h_enable(g_h, AIPROF_COLLECT_CUDA) < 0)
			goto not_recording;
		v = recording_ns_per_call(n, DRAIN_SAME_CORE);
		rec = v < rec ? v : rec;
		g_depth = 32;
		v = recording_ns_per_call(n, DRAIN_SAME_CORE);
		rec_deep = v < rec_deep ? v : rec_deep;
		g_depth = 0;
		if (h_enable(g_h, AIPROF_COLLECT_CUDA | AIPROF_COLLECT_NO_STACKS) < 0)
			goto not_recording;
		v = recording_ns_per_call(n, DRAIN_SAME_CORE);
		rec_nostack = v < rec_nostack ? v : rec_nostack;
	}
	if (h_enable(g_h, AIPROF_COLLECT_CUDA) < 0)
		goto not_recording;
	rec_poll = best_rec(n, rounds, DRAIN_POLLING);
	rec_spin = best_rec(n, rounds, DRAIN_SPINNING);
	/* new call sites: the unwinder C++ programs have, then the three side by side */
	if (!dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "bench_hooks: libgcc_s.so.1: %s\n", dlerror());
		return 1;
	}
	site_none = new_site_cost(AIPROF_COLLECT_CUDA | AIPROF_COLLECT_NO_STACKS, 5);
	site_fp = new_site_cost(AIPROF_COLLECT_CUDA | AIPROF_COLLECT_FP_STACKS, 5);
	site_cfi = new_site_cost(AIPROF_COLLECT_CUDA, 5);
	if (site_none.ns < 0 || site_fp.ns < 0 || site_cfi.ns < 0)
		goto not_recording;
	h_disable(g_h);
	atomic_store(&g_consume, 0);
	pthread_join(consumer, NULL);
	ptr_after = best(ptr_loop, n, rounds);

	printf("clock: %s, %ld calls x %d rounds, best round\n", clock_name, n, rounds);
	printf("  %-34s %8.2f ns/call\n", "unhooked (PLT, before load)", unhooked);
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (target <= 5)   %s\n", "hooked, idle", idle,
	       idle - unhooked, idle - unhooked <= 5.0 ? "ok" : "OVER");
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (target <= 50)  %s\n",
	       "hooked, recording", rec, rec - unhooked, rec - unhooked <= 50.0 ? "ok" : "OVER");
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (call stack: %+.2f ns)\n",
	       "  without the call stack", rec_nostack, rec_nostack - unhooked, rec - rec_nostack);
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (call stack: %+.2f ns, %.2f ns/frame)\n",
	       "  call stack 32 frames deeper", rec_deep, rec_deep - unhooked, rec_deep - rec_nostack,
	       (rec_deep - rec) / 32.0);
	printf("  %-34s %8.2f ns/call  (%d depths, one launch each)\n",
	       "  new call sites, no call stack", site_none.ns, SITE_DEPTHS);
	printf("  %-34s %8.2f ns/call  %+7.2f ns per new site\n",
	       "  new call sites, frame pointers", site_fp.ns, site_fp.ns - site_none.ns);
	printf("  %-34s %8.2f ns/call  %+7.2f ns per new site (%zu of %zu walks by CFI)\n",
	       "  new call sites, CFI", site_cfi.ns, site_cfi.ns - site_none.ns, site_cfi.cfi,
	       site_cfi.walks);
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (cross-core cache traffic)\n",
	       "  reader on another core, polling", rec_poll, rec_poll - unhooked);
	printf("  %-34s %8.2f ns/call  %+7.2f ns  (cross-core cache traffic)\n",
	       "  reader on another core, spinning", rec_spin, rec_spin - unhooked);
	printf("  %-34s %8.2f / %.2f ns/call (before / after)\n", "control: function pointer",
	       ptr_before, ptr_after);
	printf("  recording: %llu events, %llu dropped (consumer kept up: %s)\n",
	       (unsigned long long)(atomic_load(&g_h->recorded) - recorded0),
	       (unsigned long long)(atomic_load(&g_h->drops) - drops0),
	       atomic_load(&g_h->drops) == drops0 ? "yes" : "no");
	return 0;
not_recording:
	fprintf(stderr, "bench_hooks: library did not start recording\n");
	return 1;
}

int main(int argc, char **argv)
{
	long n = 500000;
	int rounds = 15;
	bool vdso = true, child = getenv("AIPROF_CLOCK") != NULL;
	int r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
			n = atol(argv[++i]);
		else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--no-vdso") == 0)
			vdso = false;
		else {
			fprintf(stderr, "usage: %s [-n calls] [-r rounds] [--no-vdso]\n", argv[0]);
			return 2;
		}
	}
	if (n < 1000 || rounds < 1)
		return 2;
	r = run(n, rounds, child ? "clock_gettime (AIPROF_CLOCK=vdso)" : "default (TSC if the kernel uses it)");
	fflush(stdout);
	if (r == 0 && vdso && !child) {
		pid_t pid = fork();
		int status;

		if (pid == 0) {
			char *args[] = { argv[0], "-n", NULL, "-r", NULL, NULL };
			char nbuf[32], rbuf[16];

			snprintf(nbuf, sizeof(nbuf), "%ld", n);
			snprintf(rbuf, sizeof(rbuf), "%d", rounds);
			args[2] = nbuf;
			args[4] = rbuf;
			setenv("AIPROF_CLOCK", "vdso", 1);
			execv("/proc/self/exe", args);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			r = 1;
	}
	return r;
}
