/* SPDX-License-Identifier: MIT */
/*
 * System calls, user half (kernel half: bpf/syscalls.bpf.c, shared structs: bpf/syscalls.h).
 * Tells the kernel side which argument of each syscall is an fd or a path, turns slow-call
 * records into syscall timeline events with the file, pipe or socket behind them, and reads
 * the per-syscall latency totals at the end of the window.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/types.h>

#include "bpf/syscalls.h"
#include "ebpf_internal.h"

/* x86_64 numbers: which argument is an fd or a path, and what the call does with bytes */
uint8_t ebpf_syscall_kind(uint32_t nr)
{
	switch (nr) {
	case 1: case 18: case 20: case 40: case 296: case 328:  /* write, pwrite64, writev,
								* sendfile, pwritev, pwritev2 */
		return SYS_K_FD0 | SYS_K_WRITES;
	case 74: case 75: case 277:                              /* fsync, fdatasync, sync_file_range */
		return SYS_K_FD0 | SYS_K_SYNCS;
	case 3:                                                  /* close */
		return SYS_K_FD0 | SYS_K_CLOSES;
	case 0: case 5: case 8: case 16: case 17: case 19: case 42: case 43: case 44: case 45:
	case 46: case 47: case 48: case 49: case 50: case 51: case 52: case 54: case 55: case 72:
	case 73: case 77: case 78: case 81: case 91: case 93: case 138: case 187: case 190:
	case 193: case 196: case 199: case 217: case 221: case 232: case 233: case 281: case 285:
	case 288: case 295: case 299: case 306: case 307: case 326: case 327: case 426: case 441:
		return SYS_K_FD0;
	case 2: case 4: case 6: case 21: case 59: case 76: case 80: case 82: case 83: case 84:
	case 85: case 86: case 87: case 89: case 90: case 92: case 94: case 132: case 133:
	case 137:
		return SYS_K_PATH0;
	case 257: case 258: case 259: case 260: case 261: case 262: case 263: case 264: case 265:
	case 267: case 268: case 269: case 280: case 303: case 316: case 322: case 332: case 437:
	case 439:
		return SYS_K_PATH1;
	default:
		return 0;
	}
}

#define PIPEFS_MAGIC 0x50495045u
#define SOCKFS_MAGIC 0x534f434bu
#define ANON_INODE_FS_MAGIC 0x09041934u

static char *sock_target(const struct syscall_event *ev)
{
	char s[INET6_ADDRSTRLEN] = "", d[INET6_ADDRSTRLEN] = "", buf[256];
	const char *proto = ev->sk_proto == 6 ? "tcp" : ev->sk_proto == 17 ? "udp" : "ip";

	if (ev->sk_family == AF_INET || ev->sk_family == AF_INET6) {
		int af = ev->sk_family == AF_INET ? AF_INET : AF_INET6;

		inet_ntop(af, ev->saddr, s, sizeof(s));
		inet_ntop(af, ev->daddr, d, sizeof(d));
		if (af == AF_INET6)
			snprintf(buf, sizeof(buf), "%s [%s]:%u->[%s]:%u", proto, s, ev->sport, d, ev->dport);
		else
			snprintf(buf, sizeof(buf), "%s %s:%u->%s:%u", proto, s, ev->sport, d, ev->dport);
	} else if (ev->sk_family == AF_UNIX) {
		snprintf(buf, sizeof(buf), "unix socket:[%llu]", (unsigned long long)ev->ino);
	} else {
		snprintf(buf, sizeof(buf), "socket:[%llu]", (unsigned long long)ev->ino);
	}
	return strdup(buf);
}

