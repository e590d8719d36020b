/* SPDX-License-Identifier: MIT */
/*
 * The summary's diagnosis members (schema aiprof.summary/v2, README.md): "analysis" (GPU
 * busy per stream, top kernels, copy bandwidth, NCCL by op, per-rank collective timing,
 * compute/communication overlap, GPU memory), "timeline" (size budget and what was
 * aggregated), "findings", and the diagnosis' part of "not_collected".
 */
#include <stdio.h>
#include <string.h>

#include "jsonw.h"
#include "model/profile.h"
#include "analyze/analysis.h"
#include "analyze/diagnosis.h"
#include "timeline.h"

static void us(struct jsonw *w, const char *key, uint64_t ns)
{
	jsonw_key(w, key);
	jsonw_fixed3(w, ns);
}

/* bytes per ns is GB/s */
static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

static double round3(double v)
{
	return (double)(int64_t)(v * 1000.0 + 0.5) / 1000.0;
}

void summary_write_counts_ebpf(struct jsonw *w, const struct profile *p)
{
	const struct analysis *a = p->diag ? p->diag->analysis : NULL;

	for (size_t i = 6; a && i < 10; i++)
		jsonw_kv_uint(w, analysis_categories[i], a->counts[i]);
}

static void write_streams(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "gpu_busy");
	if (!a->gpu_timing) {
		jsonw_str(w, "unknown (API-level timing)");
		return;
	}
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->nstreams; i++) {
		const struct an_stream *s = &a->streams[i];

		jsonw_obj_open(w);
		jsonw_kv_int(w, "pid", s->pid);
		jsonw_kv_uint(w, "device", s->device);
		jsonw_kv_uint(w, "stream", s->stream);
		jsonw_kv_int(w, "rank", s->rank);
		jsonw_kv_uint(w, "kernels", s->kernels);
		us(w, "busy_us", s->busy_ns);
		jsonw_kv_double(w, "busy_pct", round3(s->busy_pct));
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

static void write_kernels(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "top_kernels");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "by", a->gpu_timing ? "gpu_time" : "launches");
	jsonw_key(w, "kernels");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->nkernels && i < AN_TOP_KERNELS; i++) {
		const struct an_kernel *k = &a->kernels[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", k->name);
		jsonw_kv_uint(w, "launches", k->launches);
		us(w, "launch_api_us", k->api_ns);
		if (a->gpu_timing) {
			jsonw_kv_uint(w, "gpu_count", k->gpu_count);
			us(w, "gpu_us", k->gpu_ns);
			us(w, "gpu_min_us", k->gpu_min_ns);
			us(w, "gpu_max_us", k->gpu_max_ns);
			us(w, "gpu_mean_us", k->gpu_count ? k->gpu_ns / k->gpu_count : 0);
		}
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

static void write_copies(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "copies");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->ncopies; i++) {
		const struct an_copy *c = &a->copies[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "kind", c->kind);
		jsonw_kv_str(w, "host_memory", c->host_memory);
		jsonw_kv_uint(w, "count", c->count);
		jsonw_kv_uint(w, "bytes", c->bytes);
		us(w, "api_us", c->api_ns);
		jsonw_kv_uint(w, "blocking_count", c->blocking_count);
		jsonw_kv_uint(w, "blocking_bytes", c->blocking_bytes);
		us(w, "blocking_us", c->blocking_ns);
		jsonw_kv_double(w, "blocking_gbps", round3(gbps(c->blocking_bytes, c->blocking_ns)));
		if (c->gpu_count) {
			jsonw_kv_uint(w, "gpu_count", c->gpu_count);
			jsonw_kv_uint(w, "gpu_bytes", c->gpu_bytes);
			us(w, "gpu_us", c->gpu_ns);
			jsonw_kv_double(w, "gpu_gbps", round3(gbps(c->gpu_bytes, c->gpu_ns)));
		}
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

static void write_nccl(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "nccl");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->nnccl; i++) {
		const struct an_nccl_op *n = &a->nccl[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "op", n->op);
		jsonw_kv_uint(w, "count", n->count);
		jsonw_kv_uint(w, "bytes", n->bytes);
		us(w, "api_us", n->api_ns);
		us(w, "max_us", n->max_ns);
		jsonw_kv_double(w, "api_gbps", round3(gbps(n->bytes, n->api_ns)));
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

static void write_ranks(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "ranks");
	jsonw_arr_open(w);
	for (size_t g = 0; g < a->ngroups; g++) {
		const struct an_group *gr = &a->groups[g];

		jsonw_obj_open(w);
		jsonw_kv_int(w, "nranks", gr->nranks);
		jsonw_kv_bool(w, "matched", !gr->ambiguous && gr->nm > 1);
		jsonw_kv_uint(w, "collectives_matched", gr->ncoll);
		us(w, "step_period_us", gr->period_ns);
		jsonw_key(w, "members");
		jsonw_arr_open(w);
		for (size_t j = 0; j < gr->nm; j++) {
			const struct an_rank *m = &gr->m[j];
			const struct an_thread *th = &a->threads[m->thread];

			jsonw_obj_open(w);
			jsonw_kv_int(w, "rank", m->rank);
			jsonw_kv_int(w, "pid", th->pid);
			jsonw_kv_uint(w, "tid", th->tid);
			jsonw_kv_uint(w, "collectives", th->collectives);
			us(w, "collective_api_us", th->collective_ns);
			us(w, "median_lateness_us", m->lateness_median_ns);
			us(w, "mean_lateness_us", m->lateness_mean_ns);
			us(w, "max_lateness_us", m->lateness_max_ns);
			jsonw_kv_uint(w, "last_arrivals", m->last_count);
			jsonw_obj_close(w);
		}
		jsonw_arr_close(w);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

static void write_threads(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "threads");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];

		if (!th->launches && !th->collectives && !th->syncs && !th->copies)
			continue;
		jsonw_obj_open(w);
		jsonw_kv_int(w, "pid", th->pid);
		jsonw_kv_uint(w, "tid", th->tid);
		jsonw_kv_str(w, "comm", th->comm);
		jsonw_kv_int(w, "rank", th->rank);
		jsonw_kv_uint(w, "launches", th->launches);
		us(w, "launch_api_us", th->launch_api_ns);
		jsonw_kv_uint(w, "syncs", th->syncs);
		jsonw_kv_uint(w, "device_syncs", th->device_syncs);
		us(w, "sync_us", th->sync_ns);
		jsonw_kv_uint(w, "copies", th->copies);
		us(w, "copy_us", th->copy_ns);
		jsonw_kv_uint(w, "collectives", th->collectives);
		us(w, "collective_us", th->collective_ns);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

static void write_analysis(struct jsonw *w, const struct analysis *a)
{
	jsonw_key(w, "analysis");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "gpu_timing", a->gpu_timing ? "cupti" : "api");
	write_streams(w, a);
	write_kernels(w, a);
	write_copies(w, a);
	write_nccl(w, a);
	write_ranks(w, a);
	jsonw_key(w, "overlap");
	jsonw_obj_open(w);
	jsonw_kv_bool(w, "known", a->overlap_known);
	if (a->overlap_known) {
		us(w, "communication_us", a->comm_ns);
		us(w, "compute_us", a->compute_ns);
		us(w, "overlap_us", a->overlap_ns);
		jsonw_kv_double(w, "overlap_share_of_communication",
				round3(a->comm_ns ? (double)a->overlap_ns / (double)a->comm_ns : 0));
	} else {
		jsonw_kv_str(w, "reason", a->gpu_timing ? "no communication kernels (nccl...) in the "
			     "GPU records" : "unknown (API-level timing)");
	}
	jsonw_obj_close(w);
	jsonw_key(w, "gpu_memory");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->nmemory; i++) {
		const struct an_memory *m = &a->memory[i];

		jsonw_obj_open(w);
		jsonw_kv_int(w, "pid", m->pid);
		jsonw_kv_uint(w, "allocations", m->allocs);
		jsonw_kv_uint(w, "frees", m->frees);
		jsonw_kv_uint(w, "allocated_bytes", m->alloc_bytes);
		jsonw_kv_uint(w, "freed_bytes", m->free_bytes);
		jsonw_kv_uint(w, "unfreed_allocations", m->unfreed_allocs);
		jsonw_kv_uint(w, "unfreed_bytes", m->unfreed_bytes);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	write_threads(w, a);
	jsonw_obj_close(w);
}

static void write_timeline(struct jsonw *w, const struct timeline_stats *s)
{
	char note[256];

	jsonw_key(w, "timeline");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "budget_bytes", s->budget_bytes);
	jsonw_kv_uint(w, "bytes", s->bytes);
	jsonw_kv_uint(w, "events_in", s->events_in);
	jsonw_kv_uint(w, "events_written", s->events_written);
	jsonw_kv_uint(w, "events_aggregated", s->events_aggregated);
	jsonw_kv_uint(w, "aggregate_slices", s->aggregate_slices);
	jsonw_kv_uint(w, "flows", s->flows);
	us(w, "bucket_us", s->bucket_ns);
	if (!s->events_aggregated)
		snprintf(note, sizeof(note), "every event is in the timeline");
	else if (s->bucket_ns)
		snprintf(note, sizeof(note), "over the size budget: %llu events folded into %llu "
			 "slices (runs of identical events, then one slice per track and %.3f ms)",
			 (unsigned long long)s->events_aggregated,
			 (unsigned long long)s->aggregate_slices, (double)s->bucket_ns / 1e6);
	else
		snprintf(note, sizeof(note), "over the size budget: %llu events folded into %llu "
			 "slices (runs of identical events); counts and totals are in the slices' args",
			 (unsigned long long)s->events_aggregated,
			 (unsigned long long)s->aggregate_slices);
	jsonw_kv_str(w, "note", note);
	jsonw_obj_close(w);
}

