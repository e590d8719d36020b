// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * System calls of the targets, two ways.
 *
 * Switch mode (the default where the kernel has bpf_task_work, Linux 6.18): no syscall
 * tracepoint at all, so no other task's system calls pay anything. A target thread giving up
 * the CPU inside a call (sched_switch, the call read from its pt_regs) starts the call's
 * record; when it is switched back in, a task work of its own completes the record on its way
 * back to user space, with the return value. Only the calls that gave up the CPU are seen,
 * timed from the moment they first did; a flush's bytes are not known.
 *
 * Trace mode (--all-syscalls, or a kernel without bpf_task_work): raw_syscalls:sys_enter and
 * sys_exit see every call of a target thread, at the price of the kernel's slow path for every
 * task's system calls while they are traced.
 *
 * Either way each call seen updates a per-CPU latency record for (tgid, nr); a call that took
 * at least slow_ns also becomes a ring-buffer record naming the file, pipe or socket behind
 * its fd (walked up the dentry and mount tree, so it is the path the target sees) or the path
 * it was given, with the bytes it moved.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "syscalls.h"
#include "maps.bpf.h"
#include "taskwork.bpf.h"
#include "ratelimit.bpf.h"
#include "ucopy.bpf.h"

#define S_IFMT  00170000
#define S_IFSOCK 0140000

const volatile __u64 slow_ns = 1000000;
const volatile __u64 always_ns = 0;   /* a call at least this long is recorded regardless */
const volatile __u64 site_fresh_ns = 0; /* switch mode: a slow call under always_ns at a site
					 * its thread recorded one at this recently is a
					 * syscall_site_event, no task work (sys_site); 0: none */

bool running = false;
/* set by user space while recording (the budget: ebpf_budget.c) */
__u32 rec_rate = 0;           /* per thread a second: slow-call records, and in switch mode
			       * a tenth as many short calls timed (two buckets); 0: all */
bool paused = false;          /* no new call is begun */
__u32 epoch = 0;              /* bumped at each pause: a call seen before it is dropped */
__u64 lost = 0;
__u64 tw_failed = 0;
__u64 tw_map_full = 0;        /* of them, because sys_works was full */
__u64 tw_ns = 0;              /* time in the task works' callbacks (bpf_stats leaves it out) */
__u64 tw_runs = 0;
__u64 seeded = 0;             /* calls that gave up the CPU in a pause, started by sys_seed */
__u64 ended_in_pause = 0;     /* ...whose task work ran in the pause: recorded (or counted) */

/* struct sys_enter_state: syscalls.h (user space reads what it has not folded yet) */

/* per thread: the call it is in (task storage: no hash update on the hot path) */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_enter_state);
} sys_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct syscall_stat_key);
	__type(value, struct syscall_stat);
} sys_stats SEC(".maps");

/* host tids of aiprof's own threads in the targets (filled by user space): not counted */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} own_tids SEC(".maps");

/* nr -> enum syscall_kind bits, filled by user space */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SYSCALL_NR_MAX);
	__type(key, __u32);
	__type(value, __u8);
} sys_kinds SEC(".maps");

/* (tgid, fd) -> bytes written through it since its last fsync-like call (or its open) */
struct sys_fd_key {
	__u32 tgid;
	__s32 fd;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sys_fd_key);
	__type(value, __u64);
} sys_written SEC(".maps");

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 b = 0;

	if (v >> 32) { v >>= 32; b += 32; }
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { b += 1; }
	return b < SYSCALL_HIST ? b : SYSCALL_HIST - 1;
}

static __always_inline struct file *fd_file(__u64 fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct file **fds;
	struct file *f = NULL;
	unsigned int max;

	max = BPF_CORE_READ(task, files, fdt, max_fds);
	if (fd >= max)
		return NULL;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (!fds)
		return NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/*
 * comps[i] is the name of the i-th dentry up from the file, or "" where the walk crossed
 * from a mount's root to its mount point. One slot per step keeps the verifier's job linear.
 */
static __always_inline void fill_path(struct syscall_event *e, struct file *f)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	struct mount *m = (struct mount *)((void *)vm - bpf_core_field_offset(struct mount, mnt));
	__u32 i;

	e->path_src = SYS_PATH_DENTRY;
	e->path_truncated = 1;
	for (i = 0; i < SYSCALL_PATH_DEPTH; i++) {
		struct dentry *parent, *root = BPF_CORE_READ(m, mnt.mnt_root);
		struct mount *mp;

		e->comps[i][0] = 0;
		if (d == root) {
			mp = BPF_CORE_READ(m, mnt_parent);
			if (mp == m) {  /* the root of the mount tree */
				e->path_truncated = 0;
				break;
			}
			d = BPF_CORE_READ(m, mnt_mountpoint);
			m = mp;
			continue;
		}
		parent = BPF_CORE_READ(d, d_parent);
		bpf_probe_read_kernel_str(e->comps[i], SYSCALL_NAME_LEN, BPF_CORE_READ(d, d_name.name));
		if (parent == d) {      /* root of a filesystem that is not mounted (pipefs, ...) */
			e->path_truncated = 0;
			i++;
			break;
		}
		d = parent;
	}
	e->depth = i;
}

