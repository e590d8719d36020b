// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Off-CPU time, from BTF tracepoints only (no kprobes, no trampolines: they need not
 * exist in the kernel). sched_switch notes when a target thread goes to sleep and, when it
 * is switched in after a long sleep, takes its kernel stack (bpf_get_task_stack: the thread
 * is not running yet, its stack is the wait's). The record is written in the thread's own
 * context, where its user stack and Python frames are readable and unchanged since the
 * wait: on its way back to user space, by a task work the switch-in schedules for that
 * thread alone (bpf_task_work, Linux 6.18), or, on a kernel without it, at sys_exit of the
 * syscall it slept in (a tracepoint that puts every task's syscalls on the kernel's slow
 * path); or at its next sleep if that comes first. A sleep outside a syscall (a page
 * fault) is recorded at once, with the user pc as its only user frame.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "offcpu.h"
#include "pystack.bpf.h"
#include "ucopy.bpf.h"
#include "taskwork.bpf.h"
#include "ratelimit.bpf.h"

const volatile bool want_python = false;
const volatile __u64 min_block_ns = 1000000;
const volatile __u32 ucopy_max = 0;   /* bytes of user stack to copy with a record; 0: none */
const volatile __u64 always_ns = 0;   /* a block at least this long is recorded regardless */
const volatile __u64 site_fresh_ns = 0; /* a site's record stands for later blocks this long;
					 * 0: every long block is recorded (no sites) */

bool running = false;
/* set by user space while recording (the budget: ebpf_budget.c) */
__u32 rec_rate = 0;           /* records a second per thread (its bucket); 0: all */
bool paused = false;          /* nothing new is begun; a sleep begun before is not ended */
__u32 epoch = 0;              /* bumped at each pause: a sleep begun before it is dropped */
__u64 lost = 0;
__u64 tw_failed = 0;
__u64 tw_map_full = 0;        /* task works not scheduled: offcpu_works was full */
__u64 tw_ns = 0;              /* time in the task works' callbacks (bpf_stats leaves it out) */
__u64 tw_runs = 0;
__u64 seeded = 0;             /* sleeps begun in a pause, started by offcpu_seed */
__u64 ended_in_pause = 0;     /* sleeps begun before a pause that ended in it: recorded at
			       * the resume (long ones) */
__u64 ended_unseen = 0;       /* ...whose end could not be told (the thread ran, then slept
			       * again in the pause): not recorded */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_task);
} offcpu_task SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, EBPF_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct offcpu_total);
} offcpu_totals SEC(".maps");

#ifdef AIPROF_HAVE_TASK_WORK
/* per target thread: the task work that completes its record (offcpu_switch_tw) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tw_slot);
} offcpu_works SEC(".maps");
#endif

/*
 * The program that runs after this one at a target thread's context switch, by a tail call:
 * the syscall collector's switch half (sys_switch), put here by user space when both run,
 * so that a switch pays for one sched_switch program, not two (the tracepoint's dispatch,
 * the kernel's statistics around each run), and another process's switch for neither's
 * second filter. Empty: the tail call does nothing.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} switch_next SEC(".maps");

/* where a record with a stack copy is put together before it goes on the ring buffer */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_event_ucopy);
} offcpu_scratch SEC(".maps");

#define user_regs ucopy_user_regs

static __always_inline struct offcpu_total *totals(__u32 tgid)
{
	struct offcpu_total *tot = bpf_map_lookup_elem(&offcpu_totals, &tgid);

	if (!tot) {
		struct offcpu_total t0 = {};

		bpf_map_update_elem(&offcpu_totals, &tgid, &t0, BPF_NOEXIST);
		tot = bpf_map_lookup_elem(&offcpu_totals, &tgid);
	}
	return tot;
}

