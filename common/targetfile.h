/* SPDX-License-Identifier: MIT */
/*
 * Files of a profiled process, opened as that process sees them and only those: the process
 * is untrusted, and its container's filesystem is its to arrange. A path is resolved inside
 * the process's root (openat2 RESOLVE_IN_ROOT: an absolute symlink planted there resolves
 * against that root, never the injector's, and `..` stops at it; magic links are refused),
 * and every file is looked at before it is opened for reading (O_PATH, then fstat): regular
 * files only, so a FIFO cannot block the injector and a device node is never opened.
 */
#ifndef AIPROF_TARGETFILE_H
#define AIPROF_TARGETFILE_H

#include <sys/types.h>

struct elf_file;
struct maps_entry;

/* Opens `path`, as process pid sees it, for reading. Returns an fd (O_CLOEXEC) or -errno:
 * -ENOEXEC when it is not a regular file, -EXDEV when it resolves outside the root. */
int target_file__open(pid_t pid, const char *path);
/* The file behind mapping e of pid: the very file mapped (/proc/PID/map_files, the
 * kernel's own reference) when this process may open that, else e->path as above. */
int target_file__open_mapped(pid_t pid, const struct maps_entry *e);
/* The same, read as an ELF file (common/elfsym.h). */
int target_file__open_elf(pid_t pid, const struct maps_entry *e, struct elf_file **ret);

#endif
