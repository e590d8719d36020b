/* SPDX-License-Identifier: MIT */
/*
 * The summary's "ebpf" member: what ran (or why not), how many samples, how good the
 * stacks were (truncated share, Python frames found), per-syscall latency and the top
 * reasons threads were off CPU, per target.
 */
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "collect/ebpf_internal.h"
#include "ebpf_artifacts.h"

#define TOP_SYSCALLS 25
#define TOP_REASONS 10

static const char *const collector_names[EC__N] = { "cpu", "offcpu", "syscalls", "python",
							  "tasks", "follow" };

static void us(struct jsonw *w, const char *key, uint64_t ns)
{
	jsonw_key(w, key);
	jsonw_fixed3(w, ns);
}

static double share(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0.0;
}

/* upper bound, in ns, of the log2 bucket holding the q-quantile */
static uint64_t quantile_le(const uint32_t *hist, uint64_t count, double q)
{
	uint64_t want = (uint64_t)((double)count * q), seen = 0;

	if (want == 0)
		want = 1;
	for (int b = 0; b < SYSCALL_HIST; b++) {
		seen += hist[b];
		if (seen >= want)
			return b >= 63 ? UINT64_MAX : (1ULL << (b + 1));
	}
	return 0;
}

static int by_total_desc(const void *a, const void *b)
{
	const struct ebpf_sys_stat *x = a, *y = b;

	return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

struct reason {
	char name[200];
	uint32_t state;
	uint64_t count, total, max;
};

static int by_reason_total(const void *a, const void *b)
{
	const struct reason *x = a, *y = b;

	return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}

static void write_syscalls(struct jsonw *w, const struct ebpf_tdata *td)
{
	struct ebpf_sys_stat *v = NULL;
	char nb[32];
	uint64_t slow = 0, limited = 0, untimed = 0, site = 0;

	if (td->nstats) {
		v = malloc(td->nstats * sizeof(*v));
		if (v) {
			memcpy(v, td->stats, td->nstats * sizeof(*v));
			qsort(v, td->nstats, sizeof(*v), by_total_desc);
		}
	}
	jsonw_key(w, "syscalls");
	jsonw_arr_open(w);
	for (size_t i = 0; v && i < td->nstats && i < TOP_SYSCALLS; i++) {
		const struct ebpf_sys_stat *s = &v[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", ebpf_syscall_name(s->nr, nb, sizeof(nb)));
		jsonw_kv_uint(w, "count", s->count);
		us(w, "total_us", s->total_ns);
		us(w, "mean_us", s->count ? s->total_ns / s->count : 0);
		us(w, "p50_le_us", quantile_le(s->hist, s->count, 0.5));
		us(w, "p99_le_us", quantile_le(s->hist, s->count, 0.99));
		us(w, "max_us", s->max_ns);
		jsonw_kv_uint(w, "slow", s->slow);
		/* past the thread's record rate: slow calls with no record, calls not timed */
		jsonw_kv_uint(w, "slow_not_recorded", s->limited);
		/* at a site (fd, user pc) its thread recorded a slow call in the last second:
		 * events with that record's file */
		jsonw_kv_uint(w, "slow_site_events", s->site);
		jsonw_kv_uint(w, "untimed", s->untimed);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	for (size_t i = 0; i < td->nstats; i++) {
		slow += td->stats[i].slow;
		limited += td->stats[i].limited;
		untimed += td->stats[i].untimed;
		site += td->stats[i].site;
	}
	jsonw_kv_uint(w, "slow_syscalls", slow);
	jsonw_kv_uint(w, "slow_syscalls_not_recorded", limited);
	jsonw_kv_uint(w, "slow_syscalls_site_events", site);
	jsonw_kv_uint(w, "syscalls_untimed", untimed);
	jsonw_kv_uint(w, "slow_syscall_events", td->nsys);
	free(v);
}

/* Adds count blocks of total ns (the longest max) in syscall sc at kernel frame wchan, state,
 * to the reasons r[0..*n) */
static void add_reason(const struct ebpf *e, struct reason *r, size_t *n, int32_t syscall,
		       uint32_t wchan, uint32_t state, uint64_t count, uint64_t total, uint64_t max)
{
	char nb[32], name[200];
	const char *sc = syscall >= 0 ? ebpf_syscall_name((uint32_t)syscall, nb, sizeof(nb)) : "-";
	const char *wc = wchan != UINT32_MAX ? stack_store__frame_name(&e->stacks, wchan) : "?";
	size_t k, wl = strlen(wc);

	if (wl > 4 && strcmp(wc + wl - 4, "_[k]") == 0)
		wl -= 4;
	snprintf(name, sizeof(name), "%s: %.*s", sc, (int)wl, wc);
	for (k = 0; k < *n; k++)
		if (r[k].state == (state & 3) && strcmp(r[k].name, name) == 0)
			break;
	if (k == *n) {
		snprintf(r[k].name, sizeof(r[k].name), "%s", name);
		r[k].state = state & 3;
		(*n)++;
	}
	r[k].count += count;
	r[k].total += total;
	if (max > r[k].max)
		r[k].max = max;
}

static void write_offcpu(struct jsonw *w, const struct ebpf *e, const struct ebpf_tdata *td)
{
	size_t n = 0;
	struct reason *r = td->noff ? calloc(td->noff, sizeof(*r)) : NULL;

	for (size_t i = 0; r && i < td->noff; i++) {
		const struct ebpf_off_ev *o = &td->off[i];

		add_reason(e, r, &n, o->syscall, o->wchan, o->state, 1, o->dur, o->dur);
	}
	if (r)
		qsort(r, n, sizeof(*r), by_reason_total);
	jsonw_key(w, "offcpu");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "blocks", td->offcpu_count);
	us(w, "blocked_us", td->offcpu_total_ns);
	jsonw_kv_uint(w, "events", td->noff);
	/* long blocks past the thread's record rate: in blocks and blocked_us, no stacks */
	jsonw_kv_uint(w, "blocks_not_recorded", td->offcpu_limited);
	us(w, "not_recorded_us", td->offcpu_limited_ns);
	/* of events: long blocks at a site the thread had just recorded, with that record's
	 * stacks (none taken for them) */
	jsonw_kv_uint(w, "site_stack_blocks", td->offcpu_site_stacks);
	us(w, "site_stack_us", td->offcpu_site_stacks_ns);
	jsonw_key(w, "top_reasons");
	jsonw_arr_open(w);
	for (size_t i = 0; i < n && i < TOP_REASONS; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "reason", r[i].name);
		jsonw_kv_str(w, "state", ebpf_state_letter(r[i].state ? r[i].state : 1));
		jsonw_kv_uint(w, "count", r[i].count);
		us(w, "total_us", r[i].total);
		us(w, "max_us", r[i].max);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
	free(r);
}

/* What the CPU samples' stacks do not show, each marked in the stack where it is */
static void write_stack_cuts(struct jsonw *w, const struct ebpf *e)
{
	uint64_t py = 0, pycut = 0, k = 0, kcut = 0, user = 0, trunc = 0;

	for (size_t i = 0; i < e->nt; i++) {
		py += e->t[i].samples_py_thread;
		pycut += e->t[i].samples_py_cut;
		k += e->t[i].samples_kernel;
		kcut += e->t[i].samples_kernel_cut;
		user += e->t[i].samples_user;
		trunc += e->t[i].samples_truncated;
	}
	jsonw_key(w, "stack_cuts");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "python_stacks_cut", pycut);
	jsonw_kv_double(w, "python_cut_share", share(pycut, py));
	jsonw_kv_uint(w, "python_walk_max", e->py_walk_max);
	jsonw_kv_uint(w, "python_kept_inner", EBPF_PY_INNER);
	jsonw_kv_uint(w, "python_kept_outer", EBPF_PY_OUTER);
	jsonw_kv_uint(w, "kernel_stacks_cut", kcut);
	jsonw_kv_double(w, "kernel_cut_share", share(kcut, k));
	jsonw_kv_uint(w, "kernel_max", EBPF_KSTACK_MAX);
	jsonw_kv_uint(w, "native_stacks_cut", trunc);
	jsonw_kv_double(w, "native_cut_share", share(trunc, user));
	jsonw_kv_str(w, "marks", "a cut is a frame of its own where it is: '[... N Python frames "
		     "not shown]' (the innermost and the outermost frames kept), '[... Python "
		     "frames past N not read]', '[... Python frames not readable]', '[... kernel "
		     "frames not shown]', '[... native frames not unwound]', '[... user code in "
		     "no known mapping]'");
	jsonw_obj_close(w);
}

/*
 * How the native stacks were walked (CPU samples and off-CPU records together), why the
 * CFI walks ended, and what the unwind tables cost.
 */
static void write_unwinding(struct jsonw *w, const struct ebpf *e)
{
	uint64_t fp = 0, cfi = 0, fp_frames = 0, ends[UNWIND_END__N] = { 0 };
	struct unwind_stats us = { 0 };

	for (size_t i = 0; i < e->nt; i++) {
		fp += e->t[i].stacks_fp;
		cfi += e->t[i].stacks_cfi;
		fp_frames += e->t[i].unwind_fp_frames;
		for (int k = 0; k < UNWIND_END__N; k++)
			ends[k] += e->t[i].unwind_ends[k];
	}
	jsonw_key(w, "unwinding");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "method", e->uw ? "cfi" : "fp");
	jsonw_kv_uint(w, "stack_copy_bytes", e->opts.unwind_stack_bytes);
	jsonw_kv_uint(w, "stacks_frame_pointers", fp);
	jsonw_kv_uint(w, "stacks_cfi", cfi);
	jsonw_kv_uint(w, "cfi_frames_by_frame_pointer", fp_frames);
	jsonw_key(w, "ends");
	jsonw_obj_open(w);
	for (int k = 0; k < UNWIND_END__N; k++)
		jsonw_kv_uint(w, unwind_end_name((enum unwind_end)k), ends[k]);
	jsonw_obj_close(w);
	if (e->uw) {
		unwind_tables__stats(e->uw, &us);
		jsonw_key(w, "tables");
		jsonw_obj_open(w);
		jsonw_kv_uint(w, "modules", us.modules);
		jsonw_kv_uint(w, "modules_without_cfi", us.modules_without_cfi);
		jsonw_kv_uint(w, "cfi_section_bytes", us.cfi_bytes);
		jsonw_kv_uint(w, "frames_cached", us.frames_cached);
		jsonw_kv_uint(w, "frames_cache_max", us.frames_cache_max);
		jsonw_kv_uint(w, "frames_cache_bytes", us.frames_cache_bytes);
		jsonw_kv_uint(w, "lookups", us.lookups);
		jsonw_kv_uint(w, "cache_hits", us.cache_hits);
		jsonw_kv_uint(w, "modules_decoded", us.modules_decoded);
		jsonw_kv_uint(w, "modules_from_shared_image", us.modules_from_image);
		jsonw_kv_uint(w, "modules_from_memory", us.modules_from_memory);
		jsonw_key(w, "shared");
		jsonw_obj_open(w);
		if (us.shared) {
			jsonw_kv_str(w, "dir", unwind_tables__share_dir(e->uw));
			jsonw_kv_uint(w, "files", us.share.files);
			jsonw_kv_uint(w, "mapped_bytes", us.share.mapped_bytes);
			jsonw_kv_uint(w, "images", us.share.images);
			jsonw_kv_uint(w, "image_bytes", us.share.image_bytes);
			jsonw_kv_uint(w, "images_built", us.share.images_built);
			jsonw_kv_uint(w, "hits", us.share.hits);
			jsonw_kv_uint(w, "misses", us.share.misses);
			jsonw_kv_uint(w, "inserts", us.share.inserts);
			jsonw_kv_uint(w, "rejected", us.share.rejected);
			jsonw_kv_uint(w, "table_full", us.share.full);
			/* modules left unshared because their files could not be had (a
			 * full disk: ENOSPC), and why: their rows were decoded here */
			jsonw_kv_uint(w, "files_failed", us.share.files_failed);
			jsonw_kv_uint(w, "images_failed", us.share.images_failed);
			if (us.share.last_errno)
				jsonw_kv_str(w, "files_error", strerror(us.share.last_errno));
			jsonw_kv_uint(w, "rows_not_shareable", us.rows_not_shareable);
		} else {
			jsonw_kv_str(w, "off", e->uw_share_why[0] ? e->uw_share_why :
				     "no directory (--unwind-cache none)");
		}
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	jsonw_obj_close(w);
}

/* python.gil: how often each Python thread held the GIL when it was sampled on a CPU */
static void write_gil(struct jsonw *w, const struct ebpf_tdata *td)
{
	uint64_t held = 0, not_held = 0;

	jsonw_key(w, "gil");
	jsonw_obj_open(w);
	if (!py_proc__offsets(td->py)->bpf.gil_holder) {
		jsonw_kv_bool(w, "known", false);
		jsonw_kv_str(w, "reason", "where this CPython version keeps its GIL is not in "
			     "aiprof's table (3.11 only)");
		jsonw_obj_close(w);
		return;
	}
	jsonw_kv_bool(w, "known", true);
	for (size_t i = 0; i < td->ntids; i++) {
		held += td->tids[i].gil_held;
		not_held += td->tids[i].gil_not_held;
	}
	jsonw_kv_uint(w, "samples_holding", held);
	jsonw_kv_uint(w, "samples_not_holding", not_held);
	jsonw_key(w, "threads");
	jsonw_arr_open(w);
	for (size_t i = 0; i < td->ntids; i++) {
		const struct ebpf_tid *t = &td->tids[i];
		const char *nm = ebpf_pyname_of(td, t->tid);

		if (!t->gil_held && !t->gil_not_held)
			continue;
		jsonw_obj_open(w);
		jsonw_kv_uint(w, "tid", t->tid);
		jsonw_kv_str(w, "comm", t->comm);
		if (nm)
			jsonw_kv_str(w, "python_name", nm);
		jsonw_kv_uint(w, "samples_holding", t->gil_held);
		jsonw_kv_uint(w, "samples_not_holding", t->gil_not_held);
		jsonw_kv_double(w, "holding_share", share(t->gil_held, (uint64_t)t->gil_held +
							  t->gil_not_held));
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

static void write_target(struct jsonw *w, const struct ebpf *e, const struct ebpf_tdata *td)
{
	const struct psym_module *mods = NULL;
	size_t nmods = td->syms ? proc_symbolizer__modules(td->syms, &mods) : 0;

	jsonw_obj_open(w);
	jsonw_kv_int(w, "pid", td->pid);
	jsonw_kv_str(w, "comm", td->comm);
	if (td->parent) {
		/* started by a target during the window, and followed */
		jsonw_kv_int(w, "parent", td->parent);
		if (td->started_ns)
			jsonw_kv_uint(w, "started_after_ms", td->started_ns > e->start_ns ?
				      (td->started_ns - e->start_ns) / 1000000 : 0);
		else
			jsonw_kv_bool(w, "started_before_window", true);
	}
	if (td->execd)
		jsonw_kv_bool(w, "execd", true);
	if (e->on & EBPF_COLLECT_CPU) {
		jsonw_kv_uint(w, "cpu_samples", td->cpu_samples);
		jsonw_kv_double(w, "truncated_stack_share", share(td->samples_truncated, td->samples_user));
		jsonw_kv_double(w, "python_cut_stack_share", share(td->samples_py_cut,
								   td->samples_py_thread));
		jsonw_kv_double(w, "kernel_stack_share", share(td->samples_kernel, td->cpu_samples));
	}
	/* past the event budget: in the flame graphs and totals, not in the timeline */
	jsonw_kv_uint(w, "events_summed", td->summed);
	/* aiprof's own threads in it (by tid): what of theirs was left out */
	jsonw_kv_uint(w, "aiprof_threads", td->nown);
	jsonw_kv_uint(w, "aiprof_records_left_out", td->own_records);
	jsonw_key(w, "python");
	jsonw_obj_open(w);
	if (td->py) {
		jsonw_kv_str(w, "version", py_proc__version(td->py));
		jsonw_kv_str(w, "offsets", py_proc__offsets_source(td->py));
		/* its interpreter was starting up when first looked at: frames from then on */
		if (td->py_found_late_ns)
			jsonw_kv_uint(w, "found_after_ms", td->py_found_late_ns > e->start_ns ?
				      (td->py_found_late_ns - e->start_ns) / 1000000 : 0);
		jsonw_kv_uint(w, "samples_of_python_threads", td->samples_py_thread);
		jsonw_kv_double(w, "with_python_frames_share", share(td->samples_py, td->samples_py_thread));
		jsonw_kv_double(w, "interleaved_at_eval_frames_share",
				share(td->samples_py_interleaved, td->samples_py));
		if (e->on & EBPF_COLLECT_CPU)
			write_gil(w, td);
	} else {
		jsonw_kv_str(w, "reason", td->py_why[0] ? td->py_why :
			     (e->opts.collectors & EBPF_COLLECT_PYTHON) ? "not a CPython process" :
			     "not requested");
	}
	jsonw_obj_close(w);
	if (e->on & EBPF_COLLECT_OFFCPU)
		write_offcpu(w, e, td);
	if (e->on & EBPF_COLLECT_SYSCALLS)
		write_syscalls(w, td);
	jsonw_key(w, "modules");
	jsonw_arr_open(w);
	for (size_t i = 0; i < nmods; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "path", mods[i].path);
		jsonw_kv_str(w, "build_id", mods[i].build_id);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

/*
 * "record_rate": what each target thread may record a second (--record-rate), and what came
 * past it: counted in the kernel, with no record and no stacks (per process: offcpu and
 * syscalls of each target). The off-CPU flame graph has their time under one frame.
 */
/* How wall.folded was made: --mode wall's sampler, or the CPU and off-CPU collectors. */
static void write_wall(struct jsonw *w, const struct ebpf *e)
{
	if (!(e->on & EBPF_COLLECT_CPU))
		return;
	if (!e->opts.wall) {
		if (!(e->on & EBPF_COLLECT_OFFCPU))
			return;
		jsonw_key(w, "wall");
		jsonw_obj_open(w);
		jsonw_kv_str(w, "mode", "blocks");
		jsonw_kv_str(w, "what", "wall.folded: the CPU samples, each 1/frequency_hz s, and "
			     "the off-CPU blocks, each its own time; blocks under offcpu_min_us are "
			     "not in it (--mode wall samples every thread off its CPU instead)");
		jsonw_obj_close(w);
		return;
	}
	jsonw_key(w, "wall");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "mode", e->tasks_link ? "sampled" : "not sampled");
	jsonw_kv_str(w, "what", e->tasks_link ?
		     "wall.folded: the CPU samples, each 1/frequency_hz s, and at the same rate "
		     "every target thread off its CPU (asleep, stopped, or waiting for a CPU), "
		     "each sample its time off the CPU since its last (the clock less the CPU time "
		     "the kernel counted for it); a thread that had not run since its stack was "
		     "last read has that stack (stacks_reused); a thread's first tick is not a "
		     "sample" :
		     "no task iterator here (ebpf.not_running says why): wall.folded has the CPU "
		     "samples only");
	jsonw_kv_uint(w, "frequency_hz", e->opts.frequency_hz);
	jsonw_kv_uint(w, "ticks", e->wall.ticks);
	jsonw_kv_uint(w, "ticks_late", e->wall.late);
	jsonw_kv_uint(w, "samples", e->wall.samples);
	jsonw_key(w, "sampled_s");
	jsonw_fixed3(w, e->wall.sampled_us / 1000);
	jsonw_kv_uint(w, "stacks_unwound", e->wall.unwound);
	jsonw_kv_uint(w, "stacks_reused", e->wall.reused);
	jsonw_kv_uint(w, "stacks_unreadable", e->wall.unread);
	jsonw_key(w, "unreadable_s");
	jsonw_fixed3(w, e->wall.unread_us / 1000);
	jsonw_kv_uint(w, "iterator_errors", e->wall.failed);
	/* what the ticks cost: the injector's CPU time in them (the iterator's BPF program
	 * runs in its thread; the targets are not stopped) */
	jsonw_key(w, "injector_cpu_s");
	jsonw_fixed3(w, e->wall.ns / 1000000);
	jsonw_obj_close(w);
}

static void write_record_rate(struct jsonw *w, const struct ebpf *e)
{
	const struct ebpf_cost *c = ebpf__cost(e);
	uint64_t blocks = c ? c->offcpu_not_recorded : 0, blocked = c ? c->offcpu_not_recorded_ns : 0;
	uint64_t slow = c ? c->slow_not_recorded : 0, untimed = c ? c->untimed : 0;

	jsonw_key(w, "record_rate");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "per_thread_per_s", e->opts.record_rate);
	jsonw_kv_str(w, "what", e->opts.record_rate ? "per target thread a second, at most this "
		     "many off-CPU records and slow-syscall records, each, and a tenth as many "
		     "short calls timed; past it they are counted here and in the totals, with "
		     "no record and no stacks; blocks and calls of always_recorded_us or more "
		     "always are recorded" :
		     "no limit: every block and slow call is recorded");
	us(w, "always_recorded_us", EBPF_RECORD_ALWAYS_NS);
	jsonw_kv_uint(w, "offcpu_blocks_not_recorded", blocks);
	us(w, "offcpu_not_recorded_us", blocked);
	jsonw_kv_uint(w, "slow_syscalls_not_recorded", slow);
	jsonw_kv_uint(w, "syscalls_untimed", untimed);
	jsonw_kv_uint(w, "short_calls_timed_per_thread_per_s", e->opts.record_rate ?
		      (e->opts.record_rate / 10 ? e->opts.record_rate / 10 : 1) : 0);
	us(w, "site_fresh_us", e->opts.record_rate ? EBPF_SITE_FRESH_NS : 0);
	jsonw_kv_uint(w, "offcpu_site_stack_blocks", c ? c->offcpu_site_stacks : 0);
	us(w, "offcpu_site_stack_us", c ? c->offcpu_site_stacks_ns : 0);
	jsonw_kv_uint(w, "slow_syscalls_site_events", c ? c->slow_site : 0);
	jsonw_kv_str(w, "sites", e->opts.record_rate ? "a long block (under "
		     "always_recorded_us) at a site its thread recorded less than site_fresh_us "
		     "ago (same syscall, user pc, user stack pointer, first argument, state and "
		     "innermost 3 Python frames) is an event with that record's stacks, none taken "
		     "for it (timeline args.stack \"site\"); "
		     "a slow syscall already slow as it got the CPU back, at a site (syscall, "
		     "first argument, user pc) its thread recorded one at less than "
		     "site_fresh_us ago, is an event with that record's path, timed until it got "
		     "the CPU back, no ret (timeline args.site; counted in slow and untimed)" : "none: every long block's stacks are taken");
	jsonw_obj_close(w);
}

/* "budget": --budget and what keeping it took (ebpf_budget.c) */
static void write_budget(struct jsonw *w, const struct ebpf_cost *c)
{
	const struct ebpf_budget *b = c ? &c->budget : NULL;
	uint64_t share;

	jsonw_key(w, "budget");
	jsonw_obj_open(w);
	jsonw_kv_bool(w, "set", b && b->ppm);
	if (!b || !b->ppm) {
		jsonw_obj_close(w);
		return;
	}
	jsonw_kv_uint(w, "target_ppm", b->ppm);
	jsonw_kv_bool(w, "measured", b->kept_by_measure);
	if (!b->kept_by_measure) {
		jsonw_kv_str(w, "reason", c->why);
		jsonw_obj_close(w);
		return;
	}
	share = c->targets_cpu_ns ? (uint64_t)((double)c->bpf_ns * 1e6 / (double)c->targets_cpu_ns) : 0;
	jsonw_kv_str(w, "what", "the share of the targets' CPU the BPF programs may take, kept "
		     "at every tick (200 ms) by lowering the record rate, then pausing the off-CPU "
		     "and syscall collectors for 250 ms to 1 s at a time (nothing new is begun by "
		     "them while paused; a wait on as a pause begins, or begun in it and on as it "
		     "ends, is recorded whole); window_share_ppm is the whole window's, as ebpf.cost "
		     "says it");
	jsonw_kv_uint(w, "window_share_ppm", share);
	/* what a pause cannot lose: a wait longer than the longest pause, begun anywhere */
	jsonw_key(w, "waits_over_s_always_recorded");
	if (b->ends_in_pauses_recorded)
		jsonw_fixed3(w, b->pause_max_ns / 1000000);
	else
		jsonw_null(w);
	jsonw_kv_str(w, "waits_not_recorded", b->ends_in_pauses_recorded ?
		     "those begun and ended inside one pause (counted in no total)" :
		     "those begun and ended inside one pause, and those begun before a pause and "
		     "ended in it (bpf_task_work is not used here, ebpf.task_work says why; the off-CPU "
		     "ones whose thread "
		     "switched once at most since are recorded at the resume, with their kernel "
		     "stack and user pc; the rest are counted in sleeps_ended_in_pauses_unmeasured)");
	jsonw_kv_bool(w, "kept", share <= b->ppm);
	jsonw_kv_uint(w, "lowest_record_rate", b->lowest_rate);
	jsonw_kv_uint(w, "final_record_rate", b->rate);
	jsonw_kv_uint(w, "pauses", b->pauses);
	jsonw_kv_uint(w, "sleeps_begun_in_pauses", b->seeded_sleeps);
	jsonw_kv_uint(w, "calls_begun_in_pauses", b->seeded_calls);
	jsonw_kv_uint(w, "sleeps_ended_in_pauses", b->sleeps_ended_in_pauses);
	jsonw_kv_uint(w, "sleeps_ended_in_pauses_unmeasured", b->sleeps_ended_unseen);
	jsonw_kv_uint(w, "calls_ended_in_pauses", b->calls_ended_in_pauses);
	jsonw_key(w, "paused_s");
	jsonw_fixed3(w, b->paused_ns / 1000000);
	jsonw_kv_uint(w, "changes_total", b->changes_total);
	jsonw_key(w, "changes");
	jsonw_arr_open(w);
	for (size_t i = 0; i < b->nchanges; i++) {
		jsonw_obj_open(w);
		jsonw_key(w, "t_s");
		jsonw_fixed3(w, b->changes[i].t_ns / 1000000);
		jsonw_kv_uint(w, "share_ppm", b->changes[i].share_ppm);
		jsonw_kv_uint(w, "record_rate", b->changes[i].record_rate);
		jsonw_kv_bool(w, "paused", b->changes[i].paused);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

/* "cost": what the window cost, from the kernel's BPF statistics (ebpf.h) */
static void write_cost(struct jsonw *w, const struct ebpf_cost *c)
{
	jsonw_key(w, "cost");
	jsonw_obj_open(w);
	if (!c || !c->measured) {
		jsonw_kv_bool(w, "measured", false);
		jsonw_kv_str(w, "reason", c ? c->why : "the window did not run");
		jsonw_obj_close(w);
		return;
	}
	jsonw_kv_bool(w, "measured", true);
	jsonw_kv_str(w, "what", "every run of aiprof's BPF programs on every CPU while recording "
		     "(the kernel's run_time_ns; tracepoint programs run at every context switch "
		     "and syscall of the node, not only the targets'), against the targets' own "
		     "CPU time (utime + stime, followed children included); injector_cpu_s is the "
		     "injector's own CPU time in the window");
	jsonw_key(w, "window_s");
	jsonw_fixed3(w, c->window_ns / 1000000);
	jsonw_key(w, "bpf_cpu_s");
	jsonw_fixed3(w, c->bpf_ns / 1000000);
	jsonw_kv_uint(w, "bpf_ns", c->bpf_ns);
	jsonw_kv_uint(w, "bpf_runs", c->bpf_runs);
	jsonw_key(w, "targets_cpu_s");
	jsonw_fixed3(w, c->targets_cpu_ns / 1000000);
	jsonw_key(w, "injector_cpu_s");
	jsonw_fixed3(w, c->injector_cpu_ns / 1000000);
	/* parts per million, so that an integer says it: 8700 is 0.87 % */
	jsonw_kv_uint(w, "bpf_share_of_targets_cpu_ppm",
		      c->targets_cpu_ns ? (uint64_t)((double)c->bpf_ns * 1e6 / (double)c->targets_cpu_ns) : 0);
	jsonw_kv_uint(w, "bpf_share_of_window_ppm",
		      c->window_ns ? (uint64_t)((double)c->bpf_ns * 1e6 / (double)c->window_ns) : 0);
	jsonw_key(w, "programs");
	jsonw_arr_open(w);
	for (size_t i = 0; i < c->nprogs; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", c->progs[i].name);
		jsonw_kv_uint(w, "runs", c->progs[i].runs);
		jsonw_kv_uint(w, "ns", c->progs[i].ns);
		jsonw_kv_uint(w, "ns_per_run", c->progs[i].runs ? c->progs[i].ns / c->progs[i].runs : 0);
		if (c->progs[i].tail_call_of[0])
			jsonw_kv_str(w, "tail_call_of", c->progs[i].tail_call_of);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

void ebpf_summary_write(struct jsonw *w, const struct ebpf *e, const char *why_off)
{
	uint64_t samples = 0, user = 0, trunc = 0, off = 0, slow = 0, summed = 0;

	jsonw_key(w, "ebpf");
	jsonw_obj_open(w);
	if (!e) {
		jsonw_kv_str(w, "state", "off");
		jsonw_kv_str(w, "reason", why_off && *why_off ? why_off : "not requested");
		jsonw_obj_close(w);
		return;
	}
	jsonw_kv_str(w, "state", "on");
	jsonw_key(w, "collectors");
	jsonw_arr_open(w);
	for (int c = 0; c < EC__N; c++)
		if (e->on & (1u << c))
			jsonw_str(w, collector_names[c]);
	jsonw_arr_close(w);
	jsonw_key(w, "not_running");
	jsonw_arr_open(w);
	for (int c = 0; c < EC__N; c++) {
		if (!(e->opts.collectors & (1u << c)) || (e->on & (1u << c)))
			continue;
		jsonw_obj_open(w);
		jsonw_kv_str(w, "collector", collector_names[c]);
		jsonw_kv_str(w, "reason", e->why[c][0] ? e->why[c] : "could not start");
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	/* what triggers each collector's programs: the targets' threads only ("task"), or
	 * every task on the node ("global (why)"): what the window costs everyone else */
	jsonw_key(w, "scope");
	jsonw_obj_open(w);
	for (int c = 0; c < EC_PYTHON; c++)
		if ((e->on & (1u << c)) && e->scope[c][0])
			jsonw_kv_str(w, collector_names[c], e->scope[c]);
	jsonw_obj_close(w);
	jsonw_kv_uint(w, "cpu_foreign_samples", e->cpu_foreign);
	/* what chose the sampler's events: per thread, or per CPU past 2,000 a second */
	jsonw_kv_uint(w, "cpu_target_switches_per_s", e->cpu_switches_per_s);
	jsonw_kv_uint(w, "frequency_hz", e->opts.frequency_hz);
	us(w, "offcpu_min_us", e->opts.offcpu_min_ns);
	us(w, "slow_syscall_us", e->opts.slow_syscall_ns);
	write_record_rate(w, e);
	write_wall(w, e);
	/* which calls the per-syscall counts and latencies are of (scope.syscalls says how) */
	if (e->on & EBPF_COLLECT_SYSCALLS)
		jsonw_kv_str(w, "syscalls_counted", e->sys_switch ? "gave_up_cpu" : "every_call");
	/* how off-CPU and syscall records are completed: a task work of the thread's own, or
	 * at sys_exit (every task's system calls on the slow path), and why */
	if (e->on & (EBPF_COLLECT_OFFCPU | EBPF_COLLECT_SYSCALLS))
		jsonw_kv_str(w, "task_work", e->task_work_why[0] ? e->task_work_why :
			     (e->off_task_work || e->sys_switch) ? "used" :
			     "not used (not in this kernel, or not asked for)");
	for (size_t i = 0; i < e->nt; i++) {
		samples += e->t[i].cpu_samples;
		summed += e->t[i].summed;
		user += e->t[i].samples_user;
		trunc += e->t[i].samples_truncated;
		off += e->t[i].noff;
		slow += e->t[i].nsys;
	}
	jsonw_kv_uint(w, "cpu_samples", samples);
	jsonw_kv_double(w, "truncated_stack_share", share(trunc, user));
	jsonw_kv_str(w, "truncated_stack_rule", "the native user stack did not reach a thread's "
		     "first frame (_start, start_thread, clone), or none of its frames is in a "
		     "known mapping: see unwinding.ends for why");
	write_stack_cuts(w, e);
	write_unwinding(w, e);
	jsonw_kv_uint(w, "unique_stacks", stack_store__nstacks(&e->stacks));
	{
		uint64_t nf = 0;

		for (size_t i = 0; i < e->nt; i++)
			nf += e->t[i].parent != 0;
		jsonw_key(w, "follow");
		jsonw_obj_open(w);
		jsonw_kv_bool(w, "on", e->follow != NULL);
		jsonw_kv_uint(w, "processes", nf);
		jsonw_kv_uint(w, "not_followed", e->follow_full);
		jsonw_kv_uint(w, "max", EBPF_MAX_FOLLOWED);
		jsonw_obj_close(w);
	}
	jsonw_kv_uint(w, "offcpu_events", off);
	jsonw_kv_uint(w, "slow_syscall_events", slow);
	jsonw_kv_uint(w, "events_per_process", e->opts.max_events);
	jsonw_kv_uint(w, "events_summed", summed);
	jsonw_kv_uint(w, "records", e->records);
	jsonw_kv_uint(w, "lost_records", e->lost);
	/* a thread's record completed by a task work whose slot could not be had (the
	 * 16,384-slot map full of live threads): recorded late (off-CPU) or lost (syscalls) */
	jsonw_kv_uint(w, "task_work_map_full", e->tw_map_full);
	jsonw_kv_uint(w, "foreign_records", e->foreign);
	write_cost(w, ebpf__cost(e));
	write_budget(w, ebpf__cost(e));
	jsonw_key(w, "targets");
	jsonw_arr_open(w);
	for (size_t i = 0; i < e->nt; i++)
		write_target(w, e, &e->t[i]);
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}
