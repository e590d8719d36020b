/* SPDX-License-Identifier: MIT */
/*
 * summary.json: the numbers a person or a controller reads without opening the
 * timeline. Schema "aiprof.summary/v2", documented in README.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jsonw.h"
#include "model/names.h"
#include "model/profile.h"
#include "collect/ebpf.h"
#include "ebpf_artifacts.h"
#include "collect/uprobes.h"
#include "target/target.h"
#include "analyze/diagnosis.h"
#include "launch_stacks.h"
#include "summary.h"

/*
 * "origin": where this profile comes from, so `aiprof merge` can name each rank and refuse
 * ranks of different sessions: the Kubernetes session, pod and container the controller
 * passes in AIPROF_SESSION / AIPROF_TARGET_POD / AIPROF_TARGET_CONTAINER, and the host
 * (AIPROF_NODE_NAME, else the host name when not in a pod).
 */
static void write_origin(struct jsonw *w)
{
	static const struct { const char *key, *env; } from[] = {
		{ "session", "AIPROF_SESSION" },
		{ "pod", "AIPROF_TARGET_POD" },
		{ "container", "AIPROF_TARGET_CONTAINER" },
		{ "host", "AIPROF_NODE_NAME" },
	};
	char host[256] = "";

	jsonw_key(w, "origin");
	jsonw_obj_open(w);
	for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
		const char *v = getenv(from[i].env);

		if (v && *v)
			jsonw_kv_str(w, from[i].key, v);
	}
	if (!getenv("AIPROF_NODE_NAME") && !getenv("AIPROF_TARGET_POD") && gethostname(host, sizeof(host) - 1) == 0 &&
	    host[0])
		jsonw_kv_str(w, "host", host);
	jsonw_obj_close(w);
}

#ifndef AIPROF_VERSION
#define AIPROF_VERSION "0.1.0"
#endif

struct agg {
	const char *key;
	const char *key2;
	uint64_t count, bytes, ns;
};

struct aggs {
	struct agg *v;
	size_t n, cap;
};

static struct agg *agg_get(struct aggs *a, const char *key, const char *key2)
{
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i].key, key) == 0 && (!key2 || strcmp(a->v[i].key2, key2) == 0))
			return &a->v[i];
	if (a->n == a->cap) {
		size_t ncap = a->cap ? a->cap * 2 : 32;
		struct agg *nv = realloc(a->v, ncap * sizeof(*nv));

		if (!nv)
			return NULL;
		a->v = nv;
		a->cap = ncap;
	}
	a->v[a->n] = (struct agg){ .key = key, .key2 = key2 ? key2 : "" };
	return &a->v[a->n++];
}

static int by_ns_desc(const void *x, const void *y)
{
	const struct agg *a = x, *b = y;

	if (a->ns != b->ns)
		return a->ns < b->ns ? 1 : -1;
	return a->count < b->count ? 1 : a->count > b->count ? -1 : 0;
}

static void write_us(struct jsonw *w, const char *key, uint64_t ns)
{
	jsonw_key(w, key);
	jsonw_fixed3(w, ns);
}

