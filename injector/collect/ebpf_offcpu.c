/* SPDX-License-Identifier: MIT */
/*
 * Off-CPU time, user half (kernel half: bpf/offcpu.bpf.c, shared structs: bpf/offcpu.h).
 * Turns records into offcpu timeline events (dur = time blocked) and offcpu.folded lines
 * (weight = microseconds). Threads still asleep when the window closes are reported up to
 * its end, with the stacks /proc and the interpreter give for a sleeping thread: a
 * checkpoint that outlasts the window is the one to see.
 */
#ifndef AIPROF_NO_EBPF
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/offcpu.h"
#include "bpf/tasks.h"
#include "offcpu.skel.h"
#include "ebpf_internal.h"
#include "ebpf_kallsyms.h"
#include "readfile.h"


static int offcpu_load(struct ebpf *e, bool task_work, struct offcpu_bpf **ret)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct offcpu_bpf *skel;
	int r;

	skel = offcpu_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_OFFCPU], sizeof(e->why[EC_OFFCPU]), "cannot open the off-CPU "
			 "collector: %s", strerror(-r));
		return r;
	}
	skel->rodata->want_python = (e->opts.collectors & EBPF_COLLECT_PYTHON) != 0;
	skel->rodata->min_block_ns = e->opts.offcpu_min_ns;
	skel->rodata->ucopy_max = e->opts.unwind_stack_bytes;
	skel->bss->rec_rate = e->opts.record_rate;
	skel->rodata->always_ns = EBPF_RECORD_ALWAYS_NS;
	/* no record rate: no sites, every long block's stacks are taken */
	skel->rodata->site_fresh_ns = e->opts.record_rate ? EBPF_SITE_FRESH_NS : 0;
	if (task_work && !skel->rodata->task_work_built) {
		/* built against a kernel's BTF without it */
		offcpu_bpf__destroy(skel);
		return -ENOSYS;
	}
	/* one of the two ways to complete a record in the thread's own context */
	bpf_program__set_autoload(skel->progs.offcpu_switch_tw, task_work);
	bpf_program__set_autoload(skel->progs.offcpu_switch, !task_work);
	bpf_program__set_autoload(skel->progs.offcpu_sys_exit, !task_work);
	/* both ways: it folds an exiting thread's blocks into its process's (and gives its
	 * task work slot back) */
	bpf_program__set_autoload(skel->progs.offcpu_thread_exit, true);
	/* run by the budget's resumes, not attached with the rest */
	bpf_program__set_autoattach(skel->progs.offcpu_seed, false);
	bpf_program__set_autoload(skel->progs.offcpu_hold_tw, task_work);
	bpf_program__set_autoload(skel->progs.offcpu_hold, !task_work);
	bpf_program__set_autoattach(skel->progs.offcpu_hold_tw, false);
	bpf_program__set_autoattach(skel->progs.offcpu_hold, false);
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = offcpu_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_OFFCPU], sizeof(e->why[EC_OFFCPU]), "the kernel refused the "
			 "off-CPU collector (sched_switch BTF tracepoint, %s, task storage): %s",
			 task_work ? "bpf_task_work" : "sys_exit", strerror(-r));
		offcpu_bpf__destroy(skel);
		return r;
	}
	*ret = skel;
	return 0;
}

static int ebpf_offcpu__open(struct ebpf *e)
{
	struct offcpu_bpf *skel = NULL;
	int r = -ENOSYS;

	const char *force = getenv("AIPROF_EBPF_OFFCPU_TASK_WORK");  /* "0": sys_exit, for tests */

	e->off_task_work = !(force && strcmp(force, "0") == 0) &&
			   ebpf_kernel_has_task_work(e->opts.btf_path);
	if (e->off_task_work) {
		ebpf_verifier_why_clear();
		r = offcpu_load(e, true, &skel);
		if (r < 0)
			ebpf_task_work_refused(e, r);
	}
	if (r < 0) {
		e->off_task_work = false;
		r = offcpu_load(e, false, &skel);
	}
	if (r < 0)
		return r;
	ebpf_loaded(e, skel->obj);
	e->off = skel;
	return 0;
}