/* The first part of the record of s's finished sleep, of thread t (tgid, tid) */
static __always_inline void fill_head(struct offcpu_event_head *h, struct task_struct *t,
				      struct offcpu_task *s, __u32 tgid, __u32 tid, __s32 syscall,
				      __u32 flags)
{
	h->hdr.type = EBPF_REC_OFFCPU;
	h->hdr.tgid = tgid;
	h->hdr.tid = tid;
	h->hdr.cpu = s->cpu;
	h->hdr.ts = s->ts;
	BPF_CORE_READ_STR_INTO(&h->hdr.comm, t, comm);
	h->dur_ns = s->woke - s->ts;
	h->state = s->state;
	h->syscall = syscall;
	h->site_key = s->key;
	h->flags = flags;
	h->pad = 0;
}

/*
 * Writes the record of s's finished sleep. Called in the thread's own context (user_stack)
 * or, for a sleep outside a syscall, at its switch-in with its pc only.
 */
static __always_inline void emit(void *ctx, struct task_struct *t, struct offcpu_task *s,
				 __s32 syscall, bool user_stack, bool in_task_work, __u32 flags)
{
	struct offcpu_total *tot;
	struct offcpu_event *e;
	struct pt_regs *regs;
	__u32 tgid = BPF_CORE_READ(t, tgid), tid = BPF_CORE_READ(t, pid);

	struct offcpu_event_ucopy *x = NULL;
	__u32 zero = 0, size;

	if (ucopy_max && user_stack) {
		x = bpf_map_lookup_elem(&offcpu_scratch, &zero);
		if (!x)
			return;
		e = &x->e;
	} else {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			__sync_fetch_and_add(&lost, 1);
			return;
		}
	}
	fill_head(&e->h, t, s, tgid, tid, syscall, flags);
	e->st.kstack_bytes = s->kstack_bytes;
	bpf_probe_read_kernel(e->st.kips, sizeof(e->st.kips), s->kips);
	e->st.py_frames = 0;
	e->st.py_cut = 0;
	e->st.py_status = EBPF_PY_ST_NONE;
	e->st.py_gil = EBPF_PY_GIL_UNKNOWN;
	if (user_stack && in_task_work) {
		/* no program context here: the current task's own user stack */
		e->st.ustack_bytes = bpf_get_task_stack(t, e->st.uips, sizeof(e->st.uips),
							BPF_F_USER_STACK);
		if (want_python)
			py_walk(&e->st, tgid, tid);
	} else if (user_stack) {
		e->st.ustack_bytes = bpf_get_stack(ctx, e->st.uips, sizeof(e->st.uips), BPF_F_USER_STACK);
		if (want_python)
			py_walk(&e->st, tgid, tid);
	} else {
		regs = user_regs(t);
		e->st.uips[0] = regs ? BPF_CORE_READ(regs, ip) : 0;
		e->st.ustack_bytes = e->st.uips[0] ? 8 : 0;
	}
	if (x) {
		size = sizeof(x->e) + ucopy_fill(&x->u, t, ucopy_max);
		if (size > sizeof(*x))
			size = sizeof(*x);
		if (bpf_ringbuf_output(&events, x, size, BPF_RB_NO_WAKEUP)) {
			__sync_fetch_and_add(&lost, 1);
			return;
		}
	} else {
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	tot = totals(tgid);
	if (tot)
		tot->emitted++;
}

/* s's sleep, begun before a pause, ended at end in it: counted; true if it is long enough
 * for a record (woke set for it) */
static __always_inline bool held_ended(struct offcpu_task *s, __u64 end)
{
	__u64 dur = end - s->ts;

	s->count++;
	s->total_ns += dur;
	if (dur < min_block_ns)
		return false;
	s->woke = end;
	__sync_fetch_and_add(&ended_in_pause, 1);
	return true;
}

#ifdef AIPROF_HAVE_TASK_WORK
/*
 * s's sleep, held as a pause began (offcpu_hold_tw), has ended in the pause: t (current)
 * is on its way back to user space. Its end: its switch-in since (the scheduler's account)
 * if it has not switched since, else now. Recorded with the kernel stack read as the pause
 * began and its user stack and Python frames read here.
 */