char *ebpf_syscall_target(const struct syscall_event *ev)
{
	char buf[SYSCALL_PATH_DEPTH * SYSCALL_NAME_LEN + 8];
	size_t pos = 0;

	if (ev->path_src == SYS_PATH_USER) {
		snprintf(buf, sizeof(buf), "%.*s", (int)sizeof(ev->upath), ev->upath);
		return strdup(buf);
	}
	if (ev->i_mode && S_ISSOCK(ev->i_mode))
		return sock_target(ev);
	if (ev->path_src != SYS_PATH_DENTRY)
		return NULL;
	if (ev->s_magic == PIPEFS_MAGIC) {
		snprintf(buf, sizeof(buf), "pipe:[%llu]", (unsigned long long)ev->ino);
		return strdup(buf);
	}
	if (ev->s_magic == ANON_INODE_FS_MAGIC) {
		snprintf(buf, sizeof(buf), "anon_inode:%.*s", SYSCALL_NAME_LEN, ev->comps[0]);
		return strdup(buf);
	}
	if (ev->path_truncated)
		pos += (size_t)snprintf(buf, sizeof(buf), "...");
	for (uint32_t i = ev->depth < SYSCALL_PATH_DEPTH ? ev->depth : SYSCALL_PATH_DEPTH; i-- > 0;) {
		const char *c = ev->comps[i];
		size_t n = strnlen(c, SYSCALL_NAME_LEN);

		if (!n || (n == 1 && c[0] == '/'))
			continue;  /* a mount point crossed, or a filesystem's root */
		if (pos + n + 2 >= sizeof(buf))
			break;
		buf[pos++] = '/';
		memcpy(buf + pos, c, n);
		pos += n;
	}
	if (!pos)
		buf[pos++] = '/';
	buf[pos] = 0;
	return strdup(buf);
}

#ifndef AIPROF_NO_EBPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "syscalls.skel.h"

/* Opens and loads the collector in switch mode (bpf_task_work) or trace mode (raw_syscalls). */
static int syscalls_load(struct ebpf *e, bool switch_mode, struct syscalls_bpf **ret)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct syscalls_bpf *skel;
	int r;

	skel = syscalls_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_SYSCALLS], sizeof(e->why[EC_SYSCALLS]), "cannot open the "
			 "syscall collector: %s", strerror(-r));
		return r;
	}
	if (switch_mode && !skel->rodata->task_work_built) {
		/* built against a kernel's BTF without it */
		syscalls_bpf__destroy(skel);
		return -ENOSYS;
	}
	skel->rodata->slow_ns = e->opts.slow_syscall_ns;
	skel->bss->rec_rate = e->opts.record_rate;
	skel->rodata->always_ns = EBPF_RECORD_ALWAYS_NS;
	skel->rodata->site_fresh_ns = e->opts.record_rate ? EBPF_SITE_FRESH_NS : 0;
	bpf_program__set_autoload(skel->progs.sys_switch, switch_mode);
	bpf_program__set_autoload(skel->progs.sys_enter, !switch_mode);
	bpf_program__set_autoload(skel->progs.sys_exit, !switch_mode);
	/* both ways: it folds an exiting thread's untimed calls (and gives its task work
	 * slot back) */
	bpf_program__set_autoload(skel->progs.sys_thread_exit, true);
	/* run by the budget's resumes, not attached with the rest */
	bpf_program__set_autoattach(skel->progs.sys_seed, false);
	bpf_program__set_autoload(skel->progs.sys_hold, switch_mode);
	bpf_program__set_autoattach(skel->progs.sys_hold, false);
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = syscalls_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_SYSCALLS], sizeof(e->why[EC_SYSCALLS]), "the kernel refused the "
			 "syscall collector (%s, task storage): %s", switch_mode ?
			 "sched_switch BTF tracepoint, bpf_task_work" : "raw_syscalls BTF tracepoints",
			 strerror(-r));
		syscalls_bpf__destroy(skel);
		return r;
	}
	*ret = skel;
	return 0;
}

/*
 * Switch mode unless --all-syscalls asks for every call: then, or where the kernel has no
 * bpf_task_work, raw_syscalls.
 */
static int ebpf_syscalls__open(struct ebpf *e)
{
	struct syscalls_bpf *skel = NULL;
	int r = -ENOSYS;

	e->sys_switch = !e->opts.all_syscalls && ebpf_kernel_has_task_work(e->opts.btf_path);
	if (e->sys_switch) {
		ebpf_verifier_why_clear();
		r = syscalls_load(e, true, &skel);
		if (r < 0)
			ebpf_task_work_refused(e, r);
	}
	if (r < 0) {
		e->sys_switch = false;
		r = syscalls_load(e, false, &skel);
	}
	if (r < 0)
		return r;
	ebpf_loaded(e, skel->obj);
	e->sys = skel;
	return 0;
}

