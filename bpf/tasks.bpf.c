// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The threads of the targets, one record each, written into the iterator's seq_file when
 * user space reads it: state, scheduler times, kernel stack, user registers and a copy of
 * the user stack (bpf_copy_from_user_task: a sleepable iterator, so pages that are not
 * resident are faulted in rather than lost). Other tasks are skipped by the target filter.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tasks.h"
#include "maps.bpf.h"
#include "ucopy.bpf.h"
#include "ratelimit.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_dump);
} task_scratch SEC(".maps");

SEC("iter.s/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task, *self = bpf_get_current_task_btf();
	struct task_dump *d;
	struct pt_regs *r;
	__u32 zero = 0, size, n, first;
	__u64 sp;

	if (!t || !is_target(t->tgid))
		return 0;
	d = bpf_map_lookup_elem(&task_scratch, &zero);
	if (!d)
		return 0;
	d->hdr.type = EBPF_REC_TASK;
	d->hdr.tgid = t->tgid;
	d->hdr.tid = t->pid;
	d->hdr.cpu = BPF_CORE_READ(t, thread_info.cpu);
	/* now, in the runqueues' clock (sched_clock: the same on every CPU, steal time
	 * included): when this reader was last switched in plus what it has run since */
	d->hdr.ts = sched_left_at(self);
	BPF_CORE_READ_STR_INTO(&d->hdr.comm, t, comm);
	d->state = task_state(t) & 0xff;
	d->on_cpu = BPF_CORE_READ(t, on_cpu);
	d->stopped_at = sched_left_at(t);
	d->last_arrival = BPF_CORE_READ(t, sched_info.last_arrival);
	d->pcount = (__u32)BPF_CORE_READ(t, sched_info.pcount);
	d->run_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
	d->st.kstack_bytes = bpf_get_task_stack(t, d->st.kips, sizeof(d->st.kips), 0);
	d->st.py_frames = 0;
	d->st.py_cut = 0;
	d->st.py_status = EBPF_PY_ST_NONE;
	d->st.py_gil = EBPF_PY_GIL_UNKNOWN;
	d->st.ustack_bytes = 0;
	d->syscall = -1;
	d->u.bytes = 0;
	size = sizeof(*d) - sizeof(d->u) + EBPF_UCOPY_HDR;
	r = ucopy_user_regs(t);
	if (r) {
		d->syscall = (__s32)BPF_CORE_READ(r, orig_ax);
		d->st.uips[0] = BPF_CORE_READ(r, ip);
		d->st.ustack_bytes = d->st.uips[0] ? 8 : 0;
		ucopy_regs(&d->u, r);
		sp = d->u.regs[7];
		first = UCOPY_PAGE - (__u32)(sp & (UCOPY_PAGE - 1));
		if (first > UCOPY_PAGE)
			first = UCOPY_PAGE;
		if (sp && first && !bpf_copy_from_user_task(d->u.data, first, (void *)sp, t, 0)) {
			n = first;
			for (int i = 0; i < EBPF_UCOPY_MAX / UCOPY_PAGE; i++) {
				if (n > EBPF_UCOPY_MAX - UCOPY_PAGE)
					break;
				if (bpf_copy_from_user_task(d->u.data + n, UCOPY_PAGE, (void *)(sp + n),
							    t, 0))
					break;
				n += UCOPY_PAGE;
			}
			d->u.bytes = n;
			size += n & (EBPF_UCOPY_MAX * 2 - 1);
		}
	}
	if (size > sizeof(*d))
		size = sizeof(*d);
	bpf_seq_write(ctx->meta->seq, d, size);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