static void write_target(struct jsonw *w, const struct profile *p, const struct target *t)
{
	static const char *const how[] = {
		[INJECT_NONE] = "none", [INJECT_PTRACE] = "ptrace",
		[INJECT_PTRACE_DIRECT] = "ptrace-direct", [INJECT_ALREADY_LOADED] = "already-loaded",
		[INJECT_PTRACE_WOKEN] = "ptrace-woken",
	};

	jsonw_obj_open(w);
	jsonw_kv_int(w, "pid", t->pid);
	jsonw_kv_str(w, "comm", t->comm);
	jsonw_kv_str(w, "cmdline", t->cmdline);
	jsonw_kv_str(w, "state", t->error ? "failed" : "profiled");
	/* started by a target, attached during the window; or a target chosen, attached
	 * again after its exec */
	if (t->parent)
		jsonw_kv_int(w, "parent", t->parent);
	if (t->parent || t->started_ns)
		jsonw_kv_uint(w, t->parent ? "started_after_ms" : "execd_after_ms",
			      t->started_ns > p->start_ns ? (t->started_ns - p->start_ns) / 1000000 : 0);
	/* the program it exec'd is recorded by a later entry of the same pid */
	if (t->execd_after_attach)
		jsonw_kv_bool(w, "execd_after_attach", true);
	if (t->error)
		jsonw_kv_str(w, "message", t->message);
	jsonw_kv_str(w, "method", t->uprobe_method ? "ebpf" : "ptrace");
	if (t->method_reason[0])        /* --method auto chose, and says why */
		jsonw_kv_str(w, "method_reason", t->method_reason);
	jsonw_kv_str(w, "injection", how[t->inj.how]);
	write_us(w, "stopped_us", t->inj.stop_ns);
	jsonw_kv_uint(w, "safe_point_attempts", t->inj.attempts);
	if (t->inj.safe_point[0])
		jsonw_kv_str(w, "safe_point", t->inj.safe_point);
	if (t->inj.return_path[0])
		jsonw_kv_str(w, "return_path", t->inj.return_path);
	write_us(w, "load_us", t->inj.load_ns);
	/* it ended in the window: how, when, and what aiprof was doing in it */
	if (t->died) {
		char ended[64];

		proc_status_text(t->exit_status, ended, sizeof(ended));
		jsonw_key(w, "exit");
		jsonw_obj_open(w);
		jsonw_kv_str(w, "how", ended);
		if (WIFSIGNALED(t->exit_status)) {
			const char *sig = sigabbrev_np(WTERMSIG(t->exit_status));
			char name[24];

			snprintf(name, sizeof(name), "SIG%s", sig ? sig : "?");
			jsonw_kv_str(w, "signal", name);
		} else {
			jsonw_kv_int(w, "code", WEXITSTATUS(t->exit_status));
		}
		jsonw_kv_uint(w, "after_ms", t->exit_ns > p->start_ns ?
			      (t->exit_ns - p->start_ns) / 1000000 : 0);
		jsonw_kv_str(w, "aiprof_was", t->died_during);
		jsonw_obj_close(w);
	}
	/* whether the library let go of the process after the window */
	if (t->released)
		jsonw_kv_str(w, "detached", t->released == 1 ? "released" : t->released == 2 ?
			     "kept: loaded with LD_PRELOAD" : t->released == 3 ?
			     "the process ended (or exec'd)" : "not confirmed");
	jsonw_kv_uint(w, "events", t->store.n + t->store.over.events);
	/* of those, past the event budget: in the sums (counts, tables), not kept whole */
	jsonw_kv_uint(w, "summed_events", t->store.over.events);
	jsonw_kv_uint(w, "dropped_events", t->store.drops + t->store.store_drops);
	/* records from the target's ring that failed validation (counted, never used) */
	jsonw_kv_uint(w, "rejected_records", t->store.rejected);
	jsonw_kv_uint(w, "hooks_patched", t->hooks_patched);
	jsonw_kv_uint(w, "modules_seen", t->modules_seen);
	jsonw_key(w, "gpu_timing");
	jsonw_obj_open(w);
	if (t->cupti_state == AIPROF_CUPTI_ACTIVE) {
		jsonw_kv_str(w, "source", "cupti");
	} else {
		jsonw_kv_str(w, "source", "api");
		jsonw_kv_str(w, "reason", t->cupti_reason[0] ? t->cupti_reason :
			     "no CUDA activity seen in the process");
	}
	jsonw_obj_close(w);
	uprobe_session__summary(t->uprobes, w);   /* "uprobes" and "limits"; NULL-safe */
	jsonw_obj_close(w);
}

/* What flamegraph-gpu.svg is weighted by (launch_stacks.h), with the totals to check it. */
static void write_gpu_flamegraph(struct jsonw *w, const struct profile *p)
{
	struct launch_stacks_stats st;

	launch_stacks_count(p, &st);
	jsonw_key(w, "gpu_flamegraph");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "weight", st.by_gpu_time ? "gpu_ns" : "launches");
	jsonw_kv_uint(w, "total", st.total);
	jsonw_kv_uint(w, "launches", st.launches);
	jsonw_kv_uint(w, "launches_with_stack", st.launches_with_stack);
	jsonw_kv_uint(w, "launches_stack_cfi", st.launches_stack_cfi);
	jsonw_kv_uint(w, "kernels", st.kernels);
	jsonw_obj_close(w);
}

static const char *const categories[6] = { "cuda_api", "cuda_kernel", "cuda_memcpy",
					   "cuda_memory", "nccl", "rdma" };

/* What one pass over every target's events adds up for the summary. */
struct totals {
	struct aggs kernels, copies, nccl, syncs;
	uint64_t cat_counts[6];         /* per categories[] */
	uint64_t events, drops;
	uint64_t summed;                /* of events, past the budget: in the sums only */
	uint64_t alloc_count, alloc_bytes, free_count;
};

