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

struct inject_opts {
	const char *lib_path;     /* libaiprof.so on the injector's side */
	uint64_t timeout_ns;      /* for finding a safe point and for the dlopen (default 5 s) */
};

enum inject_how {
	INJECT_NONE = 0,
	INJECT_PTRACE,            /* loaded now, dlopen on a new thread */
	INJECT_PTRACE_DIRECT,     /* loaded now, dlopen on the hijacked thread (no pthread_create) */
	INJECT_ALREADY_LOADED,    /* an earlier attach or LD_PRELOAD left it there */
};

struct inject_report {
	enum inject_how how;
	pid_t tid;                /* thread that was stopped (0 if none) */
	uint64_t stop_ns;         /* total time that thread spent stopped by us */
	unsigned attempts;        /* interrupts until a safe point was found */
	uint64_t load_ns;         /* from the first stop until the library was up */
	char safe_point[64];      /* where the thread was when we used it, e.g. "syscall 7" */
	char return_path[32];     /* how the return path's marker stops the thread: "SIGURG",
				   * or "syscall-stops" where no quiet signal was free */
	unsigned unsafe_stops;    /* stops that found the thread inside libc or a handler */
	char message[512];        /* on failure: what went wrong and what to do */
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
