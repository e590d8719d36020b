/* SPDX-License-Identifier: MIT */
/*
 * The eBPF collectors' lifecycle (libbpf CO-RE, skeletons from bpftool):
 *   open each collector's object -> configure its rodata (thresholds, Python on/off) ->
 *   probe the kernel for what it needs (BTF, ring buffer, perf events) and leave out what
 *   is missing -> load (the first object to load owns the shared maps: target filter,
 *   Python maps, ring buffer; the others reuse them) -> fill the target filter -> attach
 *   -> poll the ring buffer -> destroy everything, on every path.
 * Each collector's own half lives in ebpf_cpu.c, ebpf_offcpu.c and ebpf_syscalls.c, driven
 * through struct ebpf_collector_ops; what they share is in ebpf_core.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/types.h>

#include "log.h"
#include "target/container.h"
#include "timeutil.h"
#include "ebpf_internal.h"
#include "ebpf_kallsyms.h"

#ifndef AIPROF_NO_EBPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#endif

#define TICK_NS (250 * NSEC_PER_MSEC)

uint32_t ebpf__collectors(const struct ebpf *e)
{
	return e ? e->on : 0;
}

#ifndef AIPROF_NO_EBPF

/* ---- libbpf messages: into our log at debug level, the last warning kept for errors ----- */

static char libbpf_last[512];
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (strstr(fmt, "BEGIN PROG LOAD LOG")) {
		/* the whole log, for the verifier's reason at its end (buf would cut it) */
		va_list aq;
		char *all = NULL;

		va_copy(aq, ap);
		if (vasprintf(&all, fmt, aq) >= 0) {
			ebpf_verifier_why_set(all);
			free(all);
		}
		va_end(aq);
	}
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	if (level == LIBBPF_WARN && n)
		snprintf(libbpf_last, sizeof(libbpf_last), "%s", buf);
	if (level != LIBBPF_DEBUG || log_get_max_level() >= LOG_DEBUG)
		log_debug("libbpf: %s", buf);
	return 0;
}

static const struct ebpf_collector_ops *const collectors[] = {
	&ebpf_cpu_ops, &ebpf_offcpu_ops, &ebpf_syscalls_ops, &ebpf_tasks_ops, &ebpf_follow_ops,
};
#define NCOLLECTORS (sizeof(collectors) / sizeof(collectors[0]))

static bool any_on(const struct ebpf *e)
{
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (collectors[i]->is_on(e))
			return true;
	return false;
}

/* ---- ring buffer ------------------------------------------------------------------------- */

static int on_record(void *ctx, void *data, size_t size)
{
	struct ebpf *e = ctx;
	const struct ebpf_rec_hdr *h = data;
	struct ebpf_tdata *td;

	if (size < sizeof(*h)) {
		e->bad_records++;
		return 0;
	}
	td = ebpf_tdata_of(e, h->tgid);
	if (!td && h->type == EBPF_REC_FOLLOW) {
		/* a new child of a target: the kernel side let it through the filter already */
		e->records++;
		ebpf_follow_ops.record(e, NULL, data, size);
		return 0;
	}
	if (!td) {
		e->foreign++;  /* the kernel-side filter makes this impossible; counted to prove it */
		return 0;
	}
	e->records++;
	if (td->nown && h->type != EBPF_REC_FOLLOW && ebpf_tid_is_ours(td, h->tid))
		return 0;       /* aiprof's own thread: never in the target's data */
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (collectors[i]->rec_type == h->type) {
			collectors[i]->record(e, td, data, size);
			return 0;
		}
	e->bad_records++;
	return 0;
}

