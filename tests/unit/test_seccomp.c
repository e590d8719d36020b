/* SPDX-License-Identifier: MIT */
/* injector/attach/seccomp.c: the Seccomp: lines of /proc/PID/status, and a live thread's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "injector/attach/seccomp.h"

static int parse(const char *s, int *filters)
{
	return seccomp_status_parse(s, strlen(s), filters);
}

static void test_parse(void **state)
{
	int f = -5;

	(void)state;
	assert_int_equal(parse("Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n", &f), 0);
	assert_int_equal(f, 0);
	assert_int_equal(parse("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\nSpeculation:\tx\n", &f), 2);
	assert_int_equal(f, 3);
	assert_int_equal(parse("Seccomp:\t1\n", &f), 1);   /* an old kernel: no filters line */
	assert_int_equal(f, 0);
	/* a name that only looks like the line, a missing or garbled one */
	assert_int_equal(parse("Name:\tSeccomp:\t2\nSeccomp:\t0\n", &f), 0);
	assert_int_equal(parse("Name:\tx\n", &f), -1);
	assert_int_equal(parse("Seccomp:\t7\n", &f), -1);
	assert_int_equal(parse("Seccomp:\t2x\n", &f), -1);
	assert_int_equal(parse("Seccomp:\n", &f), -1);
	/* the bound is the length given, not a NUL */
	assert_int_equal(seccomp_status_parse("Seccomp:\t2\n", 9, &f), -1);
}

/* This process has no filter: nothing to refuse. */
static void test_self_not_refused(void **state)
{
	char msg[256] = "";

	(void)state;
	assert_int_equal(seccomp_refuse_remote_call(getpid(), msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_self_not_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