static int ebpf_offcpu__attach(struct ebpf *e)
{
	int r = offcpu_bpf__attach(e->off);

	if (r < 0)
		snprintf(e->why[EC_OFFCPU], sizeof(e->why[EC_OFFCPU]), "cannot attach to sched_switch "
			 "and %s: %s", e->off_task_work ? "schedule a task work" : "sys_exit",
			 strerror(-r));
	else if (e->off_task_work)
		snprintf(e->scope[EC_OFFCPU], sizeof(e->scope[EC_OFFCPU]), "%s",
			 EBPF_SCOPE_TRACEPOINT "; no syscall tracepoint: each record is completed by "
			 "a task work of the target thread's own, bpf_task_work)");
	else
		snprintf(e->scope[EC_OFFCPU], sizeof(e->scope[EC_OFFCPU]), "%s",
			 EBPF_SCOPE_TRACEPOINT EBPF_SCOPE_SYSCALLS_TAIL);
	return r;
}

static void ebpf_offcpu__set_running(struct ebpf *e, bool on)
{
	if (!e->off)
		return;
	if (on) {
		__atomic_store_n(&e->off->bss->tw_ns, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->off->bss->tw_runs, 0, __ATOMIC_RELAXED);
	}
	e->off->bss->running = on;
	if (!on) {
		ebpf_task_works_cancel(e->off->obj, "offcpu_works");
		e->lost += __atomic_exchange_n(&e->off->bss->lost, 0, __ATOMIC_RELAXED);
		e->tw_map_full += __atomic_exchange_n(&e->off->bss->tw_map_full, 0,
						      __ATOMIC_RELAXED);
	}
}

void ebpf_offcpu_throttle(struct ebpf *e, uint32_t rate, bool paused)
{
	struct offcpu_bpf *o = e->off;

	if (o)
		ebpf_throttle("off-CPU", &(struct ebpf_knobs){
			.rate = &o->bss->rec_rate, .paused = &o->bss->paused, .epoch = &o->bss->epoch,
			.progs = { o->progs.offcpu_switch_tw, o->progs.offcpu_switch,
				   o->progs.offcpu_sys_exit },
			.links = { &o->links.offcpu_switch_tw, &o->links.offcpu_switch,
				   &o->links.offcpu_sys_exit },
			.seed = o->progs.offcpu_seed,
			.hold = bpf_program__autoload(o->progs.offcpu_hold_tw) ?
				o->progs.offcpu_hold_tw : o->progs.offcpu_hold },
			rate, paused);
}

uint64_t ebpf_offcpu_tw_ns(const struct ebpf *e)
{
	return e->off ? __atomic_load_n(&e->off->bss->tw_ns, __ATOMIC_RELAXED) : 0;
}

uint64_t ebpf_offcpu_seeded(const struct ebpf *e)
{
	return e->off ? __atomic_load_n(&e->off->bss->seeded, __ATOMIC_RELAXED) : 0;
}

void ebpf_offcpu_ended_in_pauses(const struct ebpf *e, uint64_t *recorded, uint64_t *unseen)
{
	*recorded = e->off ? __atomic_load_n(&e->off->bss->ended_in_pause, __ATOMIC_RELAXED) : 0;
	*unseen = e->off ? __atomic_load_n(&e->off->bss->ended_unseen, __ATOMIC_RELAXED) : 0;
}

uint64_t ebpf_offcpu_tw_runs(const struct ebpf *e)
{
	return e->off ? __atomic_load_n(&e->off->bss->tw_runs, __ATOMIC_RELAXED) : 0;
}

/* Counts ev (its stack already in the store) and keeps it whole if the budget allows. */
static void keep_event(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_off_ev *ev)
{
	stack_store__add(&e->stacks, ev->stack, STACK_OFFCPU, ev->dur / 1000 ? ev->dur / 1000 : 1);
	if (!ebpf_keep_event(e, td))
		return;
	if (td->noff == td->capoff) {
		size_t ncap = td->capoff ? td->capoff * 2 : 256;
		struct ebpf_off_ev *nv = realloc(td->off, ncap * sizeof(*nv));

		if (!nv)
			return;
		td->off = nv;
		td->capoff = ncap;
	}
	td->off[td->noff++] = *ev;
}