void ebpf__exclude_thread(struct ebpf *e, pid_t pid, pid_t tid)
{
	if (!e || tid <= 0 || !ebpf_tdata_of(e, (uint32_t)pid))
		return;
	ebpf_exclude_thread_records(e, pid, tid);
	ebpf_syscalls_exclude_tid(e, (uint32_t)tid);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void set_why(struct ebpf *e, enum ebpf_collector c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_why(struct ebpf *e, enum ebpf_collector c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->why[c], sizeof(e->why[c]), fmt, ap);
	va_end(ap);
}

/*
 * Following: the processes the targets had already started (a launcher's ranks, the
 * DataLoader workers of an epoch in progress, and theirs) are recorded too, as children of
 * their parents. Called once before the programs load and once more when the follower runs
 * (ebpf__start): a fork in between is found by the second scan, every later one by the
 * follower. A process counts as a child only if it started no earlier than its parent (never
 * a pid reused). Returns how many were added, or -ENOMEM.
 */
static int add_children(struct ebpf *e)
{
	struct proc_link *v = NULL;
	size_t n = 0, before = e->nt;
	bool grew = true;
	int r;

	if (container__proc_links("/proc", &v, &n) < 0)
		return 0;
	/* to the closure: children of targets, then their children */
	while (grew && e->nt < e->capt) {
		grew = false;
		for (size_t i = 0; i < n && e->nt < e->capt; i++) {
			unsigned long long pstart = 0;
			bool parent_known = false;
			struct ebpf_tdata *td;

			if (!v[i].ppid || ebpf_tdata_of(e, (uint32_t)v[i].pid) ||
			    !ebpf_tdata_of(e, (uint32_t)v[i].ppid))
				continue;
			for (size_t k = 0; k < n && !parent_known; k++)
				if (v[k].pid == v[i].ppid) {
					pstart = v[k].start;
					parent_known = true;
				}
			if (!parent_known || v[i].start < pstart)
				continue;
			td = &e->t[e->nt];
			r = ebpf_tdata_init(e, td, v[i].pid, NULL);
			if (r < 0)
				goto out;
			e->nt++;
			td->parent = v[i].ppid;
			ebpf_follow_note(e, v[i].pid, v[i].ppid, now_monotonic_ns(), false);
			grew = true;
		}
	}
	r = (int)(e->nt - before);
out:
	free(v);
	return r;
}

static int setup_targets(struct ebpf *e, const pid_t *pids, size_t npids)
{
	/* room for the processes followed during the window: e->t never moves */
	e->capt = npids + ((e->opts.collectors & EBPF_COLLECT_FOLLOW) ? EBPF_MAX_FOLLOWED : 0);
	e->t = calloc(e->capt, sizeof(*e->t));
	if (!e->t)
		return -ENOMEM;
	for (size_t i = 0; i < npids; i++) {
		int r = ebpf_tdata_init(e, &e->t[e->nt++], pids[i], NULL);

		if (r < 0)
			return r;
	}
	if (e->opts.collectors & EBPF_COLLECT_FOLLOW) {
		int r = add_children(e);

		return r < 0 ? r : 0;
	}
	return 0;
}

static bool any_python(const struct ebpf *e)
{
	for (size_t i = 0; i < e->nt; i++)
		if (e->t[i].py)
			return true;
	return false;
}

/* Puts a target into the first free slot of its probe sequence (see bpf/stack.h). */
static int ebpf_target_place(int fd, const struct ebpf_target *v)
{
	for (uint32_t i = 0; i < EBPF_TARGET_PROBES; i++) {
		uint32_t slot = (v->tgid + i) & (EBPF_TARGET_SLOTS - 1);
		struct ebpf_target cur = { 0 };

		if (bpf_map_lookup_elem(fd, &slot, &cur) < 0)
			return -errno;
		if (cur.tgid == v->tgid)
			return 0;
		if (cur.tgid)
			continue;
		return bpf_map_update_elem(fd, &slot, v, BPF_ANY) < 0 ? -errno : 0;
	}
	return -ENOSPC;
}

/* Targets from index `from` on into the kernel's filter (and their interpreters' maps). */
static int fill_maps_from(struct ebpf *e, size_t from)
{
	int tfd = ebpf_shared_map_fd(e, "targets"), pfd = ebpf_shared_map_fd(e, "py_procs");

	if (tfd < 0)
		return tfd;
	for (size_t i = from; i < e->nt; i++) {
		struct ebpf_target v = { .tgid = (uint32_t)e->t[i].pid, .index = (uint32_t)i };
		uint32_t key = (uint32_t)e->t[i].pid;
		int r = ebpf_target_place(tfd, &v);

		if (r < 0)
			return r;
		if (e->t[i].py && pfd >= 0) {
			const struct py_offsets *o = &py_proc__offsets(e->t[i].py)->bpf;

			if (bpf_map_update_elem(pfd, &key, o, BPF_ANY) < 0)
				return -errno;
			ebpf_py_refresh(e, &e->t[i]);
		}
	}
	return 0;
}

static int fill_maps(struct ebpf *e)
{
	return fill_maps_from(e, 0);
}

/* CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in our effective set. */
static bool may_load_bpf(void)
{
	unsigned long long eff = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "re");
	bool found = false;

	if (!f)
		return true;  /* cannot tell: let the load say */
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1) {
			found = true;
			break;
		}
	fclose(f);
	if (!found)
		return true;
	return (eff >> 21 & 1) || ((eff >> 39 & 1) && (eff >> 38 & 1));
}

