/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The tests' own question to the kernel, asked apart from aiprof's collectors: does it take
 * a task work (bpf_task_work, Linux 6.18) scheduled from a sched_switch program? Some 6.18
 * kernels have the kfunc in their BTF but refuse it there ("sleepable callback in a program
 * that is not sleepable"); aiprof then completes its records at sys_exit, and the tests that
 * check which way it took ask this program (loaded by bpftool, never attached).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#ifdef AIPROF_HAVE_TASK_WORK
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					     void *map__map, bpf_task_work_callback_t callback,
					     void *aux__prog) __ksym __weak;

struct probe_slot {
	struct bpf_task_work tw;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_slot);
} probe_works SEC(".maps");

static int probe_cb(struct bpf_map *map, void *key, void *value)
{
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(task_work_probe, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct probe_slot zero = {}, *w;
	__u32 k = 0;

	bpf_map_update_elem(&probe_works, &k, &zero, BPF_NOEXIST);
	w = bpf_map_lookup_elem(&probe_works, &k);
	if (w)
		bpf_task_work_schedule_resume_impl(prev, &w->tw, &probe_works, probe_cb, NULL);
	return 0;
}
#endif
