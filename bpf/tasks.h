/* SPDX-License-Identifier: MIT */
/*
 * Every thread of the targets as it is right now (tasks.bpf.c <-> injector/collect/
 * ebpf_tasks.c): a BPF task iterator read on demand — for `aiprof stacks`, and for the
 * threads still asleep when a profile window closes. Nothing is stopped: a thread that is
 * not on a CPU has its user registers saved at its entry into the kernel and its stack as
 * it left it; one on a CPU is marked so (its copy may be torn).
 */
#ifndef AIPROF_BPF_TASKS_H
#define AIPROF_BPF_TASKS_H

#include "stack.h"

struct task_dump {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_TASK; ts = now, in the runqueues' clock */
	__u32 state;              /* task state & 0xff: 0 runnable, 1 S, 2 D, 4/8 stopped/traced */
	__u32 on_cpu;             /* running on a CPU as it was read */
	__s32 syscall;            /* the syscall it is in (orig_ax), -1 if none */
	__u32 pcount;             /* times it was switched in (sched_info.pcount), low 32 bits:
				   * /proc's schedstat says whether it ran since */
	__u64 stopped_at;         /* runqueue clock when it last left its CPU (asleep), 0 */
	__u64 last_arrival;       /* runqueue clock when it was last switched in, 0 */
	__u64 run_ns;             /* its CPU time so far (se.sum_exec_runtime), ns */
	struct ebpf_stacks st;    /* kernel stack; uips[0] = the user pc */
	struct ebpf_ucopy u;      /* only sizeof(fixed part) + EBPF_UCOPY_HDR + u.bytes are written */
};

_Static_assert(sizeof(struct task_dump) == 80 + EBPF_STACKS_SIZE + sizeof(struct ebpf_ucopy),
	       "task_dump layout");

#endif