static __always_inline void fill_socket(struct syscall_event *e, struct file *f)
{
	struct socket *sock = BPF_CORE_READ(f, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);

	if (!sk)
		return;
	e->sk_type = BPF_CORE_READ(sock, type);
	e->sk_family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->sk_proto = BPF_CORE_READ(sk, sk_protocol);
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (e->sk_family == 2 /* AF_INET */) {
		bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
	} else if (e->sk_family == 10 /* AF_INET6 */) {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
}

static __always_inline void fill_file(struct syscall_event *e, struct file *f)
{
	struct inode *ino = BPF_CORE_READ(f, f_inode);

	e->i_mode = BPF_CORE_READ(ino, i_mode);
	e->ino = BPF_CORE_READ(ino, i_ino);
	e->file_size = BPF_CORE_READ(ino, i_size);
	e->s_magic = BPF_CORE_READ(ino, i_sb, s_magic);
	if ((e->i_mode & S_IFMT) == S_IFSOCK)
		fill_socket(e, f);
	else
		fill_path(e, f);
}

/*
 * Trace mode. Both programs run for every system call of every task on the node (a
 * tracepoint cannot be limited to some tasks): for the others they cost an inlined load and the target filter's
 * inlined array lookups, no helper call.
 */
SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sys_enter_state *s;

	if (!running || paused || !is_target(task->tgid))
		return 0;
	s = bpf_task_storage_get(&sys_start, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s)
		return 0;
	s->ts = bpf_ktime_get_ns();
	s->nr = (__u32)id;
	s->args[0] = regs->di;    /* a BTF pointer: plain loads, no probe reads */
	s->args[1] = regs->si;
	s->args[2] = regs->dx;
	return 0;
}

static __always_inline struct syscall_stat *stat_of(__u32 tgid, __u32 nr)
{
	struct syscall_stat_key key = { .tgid = tgid, .nr = nr };
	struct syscall_stat *st = bpf_map_lookup_elem(&sys_stats, &key);

	if (!st) {
		struct syscall_stat z = {};

		bpf_map_update_elem(&sys_stats, &key, &z, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&sys_stats, &key);
	}
	return st;
}

static __always_inline bool own_thread(__u32 tid)
{
	return bpf_map_lookup_elem(&own_tids, &tid) != NULL;
}

/* Short calls timed a second per thread (switch mode): a tenth of the record rate, at
 * least one; 0 (no rate): all. A task work each: sampled, the rest counted as untimed. */
static __always_inline __u32 time_rate(void)
{
	__u32 r = rec_rate / 10;

	return rec_rate && !r ? 1 : r;
}

/* The site of the call s describes, of thread t: its syscall, first argument, user pc (0:
 * none, no registers, or no sites) */
static __always_inline __u64 sys_site_key(struct sys_enter_state *s, struct task_struct *t)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

	if (!site_fresh_ns || !regs)
		return 0;
	return site_mix(site_mix(s->nr, s->args[0]), regs->ip) | 1;
}