/* What stops every collector at once, in words; 0 if nothing does. */
static int preflight(struct ebpf *e, char *why, size_t whylen)
{
	const char *btf = e->opts.btf_path;
	int r;

	if (!btf)
		btf = getenv("AIPROF_VMLINUX_BTF");
	if (btf && !*btf)
		btf = NULL;
	if (access(btf ? btf : "/sys/kernel/btf/vmlinux", R_OK) < 0) {
		r = -errno;
		snprintf(why, whylen, "the kernel has no BTF (%s: %s); the CO-RE collectors need a "
			 "kernel built with CONFIG_DEBUG_INFO_BTF", btf ? btf : "/sys/kernel/btf/vmlinux",
			 strerror(-r));
		return -EOPNOTSUPP;
	}
	e->opts.btf_path = btf;  /* NULL: libbpf finds the running kernel's own */
	if (!may_load_bpf()) {
		snprintf(why, whylen, "not allowed to load eBPF programs: run aiprof as root, or "
			 "give it CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)");
		return -EPERM;
	}
	r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL);
	if (r == -EPERM || r == -EACCES) {
		snprintf(why, whylen, "not allowed to load eBPF programs (%s): run aiprof as root, or "
			 "give it CAP_BPF and CAP_PERFMON", strerror(-r));
		return -EPERM;
	}
	if (r == 0) {
		snprintf(why, whylen, "the kernel has no BPF ring buffer (needs Linux 5.8 or newer)");
		return -EOPNOTSUPP;
	}
	if (r < 0) {
		snprintf(why, whylen, "cannot probe the kernel's BPF support: %s", strerror(-r));
		return r;
	}
	/* how deep the Python walker goes: bpf_loop (5.17) or its unrolled EBPF_PY_MAX */
	e->py_walk_max = libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, BPF_FUNC_loop, NULL) > 0 ?
			 EBPF_PY_WALK_MAX : EBPF_PY_MAX;
	return 0;
}

