/* SPDX-License-Identifier: MIT */
/*
 * injector/cli/late.c: the processes the targets start, attached on threads of their own.
 * The attach function here records what it was given and when; what the window does with
 * an attached process is the integration tests' (tests/integration/test_follow.py).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "timeutil.h"
#include "cli/late.h"

struct seen {
	pid_t pid[64], parent[64];
	uint64_t at[64];
	int n;
	int result;                     /* what attach returns */
	int discarded;
	uint64_t takes_ns;              /* how long an attach takes */
	pid_t held;                     /* this pid's attach waits until release is set (5 s) */
	int release;
	int held_done;                  /* set as the held attach returns */
};

static int fake_attach(struct target *t, void *ctx)
{
	struct seen *s = ctx;
	int r = __atomic_load_n(&s->result, __ATOMIC_ACQUIRE);
	int i = __atomic_fetch_add(&s->n, 1, __ATOMIC_ACQ_REL);   /* workers attach at once */

	if (i < 64) {
		s->pid[i] = t->pid;
		s->parent[i] = t->parent;
		s->at[i] = now_monotonic_ns();
	}
	if (s->takes_ns)
		sleep_ns(s->takes_ns);
	if (s->held && t->pid == s->held) {
		for (uint64_t end = now_monotonic_ns() + 5 * NSEC_PER_SEC;
		     !__atomic_load_n(&s->release, __ATOMIC_ACQUIRE) && now_monotonic_ns() < end;)
			sleep_ns(1 * NSEC_PER_MSEC);
		__atomic_store_n(&s->held_done, 1, __ATOMIC_RELEASE);
	}
	if (r < 0)
		snprintf(t->message, sizeof(t->message), "refused by the test");
	return r;
}

static struct seen *g_seen;

static void fake_discard(struct target *t)
{
	(void)t;
	g_seen->discarded++;
}

/* Takes what is attached until want were, or 2 s passed. */
static int take_all(struct late *l, struct target *got, int want)
{
	uint64_t end = now_monotonic_ns() + 2 * NSEC_PER_SEC;
	int n = 0;

	while (n < want && now_monotonic_ns() < end) {
		if (late__take(l, &got[n]))
			n++;
		else
			sleep_ns(1 * NSEC_PER_MSEC);
	}
	return n;
}

static void test_fork_then_exec_is_attached_once_after_the_exec(void **state)
{
	struct seen s = { 0 };
	struct late_stats st;
	struct target got[2];
	struct late *l;
	uint64_t t0 = now_monotonic_ns();

	(void)state;
	g_seen = &s;
	assert_int_equal(late__new(fake_attach, fake_discard, &s, &l), 0);
	late__offer(l, 100, 7, t0, false, 0);
	sleep_ns(20 * NSEC_PER_MSEC);
	late__offer(l, 100, 7, t0 + 20 * NSEC_PER_MSEC, true, 0);   /* the exec, before it is due */
	assert_int_equal(take_all(l, got, 1), 1);
	assert_int_equal(got[0].pid, 100);
	assert_int_equal(got[0].parent, 7);
	assert_int_equal(got[0].started_ns, t0);
	assert_int_equal(s.n, 1);
	/* not before the exec's settle time */
	assert_true(s.at[0] >= t0 + 20 * NSEC_PER_MSEC + LATE_SETTLE_NS);
	/* an exec after the attach: the library went with the old program, so the new one
	 * is attached again, a second entry of the same pid */
	late__offer(l, 100, 7, now_monotonic_ns(), true, 0);
	assert_int_equal(take_all(l, got, 1), 1);
	assert_int_equal(got[0].pid, 100);
	assert_int_equal(got[0].started_ns, t0);        /* still when it was forked */
	late__stop(l);
	late__stats(l, &st);
	assert_int_equal(st.offered, 1);
	assert_int_equal(st.attached, 2);
	assert_int_equal(st.execd_after, 1);
	assert_int_equal(take_all(l, got, 1), 0);
	late__free(l);
	assert_int_equal(s.discarded, 0);
}