static __always_inline void end_held_here(struct task_struct *t, struct offcpu_task *s, __u64 now)
{
	__u64 end = switches_of(t) == s->nsw ? arrived_mono(t) : 0;

	if (!end || end <= s->ts || end > now)
		end = now;
	if (held_ended(s, end) && running)
		emit(NULL, t, s, s->held_nr, true, true, OFFCPU_F_ENDED_IN_PAUSE);
}

/* the task work of a thread back from a long sleep in a syscall: its own context; or back
 * from one held as a pause began (offcpu_hold_tw) that ended in the pause */
static int offcpu_tw_run(struct bpf_map *map, void *key, void *value)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct offcpu_task *s = bpf_task_storage_get(&offcpu_task, t, NULL, 0);
	struct pt_regs *regs;
	__u64 t0 = bpf_ktime_get_ns();

	if (!s)
		return 0;
	if (!s->woke) {
		/* a held sleep not ended by a switch-in the collector saw; else recorded
		 * meanwhile, at a second sleep in the same syscall */
		if (s->ts && __sync_val_compare_and_swap(&s->held, HELD_WORK, 0) == HELD_WORK) {
			end_held_here(t, s, t0);
			s->ts = 0;
			s->woke = 0;
			__sync_fetch_and_add(&tw_ns, bpf_ktime_get_ns() - t0);
			__sync_fetch_and_add(&tw_runs, 1);
		}
		return 0;
	}
	s->held = 0;
	if (running) {
		regs = user_regs(t);
		emit(NULL, t, s, regs ? (__s32)BPF_CORE_READ(regs, orig_ax) : -1, true, true, 0);
	}
	s->ts = 0;
	s->woke = 0;
	__sync_fetch_and_add(&tw_ns, bpf_ktime_get_ns() - t0);
	__sync_fetch_and_add(&tw_runs, 1);
	return 0;
}

/* the record is completed in the thread's own context: a task work of its own */
static __always_inline bool schedule_work(struct task_struct *t)
{
	return tw_schedule(t, &offcpu_works, offcpu_tw_run, &tw_map_full);
}
#else
static __always_inline bool schedule_work(struct task_struct *t)
{
	return false;  /* not built in: user space never loads offcpu_switch_tw */
}
#endif

/*
 * Where t, back from a long sleep, waited (its site), or 0 where that cannot be told: its
 * syscall, user pc and stack pointer and first argument (from its saved registers) and,
 * for a Python thread, its innermost Python frames. Those are in its user memory, read only
 * in its own context: at its switch-out (py_key), and only by a thread that had a long block
 * in its last PY_HINT_SHORT (py_hint): a thread that mostly blocks briefly pays nothing for
 * them, and its long block after as many short ones has no site (it takes the record
 * rate's way).
 */
#define PY_HINT_SHORT 16

static __always_inline __u64 site_key_of(struct offcpu_task *s, struct task_struct *t)
{
	struct pt_regs *regs = user_regs(t);
	__u32 tid = t->pid;
	__u64 k;

	if (!regs)
		return 0;
	k = site_mix(s->state, regs->orig_ax);
	k = site_mix(k, regs->ip);
	k = site_mix(k, regs->sp);
	k = site_mix(k, regs->di);
	if (want_python && bpf_map_lookup_elem(&py_threads, &tid)) {
		s->py_hint = 1;
		if (!s->py_valid)
			return 0;
		k = site_mix(k, s->py_key);
	} else {
		s->py_hint = 0;
	}
	return k | 1;
}

/* The record of s's block, just ended (woke), at a site its thread recorded a moment ago:
 * no stacks (user space gives it that record's) */
static __always_inline void emit_at_site(struct task_struct *t, struct offcpu_task *s)
{
	struct pt_regs *regs = user_regs(t);
	struct offcpu_event_head *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);

	if (!h) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	fill_head(h, t, s, t->tgid, t->pid, regs ? (__s32)regs->orig_ax : -1,
		  OFFCPU_F_SITE_STACKS);
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
}

