/* SPDX-License-Identifier: MIT */
/* How a target was attached: what attach/inject.c reports and the artifacts show. */
#ifndef AIPROF_INJECT_REPORT_H
#define AIPROF_INJECT_REPORT_H

#include <stdint.h>
#include <sys/types.h>

enum inject_how {
	INJECT_NONE = 0,
	INJECT_PTRACE,            /* loaded now, dlopen on a new thread */
	INJECT_PTRACE_DIRECT,     /* loaded now, dlopen on the hijacked thread (no pthread_create) */
	INJECT_ALREADY_LOADED,    /* an earlier attach or LD_PRELOAD left it there */
	INJECT_PTRACE_WOKEN,      /* a forked child's inherited dormant copy, woken by ptrace */
};

struct inject_report {
	enum inject_how how;
	pid_t tid;                /* thread that was stopped (0 if none) */
	uint64_t stop_ns;         /* total time that thread spent stopped by us */
	unsigned attempts;        /* interrupts until a safe point was found */
	uint64_t load_ns;         /* from the first stop until the library was up */
	char safe_point[192];     /* where the thread was when we used it (or, on failure, at
				   * the last stop), e.g. "syscall 7, 23 frames" */
	char return_path[32];     /* how the return path's marker stops the thread: "SIGURG",
				   * or "syscall-stops" where no quiet signal was free */
	uint64_t started_ns;      /* when the injection began (CLOCK_MONOTONIC) */
	int died_status;          /* the process died while a thread was stopped or in a call:
				   * its wait(2) status; -1 if it did not */
	char died_doing[64];      /* what aiprof was doing in it then ("mmap", "safe-point check") */
	pid_t loader_tid;         /* the thread that ran dlopen (host tid; 0 if unknown) */
	unsigned unsafe_stops;    /* stops that found the thread inside libc or a handler */
	char message[512];        /* on failure: what went wrong and what to do */
};

#endif
