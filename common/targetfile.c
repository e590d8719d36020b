/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "elfsym.h"
#include "procmaps.h"
#include "targetfile.h"

/* pathfd (O_PATH) to an fd open for reading, if it is a regular file; closes pathfd. */
static int reopen_regular(int pathfd)
{
	char p[64];
	struct stat st;
	int fd, r;

	if (fstat(pathfd, &st) < 0) {
		r = -errno;
	} else if (!S_ISREG(st.st_mode)) {
		r = -ENOEXEC;
	} else {
		snprintf(p, sizeof(p), "/proc/self/fd/%d", pathfd);
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		r = fd >= 0 ? fd : -errno;
	}
	close(pathfd);
	return r;
}

int target_file__open(pid_t pid, const char *path)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	char root[64];
	int dfd, fd;

	if (!path || path[0] != '/')
		return -EINVAL;
	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof(how));
	if (fd < 0)
		fd = -errno;
	close(dfd);
	return fd < 0 ? fd : reopen_regular(fd);
}

int target_file__open_mapped(pid_t pid, const struct maps_entry *e)
{
	char p[96];
	int fd;

	snprintf(p, sizeof(p), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, e->start,
		 e->end);
	fd = open(p, O_PATH | O_CLOEXEC);
	if (fd >= 0)
		return reopen_regular(fd);
	return target_file__open(pid, e->path);
}

int target_file__open_elf(pid_t pid, const struct maps_entry *e, struct elf_file **ret)
{
	int fd = target_file__open_mapped(pid, e), r;

	if (fd < 0)
		return fd;
	r = elf_file__open_fd(fd, ret);
	close(fd);
	return r;
}
