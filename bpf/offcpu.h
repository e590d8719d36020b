/* SPDX-License-Identifier: MIT */
/*
 * Off-CPU time (offcpu.bpf.c <-> injector/collect/ebpf_offcpu.c). When a target thread goes to
 * sleep (switched out in a sleeping state, not preempted) only the time is noted, in its
 * task storage. When it is switched in again after at least the threshold, its kernel
 * stack (still the wait's) is kept there, and the record is completed in the thread's own
 * context — where its user and Python stacks can be read and are still those of the wait:
 * by a task work of that thread's own on its way back to user space (bpf_task_work; on
 * older kernels at the end of the syscall it slept in), or at its next sleep, whichever
 * comes first.
 * Short blocks cost two task-storage accesses and nothing else; long ones past a thread's
 * record rate (rec_rate a second, ratelimit.bpf.h) are counted, not recorded, unless they
 * lasted at least always_ns.
 *
 * Sites: as a target thread is switched in after a long block, a key of where it waited is
 * made — syscall, user pc, user stack pointer, first argument, state, and for a Python
 * thread the innermost Python frames (code, instruction), read as it went to sleep (its own
 * context). The thread keeps its last SITE_SLOTS recorded sites.
 * A long block (under always_ns) at a site the thread recorded less than site_fresh_ns ago
 * takes no stacks, no task work and no token: a record of its own with no stacks
 * (OFFCPU_F_SITE_STACKS, the first sizeof(struct offcpu_event_head) bytes) goes out at its
 * switch-in, and user space gives it the stacks of that site's last record. A job that waits
 * at the same few places thousands of times a second pays for a few stacks a second.
 */
#ifndef AIPROF_BPF_OFFCPU_H
#define AIPROF_BPF_OFFCPU_H

#include "stack.h"

/* Per thread (task storage offcpu_task; user space reads it by pidfd at the end). */
struct offcpu_task {
	__u64 ts;                 /* when it went to sleep, CLOCK_MONOTONIC ns; 0 if running */
	__u64 woke;               /* when it woke from a long sleep not yet recorded; else 0 */
	__u32 state;              /* task state at sleep: 1 S, 2 D, 4/8 stopped/traced */
	__u32 cpu;
	__s32 kstack_bytes;       /* kips, taken as it was switched in */
	__u32 epoch;              /* the collector's epoch as it went to sleep */
	__u32 nsw;                /* its context switches then (nvcsw + nivcsw, truncated) */
	__s32 held_nr;            /* the syscall it slept in as a pause began, -1 if none */
	__u64 held;               /* asleep in that sleep as the collector paused (--budget):
				   * HELD_STACKS: kips, held_pc and held_nr are the wait's, read
				   * then; HELD_WORK: and its task work is scheduled (64 bits:
				   * compared and swapped) */
	__u64 held_pc;            /* its user pc then (where it entered the kernel) */
	struct rl_bucket rl;      /* its records: at most rec_rate a second (ratelimit.bpf.h) */
	__u64 count;              /* its blocks, also the short ones, and their time: folded */
	__u64 total_ns;           /* into offcpu_totals as it exits, read by user space at the
				   * end while it lives (no hash lookup at every switch) */
	__u64 key;                /* the site of the long sleep being recorded (0: none) */
	__u64 py_key;             /* its innermost Python frames, read as it went to sleep */
	__u32 py_valid;           /* py_key was read for the sleep at ts */
	__u16 py_hint;            /* a Python thread with a long block in its last few: read
				   * py_key */
	__u16 py_short;           /* its short blocks since its last long one */
	struct site_slot sites[SITE_SLOTS];
	__u64 kips[EBPF_KSTACK_MAX];
};

#define HELD_STACKS 1
#define HELD_WORK 2

#define OFFCPU_F_SITE_STACKS 1    /* no stacks: those of the thread's last record at site_key */
#define OFFCPU_F_ENDED_IN_PAUSE 2 /* begun before a pause of the collector (--budget), ended in
				   * it: its kernel stack read as the pause began; its end and user
				   * stacks read by its thread's own task work as it went back to
				   * user space, or (OFFCPU_F_NO_USER_STACK) its end from the
				   * scheduler's account as the collector resumed */
#define OFFCPU_F_NO_USER_STACK 4  /* only the user pc where it entered the kernel, no Python
				   * frames (none at all if it had woken as the pause began) */

/* what every off-CPU record begins with; one with OFFCPU_F_SITE_STACKS is only this */
struct offcpu_event_head {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_OFFCPU; ts = went to sleep; cpu = slept on */
	__u64 dur_ns;             /* time until it was switched in again */
	__u32 state;
	__s32 syscall;            /* syscall it slept in (orig_ax), -1 if none/unknown */
	__u64 site_key;           /* its site (site_slot.key; 0: none) */
	__u32 flags;              /* OFFCPU_F_* */
	__u32 pad;
};

struct offcpu_event {
	struct offcpu_event_head h;
	struct ebpf_stacks st;    /* where it slept */
};

/* a record with its stack copy: only its first sizeof(e) + EBPF_UCOPY_HDR + u.bytes go out */
struct offcpu_event_ucopy {
	struct offcpu_event e;
	struct ebpf_ucopy u;
};

/* Per target process (map offcpu_totals, per CPU): every block of its threads that exited
 * (the live ones' are in their task storage), the records and what the rate left out. */
struct offcpu_total {
	__u64 count;
	__u64 total_ns;
	__u64 emitted;
	__u64 limited;            /* blocks at or above the threshold its thread had no token
				   * for: counted here, no record, no stacks */
	__u64 limited_ns;
};

_Static_assert(sizeof(struct offcpu_task) == 112 + 16 * SITE_SLOTS + 8 * EBPF_KSTACK_MAX,
	       "offcpu_task layout");
_Static_assert(sizeof(struct offcpu_event_head) == 72, "offcpu_event_head layout");
_Static_assert(sizeof(struct offcpu_event) == 72 + EBPF_STACKS_SIZE, "offcpu_event layout");

#endif