int ebpf__new(const struct ebpf_opts *o, const pid_t *pids, size_t npids, struct ebpf **ret,
	      char *why, size_t whylen)
{
	struct ebpf *e;
	int r;

	why[0] = 0;
	if (!o || !pids || !npids || !ret)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->opts = *o;
	for (size_t i = 0; i < EBPF_SHARED_MAPS; i++)
		e->shared_fd[i] = -1;
	e->cost_stats_fd = -1;
	if (!e->opts.frequency_hz)
		e->opts.frequency_hz = EBPF_DEFAULT_FREQUENCY;
	/* Python frames live in the stacks of the CPU and off-CPU collectors (and dumps) */
	if ((e->opts.collectors & EBPF_COLLECT_PYTHON) &&
	    !(e->opts.collectors & (EBPF_COLLECT_CPU | EBPF_COLLECT_OFFCPU | EBPF_COLLECT_TASKS)))
		e->opts.collectors |= EBPF_COLLECT_CPU;
	/* threads still asleep when the window closes are read with the task iterator */
	if (e->opts.collectors & EBPF_COLLECT_OFFCPU)
		e->opts.collectors |= EBPF_COLLECT_TASKS;
	/* --mode wall: the threads on a CPU are the sampler's, the others the iterator's */
	if (e->opts.wall)
		e->opts.collectors |= EBPF_COLLECT_CPU | EBPF_COLLECT_TASKS;
	/* the processes the targets start during the window are recorded too */
	if ((e->opts.collectors & (EBPF_COLLECT_CPU | EBPF_COLLECT_OFFCPU | EBPF_COLLECT_SYSCALLS)) &&
	    !e->opts.no_follow)
		e->opts.collectors |= EBPF_COLLECT_FOLLOW;
	stack_store__init(&e->stacks);
	stack_tree__init(&e->tree);
	libbpf_set_print(libbpf_print);

	r = preflight(e, why, whylen);
	if (r < 0)
		goto fail;
	r = symbolizer__new(&e->symz);
	if (r < 0)
		goto fail_msg;
	/* --mode wall names kernel frames from its first tick: the kernel's symbols read now,
	 * before the window, not in it */
	if (e->opts.wall)
		(void)symbolizer__ksyms(e->symz);
	_Static_assert(EBPF_UNWIND_STACK_BYTES == EBPF_UCOPY_MAX, "stack copy size");
	if (e->opts.unwind_stack_bytes > EBPF_UCOPY_MAX)
		e->opts.unwind_stack_bytes = EBPF_UCOPY_MAX;
	if (e->opts.unwind_stack_bytes) {
		r = unwind_tables__new(0, &e->uw);
		if (r < 0)
			goto fail_msg;
		if (e->opts.unwind_cache &&
		    unwind_tables__share(e->uw, e->opts.unwind_cache, e->uw_share_why,
					 sizeof(e->uw_share_why)) < 0)
			log_notice("unwind rules not shared with other injectors: %s",
				   e->uw_share_why);
	}
	r = setup_targets(e, pids, npids);
	if (r < 0)
		goto fail_msg;
	if ((e->opts.collectors & EBPF_COLLECT_PYTHON) && !any_python(e))
		set_why(e, EC_PYTHON, "%s", npids == 1 ? e->t[0].py_why :
			"no target runs a CPython whose frames aiprof can read");

	/* open + configure */
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (e->opts.collectors & collectors[i]->flag)
			collectors[i]->open(e);
	if (!any_on(e)) {
		for (int c = 0; c < EC__N; c++)
			if (c != EC_PYTHON && e->why[c][0]) {
				snprintf(why, whylen, "%s", e->why[c]);
				break;
			}
		if (!why[0])
			snprintf(why, whylen, "no eBPF collector was asked for");
		r = -EOPNOTSUPP;
		goto fail;
	}
	/* the shared maps now exist: targets, Python offsets and threads; then attach */
	r = fill_maps(e);
	if (r < 0) {
		snprintf(why, whylen, "cannot fill the target map: %s", r == -ENOSPC ?
			 "too many targets whose pids collide in it" : strerror(-r));
		goto fail;
	}
	for (size_t i = 0; i < NCOLLECTORS; i++) {
		const struct ebpf_collector_ops *c = collectors[i];

		if (c->is_on(e) && c->configure && c->configure(e) < 0)
			c->destroy(e);
	}
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (collectors[i]->is_on(e) && collectors[i]->attach(e) < 0)
			collectors[i]->destroy(e);
	if (!any_on(e)) {
		for (int c = 0; c < EC__N; c++)
			if (c != EC_PYTHON && e->why[c][0]) {
				snprintf(why, whylen, "%s", e->why[c]);
				break;
			}
		r = -EOPNOTSUPP;
		goto fail;
	}
	e->rb = ring_buffer__new(ebpf_shared_map_fd(e, "events"), on_record, e, NULL);
	if (!e->rb) {
		r = -errno;
		snprintf(why, whylen, "cannot map the BPF ring buffer: %s", strerror(-r));
		goto fail;
	}
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (collectors[i]->is_on(e))
			e->on |= collectors[i]->flag;
	/* Python frames ride on the stacks of the CPU and off-CPU collectors and dumps */
	if ((e->on & (EBPF_COLLECT_CPU | EBPF_COLLECT_OFFCPU | EBPF_COLLECT_TASKS)) &&
	    any_python(e) &&
	    (e->opts.collectors & EBPF_COLLECT_PYTHON))
		e->on |= EBPF_COLLECT_PYTHON;
	*ret = e;
	return 0;
fail_msg:
	if (!why[0])
		snprintf(why, whylen, "%s", strerror(-r));
fail:
	ebpf__free(e);
	return r;
}

