/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "readfile.h"

/* First capacity when the size is unknown (/proc files report 0). */
#define READFILE_FIRST_CAP 16384

ssize_t read_some(int fd, void *buf, size_t len, int64_t off)
{
	for (;;) {
		ssize_t n = off >= 0 ? pread(fd, buf, len, (off_t)off) : read(fd, buf, len);

		if (n >= 0 || errno != EINTR)
			return n < 0 ? -errno : n;
	}
}

int readfile_fd(int fd, size_t max, unsigned flags, char **ret, size_t *ret_len)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0, cap = 0, first = READFILE_FIRST_CAP;
	int err;

	if (fd < 0 || !ret)
		return -EINVAL;
	if (max > SIZE_MAX / 4)
		max = SIZE_MAX / 4;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if ((flags & READFILE_REGULAR) && !S_ISREG(st.st_mode))
		return -EINVAL;
	/* A regular file's size is a good first guess: one read, one more to see the end. */
	if (S_ISREG(st.st_mode) && st.st_size > 0)
		first = (uint64_t)st.st_size < max ? (size_t)st.st_size + 2 : max + 2;
	for (;;) {
		ssize_t n;

		/* Room for at least one byte to read and the NUL; a buffer of max + 2 tells a
		 * file of max bytes from a longer one. */
		if (cap - len < 2) {
			size_t ncap = cap ? cap * 2 : first;
			char *nb;

			if (ncap > max + 2)
				ncap = max + 2;
			if (ncap <= cap) {
				err = -EFBIG;
				goto fail;
			}
			nb = realloc(buf, ncap);
			if (!nb) {
				err = -ENOMEM;
				goto fail;
			}
			buf = nb;
			cap = ncap;
		}
		n = read_some(fd, buf + len, cap - len - 1, -1);
		if (n < 0) {
			err = (int)n;
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			err = -EFBIG;
			goto fail;
		}
	}
	if (!buf) {
		buf = malloc(1);
		if (!buf)
			return -ENOMEM;
	}
	buf[len] = '\0';
	*ret = buf;
	if (ret_len)
		*ret_len = len;
	return 0;
fail:
	if (buf) {
		explicit_bzero(buf, cap);
		free(buf);
	}
	return err;
}

int readfile(const char *path, size_t max, unsigned flags, char **ret, size_t *ret_len)
{
	int fd, r;

	if (!path || !ret)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	r = readfile_fd(fd, max, flags, ret, ret_len);
	close(fd);
	return r;
}

ssize_t readfile_buf(const char *path, char *buf, size_t len)
{
	size_t got = 0;
	int fd;

	if (!path || !buf || !len)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);

		if (n < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

int mkdir_parents(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