/* what add_event's block is besides its times */
enum { OFF_ENDED = 0, OFF_OPEN_AT_END = 1, OFF_ENDED_IN_PAUSE = 2 };

/* Returns the stack id the event went on, or -1 */
static int add_event(struct ebpf *e, struct ebpf_tdata *td, uint64_t ts, uint64_t dur,
		     uint32_t tid, uint32_t state, int32_t syscall, const struct ebpf_stacks *st,
		     const struct ebpf_ucopy *uc, int how, uint32_t wchan_hint,
		     uint32_t *ret_wchan)
{
	uint32_t wchan = UINT32_MAX;
	int id;

	id = ebpf_stack_from(e, td, st, uc, true, false, NULL, &wchan);
	if (id < 0)
		return -1;
	if (wchan == UINT32_MAX)
		wchan = wchan_hint;
	if (ret_wchan)
		*ret_wchan = wchan;
	keep_event(e, td, &(struct ebpf_off_ev){ .ts = ts, .dur = dur, .tid = tid,
		   .stack = (uint32_t)id, .state = state, .syscall = syscall, .wchan = wchan,
		   .open_at_end = how == OFF_OPEN_AT_END, .ended_in_pause = how == OFF_ENDED_IN_PAUSE,
		   .blocked_ns = dur });
	return id;
}

#define EBPF_MAX_SITES 65536       /* per target process: 3 MiB */

static struct ebpf_off_site *site_of(struct ebpf_tdata *td, uint32_t tid, uint64_t key)
{
	uint64_t i;

	if (!u64map_get(&td->site_idx, u64_hash2(tid, key), &i) || i >= td->nsites ||
	    td->sites[i].tid != tid || td->sites[i].key != key)
		return NULL;
	return &td->sites[i];
}

/* The record of thread tid at site key went on stack: later blocks there go on it too */
static void site_note(struct ebpf_tdata *td, uint32_t tid, uint64_t key, uint32_t stack,
		      uint32_t wchan)
{
	struct ebpf_off_site *s = site_of(td, tid, key);

	if (!s) {
		/* a bound on memory in long windows: past it, what later blocks at a new site
		 * would have put on its record is counted as not recorded */
		if (td->nsites >= EBPF_MAX_SITES)
			return;
		if (td->nsites == td->capsites) {
			size_t ncap = td->capsites ? td->capsites * 2 : 64;
			struct ebpf_off_site *nv = realloc(td->sites, ncap * sizeof(*nv));

			if (!nv)
				return;
			td->sites = nv;
			td->capsites = ncap;
		}
		if (u64map_put(&td->site_idx, u64_hash2(tid, key), td->nsites) < 0)
			return;
		s = &td->sites[td->nsites++];
		*s = (struct ebpf_off_site){ .tid = tid, .key = key };
	}
	s->stack = stack;
	s->wchan = wchan;
}

/* A block at a site its thread recorded a moment ago: the stacks of that record. With no
 * such record seen (lost on a full ring buffer, or past EBPF_MAX_SITES), counted as not
 * recorded. */
static void add_at_site(struct ebpf *e, struct ebpf_tdata *td, const struct offcpu_event_head *h)
{
	struct ebpf_off_site *s = site_of(td, h->hdr.tid, h->site_key);

	if (!s) {
		td->offcpu_limited++;
		td->offcpu_limited_ns += h->dur_ns;
		return;
	}
	td->offcpu_site_stacks++;
	td->offcpu_site_stacks_ns += h->dur_ns;
	keep_event(e, td, &(struct ebpf_off_ev){ .ts = h->hdr.ts, .dur = h->dur_ns,
		   .tid = h->hdr.tid, .stack = s->stack, .state = h->state, .syscall = h->syscall,
		   .wchan = s->wchan, .site_stacks = true, .blocked_ns = h->dur_ns });
}