/* t's sleep in state, on cpu, begins at ts (its site and Python frames: the caller's) */
static __always_inline void begin_sleep(struct offcpu_task *s, struct task_struct *t, __u64 ts,
					__u32 state, __u32 cpu)
{
	s->ts = ts;
	s->woke = 0;
	s->state = state;
	s->cpu = cpu;
	s->epoch = epoch;
	s->nsw = switches_of(t);
	s->key = 0;
	s->held = 0;
}

/* prev_target, next_target: whether prev and next are target threads (is_target) */
static __always_inline int on_switch(void *ctx, bool preempt, struct task_struct *prev,
				     struct task_struct *next, bool prev_target, bool next_target,
				     bool task_work)
{
	struct offcpu_task *s;
	struct offcpu_total *tot;
	struct pt_regs *regs;
	__u64 now = 0, dur;
	__s32 nr;
	__u32 state;

	if (!running || paused)
		return 0;
	/* prev: a long sleep it woke from and has not been recorded (it slept again in the
	 * same syscall, say) is recorded now, in its context; then a new sleep begins */
	state = preempt || !prev_target ? 0 : task_state(prev) & 0xff;
	if (state) {
		s = bpf_task_storage_get(&offcpu_task, prev, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (s) {
			if (s->woke) {
				regs = user_regs(prev);
				emit(ctx, prev, s, regs ? (__s32)BPF_CORE_READ(regs, orig_ax) : -1, true,
				     false, 0);
			}
			now = bpf_ktime_get_ns();
			begin_sleep(s, prev, now, state, bpf_get_smp_processor_id());
			/* the Python part of its site, while in its own context */
			s->py_valid = s->py_hint;
			if (s->py_hint)
				s->py_key = py_site_key(0, prev->tgid, prev->pid);
		}
	}
	/* next: only target threads that slept have storage; the filter first spares every
	 * other switch a helper call */
	if (!next_target)
		return 0;
	s = bpf_task_storage_get(&offcpu_task, next, NULL, 0);
	if (!s || !s->ts || s->woke)
		return 0;
	if (!same_epoch_or_asleep(s->epoch, epoch, s->nsw, next)) {
		s->ts = 0;    /* slept before a pause, ran in it: this sleep's start is not known */
		return 0;
	}
	if (!now)
		now = bpf_ktime_get_ns();
	dur = now - s->ts;
	s->count++;
	s->total_ns += dur;
	if (dur < min_block_ns) {
		/* its Python frames are read at a sleep only soon after a long one (a few short
		 * waits for the GIL between them do not stop it) */
		if (s->py_short < PY_HINT_SHORT && ++s->py_short == PY_HINT_SHORT)
			s->py_hint = 0;
		s->ts = 0;
		return 0;
	}
	s->py_short = 0;
	s->key = site_fresh_ns ? site_key_of(s, next) : 0;
	if (dur < always_ns && s->key && site_fresh(s->sites, s->key, now, site_fresh_ns)) {
		/* recorded here a moment ago: a record with that one's stacks */
		s->woke = now;
		emit_at_site(next, s);
		s->ts = 0;
		s->woke = 0;
		return 0;
	}
	if (dur < always_ns && !rl_take(&s->rl, now, rec_rate)) {
		/* past the thread's record rate: counted, no stacks, no record */
		tot = totals(next->tgid);
		if (tot) {
			tot->limited++;
			tot->limited_ns += dur;
		}
		s->ts = 0;
		return 0;
	}
	s->woke = now;
	if (s->key)
		site_take(s->sites, s->key, now);
	s->kstack_bytes = bpf_get_task_stack(next, s->kips, sizeof(s->kips), 0);
	regs = user_regs(next);
	nr = regs ? (__s32)regs->orig_ax : -1;
	if (nr < 0) {
		/* not in a syscall: nothing later tells us it is back in user space */
		emit(ctx, next, s, -1, false, false, 0);
		s->ts = 0;
		s->woke = 0;
	} else if (task_work && s->held != HELD_WORK && !schedule_work(next)) {
		/* no task work (the table full): its next sleep records it */
		__sync_fetch_and_add(&tw_failed, 1);
	}
	return 0;
}

/* Linux 6.18 and later: the switch-in schedules the record's completion (no sys_exit) */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch_tw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	bool pt = is_target(prev->tgid), nt = is_target(next->tgid);

	on_switch(ctx, preempt, prev, next, pt, nt, true);
	/* the next collector's half: only for a switch of a target's thread */
	if (pt || nt)
		bpf_tail_call(ctx, &switch_next, 0);
	return 0;
}

