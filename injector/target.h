/* SPDX-License-Identifier: MIT */
#ifndef AIPROF_TARGET_H
#define AIPROF_TARGET_H

#include <stddef.h>
#include <stdbool.h>
#include <sys/types.h>
#include "profile.h"

/*
 * Checks that pid can be profiled at all before anything touches it. Returns 0, or a
 * negative errno with a message that says what is wrong and what to do:
 *   -ESRCH no such process, -EPERM not allowed, -ENOEXEC static / no libc,
 *   -EPROTONOSUPPORT not an x86_64 process, -EINVAL it is ourselves.
 */
int target_preflight(pid_t pid, char *msg, size_t len);

/* After ptrace said EPERM: works out which permission is missing, into msg. */
void target_explain_eperm(pid_t pid, char *msg, size_t len);

/* Has pid exited (no /proc entry, or a zombie waiting for its parent)? */
bool target_exited(pid_t pid);

/* Fills comm and cmdline of t from /proc. */
void target_read_identity(struct target *t);

#endif