static void test_bounded_and_failures_counted(void **state)
{
	struct seen s = { .result = -EIO };
	struct late_stats st;
	struct target got[LATE_MAX];
	struct late *l;
	uint64_t now = now_monotonic_ns() - LATE_SETTLE_NS;

	(void)state;
	g_seen = &s;
	assert_int_equal(late__new(fake_attach, fake_discard, &s, &l), 0);
	for (int i = 0; i < LATE_MAX + 3; i++)
		late__offer(l, 200 + i, 7, now, false, 0);
	late__offer(l, 200, 7, now, false, 0);             /* named twice: once */
	for (uint64_t end = now_monotonic_ns() + 2 * NSEC_PER_SEC;
	     __atomic_load_n(&s.n, __ATOMIC_ACQUIRE) < LATE_MAX && now_monotonic_ns() < end;)
		sleep_ns(1 * NSEC_PER_MSEC);
	late__stop(l);
	late__stats(l, &st);
	assert_int_equal(s.n, LATE_MAX);
	assert_int_equal(st.offered, LATE_MAX + 3);
	assert_int_equal(st.over, 3);
	assert_int_equal(st.failed, LATE_MAX);
	assert_int_equal(st.attached, 0);
	assert_non_null(strstr(st.last_failure, "refused by the test"));
	assert_int_equal(take_all(l, got, 1), 0);      /* a failure is never handed out */
	late__offer(l, 999, 7, now, false, 0);            /* after the stop: nothing */
	late__stats(l, &st);
	assert_int_equal(st.offered, LATE_MAX + 3);
	late__free(l);
	assert_int_equal(s.discarded, LATE_MAX);       /* each failure's hold let go */
}

/* A late thread attaching pid, a child of 7 offered at ns, by the time this returns. */
static struct late *attaching(struct seen *s, pid_t pid, uint64_t ns)
{
	struct late *l;

	g_seen = s;
	assert_int_equal(late__new(fake_attach, fake_discard, s, &l), 0);
	late__offer(l, pid, 7, ns, false, 0);
	while (__atomic_load_n(&s->n, __ATOMIC_ACQUIRE) < 1)
		sleep_ns(1 * NSEC_PER_MSEC);
	return l;
}

static void test_gone_and_untaken(void **state)
{
	struct seen s = { .result = -ESRCH };
	struct late_stats st;
	struct late *l;
	uint64_t now = now_monotonic_ns() - LATE_SETTLE_NS;

	(void)state;
	l = attaching(&s, 300, now);
	__atomic_store_n(&s.result, 0, __ATOMIC_RELEASE);
	late__offer(l, 301, 7, now, false, 0);
	late__offer(l, 302, 7, now, false, 0);
	late__stop(l);          /* waits for an attach in flight, starts no other */
	late__stats(l, &st);
	assert_int_equal(st.gone, 1);
	assert_int_equal(st.failed, 0);
	assert_int_equal(st.attached + st.window_ended, 2);  /* each of 301, 302 one or other */
	late__free(l);          /* the attached, never taken, are let go */
	assert_int_equal(s.discarded, 1 + (int)st.attached);
}

/* Those still waiting their turn as the window closes are never attached, and counted so
 * (summary.json followed_attach.not_attached_window_ended). LATE_WORKERS attach at once:
 * of LATE_WORKERS + 2 slow attaches at least two are still waiting at the stop. */
static void test_waiting_at_the_end_is_counted(void **state)
{
	struct seen s = { .result = 0, .takes_ns = 300 * NSEC_PER_MSEC };
	struct late_stats st;
	struct late *l;
	uint64_t now = now_monotonic_ns() - LATE_SETTLE_NS;
	int offered = LATE_WORKERS + 2;

	(void)state;
	l = attaching(&s, 400, now);
	for (int i = 1; i < offered; i++)
		late__offer(l, 400 + i, 7, now, false, 0);
	late__stop(l);          /* the attaches in flight end; the rest never begin */
	late__stats(l, &st);
	assert_int_equal(st.offered, offered);
	assert_int_equal(__atomic_load_n(&s.n, __ATOMIC_ACQUIRE), (int)st.attached);
	assert_true(st.attached >= 1 && st.attached <= LATE_WORKERS);
	assert_int_equal(st.attached + st.window_ended, offered);
	late__free(l);
}

