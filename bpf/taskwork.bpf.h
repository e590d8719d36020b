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

#ifndef PF_EXITING
#define PF_EXITING 0x00000004     /* task_struct.flags: in do_exit (include/linux/sched.h) */
#endif

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
 * (the map full: counted in *map_full), t exiting, or the kernel refused (already
 * scheduled). A slot lives until its thread exits (tw_forget). */
static __always_inline bool tw_schedule(struct task_struct *t, void *map,
					bpf_task_work_callback_t cb, __u64 *map_full)
{
	struct tw_slot zero = {}, *w;
	__u32 tid = t->pid;

	/* exiting (past sched_process_exit, maybe): a slot made now would outlive it */
	if (t->flags & PF_EXITING)
		return false;
	w = bpf_map_lookup_elem(map, &tid);
	if (!w) {
		bpf_map_update_elem(map, &tid, &zero, BPF_NOEXIST);
		w = bpf_map_lookup_elem(map, &tid);
		if (!w) {
			__sync_fetch_and_add(map_full, 1);
			return false;
		}
	}
	return bpf_task_work_schedule_resume_impl(t, &w->tw, map, cb, NULL) == 0;
}

/* A thread that exits gives its slot back (a pending work of its is cancelled with it):
 * without this, the map fills with the slots of threads long gone, and a window with more
 * threads than it holds loses records. Called from sched_process_exit, for every thread on
 * the node (a delete of a key that is not there is a cheap miss). */
static __always_inline void tw_forget(void *map, struct task_struct *t)
{
	__u32 tid = t->pid;

	bpf_map_delete_elem(map, &tid);
}

/* The program (tp_btf/sched_process_exit, named name) that gives an exiting thread's slot
 * of map back; user space loads it with the programs that schedule into map. */
#define TW_FORGET_AT_EXIT(name, map)						\
	SEC("tp_btf/sched_process_exit")					\
	int BPF_PROG(name, struct task_struct *p)				\
	{									\
		tw_forget(&map, p);						\
		return 0;							\
	}
#else
const volatile bool task_work_built = false;

#define TW_FORGET_AT_EXIT(name, map)						\
	SEC("tp_btf/sched_process_exit")					\
	int BPF_PROG(name, struct task_struct *p)				\
	{									\
		return 0;   /* never loaded: no task works in this object */	\
	}
#endif

#endif
