/* SPDX-License-Identifier: MIT */
/*
 * For fuzz targets that link injector/session.c: it also arms the launch hooks' Python walk
 * (injector/launch_stacks.c) and polls its target (injector/target.c), which pull in the
 * artifact builder and /proc readers. No session is started in a fuzz target, so it supplies
 * both. Include once, in the target's one source file.
 */
#ifndef AIPROF_FUZZ_SESSION_STUBS_H
#define AIPROF_FUZZ_SESSION_STUBS_H

#include <stdbool.h>
#include <sys/types.h>

#include "event.h"
#include "injector/launch_stacks.h"
#include "injector/target.h"

int launch_stacks_arm_python(struct aiprof_ring_hdr *h, pid_t pid)
{
	(void)h;
	(void)pid;
	return 0;
}

bool target_exited(pid_t pid)
{
	(void)pid;
	return false;
}

#endif
