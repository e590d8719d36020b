/* SPDX-License-Identifier: MIT */
/*
 * timeline.json.gz: Chrome Trace Event format (the JSON Object form), which Perfetto UI
 * and chrome://tracing open. One process per target, one track per thread, one per GPU
 * stream. `ts`/`dur` are microseconds of CLOCK_MONOTONIC, with ns precision.
 *
 * Categories are fixed so tools and tests can find things: cuda_api, cuda_kernel,
 * cuda_memcpy, cuda_memory, nccl, rdma (and, from the eBPF collectors, syscall,
 * cpu_sample, offcpu, python).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "elfsym.h"
#include "jsonw.h"
#include "procsyms.h"
#include "model/names.h"
#include "model/profile.h"
#include "collect/ebpf.h"
#include "ebpf_artifacts.h"
#include "timeline.h"
#include "trace_json.h"
#include "timeline_plan.h"

#define GPU_TRACK_BASE TL_GPU_TRACK_BASE /* tid of GPU stream tracks: base + device*1000 + stream */

/* ---- writer --------------------------------------------------------------------------- */

static void hex(struct jsonw *w, const char *key, uint64_t v)
{
	char b[24];

	snprintf(b, sizeof(b), "0x%llx", (unsigned long long)v);
	jsonw_kv_str(w, key, b);
}

static void dim3(struct jsonw *w, const char *key, const uint32_t d[3])
{
	jsonw_key(w, key);
	jsonw_arr_open(w);
	jsonw_uint(w, d[0]);
	jsonw_uint(w, d[1]);
	jsonw_uint(w, d[2]);
	jsonw_arr_close(w);
}

static const char *category(const struct aiprof_event *e)
{
	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
	case AIPROF_EV_CUDA_SYNC: return "cuda_api";
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET: return "cuda_memcpy";
	case AIPROF_EV_CUDA_ALLOC:
	case AIPROF_EV_CUDA_FREE: return "cuda_memory";
	case AIPROF_EV_NCCL_INIT:
	case AIPROF_EV_NCCL_COLL:
	case AIPROF_EV_NCCL_GROUP: return "nccl";
	case AIPROF_EV_IBV: return "rdma";
	case AIPROF_EV_GPU_KERNEL: return "cuda_kernel";
	case AIPROF_EV_GPU_MEMCPY: return "cuda_memcpy";
	default: return NULL;
	}
}

/* The target's NCCL collectives by the CUPTI correlation id pushed around them (sorted), so
 * a kernel record names the call that launched it. Rebuilt per target by write_target. */
struct nccl_corr {
	uint64_t corr;
	size_t idx;
};
static struct nccl_corr *ncorr;
static size_t nncorr;

static int nccl_corr_cmp(const void *a, const void *b)
{
	const struct nccl_corr *x = a, *y = b;

	return x->corr < y->corr ? -1 : x->corr > y->corr;
}

static void nccl_corr_build(const struct target *t)
{
	size_t n = 0;

	free(ncorr);
	ncorr = NULL;
	nncorr = 0;
	for (size_t i = 0; i < t->store.n; i++)
		n += t->store.v[i].type == AIPROF_EV_NCCL_COLL && t->store.v[i].u.nccl.correlation;
	if (!n || !(ncorr = malloc(n * sizeof(*ncorr))))
		return;     /* without memory the kernels are written unlinked */
	for (size_t i = 0; i < t->store.n; i++)
		if (t->store.v[i].type == AIPROF_EV_NCCL_COLL && t->store.v[i].u.nccl.correlation)
			ncorr[nncorr++] = (struct nccl_corr){ t->store.v[i].u.nccl.correlation, i };
	qsort(ncorr, nncorr, sizeof(*ncorr), nccl_corr_cmp);
}

static const struct aiprof_event *nccl_of_kernel(const struct target *t, uint64_t corr)
{
	struct nccl_corr key = { corr, 0 }, *hit;

	if (!corr || !nncorr)
		return NULL;
	hit = bsearch(&key, ncorr, nncorr, sizeof(*ncorr), nccl_corr_cmp);
	return hit ? &t->store.v[hit->idx] : NULL;
}