/* What one event or one sum of events adds: how many, their API time and bytes. */
struct weight {
	uint64_t count, dur_ns, bytes;
};

/* Events into the totals: their category, and their aggregate where they have one. */
static void count_event(struct totals *tot, const struct target *t, const struct aiprof_event *e,
			struct weight wt)
{
	struct agg *a = NULL;

	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
		tot->cat_counts[0] += wt.count;
		a = agg_get(&tot->kernels, launch_kernel_name(t, e), NULL);
		break;
	case AIPROF_EV_CUDA_SYNC:
		tot->cat_counts[0] += wt.count;
		a = agg_get(&tot->syncs, api_name(e->api), NULL);
		break;
	case AIPROF_EV_GPU_KERNEL:
		tot->cat_counts[1] += wt.count;
		break;
	case AIPROF_EV_CUDA_MEMCPY:
		tot->cat_counts[2] += wt.count;
		a = agg_get(&tot->copies, memcpy_kind_name(e->u.memcpy.kind),
			    memcpy_host_memory(&e->u.memcpy));
		if (a)
			a->bytes += wt.bytes;
		break;
	case AIPROF_EV_CUDA_MEMSET:
	case AIPROF_EV_GPU_MEMCPY:
		tot->cat_counts[2] += wt.count;
		break;
	case AIPROF_EV_CUDA_ALLOC:
		tot->cat_counts[3] += wt.count;
		tot->alloc_count += wt.count;
		tot->alloc_bytes += wt.bytes;
		break;
	case AIPROF_EV_CUDA_FREE:
		tot->cat_counts[3] += wt.count;
		tot->free_count += wt.count;
		break;
	case AIPROF_EV_NCCL_COLL:
		tot->cat_counts[4] += wt.count;
		a = agg_get(&tot->nccl, nccl_op_name(e->api), NULL);
		if (a)
			a->bytes += wt.bytes;
		break;
	case AIPROF_EV_NCCL_INIT:
	case AIPROF_EV_NCCL_GROUP:
		tot->cat_counts[4] += wt.count;
		break;
	case AIPROF_EV_IBV:
		tot->cat_counts[5] += wt.count;
		break;
	default:
		break;
	}
	if (a) {
		a->count += wt.count;
		a->ns += wt.dur_ns;
	}
}

static struct weight weight_of(const struct aiprof_event *e)
{
	struct weight w = { .count = 1, .dur_ns = e->dur };

	if (e->type == AIPROF_EV_CUDA_MEMCPY)
		w.bytes = e->u.memcpy.bytes;
	else if (e->type == AIPROF_EV_CUDA_ALLOC)
		w.bytes = e->u.mem.bytes;
	else if (e->type == AIPROF_EV_NCCL_COLL)
		w.bytes = e->u.nccl.bytes;
	return w;
}

/* A sum of the events past the budget (event_store.h), counted as they would have been. */
static void count_total(struct totals *tot, const struct target *t, const struct event_total *o)
{
	struct aiprof_event e = { .type = o->type, .api = o->api };

	if (o->type == AIPROF_EV_CUDA_LAUNCH) {
		e.flags = o->flags;
		if (o->key & EVENT_TOTAL_NAMED)
			e.u.launch.name_id = (uint32_t)(o->key & ~EVENT_TOTAL_NAMED);
		else
			e.u.launch.func = o->key;
	} else if (o->type == AIPROF_EV_CUDA_MEMCPY || o->type == AIPROF_EV_CUDA_MEMSET) {
		e.u.memcpy.kind = (uint32_t)o->key;
		e.u.memcpy.flags = o->flags;
	}
	count_event(tot, t, &e, (struct weight){ o->count, o->dur_ns, o->bytes });
}

static void sort_aggs(struct aggs *g)
{
	/* qsort(NULL, 0, ...) is undefined: a process without CUDA has no aggregates */
	if (g->n)
		qsort(g->v, g->n, sizeof(*g->v), by_ns_desc);
}

static void count_all(const struct profile *p, struct totals *tot)
{
	for (size_t ti = 0; ti < p->ntargets; ti++) {
		const struct target *t = &p->targets[ti];

		tot->drops += t->store.drops + t->store.store_drops;
		tot->events += t->store.n + t->store.over.events;
		tot->summed += t->store.over.events;
		for (size_t i = 0; i < t->store.n; i++)
			count_event(tot, t, &t->store.v[i], weight_of(&t->store.v[i]));
		for (size_t i = 0; i < t->store.over.n; i++)
			count_total(tot, t, &t->store.over.v[i]);
	}
	sort_aggs(&tot->kernels);
	sort_aggs(&tot->copies);
	sort_aggs(&tot->nccl);
	sort_aggs(&tot->syncs);
}

