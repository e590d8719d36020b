/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * A task work of one thread's own (bpf_task_work, Linux 6.18): a callback the thread runs in
 * its own context on its way back to user space, where a record can be completed without a
 * syscall tracepoint (which would put every task's system calls on the kernel's slow path).
 * Built only where the build kernel's BTF has struct bpf_task_work (bpf/module.mk defines
 * AIPROF_HAVE_TASK_WORK); user space loads the programs that use it only where the running
 * kernel has the kfunc, and reads task_work_built to know whether this object has them.
 */
#ifndef AIPROF_BPF_TASKWORK_BPF_H
#define AIPROF_BPF_TASKWORK_BPF_H

#ifdef AIPROF_HAVE_TASK_WORK
const volatile bool task_work_built = true;

extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					     void *map__map, bpf_task_work_callback_t callback,
					     void *aux__prog) __ksym __weak;

/* the value of a map of thread id -> its task work (a HASH: the kernel keeps it there) */
struct tw_slot {
	struct bpf_task_work tw;
};

/* Schedules cb for thread t, in map's slot for it (made on first use); false: no slot
 * (the map full) or the kernel refused (t exiting, already scheduled). */
static __always_inline bool tw_schedule(struct task_struct *t, void *map,
					bpf_task_work_callback_t cb)
{
	struct tw_slot zero = {}, *w;
	__u32 tid = t->pid;

	w = bpf_map_lookup_elem(map, &tid);
	if (!w) {
		bpf_map_update_elem(map, &tid, &zero, BPF_NOEXIST);
		w = bpf_map_lookup_elem(map, &tid);
		if (!w)
			return false;
	}
	return bpf_task_work_schedule_resume_impl(t, &w->tw, map, cb, NULL) == 0;
}
#else
const volatile bool task_work_built = false;
#endif

#endif
