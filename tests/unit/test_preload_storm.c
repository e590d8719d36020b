/* SPDX-License-Identifier: MIT */
/*
 * Many threads calling a hooked function at once while GOT patching and draining go on:
 * nothing is lost while the ring has room, every loss is counted when it has not, and
 * every event is whole (each thread's own sequence numbers arrive in order, once).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "preload/fixture.h"
#include "preload/harness.h"

#define THREADS 8

static struct aiprof_ring_hdr *g_h;
static _Atomic int g_go;
static long g_per_thread;

static void *storm_main(void *arg)
{
	uintptr_t t = (uintptr_t)arg;

	while (!atomic_load(&g_go))
		;
	for (long i = 0; i < g_per_thread; i++) {
		/* func encodes (thread, sequence) so the consumer can check order and holes */
		if (caller_launch((void *)((t << 32) | (uintptr_t)i), 1, 1) != 0)
			abort();
	}
	return NULL;
}

static void storm(long per_thread)
{
	pthread_t th[THREADS];

	g_per_thread = per_thread;
	atomic_store(&g_go, 0);
	for (uintptr_t t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, storm_main, (void *)t);
	atomic_store(&g_go, 1);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
}

/* Pops all launch events, checking per-thread order; returns how many. */
static uint64_t drain_checked(long next[THREADS])
{
	struct aiprof_event e;
	uint64_t n = 0;

	while (ring__pop(g_h, &e)) {
		uint64_t t, seq;

		if (e.type != AIPROF_EV_CUDA_LAUNCH)
			continue;
		t = e.u.launch.func >> 32;
		seq = e.u.launch.func & 0xffffffffu;
		assert_true(t < THREADS);
		if (next)
			assert_true((long)seq >= next[t]);   /* in order, never twice */
		if (next)
			next[t] = (long)seq + 1;
		assert_int_equal(e.u.launch.grid[1], 2);
		assert_int_equal(e.u.launch.block[2], 6);
		n++;
	}
	return n;
}

static int group_setup(void **state)
{
	if (!h_load_lib() || !(g_h = h_ring()))
		return -1;
	return h_enable(g_h, AIPROF_COLLECT_CUDA);
}

static void test_fits_loses_nothing(void **state)
{
	long per = AIPROF_RING_SLOTS / THREADS - 16;
	long next[THREADS] = { 0 };
	uint64_t drops = atomic_load(&g_h->drops);

	h_drain(g_h, NULL, 0, true);
	storm(per);
	assert_int_equal(atomic_load(&g_h->drops), drops);
	assert_int_equal(drain_checked(next), (uint64_t)per * THREADS);
	for (int t = 0; t < THREADS; t++)
		assert_int_equal(next[t], per);
}

static void test_overflow_counts_drops(void **state)
{
	long per = AIPROF_RING_SLOTS / THREADS * 3;
	uint64_t drops = atomic_load(&g_h->drops), got;

	h_drain(g_h, NULL, 0, true);
	storm(per);
	got = drain_checked(NULL);
	/* nobody consumed: exactly the ring's worth got in, the rest was counted */
	assert_int_equal(got, AIPROF_RING_SLOTS);
	assert_int_equal(atomic_load(&g_h->drops) - drops, (uint64_t)per * THREADS - got);
}

static _Atomic int g_consuming;
static uint64_t g_consumed;
static long g_next[THREADS];

static void *consumer_main(void *arg)
{
	while (atomic_load(&g_consuming)) {
		g_consumed += drain_checked(g_next);
	}
	g_consumed += drain_checked(g_next);
	return NULL;
}

static void test_concurrent_consumer(void **state)
{
	long per = 200000;
	uint64_t drops = atomic_load(&g_h->drops), lost;
	pthread_t c;

	h_drain(g_h, NULL, 0, true);
	memset(g_next, 0, sizeof(g_next));
	g_consumed = 0;
	atomic_store(&g_consuming, 1);
	pthread_create(&c, NULL, consumer_main, NULL);
	storm(per);
	atomic_store(&g_consuming, 0);
	pthread_join(c, NULL);
	lost = atomic_load(&g_h->drops) - drops;
	/* every call is either consumed or counted as dropped */
	assert_int_equal(g_consumed + lost, (uint64_t)per * THREADS);
	print_message("    %ld calls on %d threads: %llu consumed, %llu dropped\n",
		      per * THREADS, THREADS, (unsigned long long)g_consumed,
		      (unsigned long long)lost);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fits_loses_nothing),
		cmocka_unit_test(test_overflow_counts_drops),
		cmocka_unit_test(test_concurrent_consumer),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
