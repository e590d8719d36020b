/* SPDX-License-Identifier: MIT */
#ifndef AIPROF_CLI_H
#define AIPROF_CLI_H

/* Exit codes of the aiprof CLI (documented in --help and README.md). */
enum {
	EXIT_OK = 0,
	EXIT_FAILURE_ = 1,    /* anything not listed below */
	EXIT_USAGE = 2,       /* bad command line */
	EXIT_NO_TARGET = 3,   /* no such process, or it exited */
	EXIT_PERMISSION = 4,  /* not allowed to ptrace the target */
	EXIT_UNSUPPORTED = 5, /* static binary, no libc, not x86_64 */
	EXIT_INJECT = 6,      /* injection or collection failed */
	EXIT_OUTPUT = 7,      /* artifacts could not be written */
};

int cmd_profile(int argc, char **argv);

/* Exit code for a negative errno from target checks or injection. */
int exit_code_for(int err);

#endif
