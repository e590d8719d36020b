/* SPDX-License-Identifier: MIT */
/* common/readfile.c: a whole file into one NUL-terminated buffer, up to a limit. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/readfile.h"

static char dir[] = "/tmp/aiprof-test-readfile-XXXXXX";

static void write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static char *pattern(size_t len)
{
	char *p = malloc(len);

	assert_non_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (char)('a' + i % 23);
	return p;
}

static void test_whole_file_nul_terminated(void **state)
{
	char path[128], *buf = NULL, *want = pattern(100000);
	size_t len = 0;

	(void)state;
	snprintf(path, sizeof(path), "%s/f", dir);
	write_file(path, want, 100000);
	assert_int_equal(readfile(path, 100000, 0, &buf, &len), 0);
	assert_int_equal(len, 100000);
	assert_memory_equal(buf, want, len);
	assert_int_equal(buf[len], '\0');
	free(buf);
	/* One byte over the limit is refused and nothing is returned. */
	buf = NULL;
	len = 7;
	assert_int_equal(readfile(path, 99999, 0, &buf, &len), -EFBIG);
	assert_null(buf);
	assert_int_equal(len, 7);
	free(want);
	unlink(path);
}

static void test_empty_missing_folder(void **state)
{
	char path[128], *buf = NULL;
	size_t len = 1;

	(void)state;
	snprintf(path, sizeof(path), "%s/empty", dir);
	write_file(path, "", 0);
	assert_int_equal(readfile(path, 0, 0, &buf, &len), 0);
	assert_int_equal(len, 0);
	assert_string_equal(buf, "");
	free(buf);
	buf = NULL;
	assert_int_equal(readfile(dir, 100, 0, &buf, &len), -EISDIR);
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(readfile(path, 100, 0, &buf, &len), -ENOENT);
	assert_int_equal(readfile(NULL, 100, 0, &buf, &len), -EINVAL);
	assert_null(buf);
	unlink(path);
	snprintf(path, sizeof(path), "%s/empty", dir);
	unlink(path);
}

/* A pipe has no size to guess from: the buffer grows while it is read, to the limit. */
static int pipe_with_writer(size_t n, pid_t *ret_pid)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *data = pattern(n);
		size_t off = 0;

		close(p[0]);
		while (off < n) {
			ssize_t w = write(p[1], data + off, n - off);

			if (w <= 0)
				_exit(1);
			off += (size_t)w;
		}
		_exit(0);
	}
	close(p[1]);
	*ret_pid = pid;
	return p[0];
}

static void test_pipe_grows_to_limit(void **state)
{
	char *buf = NULL, *want = pattern(300000);
	size_t len = 0;
	pid_t pid;
	int fd, status;

	(void)state;
	fd = pipe_with_writer(300000, &pid);
	assert_int_equal(readfile_fd(fd, 1 << 20, 0, &buf, &len), 0);
	close(fd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(len, 300000);
	assert_memory_equal(buf, want, len);
	assert_int_equal(buf[len], '\0');
	free(buf);
	buf = NULL;

	fd = pipe_with_writer(300000, &pid);
	assert_int_equal(readfile_fd(fd, 200000, 0, &buf, &len), -EFBIG);
	assert_null(buf);
	close(fd);     /* the writer then fails on a closed pipe and exits */
	assert_int_equal(waitpid(pid, &status, 0), pid);

	fd = pipe_with_writer(10, &pid);
	assert_int_equal(readfile_fd(fd, 100, READFILE_REGULAR, &buf, &len), -EINVAL);
	assert_null(buf);
	close(fd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	free(want);
}

/* /proc files report size 0; reading starts at the fd's offset. */
static void test_proc_and_offset(void **state)
{
	char path[128], *buf = NULL;
	size_t len = 0;
	int fd;

	(void)state;
	assert_int_equal(readfile("/proc/self/maps", 1 << 22, 0, &buf, &len), 0);
	assert_true(len > 0);
	assert_non_null(strstr(buf, "[stack]"));
	assert_int_equal(strlen(buf), len);
	free(buf);
	buf = NULL;
	snprintf(path, sizeof(path), "%s/off", dir);
	write_file(path, "0123456789", 10);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(lseek(fd, 4, SEEK_SET), 4);
	assert_int_equal(readfile_fd(fd, 6, 0, &buf, &len), 0);
	assert_string_equal(buf, "456789");
	close(fd);
	free(buf);
	unlink(path);
}

/* A small file into the caller's buffer: what does not fit is cut, always NUL-terminated. */
static void test_into_buffer(void **state)
{
	char path[128], buf[8];

	(void)state;
	snprintf(path, sizeof(path), "%s/small", dir);
	write_file(path, "0123456789", 10);
	assert_int_equal(readfile_buf(path, buf, sizeof(buf)), 7);
	assert_string_equal(buf, "0123456");
	assert_int_equal(readfile_buf(path, buf, 1), 0);
	assert_string_equal(buf, "");
	write_file(path, "abc", 3);
	assert_int_equal(readfile_buf(path, buf, sizeof(buf)), 3);
	assert_string_equal(buf, "abc");
	assert_int_equal(readfile_buf(path, buf, 0), -EINVAL);
	unlink(path);
	assert_int_equal(readfile_buf(path, buf, sizeof(buf)), -ENOENT);
	/* a /proc file reports size 0 and is read all the same */
	{
		char st[4096];

		assert_true(readfile_buf("/proc/self/status", st, sizeof(st)) > 0);
		assert_non_null(strstr(st, "Pid:"));
	}
}

static int setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_file_nul_terminated),
		cmocka_unit_test(test_empty_missing_folder),
		cmocka_unit_test(test_pipe_grows_to_limit),
		cmocka_unit_test(test_proc_and_offset),
		cmocka_unit_test(test_into_buffer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
