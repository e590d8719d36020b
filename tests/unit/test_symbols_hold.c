/* SPDX-License-Identifier: MIT */
/*
 * injector/collect/ebpf_symbols.c, proc_symbolizer__hold(): the code of a process, held
 * while it lives, names its addresses after it exits (the launch stacks of a trainer that
 * ends inside the window); after an exec the old program's maps are kept, so that what was
 * recorded under them is not named after the new program's. The processes are children
 * of this test, forked from it: their code is this file's.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "timeutil.h"
#include "injector/collect/ebpf_symbols.h"

#define NOINLINE __attribute__((noinline, noclone))

/* What a child runs: waits for a byte, then exits (or, given 'x', execs a sleep). */
NOINLINE void held_child_main(int rfd)
{
	char c = 0;

	if (read(rfd, &c, 1) == 1 && c == 'x')
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
	_exit(0);
}

struct kid {
	pid_t pid;
	int wfd;
};

static struct kid start_kid(void)
{
	int fds[2];
	struct kid k;

	assert_int_equal(pipe(fds), 0);
	k.pid = fork();
	assert_true(k.pid >= 0);
	if (k.pid == 0) {
		close(fds[1]);
		held_child_main(fds[0]);
	}
	close(fds[0]);
	k.wfd = fds[1];
	return k;
}

/* The child told to exit (c 'q') or exec ('x'); an exit is reaped. */
static void tell(struct kid *k, char c)
{
	assert_int_equal(write(k->wfd, &c, 1), 1);
	close(k->wfd);
	if (c != 'x')
		assert_int_equal(waitpid(k->pid, NULL, 0), k->pid);
}

static int name_of(struct proc_symbolizer *ps, uint64_t addr, char *buf, size_t len)
{
	return proc_symbolizer__lookup(ps, addr, buf, len);
}

static void test_held_code_names_a_process_gone(void **state)
{
	uint64_t addr = (uint64_t)(uintptr_t)&held_child_main + 4;
	struct proc_symbolizer *held, *lazy;
	struct symbolizer *z, *z2;
	struct kid k = start_kid();
	size_t opened = 0;
	char name[256];
	int f;

	(void)state;
	assert_int_equal(symbolizer__new(&z), 0);
	assert_int_equal(symbolizer__new(&z2), 0);
	assert_int_equal(symbolizer__proc(z, k.pid, &held), 0);
	assert_int_equal(symbolizer__proc(z2, k.pid, &lazy), 0);
	assert_int_equal(proc_symbolizer__hold(held, &opened), 0);
	assert_true(opened >= 2);                       /* this program, libc, ... */
	assert_int_equal(proc_symbolizer__hold(held, &opened), 0);
	assert_int_equal(opened, 0);                    /* nothing mapped since */
	assert_ptr_equal(symbolizer__proc_of(z, k.pid), held);
	tell(&k, 'q');
	/* gone: the held one still names its code, the one that was not held cannot */
	f = name_of(held, addr, name, sizeof(name));
	assert_true(f & USYM_NAMED);
	assert_string_equal(name, "held_child_main");
	f = name_of(lazy, addr, name, sizeof(name));
	assert_false(f & USYM_NAMED);
	assert_int_equal(proc_symbolizer__hold(held, NULL), -ESRCH);
	assert_true(proc_symbolizer__gone(held));
	f = name_of(held, addr, name, sizeof(name));     /* and still, after the look */
	assert_string_equal(name, "held_child_main");
	symbolizer__free(z2);
	symbolizer__free(z);
}

/* /proc/PID/exe of pid names path (the exec is done). */
static bool runs(pid_t pid, const char *path)
{
	char link[64], buf[256];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, path) != NULL;
}

static void test_after_an_exec_the_old_maps_are_kept(void **state)
{
	uint64_t addr = (uint64_t)(uintptr_t)&held_child_main + 4;
	struct proc_symbolizer *ps;
	struct symbolizer *z;
	struct kid k = start_kid();
	char name[256];
	int f;

	(void)state;
	assert_int_equal(symbolizer__new(&z), 0);
	assert_int_equal(symbolizer__proc(z, k.pid, &ps), 0);
	assert_int_equal(proc_symbolizer__hold(ps, NULL), 0);
	tell(&k, 'x');
	for (uint64_t end = now_monotonic_ns() + 5 * NSEC_PER_SEC;
	     !runs(k.pid, "sleep") && now_monotonic_ns() < end;)
		sleep_ns(1 * NSEC_PER_MSEC);
	assert_true(runs(k.pid, "sleep"));
	sleep_ns(50 * NSEC_PER_MSEC);                   /* its loader done */
	/* the maps now are sleep's: not taken; the old ones named as before, from now on */
	assert_int_equal(proc_symbolizer__hold(ps, NULL), 0);
	assert_false(proc_symbolizer__gone(ps));
	f = name_of(ps, addr, name, sizeof(name));
	assert_true(f & USYM_NAMED);
	assert_string_equal(name, "held_child_main");
	kill(k.pid, SIGKILL);
	assert_int_equal(waitpid(k.pid, NULL, 0), k.pid);
	symbolizer__free(z);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held_code_names_a_process_gone),
		cmocka_unit_test(test_after_an_exec_the_old_maps_are_kept),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
