/* SPDX-License-Identifier: MIT */
/*
 * A target's seccomp state, read before any remote call. A remote call makes system calls
 * on a thread of the target (mmap, memfd_create, dlopen's openat and mmap, the return
 * path's signal); a filter can answer one with SIGSYS or a kill, and strict mode kills on
 * anything but read, write, _exit and sigreturn. Filters are per thread and cannot be read
 * without CAP_SYS_ADMIN, so any thread with a filter (or in strict mode) is reason enough
 * not to make the call: the ptrace method is refused, and --method auto records with the
 * eBPF method instead, which makes no call in the process.
 */
#ifndef AIPROF_SECCOMP_H
#define AIPROF_SECCOMP_H

#include <stddef.h>
#include <sys/types.h>

/* The "Seccomp:" field of a /proc/PID/status text (len bytes, no NUL needed): 0 none, 1
 * strict, 2 filter; -1 when the line is missing or malformed. *ret_filters: the
 * "Seccomp_filters:" count (0 when absent). */
int seccomp_status_parse(const char *status, size_t len, int *ret_filters);

/*
 * Looks at every thread of pid: 0 when none is under seccomp (or the state cannot be read:
 * the attach will say why), else -EPROTONOSUPPORT with why in msg (which thread, which
 * mode, what to do).
 */
int seccomp_refuse_remote_call(pid_t pid, char *msg, size_t msglen);

#endif