static void write_args(struct jsonw *w, const struct target *t, const struct aiprof_event *e)
{
	jsonw_key(w, "args");
	jsonw_obj_open(w);
	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
		jsonw_kv_str(w, "kernel", launch_kernel_name(t, e));
		dim3(w, "grid", e->u.launch.grid);
		dim3(w, "block", e->u.launch.block);
		jsonw_kv_uint(w, "shared_mem", e->u.launch.shmem);
		hex(w, "stream", e->u.launch.stream);
		if (e->u.launch.correlation)
			jsonw_kv_uint(w, "correlation", e->u.launch.correlation);
		jsonw_kv_int(w, "result", e->u.launch.result);
		break;
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET: {
		const struct aiprof_ev_memcpy *m = &e->u.memcpy;

		jsonw_kv_uint(w, "bytes", m->bytes);
		if (e->type == AIPROF_EV_CUDA_MEMSET) {
			jsonw_kv_str(w, "kind", "Memset");
		} else {
			jsonw_kv_str(w, "kind", memcpy_kind_name(m->kind));
			jsonw_kv_str(w, "host_memory", memcpy_host_memory(m));
		}
		jsonw_kv_bool(w, "async", m->flags & AIPROF_MEMCPY_F_ASYNC);
		hex(w, "stream", m->stream);
		jsonw_kv_int(w, "result", m->result);
		break;
	}
	case AIPROF_EV_CUDA_ALLOC:
	case AIPROF_EV_CUDA_FREE: {
		static const char *const kinds[] = { "device", "host_pinned", "host_registered" };

		hex(w, "ptr", e->u.mem.ptr);
		jsonw_kv_uint(w, "bytes", e->u.mem.bytes);
		jsonw_kv_str(w, "memory", e->u.mem.kind < 3 ? kinds[e->u.mem.kind] : "unknown");
		jsonw_kv_int(w, "result", e->u.mem.result);
		break;
	}
	case AIPROF_EV_CUDA_SYNC: {
		static const char *const kinds[] = { "device", "stream", "event", "context" };

		jsonw_kv_str(w, "sync", e->u.sync.kind < 4 ? kinds[e->u.sync.kind] : "unknown");
		hex(w, "handle", e->u.sync.handle);
		jsonw_kv_int(w, "result", e->u.sync.result);
		break;
	}
	case AIPROF_EV_NCCL_INIT:
	case AIPROF_EV_NCCL_COLL:
	case AIPROF_EV_NCCL_GROUP: {
		const struct aiprof_ev_nccl *n = &e->u.nccl;

		if (e->type == AIPROF_EV_NCCL_COLL) {
			jsonw_kv_str(w, "op", nccl_op_name(e->api));
			jsonw_kv_uint(w, "count", n->count);
			jsonw_kv_uint(w, "bytes", n->bytes);
			jsonw_kv_str(w, "datatype", nccl_dtype_name(n->datatype));
			if (n->redop >= 0)
				jsonw_kv_str(w, "redop", nccl_redop_name(n->redop));
			if (n->peer >= 0)
				jsonw_kv_int(w, e->api == AIPROF_API_ncclSend ||
					     e->api == AIPROF_API_ncclRecv ? "peer" : "root", n->peer);
			hex(w, "stream", n->stream);
			if (n->seq)
				jsonw_kv_uint(w, "seq", n->seq);
			if (n->correlation)
				jsonw_kv_uint(w, "correlation", n->correlation);
		}
		if (e->type != AIPROF_EV_NCCL_GROUP) {
			jsonw_kv_int(w, "rank", n->rank);
			jsonw_kv_int(w, "nranks", n->nranks);
			hex(w, "comm", n->comm);
		}
		jsonw_kv_int(w, "result", n->result);
		break;
	}
	case AIPROF_EV_IBV: {
		const struct aiprof_ev_ibv *v = &e->u.ibv;

		hex(w, "handle", v->handle);
		if (v->addr)
			hex(w, "addr", v->addr);
		jsonw_kv_uint(w, "bytes", v->length);
		jsonw_kv_uint(w, "qp_num", v->qp_num);
		jsonw_kv_uint(w, "count", v->count);
		jsonw_kv_uint(w, "attr", v->attr);
		if (e->api == AIPROF_API_ibv_modify_qp)
			jsonw_kv_uint(w, "qp_state", v->state);
		jsonw_kv_int(w, "result", v->result);
		break;
	}
	case AIPROF_EV_GPU_KERNEL:
	case AIPROF_EV_GPU_MEMCPY: {
		const struct aiprof_ev_gpu *g = &e->u.gpu;
		const char *nm = event_store__string(&t->store, g->name_id);

		if (e->type == AIPROF_EV_GPU_KERNEL) {
			const struct aiprof_event *nc = nccl_of_kernel(t, g->correlation);

			jsonw_kv_str(w, "kernel", nm ? nm : "[unknown]");
			dim3(w, "grid", g->grid);
			dim3(w, "block", g->block);
			if (nc) {   /* an NCCL collective's kernel: the call that launched it */
				jsonw_kv_str(w, "nccl_op", nccl_op_name(nc->api));
				if (nc->u.nccl.seq)
					jsonw_kv_uint(w, "nccl_seq", nc->u.nccl.seq);
				hex(w, "nccl_comm", nc->u.nccl.comm);
			}
		} else {
			jsonw_kv_uint(w, "bytes", g->bytes);
			jsonw_kv_str(w, "kind", memcpy_kind_name(g->kind));
			/* as CUPTI saw the host side: the hooks' guess comes from the address */
			jsonw_kv_str(w, "host_memory", memcpy_host_memory_of(g->kind, g->flags));
		}
		jsonw_kv_uint(w, "device", g->device);
		jsonw_kv_uint(w, "stream", g->stream);
		jsonw_kv_uint(w, "correlation", g->correlation);
		break;
	}
	default:
		break;
	}
	jsonw_obj_close(w);
}

