/* SPDX-License-Identifier: MIT */
/*
 * Loading libaiprof.so into a process that is already running, with ptrace.
 *
 * Nothing is written into the target's filesystem: the library's bytes go into a memfd
 * created inside the target, and the target dlopen()s /proc/self/fd/N.
 */
#ifndef AIPROF_INJECT_H
#define AIPROF_INJECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "model/inject_report.h"

struct inject_opts {
	const char *lib_path;     /* libaiprof.so on the injector's side */
	uint64_t timeout_ns;      /* for finding a safe point and for the dlopen (default 5 s) */
};

/*
 * Makes sure libaiprof.so is loaded in `pid`. Returns 0, or a negative errno with
 * report->message set:
 *   -ESRCH  no such process (or it exited)        -EPERM  not allowed to ptrace it
 *   -ENOEXEC static binary / no dynamic loader    -EPROTONOSUPPORT  not x86_64
 *   -ETIMEDOUT  no safe point or dlopen hung      -EIO  dlopen failed inside the target
 */
int inject_library(pid_t pid, const struct inject_opts *opts, struct inject_report *report);

/* true if a library named libaiprof.so is mapped in pid (memfd or file). */
bool inject_is_loaded(pid_t pid);

#endif