static int ebpf_syscalls__configure(struct ebpf *e)
{
	int fd = bpf_map__fd(e->sys->maps.sys_kinds);

	for (uint32_t nr = 0; nr < SYSCALL_NR_MAX; nr++) {
		uint8_t k = ebpf_syscall_kind(nr);

		if (k && bpf_map_update_elem(fd, &nr, &k, BPF_ANY) < 0) {
			int r = -errno;

			snprintf(e->why[EC_SYSCALLS], sizeof(e->why[EC_SYSCALLS]), "cannot configure "
				 "the syscall collector: %s", strerror(-r));
			return r;
		}
	}
	return 0;
}

static int ebpf_syscalls__attach(struct ebpf *e)
{
	int r;

	/* with the off-CPU collector on (attached before this one), its sched_switch program
	 * runs this one at its end: a context switch pays for one program's dispatch */
	e->sys_chained = e->sys_switch && ebpf_switch_chain(e, e->sys->progs.sys_switch) == 0;
	bpf_program__set_autoattach(e->sys->progs.sys_switch, e->sys_switch && !e->sys_chained);
	r = syscalls_bpf__attach(e->sys);

	if (r < 0)
		snprintf(e->why[EC_SYSCALLS], sizeof(e->why[EC_SYSCALLS]), "cannot attach to "
			 "%s: %s", e->sys_switch ? "sched_switch" : "raw_syscalls", strerror(-r));
	else if (e->sys_switch)
		snprintf(e->scope[EC_SYSCALLS], sizeof(e->scope[EC_SYSCALLS]), "%s%s)",
			 EBPF_SCOPE_TRACEPOINT "; no syscall tracepoint: only the calls that gave "
			 "up the CPU are seen, read at the target thread's own context switches and "
			 "completed by a task work of its own, bpf_task_work; a flush's bytes are not "
			 "known; --all-syscalls sees every call", e->sys_chained ? "; sys_switch runs "
			 "as a tail call of the off-CPU collector's sched_switch program: its runs "
			 "and time are that program's" : "");
	else
		snprintf(e->scope[EC_SYSCALLS], sizeof(e->scope[EC_SYSCALLS]), "%s",
			 EBPF_SCOPE_TRACEPOINT EBPF_SCOPE_SYSCALLS_TAIL);
	return r;
}

static void ebpf_syscalls__set_running(struct ebpf *e, bool on)
{
	if (!e->sys)
		return;
	if (on) {
		__atomic_store_n(&e->sys->bss->tw_ns, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->sys->bss->tw_runs, 0, __ATOMIC_RELAXED);
	}
	e->sys->bss->running = on;
	if (!on) {
		ebpf_task_works_cancel(e->sys->obj, "sys_works");
		e->lost += __atomic_exchange_n(&e->sys->bss->lost, 0, __ATOMIC_RELAXED);
		/* a call whose task work could not be scheduled is a record lost too */
		e->lost += __atomic_exchange_n(&e->sys->bss->tw_failed, 0, __ATOMIC_RELAXED);
		e->tw_map_full += __atomic_exchange_n(&e->sys->bss->tw_map_full, 0,
						      __ATOMIC_RELAXED);
	}
}

void ebpf_syscalls_throttle(struct ebpf *e, uint32_t rate, bool paused)
{
	struct syscalls_bpf *o = e->sys;

	if (o)
		ebpf_throttle("syscalls", &(struct ebpf_knobs){
			.rate = &o->bss->rec_rate, .paused = &o->bss->paused, .epoch = &o->bss->epoch,
			/* chained: paused and resumed with the off-CPU collector's program */
			.progs = { e->sys_chained ? NULL : o->progs.sys_switch, o->progs.sys_enter,
				   o->progs.sys_exit },
			.links = { &o->links.sys_switch, &o->links.sys_enter, &o->links.sys_exit },
			.seed = o->progs.sys_seed,
			.hold = bpf_program__autoload(o->progs.sys_hold) ? o->progs.sys_hold : NULL },
			rate, paused);
}

void ebpf_syscalls_ended_in_pauses(const struct ebpf *e, uint64_t *ended)
{
	*ended = e->sys ? __atomic_load_n(&e->sys->bss->ended_in_pause, __ATOMIC_RELAXED) : 0;
}

uint64_t ebpf_syscalls_seeded(const struct ebpf *e)
{
	return e->sys ? __atomic_load_n(&e->sys->bss->seeded, __ATOMIC_RELAXED) : 0;
}