/* An attach that waits (a rank inside `import torch`, its safe point seconds away) does
 * not hold back the process offered after it: that one is attached and handed out while
 * the first is still waiting. */
static void test_a_slow_attach_holds_no_other_back(void **state)
{
	struct seen s = { .result = 0, .held = 600 };
	struct target got[1];
	struct late_stats st;
	struct late *l;
	uint64_t now = now_monotonic_ns() - LATE_SETTLE_NS;

	(void)state;
	l = attaching(&s, 600, now);
	late__offer(l, 601, 7, now, false, 0);
	assert_int_equal(take_all(l, got, 1), 1);
	assert_int_equal(got[0].pid, 601);
	assert_int_equal(__atomic_load_n(&s.held_done, __ATOMIC_ACQUIRE), 0);  /* 600 waits on */
	__atomic_store_n(&s.release, 1, __ATOMIC_RELEASE);
	assert_int_equal(take_all(l, got, 1), 1);
	assert_int_equal(got[0].pid, 600);
	late__stop(l);
	late__stats(l, &st);
	assert_int_equal(st.attached, 2);
	late__free(l);
}

/* A process that execs while its attach is in flight is attached again, but not by a
 * second worker at the same time: one tracer at a time, the new attach after the old. */
static void test_one_attach_of_a_pid_at_a_time(void **state)
{
	struct seen s = { .result = 0, .held = 700 };
	struct target got[2];
	struct late_stats st;
	struct late *l;
	uint64_t now = now_monotonic_ns() - LATE_SETTLE_NS;

	(void)state;
	l = attaching(&s, 700, now);
	late__offer(l, 700, 7, now_monotonic_ns(), true, 0);  /* its exec, after the attach began */
	sleep_ns(200 * NSEC_PER_MSEC);          /* workers free, the new entry due */
	assert_int_equal(__atomic_load_n(&s.n, __ATOMIC_ACQUIRE), 1);
	__atomic_store_n(&s.release, 1, __ATOMIC_RELEASE);
	assert_int_equal(take_all(l, got, 2), 2);
	assert_int_equal(got[0].pid, 700);
	assert_int_equal(got[1].pid, 700);
	assert_int_equal(__atomic_load_n(&s.n, __ATOMIC_ACQUIRE), 2);
	late__stop(l);
	late__stats(l, &st);
	assert_int_equal(st.execd_after, 1);
	assert_int_equal(st.attached, 2);
	late__free(l);
}

/* A target chosen that exec'd: attached anew, with the start time it must still have. */
static void test_exec_of_a_chosen_target(void **state)
{
	struct seen s = { 0 };
	struct late_stats st;
	struct target got[1];
	struct late *l;

	(void)state;
	g_seen = &s;
	assert_int_equal(late__new(fake_attach, fake_discard, &s, &l), 0);
	late__offer(l, 500, 0, now_monotonic_ns() - LATE_SETTLE_NS, true, 4242);
	assert_int_equal(take_all(l, got, 1), 1);
	assert_int_equal(got[0].pid, 500);
	assert_int_equal(got[0].parent, 0);
	assert_int_equal(got[0].start_ticks, 4242);
	late__stop(l);
	late__stats(l, &st);
	assert_int_equal(st.offered, 0);        /* no new process */
	assert_int_equal(st.attached, 1);
	late__free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_then_exec_is_attached_once_after_the_exec),
		cmocka_unit_test(test_bounded_and_failures_counted),
		cmocka_unit_test(test_gone_and_untaken),
		cmocka_unit_test(test_waiting_at_the_end_is_counted),
		cmocka_unit_test(test_a_slow_attach_holds_no_other_back),
		cmocka_unit_test(test_one_attach_of_a_pid_at_a_time),
		cmocka_unit_test(test_exec_of_a_chosen_target),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
