/* SPDX-License-Identifier: MIT */
/* controller/workqueue.c and controller/backoff.c, with a fake clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include <cmocka.h>
#include "controller/backoff.h"
#include "controller/workqueue.h"

struct fake {
	uint64_t now;
	uint64_t rnd;
};

static uint64_t fake_now(void *ctx) { return ((struct fake *)ctx)->now; }
static uint64_t fake_rnd(void *ctx) { return ((struct fake *)ctx)->rnd; }

#define MS 1000000ULL

static char *get(struct workqueue *q)
{
	char *k = NULL;
	int r = workqueue__try_get(q, &k);

	return r == 0 ? k : NULL;
}

static void test_dedup_fifo(void **state)
{
	struct fake f = { 1000 * MS, 0 };
	struct wq_hooks h = { fake_now, fake_rnd, &f };
	struct workqueue *q = workqueue__new(&h, NULL);
	char *k;

	(void)state;
	assert_non_null(q);
	assert_int_equal(workqueue__add(q, "ns/a"), 0);
	assert_int_equal(workqueue__add(q, "ns/b"), 0);
	assert_int_equal(workqueue__add(q, "ns/a"), 0);   /* already queued */
	assert_int_equal(workqueue__len(q), 2);
	k = get(q);
	assert_string_equal(k, "ns/a");
	/* added again while processing: not handed out twice, queued again after done */
	assert_int_equal(workqueue__add(q, "ns/a"), 0);
	assert_int_equal(workqueue__len(q), 1);
	free(k);
	k = get(q);
	assert_string_equal(k, "ns/b");
	assert_null(get(q));                              /* ns/a is still processing */
	workqueue__done(q, "ns/a");
	workqueue__done(q, "ns/b");
	free(k);
	k = get(q);
	assert_string_equal(k, "ns/a");
	workqueue__done(q, "ns/a");
	free(k);
	assert_null(get(q));
	assert_int_equal(workqueue__len(q), 0);
	workqueue__free(q);
}

static void test_delay_and_earliest_wins(void **state)
{
	struct fake f = { 1000 * MS, 0 };
	struct wq_hooks h = { fake_now, fake_rnd, &f };
	struct workqueue *q = workqueue__new(&h, NULL);
	char *k;

	(void)state;
	assert_int_equal(workqueue__add_after(q, "x", 500 * MS), 0);
	assert_int_equal(workqueue__add_after(q, "x", 100 * MS), 0);   /* sooner wins */
	assert_int_equal(workqueue__add_after(q, "x", 900 * MS), 0);   /* later is ignored */
	assert_int_equal(workqueue__add_after(q, "y", 200 * MS), 0);
	assert_int_equal(workqueue__waiting(q), 2);
	assert_null(get(q));
	f.now += 99 * MS;
	assert_null(get(q));
	f.now += 1 * MS;
	k = get(q);
	assert_string_equal(k, "x");
	workqueue__done(q, "x");
	free(k);
	assert_null(get(q));
	f.now += 100 * MS;
	k = get(q);
	assert_string_equal(k, "y");
	workqueue__done(q, "y");
	free(k);
	/* the superseded 500 ms and 900 ms entries never hand x out again */
	f.now += 2000 * MS;
	assert_null(get(q));
	assert_int_equal(workqueue__waiting(q), 0);
	/* zero delay is an immediate add */
	assert_int_equal(workqueue__add_after(q, "z", 0), 0);
	k = get(q);
	assert_string_equal(k, "z");
	workqueue__done(q, "z");
	free(k);
	workqueue__free(q);
}

static void test_rate_limited(void **state)
{
	struct fake f = { 1000 * MS, 0 };   /* rnd 0: the bottom of each range, c/2 */
	struct wq_hooks h = { fake_now, fake_rnd, &f };
	struct wq_rate rate = { 100 * MS, 1000 * MS };
	struct workqueue *q = workqueue__new(&h, &rate);
	uint64_t expect[] = { 50, 100, 200, 400, 500, 500 };
	char *k;

	(void)state;
	for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		assert_int_equal(workqueue__add_rate_limited(q, "k"), 0);
		assert_int_equal(workqueue__failures(q, "k"), i + 1);
		f.now += expect[i] * MS - 1;
		assert_null(get(q));
		f.now += 1;
		k = get(q);
		assert_non_null(k);
		workqueue__done(q, k);
		free(k);
	}
	workqueue__forget(q, "k");
	assert_int_equal(workqueue__failures(q, "k"), 0);
	assert_int_equal(workqueue__add_rate_limited(q, "k"), 0);
	f.now += 100 * MS;
	k = get(q);
	assert_non_null(k);
	workqueue__done(q, k);
	free(k);
	workqueue__free(q);
}

static void test_backoff(void **state)
{
	(void)state;
	assert_int_equal(backoff_ns(100, 1000, 0, 5), 0);
	for (uint64_t rnd = 0; rnd < 1000; rnd += 7) {
		uint64_t b1 = backoff_ns(100, 1000, 1, rnd), b3 = backoff_ns(100, 1000, 3, rnd);
		uint64_t b9 = backoff_ns(100, 1000, 60, rnd);

		assert_true(b1 >= 50 && b1 <= 100);
		assert_true(b3 >= 200 && b3 <= 400);
		assert_true(b9 >= 500 && b9 <= 1000);
	}
	assert_true(backoff_ns(UINT64_MAX / 4, UINT64_MAX, 200, 1) <= UINT64_MAX);
}

static void *blocked_get(void *arg)
{
	char *k = NULL;

	return (void *)(intptr_t)workqueue__get(arg, &k);
}

static void test_shutdown_wakes(void **state)
{
	struct workqueue *q = workqueue__new(NULL, NULL);
	pthread_t t;
	void *ret;
	char *k = NULL;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, blocked_get, q), 0);
	workqueue__shutdown(q);
	pthread_join(t, &ret);
	assert_int_equal((int)(intptr_t)ret, -ESHUTDOWN);
	assert_int_equal(workqueue__add(q, "a"), -ESHUTDOWN);
	assert_int_equal(workqueue__get(q, &k), -ESHUTDOWN);
	workqueue__free(q);
}

static void test_blocking_get_real_clock(void **state)
{
	struct workqueue *q = workqueue__new(NULL, NULL);
	char *k = NULL;

	(void)state;
	assert_int_equal(workqueue__add_after(q, "soon", 30 * MS), 0);
	assert_int_equal(workqueue__get(q, &k), 0);    /* waits ~30 ms */
	assert_string_equal(k, "soon");
	workqueue__done(q, k);
	free(k);
	workqueue__free(q);
}

static void test_many_keys(void **state)
{
	struct workqueue *q = workqueue__new(NULL, NULL);
	char key[32], *k;
	size_t n = 0;

	(void)state;
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "ns/s-%d", i);
		assert_int_equal(workqueue__add(q, key), 0);
		assert_int_equal(workqueue__add(q, key), 0);
	}
	assert_int_equal(workqueue__len(q), 5000);
	while ((k = get(q))) {
		workqueue__done(q, k);
		free(k);
		n++;
	}
	assert_int_equal(n, 5000);
	workqueue__free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dedup_fifo),
		cmocka_unit_test(test_delay_and_earliest_wins),
		cmocka_unit_test(test_rate_limited),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_shutdown_wakes),
		cmocka_unit_test(test_blocking_get_real_clock),
		cmocka_unit_test(test_many_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