uint64_t ebpf_syscalls_tw_ns(const struct ebpf *e)
{
	return e->sys ? __atomic_load_n(&e->sys->bss->tw_ns, __ATOMIC_RELAXED) : 0;
}

uint64_t ebpf_syscalls_tw_runs(const struct ebpf *e)
{
	return e->sys ? __atomic_load_n(&e->sys->bss->tw_runs, __ATOMIC_RELAXED) : 0;
}

void ebpf_syscalls_exclude_tid(struct ebpf *e, uint32_t tid)
{
	uint8_t one = 1;

	if (e->sys)
		(void)bpf_map_update_elem(bpf_map__fd(e->sys->maps.own_tids), &tid, &one, BPF_ANY);
}

static struct ebpf_sys_ev *new_sys_event(struct ebpf *e, struct ebpf_tdata *td)
{
	if (!ebpf_keep_event(e, td))
		return NULL;    /* its latency is in the kernel-side totals all the same */
	if (td->nsys == td->capsys) {
		size_t ncap = td->capsys ? td->capsys * 2 : 256;
		struct ebpf_sys_ev *nv = realloc(td->sys, ncap * sizeof(*nv));

		if (!nv)
			return NULL;
		td->sys = nv;
		td->capsys = ncap;
	}
	return &td->sys[td->nsys++];
}

/* where the last record of thread tid's call nr with first argument arg0 is in td->sys */
static uint64_t site_key(uint32_t tid, uint32_t nr, uint64_t arg0)
{
	return u64_hash2(tid, u64_hash2(nr, arg0));
}

/* A slow call at a site its thread recorded one at a moment ago: the file of that record
 * (none if it was not kept), timed until it got the CPU back */
static void add_at_site(struct ebpf *e, struct ebpf_tdata *td, const struct syscall_site_event *s)
{
	uint8_t kind = s->nr < SYSCALL_NR_MAX ? ebpf_syscall_kind(s->nr) : 0;
	struct ebpf_sys_ev *ev;
	uint64_t i;
	char *target = NULL;

	if (u64map_get(&td->sys_sites, site_key(s->hdr.tid, s->nr, s->args[0]), &i) &&
	    i < td->nsys && td->sys[i].tid == s->hdr.tid && td->sys[i].nr == s->nr &&
	    td->sys[i].target) {
		target = strdup(td->sys[i].target);
		if (!target)
			return;
	}
	ev = new_sys_event(e, td);
	if (!ev) {
		free(target);
		return;
	}
	*ev = (struct ebpf_sys_ev){
		.ts = s->hdr.ts, .dur = s->dur_ns, .bytes_unknown = true, .tid = s->hdr.tid,
		.nr = s->nr, .fd = (kind & SYS_K_FD0) ? (int64_t)(int32_t)s->args[0] : -1,
		.target = target, .site = true,
	};
}

static void ebpf_syscalls__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size)
{
	const struct syscall_event *s = data;
	const struct syscall_site_event *ss = data;
	struct ebpf_sys_ev *ev;
	uint8_t kind;

	if (size == sizeof(*ss) && ss->flags == SYSCALL_F_SITE) {
		ebpf_note_tid(td, ss->hdr.tid, ss->hdr.comm);
		add_at_site(e, td, ss);
		return;
	}
	if (size < sizeof(*s)) {
		e->bad_records++;
		return;
	}
	ebpf_note_tid(td, s->hdr.tid, s->hdr.comm);
	ev = new_sys_event(e, td);
	if (!ev)
		return;
	(void)u64map_put(&td->sys_sites, site_key(s->hdr.tid, s->nr, s->args[0]),
			 (uint64_t)(ev - td->sys));
	kind = s->nr < SYSCALL_NR_MAX ? ebpf_syscall_kind(s->nr) : 0;
	*ev = (struct ebpf_sys_ev){
		.ts = s->hdr.ts, .dur = s->dur_ns, .ret = s->ret,
		.bytes = s->bytes == SYSCALL_BYTES_UNKNOWN ? 0 : s->bytes,
		.bytes_unknown = s->bytes == SYSCALL_BYTES_UNKNOWN,
		.file_size = s->file_size, .tid = s->hdr.tid, .nr = s->nr,
		.fd = (kind & SYS_K_FD0) ? (int64_t)(int32_t)s->args[0] : -1,
		.target = ebpf_syscall_target(s),
	};
}

