/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * A token bucket per thread, kept in the thread's task storage: at most rate a second, and
 * as many at once (a thread starts with a full bucket). The costly part of a record (its
 * stacks, the task work that completes it) is paid only with a token; what comes past the
 * rate is counted in the kernel instead (offcpu_total.limited, syscall_stat.untimed and
 * .limited), so that a job's cost does not grow with how often it waits.
 */
#ifndef AIPROF_BPF_RATELIMIT_BPF_H
#define AIPROF_BPF_RATELIMIT_BPF_H

#include "stack.h"
#include "maps.bpf.h"

#define RL_ONE 1000000000ull      /* a token, in rate * ns units */

/* struct rl_bucket: stack.h (user space reads it in task storage values) */

/* Takes a token at now; false: none left. rate 0: no limit. */
static __always_inline bool rl_take(struct rl_bucket *b, __u64 now, __u32 rate)
{
	__u64 cap = (__u64)rate * RL_ONE, dt;

	if (!rate)
		return true;
	if (!b->last) {
		b->last = now;
		b->tokens = cap;
	}
	dt = now > b->last ? now - b->last : 0;
	if (dt > 10 * RL_ONE)
		dt = 10 * RL_ONE;     /* more than fills any bucket; keeps dt * rate in range */
	b->last = now;
	b->tokens += dt * rate;
	if (b->tokens > cap)
		b->tokens = cap;
	if (b->tokens < RL_ONE)
		return false;
	b->tokens -= RL_ONE;
	return true;
}

/* A thread's context switches so far (truncated): unchanged from its switch-out to its next
 * switch-in means it did not run in between, however long that was. */
static __always_inline __u32 switches_of(struct task_struct *t)
{
	return (__u32)(t->nvcsw + t->nivcsw);
}

/*
 * Whether what a thread began in an earlier epoch (before the collector was paused) can be
 * ended now: only if it has not run since.
 */
static __always_inline bool same_epoch_or_asleep(__u32 then_epoch, __u32 now_epoch,
						 __u32 then_nsw, struct task_struct *t)
{
	return then_epoch == now_epoch || then_nsw == switches_of(t);
}

/*
 * When t last left its CPU (or, running, now), in the runqueues' clock: switched in at
 * sched_info.last_arrival, then ran sum_exec_runtime - prev_sum_exec_runtime (task clock:
 * steal and IRQ time left out, a little short of wall time). 0 if the kernel keeps no
 * sched_info.
 */
static __always_inline __u64 sched_left_at(struct task_struct *t)
{
	__u64 arrival;

	if (!bpf_core_field_exists(t->sched_info))
		return 0;
	arrival = BPF_CORE_READ(t, sched_info.last_arrival);
	if (!arrival)
		return 0;
	return arrival + BPF_CORE_READ(t, se.sum_exec_runtime) - BPF_CORE_READ(t, se.prev_sum_exec_runtime);
}

/*
 * A moment at of the runqueues' clock (as sched_left_at gives) on bpf_ktime_get_ns()'s clock
 * (CLOCK_MONOTONIC), by the reader's own "now" in both clocks (the current task is running:
 * its sched_left_at is now, to a scheduler tick); 0 where it cannot be told.
 */
static __always_inline __u64 rq_to_mono(__u64 at)
{
	__u64 me = sched_left_at(bpf_get_current_task_btf()), now = bpf_ktime_get_ns();

	if (!at || !me || at > me || me - at > now)
		return 0;
	return now - (me - at);
}

/* When t last left its CPU, on that clock: what a paused collector's resume reads for a
 * thread that went to sleep while it was paused (the iterators offcpu_seed, sys_seed). */
static __always_inline __u64 left_cpu_mono(struct task_struct *t)
{
	return rq_to_mono(sched_left_at(t));
}

/*
 * When t was last switched in, on CLOCK_MONOTONIC (0 where it cannot be told): the end of a
 * sleep it woke from while the collector was paused, if it has switched in once since it
 * went to sleep and not out again (still on its CPU) or out once (off it now).
 */
static __always_inline __u64 arrived_mono(struct task_struct *t)
{
	if (!bpf_core_field_exists(t->sched_info))
		return 0;
	return rq_to_mono(BPF_CORE_READ(t, sched_info.last_arrival));
}

/* The slot of key among slots, or NULL */
static __always_inline struct site_slot *site_find(struct site_slot *slots, __u64 key)
{
	for (int i = 0; i < SITE_SLOTS; i++)
		if (slots[i].key == key)
			return &slots[i];
	return NULL;
}

/* Whether key's record among slots was taken less than fresh_ns before now */
static __always_inline bool site_fresh(struct site_slot *slots, __u64 key, __u64 now,
				       __u64 fresh_ns)
{
	struct site_slot *slot = site_find(slots, key);

	return slot && now - slot->recorded < fresh_ns;
}

/* key's record is taken at now: in its own slot, else an empty one, else the one recorded
 * longest ago */
static __always_inline void site_take(struct site_slot *slots, __u64 key, __u64 now)
{
	struct site_slot *slot = site_find(slots, key);

	if (!slot) {
		slot = &slots[0];
		for (int i = 1; i < SITE_SLOTS; i++)
			if (slots[i].recorded < slot->recorded)
				slot = &slots[i];
	}
	slot->key = key;
	slot->recorded = now;
}

#endif