static void write_window(struct jsonw *w, const struct profile *p)
{
	time_t secs = (time_t)(p->start_realtime_ns / 1000000000ULL);
	struct tm tm;
	char when[32];

	gmtime_r(&secs, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	jsonw_key(w, "window");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "start", when);
	jsonw_kv_uint(w, "start_monotonic_ns", p->start_ns);
	jsonw_kv_uint(w, "end_monotonic_ns", p->end_ns);
	jsonw_kv_double(w, "duration_s", (double)(p->end_ns - p->start_ns) / 1e9);
	jsonw_kv_double(w, "requested_s", (double)p->requested_ns / 1e9);
	jsonw_obj_close(w);
	jsonw_kv_str(w, "clock", "CLOCK_MONOTONIC; timeline ts/dur are microseconds of it");
	/* windows with the same boot id and time-namespace offset are on one clock */
	jsonw_key(w, "clock_domain");
	jsonw_obj_open(w);
	jsonw_key(w, "boot_id");
	if (p->clock.boot_id[0])
		jsonw_str(w, p->clock.boot_id);
	else
		jsonw_null(w);
	jsonw_key(w, "time_namespace_offset_ns");
	if (p->clock.timens_known)
		jsonw_int(w, p->clock.timens_ns);
	else
		jsonw_null(w);
	jsonw_obj_close(w);
}

/* "kernels", "memcpy", "nccl", "synchronization": the aggregates, largest API time first. */
static void write_aggregates(struct jsonw *w, const struct totals *tot)
{
	jsonw_key(w, "kernels");
	jsonw_arr_open(w);
	for (size_t i = 0; i < tot->kernels.n && i < 50; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", tot->kernels.v[i].key);
		jsonw_kv_uint(w, "launches", tot->kernels.v[i].count);
		write_us(w, "launch_api_us", tot->kernels.v[i].ns);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);

	jsonw_key(w, "memcpy");
	jsonw_arr_open(w);
	for (size_t i = 0; i < tot->copies.n; i++) {
		const struct agg *a = &tot->copies.v[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "kind", a->key);
		jsonw_kv_str(w, "host_memory", a->key2);
		jsonw_kv_uint(w, "count", a->count);
		jsonw_kv_uint(w, "bytes", a->bytes);
		write_us(w, "api_us", a->ns);
		/* meaningful for synchronous copies, where the call spans the transfer */
		jsonw_kv_double(w, "api_bandwidth_gbps", a->ns ? (double)a->bytes / (double)a->ns : 0);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);

	jsonw_key(w, "nccl");
	jsonw_arr_open(w);
	for (size_t i = 0; i < tot->nccl.n; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "op", tot->nccl.v[i].key);
		jsonw_kv_uint(w, "count", tot->nccl.v[i].count);
		jsonw_kv_uint(w, "bytes", tot->nccl.v[i].bytes);
		write_us(w, "api_us", tot->nccl.v[i].ns);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);

	jsonw_key(w, "synchronization");
	jsonw_arr_open(w);
	for (size_t i = 0; i < tot->syncs.n; i++) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "api", tot->syncs.v[i].key);
		jsonw_kv_uint(w, "count", tot->syncs.v[i].count);
		write_us(w, "wait_us", tot->syncs.v[i].ns);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

/*
 * "event_budget": how much of the window is kept whole. Past a process's budget (the memory
 * aiprof may use, shared by the targets) events are summed instead of kept: they are in the
 * counts and the kernels/memcpy/nccl/synchronization tables, and the eBPF flame graphs are
 * whole-window anyway; the timeline, the GPU-launch flame graph and the diagnosis cover the
 * events kept, from the start of the window to kept_until_s.
 */
static void write_event_budget(struct jsonw *w, const struct profile *p, const struct totals *tot)
{
	uint64_t first = 0, per_process = 0;

	for (size_t i = 0; i < p->ntargets; i++) {
		const struct event_store *st = &p->targets[i].store;

		if (i == 0)     /* a process chosen; the late ones share one such budget */
			per_process = st->max_events ? st->max_events : EVENT_STORE_MAX_EVENTS;
		if (st->over.events && (!first || st->over.first_ts < first))
			first = st->over.first_ts;
	}
	jsonw_key(w, "event_budget");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "events_per_process", per_process);
	jsonw_kv_uint(w, "kept", tot->events - tot->summed);
	jsonw_kv_uint(w, "summed", tot->summed);
	if (tot->summed) {
		jsonw_kv_double(w, "kept_until_s", first > p->start_ns ?
				(double)(first - p->start_ns) / 1e9 : 0);
		jsonw_kv_str(w, "note", "past the budget events are summed, not kept: the library "
			     "events' counts, the kernels, memcpy, nccl and synchronization tables and "
			     "the CPU and off-CPU flame graphs cover the whole window; the timeline, "
			     "the GPU-launch flame graph and the diagnosis cover it up to "
			     "kept_until_s");
	}
	jsonw_obj_close(w);
}