void ebpf__start(struct ebpf *e)
{
	e->start_ns = now_monotonic_ns();
	e->next_tick_ns = e->start_ns + TICK_NS;
	for (size_t i = 0; i < NCOLLECTORS; i++)
		collectors[i]->set_running(e, true);
	/* the follower runs now: what forked since the first scan is found by a second one */
	if (e->on & EBPF_COLLECT_FOLLOW) {
		size_t before = e->nt;

		if (add_children(e) > 0)
			(void)fill_maps_from(e, before);
	}
	ebpf_cost_begin(e);
	ebpf_budget_begin(e);
	ebpf_wall_begin(e, now_monotonic_ns());
}

void ebpf__poll(struct ebpf *e)
{
	uint64_t now;

	if (!e || e->stopped)
		return;
	ring_buffer__consume(e->rb);
	now = now_monotonic_ns();
	ebpf_py_retry_due(e, now);
	for (size_t i = 0; i < e->nt; i++)
		if (e->t[i].py_soon_ns && now >= e->t[i].py_soon_ns) {
			/* a fresh child: again until its thread is known, at most for a tick */
			ebpf_py_refresh(e, &e->t[i]);
			e->t[i].py_soon_ns = u64map_get(&e->t[i].pythreads,
							       (uint64_t)e->t[i].pid, NULL) ||
					     now - e->t[i].started_ns > TICK_NS ? 0 :
					     now + FOLLOW_PY_AGAIN_NS;
		}
	ebpf_wall_tick(e, now);
	if (now >= e->next_tick_ns) {
		e->next_tick_ns = now + TICK_NS;
		ebpf_cost_tick(e);
		ebpf_budget_tick(e);
		for (size_t i = 0; i < e->nt; i++)
			if (e->t[i].py)
				ebpf_py_refresh(e, &e->t[i]);
	}
}

void ebpf__stop(struct ebpf *e)
{
	if (!e || e->stopped)
		return;
	for (size_t i = 0; i < NCOLLECTORS; i++)
		collectors[i]->set_running(e, false);
	e->end_ns = now_monotonic_ns();
	ebpf_budget_end(e);
	ebpf_cost_end(e);
	ring_buffer__consume(e->rb);
	for (size_t i = 0; i < NCOLLECTORS; i++)
		if (collectors[i]->finish)
			collectors[i]->finish(e);
	ebpf_cost_unrecorded(e);
	e->stopped = true;
	if (e->uw) {
		struct unwind_stats us;

		unwind_tables__stats(e->uw, &us);
		if (us.shared && (us.share.files_failed || us.share.images_failed))
			log_notice("unwind cache %s: %" PRIu64 " rules file(s) and %" PRIu64
				   " image(s) could not be made (%s); those modules' rows were "
				   "decoded here, not shared", unwind_tables__share_dir(e->uw),
				   us.share.files_failed, us.share.images_failed,
				   us.share.last_errno ? strerror(us.share.last_errno) : "?");
	}
}

const char *ebpf__scope(const struct ebpf *e, uint32_t collector)
{
	for (int c = 0; c < EC_PYTHON; c++)
		if (collector == 1u << c)
			return (e->on & collector) && e->scope[c][0] ? e->scope[c] : NULL;
	return NULL;
}

const char *ebpf__task_work_refused(const struct ebpf *e)
{
	return e && e->task_work_why[0] ? e->task_work_why : NULL;
}

