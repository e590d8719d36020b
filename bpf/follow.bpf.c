// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Following the processes the targets start: sched_process_fork (every fork on the node;
 * a non-target's costs the filter lookup) puts a target's new child into the target
 * filter at once, in one of the free slots of its probe sequence; sched_process_exec of a
 * target is reported. At most max_followed children per window. sched_process_exit of a
 * target's last thread takes it out of the filter (EBPF_TARGET_GONE): the kernel may hand
 * its pid to another process during the window, which is nobody this session follows.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "follow.h"
#include "maps.bpf.h"

const volatile __u32 max_followed = 256;

bool running = false;
__u64 followed = 0;
__u64 lost = 0;

static __always_inline void report(__u32 kind, __u32 tgid, __u32 tid, __u32 parent,
				   struct task_struct *t)
{
	struct follow_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	e->hdr.type = EBPF_REC_FOLLOW;
	e->hdr.tgid = tgid;
	e->hdr.tid = tid;
	e->hdr.cpu = bpf_get_smp_processor_id();
	e->hdr.ts = bpf_ktime_get_ns();
	BPF_CORE_READ_STR_INTO(&e->hdr.comm, t, comm);
	e->kind = kind;
	e->parent = parent;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* child into the first free slot of its probe sequence; false when there is none */
static __always_inline bool place(__u32 child, __u32 index)
{
	for (__u32 i = 0; i < EBPF_TARGET_PROBES; i++) {
		__u32 slot = (child + i) & (EBPF_TARGET_SLOTS - 1);
		struct ebpf_target *t = bpf_map_lookup_elem(&targets, &slot);

		if (!t)
			return false;
		if (t->tgid == child)
			return true;
		if (t->tgid)
			continue;
		/* the whole slot at once (an empty one is all zero): tgid is its low half */
		if (__sync_val_compare_and_swap((__u64 *)t, 0, (__u64)index << 32 | child) == 0)
			return true;
		if (t->tgid == child)
			return true;
	}
	return false;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u64 n;

	if (!running || ctgid == ptgid || !is_target(ptgid))
		return 0;
	n = __sync_fetch_and_add(&followed, 1);
	if (n >= max_followed || !place(ctgid, EBPF_MAX_TARGETS + (__u32)n)) {
		report(FOLLOW_FULL, ctgid, child->pid, ptgid, child);
		return 0;
	}
	report(FOLLOW_FORK, ctgid, child->pid, ptgid, child);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(follow_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;

	if (!running || !is_target(tgid))
		return 0;
	report(FOLLOW_EXEC, tgid, p->pid, 0, p);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(follow_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid;

	/* the process's last thread (the live count is dropped before this tracepoint) */
	if (!running || p->signal->live.counter != 0 || !is_target(tgid))
		return 0;
	for (__u32 i = 0; i < EBPF_TARGET_PROBES; i++) {
		__u32 slot = (tgid + i) & (EBPF_TARGET_SLOTS - 1);
		struct ebpf_target *t = bpf_map_lookup_elem(&targets, &slot);

		if (!t)
			return 0;
		if (t->tgid == tgid) {
			/* how it ended (exit_code is set before this tracepoint), for the summary */
			report(FOLLOW_EXIT, tgid, p->pid, (__u32)p->exit_code, p);
			/* the whole slot at once, as place() writes it: tgid is its low half */
			__u64 was = (__u64)t->index << 32 | tgid;

			__sync_val_compare_and_swap((__u64 *)t, was,
						    (__u64)t->index << 32 | EBPF_TARGET_GONE);
			return 0;
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