static struct ebpf_sys_stat *stat_for(struct ebpf_tdata *td, uint32_t nr)
{
	struct ebpf_sys_stat *nv;

	for (size_t i = 0; i < td->nstats; i++)
		if (td->stats[i].nr == nr)
			return &td->stats[i];
	nv = realloc(td->stats, (td->nstats + 1) * sizeof(*nv));
	if (!nv)
		return NULL;
	td->stats = nv;
	memset(&td->stats[td->nstats], 0, sizeof(*nv));
	td->stats[td->nstats].nr = nr;
	return &td->stats[td->nstats++];
}

/*
 * The untimed calls the live threads of td have not folded into sys_stats yet, read from
 * their task storage by pidfd (Linux 6.9; before, they are not counted). Recording is off:
 * nothing folds them any more.
 */
static void read_unfolded(struct ebpf_tdata *td, int map_fd, int own_fd)
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
		struct sys_enter_state v;
		struct ebpf_sys_stat *st;
		uint32_t t32 = (uint32_t)tid;
		uint8_t own;

		if (tid <= 0 || bpf_map_lookup_elem(own_fd, &t32, &own) == 0)
			continue;       /* aiprof's own thread */
		if (!ebpf_task_storage_of(map_fd, t32, &v))
			continue;
		for (int i = 0; i < SYS_UNTIMED_SLOTS; i++)
			if (v.un[i].count && (st = stat_for(td, v.un[i].nr)))
				st->untimed += v.un[i].count;
	}
	closedir(d);
}

static void ebpf_syscalls__finish(struct ebpf *e)
{
	struct syscall_stat_key key, *prev = NULL, next;
	int ncpu = libbpf_num_possible_cpus(), fd;
	struct syscall_stat *v;

	if (!e->sys || ncpu <= 0)
		return;
	for (size_t i = 0; i < e->nt; i++)
		read_unfolded(&e->t[i], bpf_map__fd(e->sys->maps.sys_start),
			      bpf_map__fd(e->sys->maps.own_tids));
	fd = bpf_map__fd(e->sys->maps.sys_stats);
	v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return;
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		struct ebpf_tdata *td;
		struct ebpf_sys_stat *st;

		key = next;
		prev = &key;
		td = ebpf_tdata_of(e, key.tgid);
		if (!td || bpf_map_lookup_elem(fd, &key, v) < 0)
			continue;
		st = stat_for(td, key.nr);
		if (!st)
			break;
		for (int c = 0; c < ncpu; c++) {
			st->count += v[c].count;
			st->total_ns += v[c].total_ns;
			st->slow += v[c].slow;
			st->untimed += v[c].untimed;
			st->limited += v[c].limited;
			st->site += v[c].site;
			if (v[c].max_ns > st->max_ns)
				st->max_ns = v[c].max_ns;
			for (int b = 0; b < SYSCALL_HIST; b++)
				st->hist[b] += v[c].hist[b];
		}
	}
	free(v);
}

static void ebpf_syscalls__destroy(struct ebpf *e)
{
	int fd = ebpf_shared_map_fd(e, "switch_next");
	uint32_t zero = 0;

	if (e->sys_chained && fd >= 0)
		(void)bpf_map_delete_elem(fd, &zero);
	e->sys_chained = false;
	syscalls_bpf__destroy(e->sys);
	e->sys = NULL;
}

static bool ebpf_syscalls__is_on(const struct ebpf *e)
{
	return e->sys != NULL;
}

const struct ebpf_collector_ops ebpf_syscalls_ops = {
	.id = EC_SYSCALLS,
	.flag = EBPF_COLLECT_SYSCALLS,
	.rec_type = EBPF_REC_SYSCALL,
	.open = ebpf_syscalls__open,
	.configure = ebpf_syscalls__configure,
	.attach = ebpf_syscalls__attach,
	.is_on = ebpf_syscalls__is_on,
	.set_running = ebpf_syscalls__set_running,
	.record = ebpf_syscalls__record,
	.finish = ebpf_syscalls__finish,
	.destroy = ebpf_syscalls__destroy,
};
#endif