const char *ebpf__describe(const struct ebpf *e, char *buf, size_t len)
{
	char dur[32];
	size_t n = 0;

	buf[0] = 0;
#define APPEND(...) do { if (n < len) n += (size_t)snprintf(buf + n, len - n, __VA_ARGS__); } while (0)
	if (e->on & EBPF_COLLECT_CPU)
		APPEND("cpu at %u Hz", e->opts.frequency_hz);
	if (e->on & EBPF_COLLECT_OFFCPU)
		APPEND("%soffcpu from %s", n ? ", " : "",
		       format_duration(dur, sizeof(dur), e->opts.offcpu_min_ns));
	if (e->on & EBPF_COLLECT_SYSCALLS)
		APPEND("%ssyscalls (slow from %s)", n ? ", " : "",
		       format_duration(dur, sizeof(dur), e->opts.slow_syscall_ns));
	for (size_t i = 0; i < e->nt; i++)
		if (e->t[i].py)
			APPEND("%spython %s in pid %d", n ? ", " : "", py_proc__version(e->t[i].py),
			       e->t[i].pid);
#undef APPEND
	return buf;
}

size_t ebpf__follow_news(struct ebpf *e, struct ebpf_proc_note *out, size_t max)
{
	size_t n = 0;

	while (e && n < max && e->news_read < e->nnews)
		out[n++] = e->news[e->news_read++];
	if (e && e->news_read == e->nnews)
		e->news_read = e->nnews = 0;
	return n;
}

void ebpf__free(struct ebpf *e)
{
	if (!e)
		return;
	ebpf_cost_free(e);
	ring_buffer__free(e->rb);
	for (size_t i = 0; i < NCOLLECTORS; i++)
		collectors[i]->destroy(e);
	for (size_t i = 0; i < e->nt; i++) {
		struct ebpf_tdata *td = &e->t[i];

		py_proc__free(td->py);
		u64map_clear(&td->ucache);
		u64map_clear(&td->wall_idx);
		free(td->wall);
		u64map_clear(&td->pycache);
		u64map_clear(&td->pythreads);
		free(td->pynames);
		free(td->tids);
		free(td->cpu);
		free(td->off);
		free(td->sites);
		u64map_clear(&td->site_idx);
		u64map_clear(&td->sys_sites);
		for (size_t k = 0; k < td->nsys; k++)
			free(td->sys[k].target);
		free(td->sys);
		free(td->stats);
		free(td->threads);
	}
	free(e->t);
	free(e->news);
	free(e->tstates);
	for (size_t i = 0; i < EBPF_SHARED_MAPS; i++)
		if (e->shared_fd[i] >= 0)
			close(e->shared_fd[i]);
	unwind_tables__free(e->uw);
	symbolizer__free(e->symz);
	stack_store__clear(&e->stacks);
	stack_tree__clear(&e->tree);
	u64map_clear(&e->kcache);
	free(e);
}

#else /* AIPROF_NO_EBPF: built without kernel BTF; every profile says so */

int ebpf__new(const struct ebpf_opts *o, const pid_t *pids, size_t npids, struct ebpf **ret,
	      char *why, size_t whylen)
{
	(void)o; (void)pids; (void)npids; (void)ret;
	snprintf(why, whylen, "this aiprof was built without eBPF (no kernel BTF on the build "
		 "machine)");
	return -EOPNOTSUPP;
}

const char *ebpf__scope(const struct ebpf *e, uint32_t collector) { (void)e; (void)collector; return NULL; }
const char *ebpf__task_work_refused(const struct ebpf *e) { (void)e; return NULL; }
void ebpf__start(struct ebpf *e) { (void)e; }
void ebpf__poll(struct ebpf *e) { (void)e; }
void ebpf__stop(struct ebpf *e) { (void)e; }
void ebpf__free(struct ebpf *e) { (void)e; }
const struct ebpf_cost *ebpf__cost(const struct ebpf *e) { (void)e; return NULL; }
void ebpf__exclude_thread(struct ebpf *e, pid_t pid, pid_t tid) { (void)e; (void)pid; (void)tid; }
const char *ebpf__describe(const struct ebpf *e, char *buf, size_t len)
{
	(void)e;
	snprintf(buf, len, "none (built without eBPF)");
	return buf;
}
int ebpf__threads(struct ebpf *e) { (void)e; return -ENOTSUP; }
const char *ebpf__thread_name(const struct ebpf *e, pid_t pid, uint32_t tid)
{
	(void)e; (void)pid; (void)tid;
	return NULL;
}
size_t ebpf__follow_news(struct ebpf *e, struct ebpf_proc_note *out, size_t max)
{
	(void)e; (void)out; (void)max;
	return 0;
}

#endif