static void ebpf_offcpu__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size)
{
	const struct offcpu_event *o = data;
	uint32_t wchan = UINT32_MAX;
	int id;

	if (size < sizeof(o->h) || (!(o->h.flags & OFFCPU_F_SITE_STACKS) && size < sizeof(*o))) {
		e->bad_records++;
		return;
	}
	ebpf_note_tid(td, o->h.hdr.tid, o->h.hdr.comm);
	if (o->h.flags & OFFCPU_F_SITE_STACKS) {
		add_at_site(e, td, &o->h);
		return;
	}
	if (o->h.flags & OFFCPU_F_ENDED_IN_PAUSE) {
		/* its kernel stack read as a pause began; its user stack by its own task work,
		 * or (written at the resume) only the pc it entered the kernel at */
		add_event(e, td, o->h.hdr.ts, o->h.dur_ns, o->h.hdr.tid, o->h.state, o->h.syscall,
			  &o->st, o->h.flags & OFFCPU_F_NO_USER_STACK ? NULL :
			  ebpf_ucopy_of(e, data, size, sizeof(*o)), OFF_ENDED_IN_PAUSE, UINT32_MAX,
			  NULL);
		return;
	}
	id = add_event(e, td, o->h.hdr.ts, o->h.dur_ns, o->h.hdr.tid, o->h.state, o->h.syscall,
		       &o->st, ebpf_ucopy_of(e, data, size, sizeof(*o)), OFF_ENDED, UINT32_MAX,
		       &wchan);
	if (id >= 0 && o->h.site_key)
		site_note(td, o->h.hdr.tid, o->h.site_key, (uint32_t)id, wchan);
}

/*
 * The stacks of a thread asleep right now: kernel frames from /proc/PID/task/TID/stack
 * ("[<0>] pipe_read+0x366/0x410", scheduler frames left out), its user pc from .../syscall,
 * its Python frames from the interpreter. Returns the syscall it sleeps in, or -1.
 */
static int32_t sleeping_stacks(struct ebpf *e, struct ebpf_tdata *td, uint32_t tid,
			       struct ebpf_stacks *st, uint32_t *ret_wchan)
{
	const struct ksyms *ks = symbolizer__ksyms(e->symz);
	char path[96], buf[4096], *p, *nl;
	unsigned long long pc = 0;
	long nr = -1;
	size_t nk = 0;

	memset(st, 0, offsetof(struct ebpf_stacks, kips));
	*ret_wchan = UINT32_MAX;
	snprintf(path, sizeof(path), "/proc/%d/task/%u/stack", td->pid, tid);
	if (readfile_buf(path, buf, sizeof(buf)) >= 0) {
		for (p = buf; *p && nk < EBPF_KSTACK_MAX; p = nl ? nl + 1 : p + strlen(p)) {
			char name[128];
			unsigned long off = 0;
			const struct ksym *s;

			nl = strchr(p, '\n');
			if (sscanf(p, "[<%*[^>]>] %127[^+]+0x%lx", name, &off) < 1)
				continue;
			if (*ret_wchan == UINT32_MAX) {
				char fr[160];
				int id;

				snprintf(fr, sizeof(fr), "%s_[k]", name);
				id = stack_store__frame(&e->stacks, fr);
				if (id >= 0)
					*ret_wchan = (uint32_t)id;
			}
			s = ksyms__find_name(ks, name);
			if (s)
				st->kips[nk++] = s->addr + off;
		}
		st->kstack_bytes = (int32_t)(nk * 8);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%u/syscall", td->pid, tid);
	if (readfile_buf(path, buf, sizeof(buf)) >= 0 &&
	    sscanf(buf, "%ld %*s %*s %*s %*s %*s %*s %*s %llx", &nr, &pc) == 2 && pc) {
		st->uips[0] = pc;
		st->ustack_bytes = 8;
	}
	ebpf_py_walk_asleep(td, tid, st);
	return nr >= 0 ? (int32_t)nr : -1;
}

/*
 * What the kernel side holds for thread tid, read from its task storage by pidfd; false if
 * it has none (it never slept in the window). Its blocks so far go into td's totals (an
 * exiting thread's are folded into offcpu_totals instead): every thread is read once, at
 * the end. Before Linux 6.9 there are no thread pidfds: without the task iterator too,
 * the live threads' blocks are not counted.
 */
static bool task_state_of(struct ebpf_tdata *td, int map_fd, uint32_t tid,
			  struct offcpu_task *ret)
{
	bool ok = ebpf_task_storage_of(map_fd, tid, ret);