/* The record of a slow call at a site its thread recorded a moment ago (syscall_site_event) */
static __always_inline void emit_at_site(struct sys_enter_state *s, struct task_struct *t,
					 __u64 now)
{
	struct syscall_site_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	e->hdr.type = EBPF_REC_SYSCALL;
	e->hdr.tgid = t->tgid;
	e->hdr.tid = t->pid;
	e->hdr.cpu = bpf_get_smp_processor_id();
	e->hdr.ts = s->ts;
	BPF_CORE_READ_STR_INTO(&e->hdr.comm, t, comm);
	e->dur_ns = now - s->ts;
	e->args[0] = s->args[0];
	e->args[1] = s->args[1];
	e->args[2] = s->args[2];
	e->nr = s->nr;
	e->flags = SYSCALL_F_SITE;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* Slot u's untimed calls into t's process's totals (sys_stats), u freed */
static __always_inline void fold_slot(struct sys_untimed *u, struct task_struct *t)
{
	struct syscall_stat *st;

	if (u->count && !own_thread(t->pid)) {
		st = stat_of(t->tgid, u->nr);
		if (st)
			st->untimed += u->count;
	}
	u->count = 0;
}

/* One more untimed call nr of t: counted in its own slot, a free one, or the one with the
 * fewest (those go into the totals first) */
static __always_inline void count_untimed(struct sys_enter_state *s, struct task_struct *t,
					  __u32 nr)
{
	struct sys_untimed *u = &s->un[0];

	for (int i = 0; i < SYS_UNTIMED_SLOTS; i++) {
		if (s->un[i].count && s->un[i].nr == nr) {
			s->un[i].count++;
			return;
		}
	}
	for (int i = 1; i < SYS_UNTIMED_SLOTS; i++)
		if (s->un[i].count < u->count)
			u = &s->un[i];
	fold_slot(u, t);
	u->nr = nr;
	u->count = 1;
}

/* all of s's untimed calls into the totals (the thread's exit) */
static __always_inline void fold_untimed(struct sys_enter_state *s, struct task_struct *t)
{
	for (int i = 0; i < SYS_UNTIMED_SLOTS; i++)
		fold_slot(&s->un[i], t);
}

/*
 * The end of the call s describes, ret its return value, in the calling thread's context:
 * the latency record, the bytes written per fd (trace mode: every write is seen), and the
 * slow-call record.
 */
static __always_inline void finish_call(struct sys_enter_state *s, long ret, bool every_call)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), dur, *w;
	__u64 written = every_call ? 0 : SYSCALL_BYTES_UNKNOWN, ts0 = s->ts;
	__u32 nr = s->nr;
	struct sys_fd_key fdk;
	struct syscall_stat *st;
	struct syscall_event *e;
	struct file *f = NULL;
	__u8 *kindp, kind = 0;

	if (own_thread((__u32)pid_tgid))
		return;         /* aiprof's own thread: in none of the target's data */
	dur = now - ts0;
	st = stat_of(pid_tgid >> 32, nr);
	if (st) {
		st->count++;
		st->total_ns += dur;
		if (dur > st->max_ns)
			st->max_ns = dur;
		if (dur >= slow_ns)
			st->slow++;
		st->hist[log2_bucket(dur)]++;
	}

	if (nr < SYSCALL_NR_MAX) {
		kindp = bpf_map_lookup_elem(&sys_kinds, &nr);
		if (kindp)
			kind = *kindp;
	}
	fdk.tgid = pid_tgid >> 32;
	fdk.fd = (__s32)s->args[0];
	if (!every_call) {
		/* the writes that did not give up the CPU were not seen: no count per fd */
	} else if ((kind & SYS_K_WRITES) && ret > 0) {
		w = bpf_map_lookup_elem(&sys_written, &fdk);
		if (w) {
			__sync_fetch_and_add(w, (__u64)ret);
		} else {
			__u64 v = (__u64)ret;

			bpf_map_update_elem(&sys_written, &fdk, &v, BPF_NOEXIST);
		}
	} else if ((kind & SYS_K_SYNCS) && ret == 0) {
		w = bpf_map_lookup_elem(&sys_written, &fdk);
		if (w)
			written = __sync_lock_test_and_set(w, 0);
	} else if ((kind & SYS_K_CLOSES) && ret == 0) {
		bpf_map_delete_elem(&sys_written, &fdk);
	}
	if (dur < slow_ns)
		return;
	/* (armed 2: slow already at its switch-in, and its token taken there) */
	if (dur < always_ns && s->armed != 2 && !rl_take(&s->rl_rec, now, rec_rate)) {
		if (st)
			st->limited++;  /* past the thread's record rate: counted, no record */
		return;
	}

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	fill_hdr(&e->hdr, EBPF_REC_SYSCALL, pid_tgid, ts0);
	e->dur_ns = dur;
	e->ret = ret;
	e->args[0] = s->args[0];
	e->args[1] = s->args[1];
	e->args[2] = s->args[2];
	e->nr = nr;
	e->bytes = (kind & SYS_K_SYNCS) ? written : (ret > 0 ? (__u64)ret : 0);
	e->file_size = 0;
	e->ino = 0;
	e->i_mode = 0;
	e->s_magic = 0;
	e->path_src = SYS_PATH_NONE;
	e->depth = 0;
	e->sk_family = e->sk_proto = e->sport = e->dport = e->sk_type = e->path_truncated = 0;
	__builtin_memset(e->saddr, 0, sizeof(e->saddr));
	__builtin_memset(e->daddr, 0, sizeof(e->daddr));
	if ((kind & SYS_K_FD0) && !(kind & SYS_K_CLOSES)) {
		f = fd_file(s->args[0]);
		if (f)
			fill_file(e, f);
	} else if (kind & (SYS_K_PATH0 | SYS_K_PATH1)) {
		const char *up = (const char *)((kind & SYS_K_PATH0) ? s->args[0] : s->args[1]);

		if (bpf_probe_read_user_str(e->upath, sizeof(e->upath), up) > 0)
			e->path_src = SYS_PATH_USER;
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sys_enter_state *s;

	/* only targets' threads have storage; the filter first spares the others a helper call */
	if (!is_target(task->tgid))
		return 0;
	s = bpf_task_storage_get(&sys_start, task, NULL, 0);
	if (!s || !s->ts)
		return 0;
	if (running)
		finish_call(s, ret, true);
	s->ts = 0;
	return 0;
}

