/* SPDX-License-Identifier: MIT */
/* common/readfile: read a whole file into one growing, NUL-terminated buffer, up to a limit;
 * and make a directory with its parents. */
#ifndef AIPROF_COMMON_READFILE_H
#define AIPROF_COMMON_READFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Refuse anything but a regular file (a FIFO would block, a device never end): -EINVAL;
 * a folder is -EISDIR with or without it. */
#define READFILE_REGULAR 0x1u

/* Reads fd from its current offset to end of file into *ret (NUL-terminated; the NUL is not
 * counted in *ret_len, which may be NULL). More than max bytes: -EFBIG. Other failures are
 * -errno (EINTR is retried). On failure the partial buffer is wiped (it may hold a secret),
 * freed, and *ret / *ret_len are untouched. Caller frees *ret. The fd stays open. */
int readfile_fd(int fd, size_t max, unsigned flags, char **ret, size_t *ret_len);

/* One read(2) of up to len bytes, or pread(2) at off when off >= 0, retried when a signal
 * interrupts it: the bytes read (0 at the end), or a negative errno. */
ssize_t read_some(int fd, void *buf, size_t len, int64_t off);

/* The same for the file at path (opened O_CLOEXEC | O_NOCTTY). */
int readfile(const char *path, size_t max, unsigned flags, char **ret, size_t *ret_len);

/* Reads at most len - 1 bytes of the file at path into buf (len >= 1) and NUL-terminates it:
 * for small /proc and /sys files; what does not fit is left unread. Returns the length, or
 * -errno (EINTR is retried). */
ssize_t readfile_buf(const char *path, char *buf, size_t len);

/* mkdir -p: the missing parents 0755, path itself `mode` (an existing one is left as it
 * is). 0 or -errno. */
int mkdir_parents(const char *path, mode_t mode);

#endif
