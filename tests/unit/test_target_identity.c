/* SPDX-License-Identifier: MIT */
/*
 * injector/target/target.c: a chosen process is held by pidfd and its start time, so that its pid,
 * once reused by another process, is not taken for it; a process with CET shadow stacks is
 * recognised from its status, to be refused (a remote call's return would crash it).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "injector/model/profile.h"
#include "injector/target/target.h"

static pid_t spawn(void)
{
	pid_t p = fork();

	assert_true(p >= 0);
	if (p == 0) {
		pause();
		_exit(0);
	}
	return p;
}

static void test_the_process_chosen_and_only_it(void **state)
{
	struct target t;
	pid_t p = spawn();

	(void)state;
	memset(&t, 0, sizeof(t));
	t.pid = p;
	target_read_identity(&t);
	assert_true(t.start_ticks > 0);
	assert_true(target_same_process(&t));
	/* the same pid with another start time: another process */
	t.start_ticks++;
	assert_false(target_same_process(&t));
	t.start_ticks--;
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	/* gone: whatever has that pid now, the pidfd says the chosen one exited */
	assert_false(target_same_process(&t));
	if (t.pidfd >= 0)
		close(t.pidfd);
}

static void test_shadow_stack_seen_in_status(void **state)
{
	(void)state;
	/* as kernel 6.6+ prints them; only an enabled "shstk" counts */
	assert_true(target_status_has_shstk("Name:\tapp\nx86_Thread_features:\tshstk wrss\n"
					    "x86_Thread_features_locked:\tshstk wrss\n"));
	assert_true(target_status_has_shstk("Name:\tapp\nx86_Thread_features:\twrss shstk\n"));
	assert_false(target_status_has_shstk("Name:\tapp\nx86_Thread_features:\t\n"
					     "x86_Thread_features_locked:\tshstk\n"));
	assert_false(target_status_has_shstk("Name:\tapp\nx86_Thread_features:\twrss\n"));
	assert_false(target_status_has_shstk("Name:\tapp\nx86_Thread_features:\tshstkx\n"));
	assert_false(target_status_has_shstk("Name:\tapp\nState:\tS (sleeping)\n"));
	assert_false(target_status_has_shstk("Name:\tshstk\n"));
	assert_false(target_status_has_shstk(NULL));
}

static void test_this_process_has_no_shadow_stack(void **state)
{
	char buf[8192];
	FILE *f = fopen("/proc/self/status", "r");
	size_t n;

	(void)state;
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* Debian 12's glibc enables none: what a target here looks like */
	assert_false(target_status_has_shstk(buf));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_process_chosen_and_only_it),
		cmocka_unit_test(test_shadow_stack_seen_in_status),
		cmocka_unit_test(test_this_process_has_no_shadow_stack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
