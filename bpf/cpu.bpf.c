// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * On-CPU sampling: a perf_event program on a cpu-clock event of every target thread (or,
 * where the kernel refuses those, of every CPU) at the requested frequency. When the
 * interrupted task belongs to a target it records kernel and user stacks (frame pointers)
 * and, for a Python thread, the interpreter's frames, and, with ucopy_max set, the user
 * registers and a copy of the user stack for unwinding by CFI; any other task is only
 * counted.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cpu.h"
#include "pystack.bpf.h"
#include "ucopy.bpf.h"

const volatile bool want_python = false;
const volatile __u32 ucopy_max = 0;   /* bytes of user stack to copy; 0: none */

bool running = false;   /* user space turns recording on and off */
__u64 lost = 0;         /* records the ring buffer had no room for */
__u64 foreign = 0;      /* runs on a task of no target: none when the events are per thread */

/* where a sample with a stack copy is put together before it goes on the ring buffer */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_sample_ucopy);
} cpu_scratch SEC(".maps");

static __always_inline void fill(struct bpf_perf_event_data *ctx, struct cpu_sample *e, __u64 id)
{
	fill_hdr(&e->hdr, EBPF_REC_CPU_SAMPLE, id, bpf_ktime_get_ns());
	e->st.kstack_bytes = bpf_get_stack(ctx, e->st.kips, sizeof(e->st.kips), 0);
	e->st.ustack_bytes = bpf_get_stack(ctx, e->st.uips, sizeof(e->st.uips), BPF_F_USER_STACK);
	e->st.py_frames = 0;
	e->st.py_cut = 0;
	e->st.py_status = EBPF_PY_ST_NONE;
	e->st.py_gil = EBPF_PY_GIL_UNKNOWN;
	if (want_python)
		py_walk(&e->st, id >> 32, (__u32)id);
}

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct cpu_sample *e;

	if (!running)
		return 0;
	if (!is_target(id >> 32)) {
		__sync_fetch_and_add(&foreign, 1);
		return 0;
	}
	if (ucopy_max) {
		struct cpu_sample_ucopy *x;
		__u32 zero = 0, size;

		x = bpf_map_lookup_elem(&cpu_scratch, &zero);
		if (!x)
			return 0;
		fill(ctx, &x->s, id);
		size = sizeof(x->s) + ucopy_fill(&x->u, bpf_get_current_task_btf(), ucopy_max);
		if (size > sizeof(*x))
			size = sizeof(*x);
		if (bpf_ringbuf_output(&events, x, size, BPF_RB_NO_WAKEUP))
			__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	fill(ctx, e, id);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
