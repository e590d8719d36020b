/* SPDX-License-Identifier: MIT */
/* common/procstat.c: fields of a /proc/PID/stat line whose name the process chose, and of
 * /proc/PID/status. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sys/syscall.h>
#include "common/procstat.h"
#include "common/readfile.h"

#define LINE(name, state, utime, stime) \
	"4242 (" name ") " state " 1 4242 4242 0 -1 4194560 100 0 0 0 " utime " " stime \
	" 0 0 20 0 3 0 12345 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 " \
	"0 0 0 0 0 0 0 0 0 0 0"

static void test_cpu_ticks_past_a_hostile_name(void **state)
{
	const char *lines[] = {
		LINE("python3", "S", "1234", "56"),
		LINE("a) R 1 2 3 4 5 6 7 8 9 10 11 999 999 (", "S", "1234", "56"),
		LINE("x\ny) 7", "R", "1234", "56"),
	};
	uint64_t v = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		assert_int_equal(procstat_cpu_ticks(lines[i], strlen(lines[i]), &v), 0);
		assert_int_equal(v, 1290);
	}
}

static void test_cpu_ticks_refuses_what_does_not_parse(void **state)
{
	const char *bad[] = { "", "4242 (x", "4242 (x) S 1 2", LINE("x", "S", "-1", "5"),
			      LINE("x", "S", "99999999999999999999", "5") };
	uint64_t v = 7;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(procstat_cpu_ticks(bad[i], strlen(bad[i]), &v), -1);
		assert_int_equal(v, 7);
	}
}

static void test_cpu_ticks_of_this_process_grow(void **state)
{
	char *s = NULL;
	size_t len = 0;
	uint64_t a, b;
	volatile uint64_t x = 0;

	(void)state;
	assert_int_equal(readfile("/proc/self/stat", 4096, 0, &s, &len), 0);
	assert_int_equal(procstat_cpu_ticks(s, len, &a), 0);
	free(s);
	for (long n = 0; n < 100000000L; n++)      /* about 0.1-0.5 s of CPU */
		x += (uint64_t)n;
	assert_int_equal(readfile("/proc/self/stat", 4096, 0, &s, &len), 0);
	assert_int_equal(procstat_cpu_ticks(s, len, &b), 0);
	free(s);
	assert_true(b > a);
}

static void test_exit_status_of_a_zombie_only(void **state)
{
	const char *zombie = LINE("a) R (", "Z", "1", "2"), *live = LINE("x", "S", "1", "2");
	char buf[512];

	(void)state;
	/* the line's last field (52) is the exit status: 0 in LINE; 256 here (exit(1)) */
	snprintf(buf, sizeof(buf), "%.*s256", (int)strlen(zombie) - 1, zombie);
	assert_int_equal(procstat_exit_status(buf, strlen(buf)), 256);
	assert_int_equal(procstat_exit_status(zombie, strlen(zombie)), 0);
	assert_int_equal(procstat_exit_status(live, strlen(live)), -1);
	snprintf(buf, sizeof(buf), "%.*s65536", (int)strlen(zombie) - 1, zombie);
	assert_int_equal(procstat_exit_status(buf, strlen(buf)), -1);
}

static void test_status_value_only_at_a_line_start(void **state)
{
	/* the name is the process's to choose: the kernel escapes its newline, but a key in
	 * it must not match, nor a key that only begins with the one asked for */
	const char text[] = "Name:\tTgid: 666 VmLib: 1\nUmask:\t0022\nTgidX:\t5\nTgid:\t4242\n"
			    "NSpid:\t4242\t7\nVmExe:\t  2800 kB\nVmLib";
	const char *v;
	size_t len = 0;

	(void)state;
	v = procstatus_value(text, strlen(text), "Tgid", &len);
	assert_non_null(v);
	assert_int_equal(len, 4);
	assert_memory_equal(v, "4242", 4);
	v = procstatus_value(text, strlen(text), "NSpid", &len);
	assert_non_null(v);
	assert_int_equal(len, 6);
	v = procstatus_value(text, strlen(text), "VmExe", &len);
	assert_non_null(v);
	assert_memory_equal(v, "2800 kB", 7);
	/* a last line without ':' or a newline, and a key not there */
	assert_null(procstatus_value(text, strlen(text), "VmLib", &len));
	assert_null(procstatus_value(text, strlen(text), "Uid", &len));
	/* the text ends inside the key's value: up to the end */
	v = procstatus_value(text, 24, "Name", &len);
	assert_non_null(v);
	assert_int_equal(len, 18);
}