void summary_write_analysis(struct jsonw *w, const struct profile *p)
{
	if (p->diag && p->diag->analysis)
		write_analysis(w, p->diag->analysis);
	if (p->timeline && p->timeline->written)
		write_timeline(w, p->timeline);
}

void summary_write_findings(struct jsonw *w, const struct profile *p)
{
	const struct findings *f = p->diag ? p->diag->findings : NULL;

	jsonw_key(w, "findings");
	jsonw_arr_open(w);
	for (size_t i = 0; f && i < f->n; i++) {
		const struct finding *x = &f->v[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "category", x->category);
		jsonw_kv_str(w, "severity", finding_severity_name(x->severity));
		jsonw_kv_str(w, "summary", x->summary);
		if (x->pid)
			jsonw_kv_int(w, "pid", x->pid);
		if (x->tid)
			jsonw_kv_uint(w, "tid", x->tid);
		if (x->rank >= 0)
			jsonw_kv_int(w, "rank", x->rank);
		jsonw_key(w, "evidence");
		jsonw_obj_open(w);
		for (size_t k = 0; k < x->nev; k++) {
			const struct evidence *e = &x->ev[k];

			if (e->type == EV_U64)
				jsonw_kv_uint(w, e->key, e->u);
			else if (e->type == EV_DOUBLE)
				jsonw_kv_double(w, e->key, e->d);
			else
				jsonw_kv_str(w, e->key, e->s);
		}
		jsonw_obj_close(w);
		jsonw_kv_str(w, "remedy", x->remedy);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
}

void summary_write_not_collected(struct jsonw *w, const struct profile *p)
{
	const struct diagnosis *d = p->diag;
	char why[512];

	if (!d) {
		jsonw_str(w, "findings: the diagnosis could not be computed (out of memory)");
		return;
	}
	if (!d->waits_known) {
		snprintf(why, sizeof(why), "findings SyncCheckpoint and DataLoaderStall, and the "
			 "confirmation of NcclHang: %s", d->findings ? d->findings->waits_why : "");
		jsonw_str(w, why);
	}
	if (d->analysis && !d->analysis->gpu_timing)
		jsonw_str(w, "GPU busy per stream, kernel durations, compute/communication overlap: "
			  "unknown (API-level timing, no CUPTI records)");
}
