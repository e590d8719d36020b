/* SPDX-License-Identifier: MIT */
/*
 * The memory limit this process runs under: the smallest of its cgroup's (v2 memory.max,
 * v1 memory.limit_in_bytes) up the tree, as a Kubernetes container or a systemd unit sets
 * it. Used to size what a window may keep in memory.
 */
#ifndef AIPROF_MEMLIMIT_H
#define AIPROF_MEMLIMIT_H

#include <stdint.h>

/*
 * `root` is where the cgroup filesystems are mounted (normally "/sys/fs/cgroup"),
 * `proc_cgroup` the text of /proc/self/cgroup. *ret_bytes = the limit, or UINT64_MAX when
 * none is set or readable. Returns 0 (also when unlimited).
 */
int memlimit_parse(const char *root, const char *proc_cgroup, uint64_t *ret_bytes);

/* The same for this process: /sys/fs/cgroup and /proc/self/cgroup. */
uint64_t memlimit_self(void);

#endif