/* The processes the targets started, attached during the window (targets[] lists them,
 * with their parent). */
static void write_late(struct jsonw *w, const struct late_stats *l)
{
	jsonw_key(w, "followed_attach");
	jsonw_obj_open(w);
	jsonw_kv_bool(w, "on", l->on);
	jsonw_kv_uint(w, "processes", l->offered);
	jsonw_kv_uint(w, "attached", l->attached);
	jsonw_kv_uint(w, "failed", l->failed);
	jsonw_kv_uint(w, "exited_before_attach", l->gone);
	/* died while aiprof attached them: in targets[], with how (targets[].exit) */
	jsonw_kv_uint(w, "died_while_attached", l->died);
	jsonw_kv_uint(w, "over_limit", l->over);
	jsonw_kv_uint(w, "execd_after_attach", l->execd_after);
	/* offered, but still waiting for the attach before it as the window closed */
	jsonw_kv_uint(w, "not_attached_window_ended", l->window_ended);
	if (l->last_failure[0])
		jsonw_kv_str(w, "last_failure", l->last_failure);
	jsonw_obj_close(w);
}

static void write_document(struct jsonw *w, const struct profile *p, const struct totals *tot)
{
	jsonw_obj_open(w);
	jsonw_kv_str(w, "schema", "aiprof.summary/v2");
	jsonw_kv_str(w, "aiprof_version", AIPROF_VERSION);
	write_origin(w);
	write_window(w, p);
	jsonw_key(w, "targets");
	jsonw_arr_open(w);
	for (size_t i = 0; i < p->ntargets; i++)
		write_target(w, p, &p->targets[i]);
	jsonw_arr_close(w);
	write_late(w, &p->late);

	jsonw_kv_uint(w, "events", tot->events);
	jsonw_kv_uint(w, "dropped_events", tot->drops);
	write_event_budget(w, p, tot);
	jsonw_key(w, "counts");
	jsonw_obj_open(w);
	for (size_t i = 0; i < 6; i++)
		jsonw_kv_uint(w, categories[i], tot->cat_counts[i]);
	summary_write_counts_ebpf(w, p);
	jsonw_obj_close(w);

	write_aggregates(w, tot);
	jsonw_key(w, "gpu_memory");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "allocations", tot->alloc_count);
	jsonw_kv_uint(w, "allocated_bytes", tot->alloc_bytes);
	jsonw_kv_uint(w, "frees", tot->free_count);
	jsonw_obj_close(w);

	ebpf_summary_write(w, p->ebpf, p->ebpf_reason);
	summary_write_analysis(w, p);
	summary_write_findings(w, p);
	write_gpu_flamegraph(w, p);
	jsonw_key(w, "not_collected");
	jsonw_arr_open(w);
	if (!p->ebpf) {
		char why[400];

		snprintf(why, sizeof(why), "cpu and off-CPU stacks, syscalls, python frames: eBPF "
			 "collectors off (%s)", p->ebpf_reason[0] ? p->ebpf_reason : "not requested");
		jsonw_str(w, why);
	}
	summary_write_not_collected(w, p);
	jsonw_arr_close(w);
	jsonw_obj_close(w);
	jsonw_newline(w);
}

int summary_write(const struct profile *p, const char *path)
{
	struct totals tot = { 0 };
	struct jsonw *w;
	FILE *f;
	int r;

	count_all(p, &tot);
	f = fopen(path, "we");
	if (!f) {
		r = -errno;
		goto out;
	}
	w = jsonw__new(jsonw_sink_file, f);
	if (!w) {
		fclose(f);
		r = -ENOMEM;
		goto out;
	}
	write_document(w, p, &tot);
	r = jsonw__finish(w);
	if (fclose(f) != 0 && !r)
		r = -errno;
out:
	free(tot.kernels.v);
	free(tot.copies.v);
	free(tot.nccl.v);
	free(tot.syncs.v);
	return r;
}