static void test_status_number_of_this_process(void **state)
{
	long long v = -5;

	(void)state;
	assert_int_equal(procstatus_number(getpid(), "Tgid", 10, &v), 0);
	assert_int_equal(v, getpid());
	assert_int_equal(procstatus_number(getpid(), "CapEff", 16, &v), 0);
	assert_true(v >= 0);
	v = -5;
	assert_int_equal(procstatus_number(getpid(), "NoSuchKey", 10, &v), -ENODATA);
	assert_int_equal(procstatus_number(getpid(), "Name", 10, &v), -ENODATA);
	assert_int_equal(v, -5);
	assert_int_equal(procstatus_number(-1, "Tgid", 10, &v), -ESRCH);
}

/* the kernel's own schedstat of this thread; a thread that is not there */
static void test_sched_switches(void **state)
{
	char tid[16];
	uint64_t n = 0, m = 0;

	(void)state;
	snprintf(tid, sizeof(tid), "%d", (int)syscall(SYS_gettid));
	if (access("/proc/self/schedstat", R_OK) != 0)
		skip();   /* a kernel without CONFIG_SCHED_INFO */
	assert_int_equal(procsched_switches(getpid(), tid, &n), 0);
	assert_true(n > 0);
	usleep(1000);   /* off the CPU and back on */
	assert_int_equal(procsched_switches(getpid(), tid, &m), 0);
	assert_true(m > n);
	assert_int_equal(procsched_switches(getpid(), "999999999", &n), -ENOENT);
}

static void test_timens_offsets(void **state)
{
	static const char text[] = "monotonic           5    123456789\nboottime            0         0\n";
	static const char neg[] = "boottime 0 0\nmonotonic -3 500\n";
	int64_t off = 42;

	assert_int_equal(timens_monotonic_offset(text, strlen(text), &off), 0);
	assert_true(off == 5123456789LL);
	assert_int_equal(timens_monotonic_offset(neg, strlen(neg), &off), 0);
	assert_true(off == -3LL * 1000000000LL + 500);
	off = 42;
	/* not a monotonic line, a cut one, nanoseconds out of range, trailing junk */
	assert_int_equal(timens_monotonic_offset("boottime 1 0\n", 13, &off), -ENODATA);
	assert_int_equal(timens_monotonic_offset("monotonic 1", 11, &off), -ENODATA);
	assert_int_equal(timens_monotonic_offset("monotonic 1 1000000000\n", 23, &off), -ENODATA);
	assert_int_equal(timens_monotonic_offset("monotonicx 1 0\n", 15, &off), -ENODATA);
	assert_int_equal(timens_monotonic_offset("monotonic 1 0 x\n", 16, &off), -ENODATA);
	assert_true(off == 42);
	/* this process: the initial time namespace (or a kernel without them): 0 */
	assert_int_equal(proc_timens_monotonic(getpid(), &off), 0);
	assert_true(off == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sched_switches),
		cmocka_unit_test(test_timens_offsets),
		cmocka_unit_test(test_cpu_ticks_past_a_hostile_name),
		cmocka_unit_test(test_cpu_ticks_refuses_what_does_not_parse),
		cmocka_unit_test(test_cpu_ticks_of_this_process_grow),
		cmocka_unit_test(test_exit_status_of_a_zombie_only),
		cmocka_unit_test(test_status_value_only_at_a_line_start),
		cmocka_unit_test(test_status_number_of_this_process),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
