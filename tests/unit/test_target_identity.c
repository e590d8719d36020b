/* SPDX-License-Identifier: MIT */
/*
 * injector/target/target.c: a chosen process is held by pidfd and its start time, so that its pid,
 * once reused by another process, is not taken for it.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_process_chosen_and_only_it),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
