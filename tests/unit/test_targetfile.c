/* SPDX-License-Identifier: MIT */
/*
 * common/targetfile.c: files of a profiled process opened inside its root and only if they
 * are regular files. The "target" is a child chrooted into a scratch folder (as a container's
 * process is), which plants what a hostile container could: an absolute symlink to a host
 * file, a `..` walk, a magic link to pid 1's root, a FIFO, a device node.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/targetfile.h"

/* mkdtemp() fills in the name; made says it did, for the teardown */
static char root[] = "/tmp/aiprof-test-targetfile-XXXXXX";
static bool made;
static pid_t child = -1;

static void put(const char *rel, const char *data)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	f = fopen(p, "we");
	assert_non_null(f);
	fputs(data, f);
	fclose(f);
}

static void link_at(const char *target, const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	assert_int_equal(symlink(target, p), 0);
}

static int setup(void **state)
{
	char p[256];
	int ready[2];

	(void)state;
	if (geteuid() != 0)
		return 0;       /* chroot needs root; the tests skip */
	assert_non_null(mkdtemp(root));
	made = true;
	snprintf(p, sizeof(p), "%s/etc", root);
	assert_int_equal(mkdir(p, 0755), 0);
	put("etc/passwd", "inside:x:0:0\n");
	put("lib.so", "a library\n");
	link_at("/etc/passwd", "abs-link");            /* absolute: must resolve in the root */
	link_at("../../../../../etc/passwd", "dotdot"); /* climbs: stops at the root */
	link_at("/proc/1/root/etc/passwd", "magic");    /* through a magic link: refused */
	snprintf(p, sizeof(p), "%s/fifo", root);
	assert_int_equal(mkfifo(p, 0600), 0);
	snprintf(p, sizeof(p), "%s/null", root);
	assert_int_equal(mknod(p, S_IFCHR | 0600, makedev(1, 3)), 0);
	assert_int_equal(pipe(ready), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		if (chroot(root) < 0 || chdir("/") < 0)
			_exit(1);
		close(ready[0]);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], p, 1), 1);
	close(ready[0]);
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	if (made) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			return -1;
	}
	return 0;
}

static char *read_all(int fd)
{
	static char buf[256];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);

	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static void test_regular_file_and_absolute_symlink_stay_inside(void **state)
{
	(void)state;
	if (child <= 0)
		skip();
	assert_string_equal(read_all(target_file__open(child, "/lib.so")), "a library\n");
	/* /etc/passwd of the container, not of the host */
	assert_string_equal(read_all(target_file__open(child, "/abs-link")), "inside:x:0:0\n");
	assert_string_equal(read_all(target_file__open(child, "/dotdot")), "inside:x:0:0\n");
	assert_string_equal(read_all(target_file__open(child, "/../../etc/passwd")), "inside:x:0:0\n");
}

static void test_magic_links_fifos_and_devices_are_refused(void **state)
{
	struct timespec t0, t1;
	int r;

	(void)state;
	if (child <= 0)
		skip();
	r = target_file__open(child, "/magic");
	assert_true(r == -ELOOP || r == -EXDEV || r == -ENOENT);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(target_file__open(child, "/fifo"), -ENOEXEC);   /* and does not block */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 2);
	assert_int_equal(target_file__open(child, "/null"), -ENOEXEC);
	assert_int_equal(target_file__open(child, "relative"), -EINVAL);
	assert_int_equal(target_file__open(child, "/missing"), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_regular_file_and_absolute_symlink_stay_inside),
		cmocka_unit_test(test_magic_links_fifos_and_devices_are_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