#ifdef AIPROF_HAVE_TASK_WORK
/* per target thread: the task work that completes its call's record (sys_switch) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tw_slot);
} sys_works SEC(".maps");

/* the task work: the thread is on its way back to user space from the call, ax its result */
static int sys_tw_run(struct bpf_map *map, void *key, void *value)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct sys_enter_state *s = bpf_task_storage_get(&sys_start, t, NULL, 0);
	struct pt_regs *regs;
	__u64 t0 = bpf_ktime_get_ns();

	if (!s || !s->ts)
		return 0;
	/* run by do_exit instead: the call (exit, a fatal signal) does not return */
	regs = (t->flags & PF_EXITING) ? NULL : (struct pt_regs *)bpf_task_pt_regs(t);
	if (running && regs && regs->orig_ax == s->nr) {
		if (s->armed == ARMED_HELD && paused)
			__sync_fetch_and_add(&ended_in_pause, 1);
		finish_call(s, (long)regs->ax, false);
	}
	s->ts = 0;
	s->armed = 0;
	__sync_fetch_and_add(&tw_ns, bpf_ktime_get_ns() - t0);
	__sync_fetch_and_add(&tw_runs, 1);
	return 0;
}

static __always_inline bool schedule_work(struct task_struct *t)
{
	return tw_schedule(t, &sys_works, sys_tw_run, &tw_map_full);
}

#else
static __always_inline bool schedule_work(struct task_struct *t)
{
	return false;  /* not built in: user space never loads sys_switch */
}
#endif

/* Switch mode: t's call nr (its registers regs) is seen, given up the CPU in it since ts. */
static __always_inline void begin_call(struct sys_enter_state *s, struct task_struct *t,
				       struct pt_regs *regs, long nr, __u64 ts)
{
	s->ts = ts;
	s->nr = (__u32)nr;
	s->armed = 0;
	s->epoch = epoch;
	s->nsw = switches_of(t);
	s->args[0] = regs->di;
	s->args[1] = regs->si;
	s->args[2] = regs->dx;
}