/* A metadata record ("ph":"M") up to its open "args" object; the caller closes both. */
static void metadata_open(struct jsonw *w, const char *what, pid_t pid, uint32_t tid)
{
	jsonw_newline(w);
	jsonw_obj_open(w);
	jsonw_kv_str(w, "ph", "M");
	jsonw_kv_str(w, "name", what);
	jsonw_kv_int(w, "pid", pid);
	jsonw_kv_uint(w, "tid", tid);
	jsonw_kv_uint(w, "ts", 0);
	jsonw_key(w, "args");
	jsonw_obj_open(w);
}

static void write_metadata(struct jsonw *w, const char *what, pid_t pid, uint32_t tid,
			   const char *name)
{
	metadata_open(w, what, pid, tid);
	jsonw_kv_str(w, "name", name);
	jsonw_obj_close(w);
	jsonw_obj_close(w);
}

/* counts what is written, for struct timeline_stats */
struct counted_gz {
	gzFile gz;
	uint64_t bytes;
};

static int sink_counted_gz(void *ctx, const char *buf, size_t len)
{
	struct counted_gz *c = ctx;

	c->bytes += len;
	return jsonw_sink_gz(c->gz, buf, len);
}

static void write_target(struct jsonw *w, const struct target *t, const struct tl_plan *pl,
			 struct timeline_stats *st)
{
	write_metadata(w, "process_name", t->pid, 0, pl->process_label);
	if (pl->first_rank >= 0) {
		/* processes ordered by rank in the UI */
		metadata_open(w, "process_sort_index", t->pid, 0);
		jsonw_kv_int(w, "sort_index", pl->first_rank);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	for (size_t i = 0; i < t->nthreads; i++) {
		uint32_t tid = t->threads[i].host_tid ? t->threads[i].host_tid : t->threads[i].ns_tid;
		const char *nm = tl_plan__track_name(pl, tid);

		write_metadata(w, "thread_name", t->pid, tid, nm ? nm : t->threads[i].comm);
	}
	for (size_t i = 0; i < pl->nnames; i++)
		if (pl->names[i].track >= GPU_TRACK_BASE)
			write_metadata(w, "thread_name", t->pid, pl->names[i].track, pl->names[i].name);
	nccl_corr_build(t);
	for (size_t k = 0; k < pl->n; k++) {
		const struct tl_item *it = &pl->items[k];
		const struct aiprof_event *e;
		const char *cat;
		uint32_t tid = it->track;

		if (tl_item_kind(it) == TL_LINE) {
			tl_plan__write_line(w, pl, it);
			st->events_written++;
			continue;
		}
		if (tl_item_kind(it) == TL_AGG) {
			const struct aiprof_event *f = &t->store.v[pl->aggs[tl_item_index(it)].first];
			const char *kn = f->type == AIPROF_EV_GPU_KERNEL ?
				event_store__string(&t->store, f->u.gpu.name_id) :
				f->type == AIPROF_EV_CUDA_LAUNCH ? launch_kernel_name(t, f) : NULL;
			char nm[320];

			if (f->type == AIPROF_EV_CUDA_LAUNCH)
				snprintf(nm, sizeof(nm), "%s %s", api_name(f->api), kn);
			else
				snprintf(nm, sizeof(nm), "%s", kn ? kn : api_name(f->api));
			tl_plan__write_agg(w, t, pl, it, nm, category(f));
			st->events_written++;
			st->aggregate_slices++;
			continue;
		}
		e = &t->store.v[tl_item_index(it)];
		cat = category(e);
		if (!cat)
			continue;
		if (e->type == AIPROF_EV_GPU_KERNEL) {
			const char *kn = event_store__string(&t->store, e->u.gpu.name_id);

			trace_event_begin(w, "X", cat, kn ? kn : "[unknown kernel]", t->pid, tid, e->ts);
		} else {
			trace_event_begin(w, "X", cat, api_name(e->api), t->pid, tid, e->ts);
		}
		jsonw_key(w, "dur");
		jsonw_fixed3(w, e->dur);
		write_args(w, t, e);
		jsonw_obj_close(w);
		st->events_written++;

		/* flow arrow from a launch to the kernel it started (CUPTI correlation); only
		 * when both ends are in the file, so every "s" has its "f" */
		if (e->type == AIPROF_EV_CUDA_LAUNCH && e->u.launch.correlation &&
		    tl_plan__flow_ok(pl, e->u.launch.correlation)) {
			char id[48];

			tl_flow_id(id, sizeof(id), t->pid, e->u.launch.correlation);
			trace_event_begin(w, "s", "cuda_kernel", "launch", t->pid, tid, e->ts);
			jsonw_kv_str(w, "id", id);
			jsonw_obj_close(w);
			st->flows++;
		} else if (e->type == AIPROF_EV_GPU_KERNEL && e->u.gpu.correlation &&
			   tl_plan__flow_ok(pl, e->u.gpu.correlation)) {
			char id[48];

			tl_flow_id(id, sizeof(id), t->pid, e->u.gpu.correlation);
			trace_event_begin(w, "f", "cuda_kernel", "launch", t->pid, tid, e->ts);
			jsonw_kv_str(w, "id", id);
			jsonw_kv_str(w, "bp", "e");
			jsonw_obj_close(w);
		}
	}
	free(ncorr);
	ncorr = NULL;
	nncorr = 0;
}

int timeline_write(const struct profile *p, const char *path)
{
	struct timeline_stats local = { 0 }, *st = p->timeline ? p->timeline : &local;
	struct tl_plan *plans;
	struct counted_gz cg = { 0 };
	uint64_t per_rank = tl_budget_per_rank(), window = p->end_ns - p->start_ns;
	struct jsonw *w;
	int r, zr;

	*st = (struct timeline_stats){ 0 };
	plans = calloc(p->ntargets ? p->ntargets : 1, sizeof(*plans));
	if (!plans)
		return -ENOMEM;
	for (size_t i = 0; i < p->ntargets; i++) {
		r = tl_plan__build(&plans[i], &p->targets[i], p->ebpf, per_rank, window);
		if (r < 0)
			goto out;
		st->budget_bytes += plans[i].budget_bytes;
		st->events_in += plans[i].events_in;
		st->events_aggregated += plans[i].events_aggregated;
		if (plans[i].bucket_ns > st->bucket_ns)
			st->bucket_ns = plans[i].bucket_ns;
	}
	/* large files: the fastest zlib level (they compress well anyway) */
	cg.gz = gzopen(path, st->events_in > 1000000 ? "wb1" : "wb6");
	if (!cg.gz) {
		r = errno ? -errno : -EIO;
		goto out;
	}
	w = jsonw__new(sink_counted_gz, &cg);
	if (!w) {
		gzclose(cg.gz);
		r = -ENOMEM;
		goto out;
	}
	jsonw_obj_open(w);
	jsonw_key(w, "traceEvents");
	jsonw_arr_open(w);
	for (size_t i = 0; i < p->ntargets; i++)
		write_target(w, &p->targets[i], &plans[i], st);
	ebpf_timeline_write_followed(w, p->ebpf);
	jsonw_arr_close(w);
	ebpf_timeline_write_frames(w, p->ebpf);
	jsonw_kv_str(w, "displayTimeUnit", "ms");
	jsonw_key(w, "otherData");
	jsonw_obj_open(w);
	jsonw_kv_str(w, "producer", "aiprof");
	jsonw_kv_str(w, "clock", "CLOCK_MONOTONIC, microseconds");
	jsonw_kv_uint(w, "window_start_ns", p->start_ns);
	jsonw_kv_uint(w, "window_end_ns", p->end_ns);
	jsonw_kv_uint(w, "budget_bytes", st->budget_bytes);
	jsonw_kv_uint(w, "events_aggregated", st->events_aggregated);
	jsonw_obj_close(w);
	jsonw_obj_close(w);
	jsonw_newline(w);
	r = jsonw__finish(w);
	zr = gzclose(cg.gz);
	if (!r && zr != Z_OK)
		r = -EIO;
	st->bytes = cg.bytes;
	st->written = r == 0;
out:
	for (size_t i = 0; i < p->ntargets; i++)
		tl_plan__clear(&plans[i]);
	free(plans);
	return r;
}