	if (ok) {
		td->offcpu_count += ret->count;
		td->offcpu_total_ns += ret->total_ns;
	}
	return ok;
}

/* Whether v's sleep can be trusted at the window's end: begun since the collector's last
 * pause (--budget), ended and measured (woke) before it, or held as the pause began and its
 * thread not back in user space since (its task work has not run); a sleep begun before a
 * pause may otherwise have ended in it unseen, and the thread slept again since. */
static bool current_sleep(const struct ebpf *e, const struct offcpu_task *v)
{
	return v->woke || v->held == HELD_WORK ||
	       v->epoch == __atomic_load_n(&e->off->bss->epoch, __ATOMIC_RELAXED);
}

/*
 * At the end of the window: threads asleep for at least the threshold are reported up to
 * the end (stacks from /proc and the interpreter), and long sleeps that ended but whose
 * record the thread had not written yet (no syscall exit since) with the kernel stack the
 * kernel side kept.
 */
static void flush_threads(struct ebpf *e, struct ebpf_tdata *td, int map_fd,
			  struct offcpu_task *v, struct ebpf_stacks *st)
{
	char path[64];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", td->pid);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		uint32_t wchan;
		int32_t nr;

		if (tid <= 0 || !task_state_of(td, map_fd, (uint32_t)tid, v) || !v->ts ||
		    v->ts < e->start_ns || v->ts >= e->end_ns || !current_sleep(e, v))
			continue;
		if (v->woke) {
			nr = sleeping_stacks(e, td, (uint32_t)tid, st, &wchan);
			st->kstack_bytes = v->kstack_bytes;
			memcpy(st->kips, v->kips, sizeof(st->kips));
			add_event(e, td, v->ts, v->woke - v->ts, (uint32_t)tid, v->state, nr, st, NULL,
				  OFF_ENDED, UINT32_MAX, NULL);
		} else if (e->end_ns - v->ts >= e->opts.offcpu_min_ns) {
			nr = sleeping_stacks(e, td, (uint32_t)tid, st, &wchan);
			add_event(e, td, v->ts, e->end_ns - v->ts, (uint32_t)tid, v->state, nr, st, NULL,
				  OFF_OPEN_AT_END, wchan, NULL);
		}
	}
	closedir(d);
}

struct flush_ctx {
	int map_fd;
	struct offcpu_task v;
	struct ebpf_stacks st;
};

/*
 * The same at the end of the window, from the task iterator: a thread asleep now is
 * reported with its whole stacks as the iterator read them, also when it went to sleep
 * before the window began (then from the window's start, with how long it has really been
 * blocked: a hang that began before anyone looked).
 */
static int flush_dumped(struct ebpf *e, struct ebpf_tdata *td, struct task_dump *d,
			void *arg)
{
	struct flush_ctx *c = arg;
	bool have = task_state_of(td, c->map_fd, d->hdr.tid, &c->v) && c->v.ts &&
		    c->v.ts < e->end_ns && current_sleep(e, &c->v);
	uint64_t since, blocked, window = e->end_ns - e->start_ns;
	uint32_t wchan = UINT32_MAX;
	int32_t nr;
	int id;

	if (have && c->v.woke) {
		/* woke from a long sleep and not back in user space yet: what the kernel kept */
		if (c->v.ts < e->start_ns)
			return 0;
		nr = sleeping_stacks(e, td, d->hdr.tid, &c->st, &wchan);
		c->st.kstack_bytes = c->v.kstack_bytes;
		memcpy(c->st.kips, c->v.kips, sizeof(c->st.kips));
		add_event(e, td, c->v.ts, c->v.woke - c->v.ts, d->hdr.tid, c->v.state, nr, &c->st,
			  NULL, OFF_ENDED, UINT32_MAX, NULL);
		return 0;
	}
	if (!d->state)
		return 0;   /* running */
	blocked = ebpf_task_for_ns(d);
	if (have && c->v.ts >= e->start_ns) {
		since = c->v.ts;     /* measured by sched_switch: exact */
		blocked = e->end_ns - since;
	} else if (blocked >= window) {
		since = e->start_ns; /* asleep for the whole window, and before it */
	} else if (blocked) {
		since = e->end_ns - blocked;
	} else {
		return 0;
	}
	if (e->end_ns - since < e->opts.offcpu_min_ns)
		return 0;
	id = ebpf_stack_of_dump(e, td, d, false, &wchan, NULL);
	if (id < 0)
		return id == -ENOMEM ? id : 0;
	keep_event(e, td, &(struct ebpf_off_ev){ .ts = since, .dur = e->end_ns - since,
		   .tid = d->hdr.tid, .stack = (uint32_t)id, .state = d->state,
		   .syscall = d->syscall, .wchan = wchan, .open_at_end = true,
		   .began_before = since == e->start_ns && blocked >= window,
		   .blocked_ns = blocked > e->end_ns - since ? blocked : e->end_ns - since });
	return 0;
}

