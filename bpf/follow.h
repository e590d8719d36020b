/* SPDX-License-Identifier: MIT */
/*
 * Processes the targets start during the window (follow.bpf.c <-> injector/collect/
 * ebpf_follow.c): a child forked by a target (fork, vfork, clone without CLONE_THREAD) is
 * put into the target filter by the kernel side itself, at the fork, so that the other
 * collectors record it from its first instruction; a target that execs is reported so that
 * its symbols and interpreter are read again.
 */
#ifndef AIPROF_BPF_FOLLOW_H
#define AIPROF_BPF_FOLLOW_H

#include "stack.h"

enum follow_kind {
	FOLLOW_FORK = 1,          /* tgid = the child, parent = the target that forked it */
	FOLLOW_EXEC = 2,          /* tgid exec'd a new program (comm: its new name) */
	FOLLOW_FULL = 3,          /* a child not followed: the limit was reached */
	FOLLOW_EXIT = 4,          /* tgid's last thread exited; parent = its exit status, as
				   * wait(2) gives it (signal in the low 7 bits, code << 8) */
};

struct follow_event {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_FOLLOW; tgid/tid: the child (or the exec'er) */
	__u32 kind;               /* enum follow_kind */
	__u32 parent;             /* the forking process (tgid) */
};

_Static_assert(sizeof(struct follow_event) == 48, "follow_event layout");

#endif