/* older kernels: completed at sys_exit (offcpu_sys_exit) */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	bool pt = is_target(prev->tgid), nt = is_target(next->tgid);

	on_switch(ctx, preempt, prev, next, pt, nt, false);
	if (pt || nt)
		bpf_tail_call(ctx, &switch_next, 0);
	return 0;
}

/*
 * Run by user space once a pause of the budget has begun (the switch programs detached): a
 * target thread still asleep in a sleep begun before gets its wait's kernel stack and user
 * pc read now, into its storage (HELD_STACKS), and, with task works, one of its own
 * scheduled (HELD_WORK): if the sleep ends in the pause, the thread records it on its way
 * back to user space (offcpu_tw_run); without, the resume records it if it can tell its
 * end (offcpu_seed: end_held).
 */
static __always_inline int hold(struct bpf_iter__task *ctx, bool task_work)
{
	struct task_struct *t = ctx->task;
	struct offcpu_task *s;
	struct pt_regs *regs;

	if (!t || !running || !paused || !is_target(t->tgid))
		return 0;
	s = bpf_task_storage_get(&offcpu_task, t, NULL, 0);
	if (!s || !s->ts || s->woke || s->held == HELD_WORK)
		return 0;      /* (HELD_WORK: its work from an earlier pause is still to run) */
	s->held = 0;
	/* woken already (on its CPU, runnable, or it ran): its stack is no longer the wait's */
	if (t->on_cpu || !(task_state(t) & 0xff) || s->nsw != switches_of(t))
		return 0;
	s->kstack_bytes = bpf_get_task_stack(t, s->kips, sizeof(s->kips), 0);
	regs = user_regs(t);
	s->held_pc = regs ? BPF_CORE_READ(regs, ip) : 0;
	s->held_nr = regs ? (__s32)BPF_CORE_READ(regs, orig_ax) : -1;
	s->held = HELD_STACKS;
	/* in a syscall: it goes back to user space through its task work as the sleep ends */
	if (task_work && s->held_nr >= 0 && schedule_work(t))
		s->held = HELD_WORK;
	return 0;
}

SEC("iter/task")
int offcpu_hold_tw(struct bpf_iter__task *ctx)
{
	return hold(ctx, true);
}

SEC("iter/task")
int offcpu_hold(struct bpf_iter__task *ctx)
{
	return hold(ctx, false);
}

/* The record of s's sleep (of t, not running this: no user stack to read), which ended at
 * woke while the collector was paused; its stacks are those offcpu_hold read */
static __always_inline void emit_ended_in_pause(struct task_struct *t, struct offcpu_task *s)
{
	struct offcpu_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	struct offcpu_total *tot;

	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	fill_head(&e->h, t, s, t->tgid, t->pid, s->held ? s->held_nr : -1,
		  OFFCPU_F_ENDED_IN_PAUSE | OFFCPU_F_NO_USER_STACK);
	e->h.site_key = 0;
	e->st.kstack_bytes = s->held ? s->kstack_bytes : 0;
	bpf_probe_read_kernel(e->st.kips, sizeof(e->st.kips), s->kips);
	e->st.uips[0] = s->held ? s->held_pc : 0;
	e->st.ustack_bytes = e->st.uips[0] ? 8 : 0;
	e->st.py_frames = 0;
	e->st.py_cut = 0;
	e->st.py_status = EBPF_PY_ST_NONE;
	e->st.py_gil = EBPF_PY_GIL_UNKNOWN;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	tot = totals(t->tgid);
	if (tot)
		tot->emitted++;
}