/* The long blocks past the record rate: their time in the off-CPU flame graph, under one
 * frame that says so (no stacks were taken for them) */
static void add_not_recorded(struct ebpf *e, struct ebpf_tdata *td)
{
	uint32_t frames[2];
	int f, id;

	if (!td->offcpu_limited_ns)
		return;
	f = stack_store__frame(&e->stacks, "[blocks past the record rate: counted, not unwound]");
	if (f < 0)
		return;
	frames[0] = td->root;
	frames[1] = (uint32_t)f;
	id = stack_store__stack(&e->stacks, frames, 2);
	if (id >= 0)
		stack_store__add(&e->stacks, (uint32_t)id, STACK_OFFCPU,
				 td->offcpu_limited_ns / 1000 ? td->offcpu_limited_ns / 1000 : 1);
}

static void ebpf_offcpu__finish(struct ebpf *e)
{
	int ncpu = libbpf_num_possible_cpus(), fd;
	struct offcpu_total *tot;
	struct ebpf_stacks *st;
	struct offcpu_task *v;

	if (!e->off)
		return;
	fd = bpf_map__fd(e->off->maps.offcpu_task);
	if (e->tasks_link) {
		struct flush_ctx *c = calloc(1, sizeof(*c));

		for (size_t i = 0; i < e->nt; i++)
			if (e->t[i].py)
				ebpf_py_refresh(e, &e->t[i]);
		if (c) {
			c->map_fd = fd;
			ebpf_tasks_each(e, flush_dumped, c);
		}
		free(c);
	} else {
		st = malloc(sizeof(*st));
		v = malloc(sizeof(*v));
		for (size_t i = 0; st && v && i < e->nt; i++)
			flush_threads(e, &e->t[i], fd, v, st);
		free(st);
		free(v);
	}
	/* the blocks of the threads that exited (the live ones were read above), the records
	 * and what the record rate left out */
	fd = bpf_map__fd(e->off->maps.offcpu_totals);
	tot = ncpu > 0 ? calloc((size_t)ncpu, sizeof(*tot)) : NULL;
	for (size_t i = 0; tot && i < e->nt; i++) {
		struct ebpf_tdata *td = &e->t[i];
		uint32_t key = (uint32_t)td->pid;

		if (bpf_map_lookup_elem(fd, &key, tot) < 0)
			continue;
		for (int c = 0; c < ncpu; c++) {
			td->offcpu_count += tot[c].count;
			td->offcpu_total_ns += tot[c].total_ns;
			td->offcpu_emitted += tot[c].emitted;
			td->offcpu_limited += tot[c].limited;
			td->offcpu_limited_ns += tot[c].limited_ns;
		}
		add_not_recorded(e, td);
	}
	free(tot);
}

static void ebpf_offcpu__destroy(struct ebpf *e)
{
	offcpu_bpf__destroy(e->off);
	e->off = NULL;
}

static bool ebpf_offcpu__is_on(const struct ebpf *e)
{
	return e->off != NULL;
}

const struct ebpf_collector_ops ebpf_offcpu_ops = {
	.id = EC_OFFCPU,
	.flag = EBPF_COLLECT_OFFCPU,
	.rec_type = EBPF_REC_OFFCPU,
	.open = ebpf_offcpu__open,
	.attach = ebpf_offcpu__attach,
	.is_on = ebpf_offcpu__is_on,
	.set_running = ebpf_offcpu__set_running,
	.record = ebpf_offcpu__record,
	.finish = ebpf_offcpu__finish,
	.destroy = ebpf_offcpu__destroy,
};
#endif