/*
 * Switch mode. Every context switch on the node runs this, but only a target thread's own
 * switches go past the inlined filters: prev giving up the CPU inside a call starts the call's
 * record (the first time in that call), next coming back inside one schedules the task work
 * that completes it (scheduled here, the thread's own CPU runs the work's setup before the
 * thread can return to user space).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(sys_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct sys_enter_state *s;
	struct syscall_stat *st;
	struct pt_regs *regs;
	__u32 armed;
	__u64 now;
	long nr;

	if (!running || paused)
		return 0;
	if (is_target(prev->tgid)) {
		regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		nr = regs ? (long)regs->orig_ax : -1;  /* -1: not in a call; a BTF pointer */
		s = nr >= 0 ? bpf_task_storage_get(&sys_start, prev, NULL,
						   BPF_LOCAL_STORAGE_GET_F_CREATE) : NULL;
		/* a call seen before a pause and not armed is stale: the thread ran since */
		if (s && (!s->ts || (s->epoch != epoch && !s->armed)))
			begin_call(s, prev, regs, nr, bpf_ktime_get_ns());
	}
	if (!is_target(next->tgid))
		return 0;
	s = bpf_task_storage_get(&sys_start, next, NULL, 0);
	if (!s || !s->ts || s->armed)
		return 0;
	if ((next->flags & PF_EXITING) || !same_epoch_or_asleep(s->epoch, epoch, s->nsw, next)) {
		/* exit or a fatal signal: the call does not return; or it was seen before a
		 * pause, and whether it returned meanwhile is not known */
		s->ts = 0;
		return 0;
	}
	now = bpf_ktime_get_ns();
	armed = 1;
	if (now - s->ts < slow_ns) {
		/* short so far: timed (a task work at its end) at a tenth of the thread's rate;
		 * past that counted, not timed */
		if (!rl_take(&s->rl_time, now, time_rate())) {
			count_untimed(s, next, s->nr);
			s->ts = 0;
			return 0;
		}
	} else if (now - s->ts < always_ns) {
		/* slow already: a record if the thread did not record one at its site just now
		 * and has a token for one; else counted here, not timed, with no task work */
		__u64 key = sys_site_key(s, next);
		bool fresh = key && site_fresh(s->sites, key, now, site_fresh_ns);

		if (fresh || !rl_take(&s->rl_rec, now, rec_rate)) {
			if (!own_thread(next->pid)) {
				st = stat_of(next->tgid, s->nr);
				if (st) {
					st->untimed++;
					st->slow++;
					if (fresh)
						st->site++;
					else
						st->limited++;
				}
				if (fresh)
					emit_at_site(s, next, now);
			}
			s->ts = 0;
			return 0;
		}
		if (key)
			site_take(s->sites, key, now);
		armed = 2;
	}
	if (schedule_work(next)) {
		s->armed = armed;
	} else {
		/* the table full, or the thread exiting: the call is not recorded */
		__sync_fetch_and_add(&tw_failed, 1);
		s->ts = 0;
	}
	return 0;
}

#ifdef AIPROF_HAVE_TASK_WORK
/*
 * Run by user space once a pause of the budget has begun (the switch program detached): a
 * target thread asleep in a call the collector saw begin before the pause gets its task
 * work now (ARMED_HELD), so that the call is timed and recorded at its end, in its own
 * context, like any other, though it ends in the pause.
 */
SEC("iter/task")
int sys_hold(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct sys_enter_state *s;

	if (!t || !running || !paused || !is_target(t->tgid) || t->on_cpu)
		return 0;
	s = bpf_task_storage_get(&sys_start, t, NULL, 0);
	if (!s || !s->ts || s->armed || s->epoch == epoch || s->nsw != switches_of(t) ||
	    !(task_state(t) & 0xff))
		return 0;      /* none, armed already, or it ran since (the call may be over) */
	if (schedule_work(t))
		s->armed = ARMED_HELD;
	return 0;
}
#else
SEC("iter/task")
int sys_hold(struct bpf_iter__task *ctx)
{
	return 0;      /* not built in: user space never loads it */
}
#endif

/*
 * Run by user space as the budget's pause ends (an iterator over every task, read to its
 * end, writing nothing): a target thread asleep in a call it began while the collector was
 * paused gets the call's start now, as the moment it left its CPU in it (the scheduler's
 * own account; the call may have begun a little earlier), so that its switch-in times and
 * records it like any other: a slow call that began in a pause is not lost.
 */
SEC("iter/task")
int sys_seed(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct sys_enter_state *s;
	struct pt_regs *regs;
	long nr;
	__u64 left;

	if (!t || !running || paused || !is_target(t->tgid) || t->on_cpu)
		return 0;
	if (!(task_state(t) & 0xff))
		return 0;      /* runnable: preempted, not asleep */
	regs = (struct pt_regs *)bpf_task_pt_regs(t);
	nr = regs ? (long)regs->orig_ax : -1;
	if (nr < 0 || own_thread(t->pid))
		return 0;
	left = left_cpu_mono(t);
	if (!left)
		return 0;
	s = bpf_task_storage_get(&sys_start, t, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s || s->armed || (s->ts && s->epoch == epoch))
		return 0;
	begin_call(s, t, regs, nr, left);
	__sync_fetch_and_add(&seeded, 1);
	return 0;
}

/* a thread's exit: its task work slot goes (loaded only with the task work programs) */
/* a thread's exit (every task's: the filter first): its untimed calls into its process's
 * totals while recording (after, user space has read them from its storage), and its task
 * work slot goes */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(sys_thread_exit, struct task_struct *p)
{
	struct sys_enter_state *s;

#ifdef AIPROF_HAVE_TASK_WORK
	tw_forget(&sys_works, p);
#endif
	if (!running || !is_target(p->tgid))
		return 0;
	s = bpf_task_storage_get(&sys_start, p, NULL, 0);
	if (s)
		fold_untimed(s, p);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