/*
 * A sleep of t begun before the pause that has just ended (s: its storage) and not seen
 * ending: if t was switched in since, once (on its CPU now, or out again once since), that
 * switch-in, from the scheduler's account, is its end, and a long one is recorded now;
 * if t switched more, its end is not known and it is counted as dropped. One still on (t
 * asleep or runnable since, not switched in) is its switch-in's to end: it is kept.
 */
static __always_inline void end_held(struct task_struct *t, struct offcpu_task *s)
{
	__u32 since = switches_of(t) - s->nsw;
	bool on = t->on_cpu;
	__u64 end;

	if (since == 0 && !on) {
		s->epoch = epoch;      /* not switched in since: still the same sleep */
		return;
	}
	if (s->held == HELD_WORK)
		return;                /* woken: its own task work records it (offcpu_tw_run) */
	end = (since == 0 && on) || (since == 1 && !on) ? arrived_mono(t) : 0;
	if (!end || end <= s->ts) {
		__sync_fetch_and_add(&ended_unseen, 1);
		s->ts = 0;
		s->held = 0;
		return;
	}
	if (held_ended(s, end))
		emit_ended_in_pause(t, s);
	s->ts = 0;
	s->woke = 0;
	s->held = 0;
}

/*
 * Run by user space as the budget's pause ends (an iterator over every task, read to its
 * end): a sleep begun before the pause and ended in it is recorded now (end_held); a
 * target thread that went to sleep while the collector was paused gets its sleep's start,
 * from the scheduler's own account (when it left its CPU), so that its switch-in records
 * the sleep like any other: a long wait that began in a pause is not lost. A thread already
 * seen going to sleep since the resume is left alone.
 */
SEC("iter/task")
int offcpu_seed(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct offcpu_task *s;
	__u32 state;
	__u64 left;

	if (!t || !running || paused || !is_target(t->tgid))
		return 0;
	s = bpf_task_storage_get(&offcpu_task, t, NULL, 0);
	if (s && s->ts && !s->woke && s->epoch != epoch)
		end_held(t, s);
	if (t->on_cpu)
		return 0;
	state = task_state(t) & 0xff;
	if (!state)
		return 0;      /* runnable: preempted, not asleep */
	left = left_cpu_mono(t);
	if (!left)
		return 0;
	if (!s)
		s = bpf_task_storage_get(&offcpu_task, t, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s || (s->ts && s->epoch == epoch) || s->woke)
		return 0;
	begin_sleep(s, t, left, state, BPF_CORE_READ(t, thread_info.cpu));
	s->py_valid = 0;       /* its Python frames were not read as it went to sleep */
	__sync_fetch_and_add(&seeded, 1);
	return 0;
}

/* the end of the syscall a long sleep happened in: the thread's own context */
SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_sys_exit, struct pt_regs *regs, long ret)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct offcpu_task *s;

	/* every system call of every task: the filter first spares the others a helper call */
	if (!is_target(t->tgid))
		return 0;
	s = bpf_task_storage_get(&offcpu_task, t, NULL, 0);
	if (!s || !s->woke)
		return 0;
	if (running)
		emit(ctx, t, s, (__s32)regs->orig_ax, true, false, 0);
	s->ts = 0;
	s->woke = 0;
	return 0;
}

/* a thread's exit (every task's: the filter first): its blocks into its process's totals,
 * while recording (after, user space has read them from its storage), and its task work
 * slot goes */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(offcpu_thread_exit, struct task_struct *p)
{
	struct offcpu_task *s;
	struct offcpu_total *tot;

#ifdef AIPROF_HAVE_TASK_WORK
	tw_forget(&offcpu_works, p);
#endif
	if (!running || !is_target(p->tgid))
		return 0;
	s = bpf_task_storage_get(&offcpu_task, p, NULL, 0);
	if (!s || !s->count)
		return 0;
	tot = totals(p->tgid);
	if (tot) {
		tot->count += s->count;
		tot->total_ns += s->total_ns;
	}
	s->count = 0;
	s->total_ns = 0;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
