/* SPDX-License-Identifier: MIT */
/*
 * What the collectors read of a task for its stacks: its state, and the user registers
 * and stack copy of struct ebpf_ucopy (stack.h).
 */
#ifndef AIPROF_UCOPY_BPF_H
#define AIPROF_UCOPY_BPF_H

#include "stack.h"

#define UCOPY_PAGE 4096

struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* The task's state word (__state since Linux 5.14, state before). */
static __always_inline __u32 task_state(struct task_struct *t)
{
	/* t is a BTF pointer (a tracepoint's argument, an iterator's task): plain loads */
	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return (__u32)((struct task_struct___pre514 *)t)->state;
}

/* The user-mode registers of task t, saved at its entry into the kernel; NULL if unknown. */
static __always_inline struct pt_regs *ucopy_user_regs(struct task_struct *t)
{
	if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs))
		return NULL;
	return (struct pt_regs *)bpf_task_pt_regs(t);
}

/* u->regs from r, in DWARF order */
static __always_inline void ucopy_regs(struct ebpf_ucopy *u, struct pt_regs *r)
{
	u->regs[0] = BPF_CORE_READ(r, ax);
	u->regs[1] = BPF_CORE_READ(r, dx);
	u->regs[2] = BPF_CORE_READ(r, cx);
	u->regs[3] = BPF_CORE_READ(r, bx);
	u->regs[4] = BPF_CORE_READ(r, si);
	u->regs[5] = BPF_CORE_READ(r, di);
	u->regs[6] = BPF_CORE_READ(r, bp);
	u->regs[7] = BPF_CORE_READ(r, sp);
	u->regs[8] = BPF_CORE_READ(r, r8);
	u->regs[9] = BPF_CORE_READ(r, r9);
	u->regs[10] = BPF_CORE_READ(r, r10);
	u->regs[11] = BPF_CORE_READ(r, r11);
	u->regs[12] = BPF_CORE_READ(r, r12);
	u->regs[13] = BPF_CORE_READ(r, r13);
	u->regs[14] = BPF_CORE_READ(r, r14);
	u->regs[15] = BPF_CORE_READ(r, r15);
	u->regs[16] = BPF_CORE_READ(r, ip);
}

/*
 * Fills u from the user state of t, the current task (bpf_probe_read_user reads the
 * current address space). Returns the bytes of u to put on the ring buffer.
 */
static __always_inline __u32 ucopy_fill(struct ebpf_ucopy *u, struct task_struct *t, __u32 max)
{
	struct pt_regs *r = ucopy_user_regs(t);
	__u32 n, first;
	__u64 sp;

	u->bytes = 0;
	if (!r)
		return EBPF_UCOPY_HDR;
	ucopy_regs(u, r);
	sp = u->regs[7];
	if (!max || !sp)
		return EBPF_UCOPY_HDR;
	/* up to the end of sp's page, then whole pages: a page that faults ends the copy */
	first = UCOPY_PAGE - (__u32)(sp & (UCOPY_PAGE - 1));
	if (first > UCOPY_PAGE)
		first = UCOPY_PAGE;
	if (first == 0 || bpf_probe_read_user(u->data, first, (void *)sp))
		return EBPF_UCOPY_HDR;
	n = first;
	for (int i = 0; i < EBPF_UCOPY_MAX / UCOPY_PAGE; i++) {
		if (n > EBPF_UCOPY_MAX - UCOPY_PAGE || n + UCOPY_PAGE > max)
			break;
		if (bpf_probe_read_user(u->data + n, UCOPY_PAGE, (void *)(sp + n)))
			break;
		n += UCOPY_PAGE;
	}
	u->bytes = n;
	return EBPF_UCOPY_HDR + (n & (EBPF_UCOPY_MAX * 2 - 1));
}

#endif
