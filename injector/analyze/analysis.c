/* SPDX-License-Identifier: MIT */
/*
 * Metrics over a recorded window; see analysis.h. One pass over the library events that
 * happen on CPU threads, a second over CUPTI records (which need the launches' correlation
 * ids), then per-thread, per-stream and per-rank reductions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "u64map.h"
#include "model/names.h"
#include "model/profile.h"
#include "analysis.h"

const char *const analysis_categories[10] = {
	"cuda_api", "cuda_kernel", "cuda_memcpy", "cuda_memory", "nccl", "rdma",
	"syscall", "cpu_sample", "offcpu", "python",
};

/* ---- small containers ------------------------------------------------------------------ */

#define GROW(v, n, cap, fail)                                                      \
	do {                                                                       \
		if ((n) == (cap)) {                                                \
			size_t ncap_ = (cap) ? (cap) * 2 : 16;                     \
			void *nv_ = realloc((v), ncap_ * sizeof(*(v)));            \
			if (!nv_)                                                  \
				goto fail;                                         \
			(v) = nv_;                                                 \
			(cap) = ncap_;                                             \
		}                                                                  \
	} while (0)

/* u64 -> u32 index, UINT32_MAX when absent: the generic map, typed for this file. */
struct idmap {
	struct u64map m;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static void idmap_free(struct idmap *m)
{
	u64map_clear(&m->m);
}

static uint32_t idmap_get(const struct idmap *m, uint64_t key)
{
	uint64_t v;

	return u64map_get(&m->m, key, &v) ? (uint32_t)v : UINT32_MAX;
}

static int idmap_put(struct idmap *m, uint64_t key, uint32_t val)
{
	return u64map_put(&m->m, key, val);
}

/*
 * Correlation id -> value. Ids are counters handed out in launch order, so after the first
 * pass they are looked up in a dense array when they are dense, else by binary search.
 */
struct corr_pair {
	uint64_t corr;
	uint32_t val;
};

struct corrmap {
	struct corr_pair *v;
	size_t n, cap;
	uint32_t *dense;
	uint64_t base;
	size_t range;
	bool sorted;
};

static int corrmap_add(struct corrmap *m, uint64_t corr, uint32_t val)
{
	if (m->n == m->cap) {
		size_t ncap = m->cap ? m->cap * 2 : 1024;
		struct corr_pair *nv = realloc(m->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		m->v = nv;
		m->cap = ncap;
	}
	m->v[m->n++] = (struct corr_pair){ corr, val };
	return 0;
}

static int corr_cmp(const void *x, const void *y)
{
	const struct corr_pair *a = x, *b = y;

	return a->corr < b->corr ? -1 : a->corr > b->corr;
}

static int corrmap_finish(struct corrmap *m)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (size_t i = 0; i < m->n; i++) {
		if (m->v[i].corr < lo)
			lo = m->v[i].corr;
		if (m->v[i].corr > hi)
			hi = m->v[i].corr;
	}
	if (m->n && hi - lo < 8 * (uint64_t)m->n + 1024) {
		m->range = (size_t)(hi - lo + 1);
		m->base = lo;
		m->dense = malloc(m->range * sizeof(*m->dense));
		if (!m->dense)
			return -ENOMEM;
		memset(m->dense, 0xff, m->range * sizeof(*m->dense));
		for (size_t i = 0; i < m->n; i++)
			m->dense[m->v[i].corr - lo] = m->v[i].val;
		return 0;
	}
	if (m->n)
		qsort(m->v, m->n, sizeof(*m->v), corr_cmp);
	m->sorted = true;
	return 0;
}

static uint32_t corrmap_get(const struct corrmap *m, uint64_t corr)
{
	if (m->dense)
		return corr >= m->base && corr - m->base < m->range ? m->dense[corr - m->base] : UINT32_MAX;
	if (m->sorted && m->n) {
		struct corr_pair key = { corr, 0 }, *hit = bsearch(&key, m->v, m->n, sizeof(*m->v), corr_cmp);

		return hit ? hit->val : UINT32_MAX;
	}
	return UINT32_MAX;
}

static void corrmap_free(struct corrmap *m)
{
	free(m->v);
	free(m->dense);
	memset(m, 0, sizeof(*m));
}

/* ns tid -> analysis thread, direct-mapped */
#define TCACHE 64
struct tcache {
	uint32_t ns[TCACHE], thi[TCACHE];
	bool valid[TCACHE];
};

static uint64_t str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

/* ---- spans ------------------------------------------------------------------------------ */

static int span_cmp(const void *x, const void *y)
{
	const struct an_span *a = x, *b = y;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return a->end < b->end ? -1 : a->end > b->end;
}

size_t an_spans_merge(struct an_span *s, size_t n)
{
	size_t o = 0;
	bool sorted = true;

	for (size_t i = 1; i < n && sorted; i++)
		sorted = s[i - 1].start <= s[i].start;
	if (!sorted)
		qsort(s, n, sizeof(*s), span_cmp);
	for (size_t i = 0; i < n; i++) {
		if (s[i].end <= s[i].start)
			continue;
		if (o && s[i].start <= s[o - 1].end) {
			if (s[i].end > s[o - 1].end)
				s[o - 1].end = s[i].end;
			continue;
		}
		s[o++] = s[i];
	}
	return o;
}

uint64_t an_spans_uncovered(const struct an_span *s, size_t n, uint64_t start, uint64_t end)
{
	uint64_t covered = 0;
	size_t lo = 0, hi = n;

	if (end <= start)
		return 0;
	/* first span that ends after start */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s[mid].end <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < n && s[i].start < end; i++) {
		uint64_t a = s[i].start > start ? s[i].start : start;
		uint64_t b = s[i].end < end ? s[i].end : end;

		if (b > a)
			covered += b - a;
	}
	return end - start - covered;
}

/* total length of the intersection of two sorted, merged span lists */
static uint64_t spans_intersection(const struct an_span *a, size_t na, const struct an_span *b,
				   size_t nb)
{
	uint64_t sum = 0;
	size_t i = 0, j = 0;

	while (i < na && j < nb) {
		uint64_t lo = a[i].start > b[j].start ? a[i].start : b[j].start;
		uint64_t hi = a[i].end < b[j].end ? a[i].end : b[j].end;

		if (hi > lo)
			sum += hi - lo;
		if (a[i].end < b[j].end)
			i++;
		else
			j++;
	}
	return sum;
}

static uint64_t spans_total(const struct an_span *s, size_t n, uint64_t lo, uint64_t hi)
{
	return (hi - lo) - an_spans_uncovered(s, n, lo, hi);
}

static int u64_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* the q-quantile of v (sorted in place) */
static uint64_t quantile(uint64_t *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), u64_cmp);
	i = (size_t)((double)(n - 1) * q + 0.5);
	return v[i < n ? i : n - 1];
}

/* ---- the builder's working state --------------------------------------------------------- */

struct coll_rec {
	uint64_t start, end;
};

/* the collectives of one thread on one communicator */
struct rank_stream {
	uint32_t thread;
	uint64_t comm;
	int32_t rank, nranks;
	struct coll_rec *v;
	size_t n, cap;
};

struct th_work {
	struct an_span *api;
	size_t napi, capapi;
	struct an_span *gpu;
	size_t ngpu, capgpu;
	uint32_t *trans;              /* [prev api][api] transition counts */
	uint16_t prev_api;
};

struct stream_work {
	struct an_span *v;
	size_t n, cap;
};

struct dev_work {
	pid_t pid;
	uint32_t device;
	struct an_span *comm, *compute;
	size_t ncomm, capcomm, ncompute, capcompute;
};

struct alloc_rec {
	uint64_t bytes, ts;
	bool freed;
};

struct builder {
	const struct profile *p;
	const struct analysis_opts *o;
	struct analysis *a;
	struct idmap thread_ix;       /* pid << 32 | host tid -> thread */
	struct th_work *tw;
	size_t captw;
	struct idmap kernel_ix;       /* name hash -> kernel */
	size_t capk;
	struct idmap copy_ix;         /* (kind, host) -> copy */
	struct idmap nccl_ix;
	struct idmap sync_ix;
	struct rank_stream *rs;
	size_t nrs, caprs;
	struct idmap rs_ix;           /* thread << 40 ^ comm hash -> rank stream */
	struct stream_work *sw;
	size_t capsw;
	struct idmap stream_ix;       /* pid, device, stream -> stream */
	struct dev_work *dw;
	size_t ndw, capdw;
};

static int add_thread(struct builder *b, const struct target *t, size_t ti, uint32_t host_tid,
		      uint32_t *ret)
{
	struct analysis *a = b->a;
	uint64_t key = (uint64_t)(uint32_t)t->pid << 32 | host_tid;
	uint32_t ix = idmap_get(&b->thread_ix, key);
	struct an_thread *th;
	size_t cap = b->captw;

	if (ix != UINT32_MAX) {
		*ret = ix;
		return 0;
	}
	GROW(a->threads, a->nthreads, cap, fail);
	if (cap != b->captw) {
		struct th_work *nw = realloc(b->tw, cap * sizeof(*nw));

		if (!nw)
			goto fail;
		b->tw = nw;
		b->captw = cap;
	}
	th = &a->threads[a->nthreads];
	*th = (struct an_thread){ .pid = t->pid, .tid = host_tid, .target = ti, .rank = -1,
				  .nranks = -1, .first_ts = UINT64_MAX };
	snprintf(th->comm, sizeof(th->comm), "%s", t->comm);
	for (size_t i = 0; i < t->nthreads; i++) {
		if (t->threads[i].host_tid == host_tid ||
		    (!t->threads[i].host_tid && t->threads[i].ns_tid == host_tid)) {
			snprintf(th->comm, sizeof(th->comm), "%s", t->threads[i].comm);
			th->alive_at_end = t->threads[i].host_tid != 0;
		}
	}
	b->tw[a->nthreads] = (struct th_work){ 0 };
	b->tw[a->nthreads].trans = calloc((size_t)AIPROF_API__MAX * AIPROF_API__MAX, sizeof(uint32_t));
	if (!b->tw[a->nthreads].trans)
		goto fail;
	if (idmap_put(&b->thread_ix, key, (uint32_t)a->nthreads) < 0) {
		free(b->tw[a->nthreads].trans);
		goto fail;
	}
	*ret = (uint32_t)a->nthreads++;
	return 0;
fail:
	return -ENOMEM;
}

static struct an_kernel *kernel_of(struct builder *b, const char *name)
{
	struct analysis *a = b->a;
	uint64_t h = str_hash(name);

	/* keys h, h+1, ... hold names with equal hashes: probe until the name or a free key */
	for (;; h++) {
		uint32_t ix = idmap_get(&b->kernel_ix, h);

		if (ix == UINT32_MAX)
			break;
		if (strcmp(a->kernels[ix].name, name) == 0)
			return &a->kernels[ix];
	}
	GROW(a->kernels, a->nkernels, b->capk, fail);
	if (idmap_put(&b->kernel_ix, h, (uint32_t)a->nkernels) < 0)
		goto fail;
	a->kernels[a->nkernels] = (struct an_kernel){ .name = name, .gpu_min_ns = UINT64_MAX };
	return &a->kernels[a->nkernels++];
fail:
	return NULL;
}

/* generic "find or add" for the small aggregate arrays keyed by a 64-bit key */
#define FIND_OR_ADD(b, map, arr, n, key, init, ret)                                      \
	do {                                                                             \
		uint32_t ix_ = idmap_get((map), (key));                                  \
		(ret) = NULL;                                                            \
		if (ix_ != UINT32_MAX) {                                                 \
			(ret) = &(arr)[ix_];                                             \
			break;                                                           \
		}                                                                        \
		{                                                                        \
			void *nv_ = realloc((arr), ((n) + 1) * sizeof(*(arr)));          \
			if (!nv_)                                                        \
				break;                                                   \
			(arr) = nv_;                                                     \
		}                                                                        \
		if (idmap_put((map), (key), (uint32_t)(n)) < 0)                          \
			break;                                                           \
		(arr)[(n)] = (init);                                                     \
		(ret) = &(arr)[(n)++];                                                   \
	} while (0)

static struct an_copy *copy_of(struct builder *b, const char *kind, const char *host)
{
	struct analysis *a = b->a;
	struct an_copy *c;
	uint64_t key = str_hash(kind) * 31 + str_hash(host);

	FIND_OR_ADD(b, &b->copy_ix, a->copies, a->ncopies, key,
		    ((struct an_copy){ .kind = kind, .host_memory = host }), c);
	return c;
}

static bool is_host_device_copy(uint32_t kind)
{
	return kind == AIPROF_MEMCPY_H2D || kind == AIPROF_MEMCPY_D2H;
}

/* a call that returns only when its copy is done */
static bool copy_blocks(const struct aiprof_ev_memcpy *m)
{
	bool pageable = (m->flags & AIPROF_MEMCPY_F_HOST_KNOWN) &&
			!(m->flags & AIPROF_MEMCPY_F_HOST_PINNED) && is_host_device_copy(m->kind);

	return !(m->flags & AIPROF_MEMCPY_F_ASYNC) || pageable;
}

static uint64_t dim_threads(const uint32_t g[3], const uint32_t bl[3])
{
	return (uint64_t)g[0] * g[1] * g[2] * bl[0] * bl[1] * bl[2];
}

static int add_span(struct an_span **v, size_t *n, size_t *cap, uint64_t s, uint64_t e)
{
	GROW(*v, *n, *cap, fail);
	(*v)[(*n)++] = (struct an_span){ s, e };
	return 0;
fail:
	return -ENOMEM;
}

static int note_collective(struct builder *b, uint32_t thread, const struct aiprof_event *e)
{
	uint64_t key = (uint64_t)thread << 40 ^ (mix64(e->u.nccl.comm) & ((1ULL << 40) - 1));
	uint32_t ix = idmap_get(&b->rs_ix, key);
	struct rank_stream *r;

	if (ix == UINT32_MAX) {
		GROW(b->rs, b->nrs, b->caprs, fail);
		b->rs[b->nrs] = (struct rank_stream){ .thread = thread, .comm = e->u.nccl.comm,
						      .rank = e->u.nccl.rank,
						      .nranks = e->u.nccl.nranks };
		if (idmap_put(&b->rs_ix, key, (uint32_t)b->nrs) < 0)
			goto fail;
		ix = (uint32_t)b->nrs++;
	}
	r = &b->rs[ix];
	GROW(r->v, r->n, r->cap, fail);
	r->v[r->n++] = (struct coll_rec){ e->ts, e->ts + e->dur };
	return 0;
fail:
	return -ENOMEM;
}

/* ---- pass 1: host-side events -------------------------------------------------------------- */

/* What the passes over one target's events keep between events. */
struct target_work {
	const struct target *t;
	size_t ti;
	struct tcache tc;             /* library tid -> thread index, the last few */
	struct corrmap corr;          /* launch correlation id -> thread */
	struct corrmap ccorr;         /* copy correlation id -> copy aggregate */
	struct idmap allocs;          /* device pointer -> alloc record */
	struct alloc_rec *arec;
	size_t narec, caparec;
	uint32_t last_six;            /* the stream of the previous GPU record */
	uint64_t last_skey;
};

/* The thread (index into a->threads) that made e. */
static int thread_of(struct builder *b, struct target_work *tw, const struct aiprof_event *e,
		     uint32_t *ret)
{
	size_t slot = e->tid & (TCACHE - 1);
	int r;

	if (tw->tc.valid[slot] && tw->tc.ns[slot] == e->tid) {
		*ret = tw->tc.thi[slot];
		return 0;
	}
	r = add_thread(b, tw->t, tw->ti, target_host_tid(tw->t, e->tid), ret);
	if (r < 0)
		return r;
	tw->tc.valid[slot] = true;
	tw->tc.ns[slot] = e->tid;
	tw->tc.thi[slot] = *ret;
	return 0;
}

static int on_launch(struct builder *b, struct target_work *tw, const struct aiprof_event *e,
		     uint32_t thi)
{
	struct an_thread *th = &b->a->threads[thi];
	struct an_kernel *k = kernel_of(b, launch_kernel_name(tw->t, e));

	if (!k)
		return -ENOMEM;
	b->a->counts[0]++;
	k->launches++;
	k->api_ns += e->dur;
	th->launches++;
	th->launch_api_ns += e->dur;
	if (dim_threads(e->u.launch.grid, e->u.launch.block) <= b->o->tiny_threads)
		th->tiny_launches++;
	if (e->u.launch.correlation && corrmap_add(&tw->corr, e->u.launch.correlation, thi) < 0)
		return -ENOMEM;
	return 0;
}

static int on_sync(struct builder *b, const struct aiprof_event *e, struct an_thread *th)
{
	struct analysis *a = b->a;
	struct an_sync *s;

	a->counts[0]++;
	th->syncs++;
	th->sync_ns += e->dur;
	if (e->u.sync.kind == AIPROF_SYNC_DEVICE || e->u.sync.kind == AIPROF_SYNC_CTX)
		th->device_syncs++;
	FIND_OR_ADD(b, &b->sync_ix, a->syncs, a->nsyncs, e->api,
		    ((struct an_sync){ .api = api_name(e->api) }), s);
	if (!s)
		return -ENOMEM;
	s->count++;
	s->ns += e->dur;
	return 0;
}

static int on_copy(struct builder *b, struct target_work *tw, const struct aiprof_event *e,
		   struct an_thread *th)
{
	const struct aiprof_ev_memcpy *m = &e->u.memcpy;
	struct an_copy *c = e->type == AIPROF_EV_CUDA_MEMSET ? copy_of(b, "Memset", "none") :
			    copy_of(b, memcpy_kind_name(m->kind), memcpy_host_memory(m));

	if (!c)
		return -ENOMEM;
	b->a->counts[2]++;
	th->copies++;
	th->copy_ns += e->dur;
	c->count++;
	c->bytes += m->bytes;
	c->api_ns += e->dur;
	if (e->type == AIPROF_EV_CUDA_MEMCPY && copy_blocks(m)) {
		c->blocking_count++;
		c->blocking_bytes += m->bytes;
		c->blocking_ns += e->dur;
	}
	/* GPU records of copies find their host memory through the correlation id */
	if (m->correlation && corrmap_add(&tw->ccorr, m->correlation,
					  (uint32_t)(c - b->a->copies)) < 0)
		return -ENOMEM;
	return 0;
}

/* Device allocations and frees, paired by pointer for what was never freed. */
static int on_memory(struct builder *b, struct target_work *tw, const struct aiprof_event *e)
{
	struct an_memory *mem = &b->a->memory[tw->ti];
	uint32_t ix;

	b->a->counts[3]++;
	if (e->u.mem.kind != AIPROF_MEM_DEVICE || e->u.mem.result != 0)
		return 0;
	if (e->type == AIPROF_EV_CUDA_FREE) {
		ix = idmap_get(&tw->allocs, e->u.mem.ptr);
		mem->frees++;
		if (ix != UINT32_MAX && !tw->arec[ix].freed) {
			tw->arec[ix].freed = true;
			mem->free_bytes += tw->arec[ix].bytes;
		}
		return 0;
	}
	mem->allocs++;
	mem->alloc_bytes += e->u.mem.bytes;
	GROW(tw->arec, tw->narec, tw->caparec, nomem);
	tw->arec[tw->narec] = (struct alloc_rec){ e->u.mem.bytes, e->ts, false };
	if (idmap_put(&tw->allocs, e->u.mem.ptr, (uint32_t)tw->narec) < 0)
		return -ENOMEM;
	tw->narec++;
	return 0;
nomem:
	return -ENOMEM;
}

static int on_collective(struct builder *b, const struct aiprof_event *e, uint32_t thi)
{
	struct analysis *a = b->a;
	struct an_thread *th = &a->threads[thi];
	struct an_nccl_op *n;
	const char *op = nccl_op_name(e->api);

	a->counts[4]++;
	th->collectives++;
	th->collective_ns += e->dur;
	FIND_OR_ADD(b, &b->nccl_ix, a->nccl, a->nnccl, e->api,
		    ((struct an_nccl_op){ .op = op }), n);
	if (!n)
		return -ENOMEM;
	n->count++;
	n->bytes += e->u.nccl.bytes;
	n->api_ns += e->dur;
	if (e->dur > n->max_ns)
		n->max_ns = e->dur;
	if (e->u.nccl.rank >= 0 && e->u.nccl.nranks > 0)
		return note_collective(b, thi, e);
	return 0;
}

static int cpu_event(struct builder *b, struct target_work *tw, const struct aiprof_event *e)
{
	struct analysis *a = b->a;
	struct an_thread *th;
	struct th_work *w;
	uint32_t thi;
	int r;

	r = thread_of(b, tw, e, &thi);
	if (r < 0)
		return r;
	th = &a->threads[thi];
	w = &b->tw[thi];
	th->events++;
	if (e->ts < th->first_ts)
		th->first_ts = e->ts;
	if (e->ts + e->dur >= th->last_end) {
		th->last_end = e->ts + e->dur;
		th->last_api = e->api;
	}
	if (e->api < AIPROF_API__MAX) {
		if (w->prev_api)
			w->trans[(size_t)w->prev_api * AIPROF_API__MAX + e->api]++;
		w->prev_api = e->api;
	}
	if (e->dur && add_span(&w->api, &w->napi, &w->capapi, e->ts, e->ts + e->dur) < 0)
		return -ENOMEM;

	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
		return on_launch(b, tw, e, thi);
	case AIPROF_EV_CUDA_SYNC:
		return on_sync(b, e, th);
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET:
		return on_copy(b, tw, e, th);
	case AIPROF_EV_CUDA_ALLOC:
	case AIPROF_EV_CUDA_FREE:
		return on_memory(b, tw, e);
	case AIPROF_EV_NCCL_COLL:
		return on_collective(b, e, thi);
	case AIPROF_EV_NCCL_INIT:
	case AIPROF_EV_NCCL_GROUP:
		a->counts[4]++;
		return 0;
	case AIPROF_EV_IBV:
		a->counts[5]++;
		return 0;
	default:
		return 0;
	}
}

/* ---- pass 2: CUPTI records ------------------------------------------------------------------ */

static bool is_comm_kernel(const char *name)
{
	return name && (strstr(name, "nccl") || strstr(name, "NCCL"));
}

static struct dev_work *dev_of(struct builder *b, pid_t pid, uint32_t device)
{
	for (size_t i = 0; i < b->ndw; i++)
		if (b->dw[i].pid == pid && b->dw[i].device == device)
			return &b->dw[i];
	GROW(b->dw, b->ndw, b->capdw, fail);
	b->dw[b->ndw] = (struct dev_work){ .pid = pid, .device = device };
	return &b->dw[b->ndw++];
fail:
	return NULL;
}

static int gpu_event(struct builder *b, const struct target *t, const struct aiprof_event *e,
		     const struct corrmap *corr, const struct corrmap *ccorr, uint32_t *last_six,
		     uint64_t *last_skey)
{
	struct analysis *a = b->a;
	const struct aiprof_ev_gpu *g = &e->u.gpu;

	if (e->type == AIPROF_EV_GPU_MEMCPY) {
		uint32_t cix = g->correlation ? corrmap_get(ccorr, g->correlation) : UINT32_MAX;
		struct an_copy *c = cix != UINT32_MAX ? &a->copies[cix] :
				    copy_of(b, memcpy_kind_name(g->kind), "unknown");

		a->counts[2]++;
		if (!c)
			return -ENOMEM;
		c->gpu_count++;
		c->gpu_bytes += g->bytes;
		c->gpu_ns += e->dur;
		return 0;
	}
	if (e->type != AIPROF_EV_GPU_KERNEL)
		return 0;
	{
		const char *name = event_store__string(&t->store, g->name_id);
		struct an_kernel *k = kernel_of(b, name ? name : "[unknown kernel]");
		uint64_t skey = (uint64_t)(uint32_t)t->pid << 32 ^ (uint64_t)g->device << 24 ^ g->stream;
		uint32_t six = *last_six != UINT32_MAX && *last_skey == skey ? *last_six :
			       idmap_get(&b->stream_ix, skey);
		uint32_t thi = g->correlation ? corrmap_get(corr, g->correlation) : UINT32_MAX;
		struct dev_work *d = dev_of(b, t->pid, g->device);

		a->counts[1]++;
		a->gpu_timing = true;
		if (!k || !d)
			return -ENOMEM;
		k->gpu_count++;
		k->gpu_ns += e->dur;
		if (e->dur < k->gpu_min_ns)
			k->gpu_min_ns = e->dur;
		if (e->dur > k->gpu_max_ns)
			k->gpu_max_ns = e->dur;
		if (six == UINT32_MAX) {
			size_t cap = b->capsw;

			GROW(a->streams, a->nstreams, cap, nomem);
			if (cap != b->capsw) {
				struct stream_work *nw = realloc(b->sw, cap * sizeof(*nw));

				if (!nw)
					return -ENOMEM;
				b->sw = nw;
				b->capsw = cap;
			}
			a->streams[a->nstreams] = (struct an_stream){ .pid = t->pid, .device = g->device,
								      .stream = g->stream, .rank = -1 };
			b->sw[a->nstreams] = (struct stream_work){ 0 };
			if (idmap_put(&b->stream_ix, skey, (uint32_t)a->nstreams) < 0)
				return -ENOMEM;
			six = (uint32_t)a->nstreams++;
		}
		*last_six = six;
		*last_skey = skey;
		a->streams[six].kernels++;
		if (thi != UINT32_MAX && !a->streams[six].tid)
			a->streams[six].tid = thi + 1;   /* resolved to a tid at the end */
		if (add_span(&b->sw[six].v, &b->sw[six].n, &b->sw[six].cap, e->ts, e->ts + e->dur) < 0)
			return -ENOMEM;
		if (is_comm_kernel(name)) {
			if (add_span(&d->comm, &d->ncomm, &d->capcomm, e->ts, e->ts + e->dur) < 0)
				return -ENOMEM;
		} else if (add_span(&d->compute, &d->ncompute, &d->capcompute, e->ts, e->ts + e->dur) < 0) {
			return -ENOMEM;
		}
		if (thi != UINT32_MAX) {
			struct th_work *w = &b->tw[thi];

			a->threads[thi].gpu_kernels++;
			if (e->dur < b->o->short_kernel_ns)
				a->threads[thi].short_kernels++;
			if (add_span(&w->gpu, &w->ngpu, &w->capgpu, e->ts, e->ts + e->dur) < 0)
				return -ENOMEM;
		}
	}
	return 0;
nomem:
	return -ENOMEM;
}

/* ---- reductions ------------------------------------------------------------------------------ */

static int kernel_cmp_gpu(const void *x, const void *y)
{
	const struct an_kernel *a = x, *b = y;

	if (a->gpu_ns != b->gpu_ns)
		return a->gpu_ns < b->gpu_ns ? 1 : -1;
	if (a->launches != b->launches)
		return a->launches < b->launches ? 1 : -1;
	return strcmp(a->name, b->name);
}

static int kernel_cmp_launches(const void *x, const void *y)
{
	const struct an_kernel *a = x, *b = y;

	if (a->launches != b->launches)
		return a->launches < b->launches ? 1 : -1;
	if (a->api_ns != b->api_ns)
		return a->api_ns < b->api_ns ? 1 : -1;
	return strcmp(a->name, b->name);
}

static int copy_cmp(const void *x, const void *y)
{
	const struct an_copy *a = x, *b = y;

	if (a->api_ns != b->api_ns)
		return a->api_ns < b->api_ns ? 1 : -1;
	return a->bytes < b->bytes ? 1 : a->bytes > b->bytes ? -1 : 0;
}

static int nccl_cmp(const void *x, const void *y)
{
	const struct an_nccl_op *a = x, *b = y;

	return a->api_ns < b->api_ns ? 1 : a->api_ns > b->api_ns ? -1 : strcmp(a->op, b->op);
}

/* the thread's main communicator and its collective statistics */
static int thread_collectives(struct builder *b)
{
	struct analysis *a = b->a;

	for (size_t i = 0; i < b->nrs; i++) {
		struct rank_stream *r = &b->rs[i];
		struct an_thread *th = &a->threads[r->thread];
		size_t best = 0;

		/* the communicator with most collectives wins */
		for (size_t j = 0; j < b->nrs; j++)
			if (b->rs[j].thread == r->thread && b->rs[j].n > best)
				best = b->rs[j].n;
		if (r->n != best || th->rank >= 0)
			continue;
		th->rank = r->rank;
		th->nranks = r->nranks;
		th->comm_id = r->comm;
		if (r->n >= 2) {
			uint64_t *v = malloc(r->n * sizeof(*v));

			if (!v)
				return -ENOMEM;
			for (size_t k = 0; k + 1 < r->n; k++)
				v[k] = r->v[k + 1].start - r->v[k].start;
			th->coll_period_ns = quantile(v, r->n - 1, 0.5);
			for (size_t k = 0; k < r->n; k++)
				v[k] = r->v[k].end - r->v[k].start;
			th->coll_p99_ns = quantile(v, r->n, 0.99);
			free(v);
		} else if (r->n == 1) {
			th->coll_p99_ns = r->v[0].end - r->v[0].start;
		}
	}
	return 0;
}

static int coll_rec_cmp(const void *x, const void *y)
{
	const struct coll_rec *a = x, *b = y;

	return a->start < b->start ? -1 : a->start > b->start;
}

/*
 * How well member m's collectives line up with the reference's at offset o (ref k <-> m
 * k + o). A collective cannot finish on one rank before another rank has entered it, so for
 * blocking collectives a wrong offset shows up as exits before entries ("violations"); for
 * non-blocking ones the offset with the closest entry times wins.
 */
static void align_score(const struct rank_stream *ref, const struct rank_stream *m, long o,
			uint64_t *viol, uint64_t *spread, size_t *pairs)
{
	const uint64_t tol = 50000;   /* 50 us of clock skew between sources */

	*viol = 0;
	*spread = 0;
	*pairs = 0;
	for (size_t k = 0; k < ref->n; k++) {
		long j = (long)k + o;
		const struct coll_rec *x, *y;

		if (j < 0 || (size_t)j >= m->n)
			continue;
		x = &ref->v[k];
		y = &m->v[j];
		if (x->end + tol < y->start || y->end + tol < x->start)
			(*viol)++;
		*spread += x->start > y->start ? x->start - y->start : y->start - x->start;
		(*pairs)++;
	}
}

/* Threads with a rank, grouped by communicator size; a rank seen twice makes it ambiguous. */
static int group_threads(struct analysis *a)
{
	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		struct an_group *g = NULL;
		struct an_rank *nm;

		if (th->rank < 0)
			continue;
		for (size_t j = 0; j < a->ngroups; j++)
			if (a->groups[j].nranks == th->nranks)
				g = &a->groups[j];
		if (!g) {
			struct an_group *ng = realloc(a->groups, (a->ngroups + 1) * sizeof(*ng));

			if (!ng)
				return -ENOMEM;
			a->groups = ng;
			g = &a->groups[a->ngroups++];
			*g = (struct an_group){ .nranks = th->nranks };
		}
		for (size_t j = 0; j < g->nm; j++)
			if (g->m[j].rank == th->rank)
				g->ambiguous = true;
		nm = realloc(g->m, (g->nm + 1) * sizeof(*nm));
		if (!nm)
			return -ENOMEM;
		g->m = nm;
		g->m[g->nm++] = (struct an_rank){ .thread = i, .rank = th->rank };
	}
	return 0;
}

/* The offset (-3..3 collectives) that best lines m up with ref (align_score). */
static long best_offset(const struct rank_stream *ref, const struct rank_stream *m)
{
	uint64_t best_v = UINT64_MAX, best_s = UINT64_MAX;
	long best = 0;

	for (long o = -3; o <= 3; o++) {
		uint64_t v, s;
		size_t np;

		align_score(ref, m, o, &v, &s, &np);
		if (np == 0)
			continue;
		s /= np;
		/* fewer violations first, then closer entries, then smaller |o| */
		if (v < best_v || (v == best_v && s < best_s)) {
			best_v = v;
			best_s = s;
			best = o;
		}
	}
	return best;
}

/* Each member's entry and exit of the collectives every member made, lined up. */
static int match_collectives(struct builder *b, struct an_group *g, const struct rank_stream **st,
			     long *off)
{
	size_t ref = 0;
	long lo = 0, hi = 0;

	for (size_t j = 0; j < g->nm; j++) {
		const struct an_thread *th = &b->a->threads[g->m[j].thread];

		for (size_t k = 0; k < b->nrs; k++)
			if (b->rs[k].thread == g->m[j].thread && b->rs[k].comm == th->comm_id)
				st[j] = &b->rs[k];
		if (st[j]->n > st[ref]->n)
			ref = j;
	}
	for (size_t j = 0; j < g->nm; j++) {
		qsort(((struct rank_stream *)st[j])->v, st[j]->n, sizeof(struct coll_rec),
		      coll_rec_cmp);
		if (j != ref)
			off[j] = best_offset(st[ref], st[j]);
	}
	/* ref index k is matched when k + off[j] is valid for every member */
	for (size_t j = 0; j < g->nm; j++) {
		if (-off[j] > lo)
			lo = -off[j];
		if ((long)st[ref]->n - ((long)st[j]->n - off[j]) > hi)
			hi = (long)st[ref]->n - ((long)st[j]->n - off[j]);
	}
	g->ncoll = (long)st[ref]->n - hi > lo ? (size_t)((long)st[ref]->n - hi - lo) : 0;
	for (size_t j = 0; j < g->nm; j++) {
		struct an_rank *m = &g->m[j];

		m->entry = calloc(g->ncoll + 1, sizeof(uint64_t));
		m->exit = calloc(g->ncoll + 1, sizeof(uint64_t));
		m->prev_exit = calloc(g->ncoll + 1, sizeof(uint64_t));
		if (!m->entry || !m->exit || !m->prev_exit)
			return -ENOMEM;
		for (size_t k = 0; k < g->ncoll; k++) {
			long idx = (long)k + lo + off[j];

			m->entry[k] = st[j]->v[idx].start;
			m->exit[k] = st[j]->v[idx].end;
			m->prev_exit[k] = idx > 0 ? st[j]->v[idx - 1].end : 0;
		}
	}
	return 0;
}

/* Per member: how late it arrived at each matched collective after the first member; and
 * the group's step period (the median time between first arrivals). */
static int group_lateness(struct an_group *g)
{
	uint64_t *lat, *first;

	if (!g->ncoll)
		return 0;
	lat = malloc(g->ncoll * sizeof(*lat));
	first = malloc(g->ncoll * sizeof(*first));
	if (!lat || !first) {
		free(lat);
		free(first);
		return -ENOMEM;
	}
	for (size_t k = 0; k < g->ncoll; k++) {
		uint64_t mn = UINT64_MAX, mx = 0;

		for (size_t j = 0; j < g->nm; j++) {
			if (g->m[j].entry[k] < mn)
				mn = g->m[j].entry[k];
			if (g->m[j].entry[k] > mx)
				mx = g->m[j].entry[k];
		}
		first[k] = mn;
		for (size_t j = 0; j < g->nm; j++)
			if (g->m[j].entry[k] == mx && mx > mn)
				g->m[j].last_count++;
	}
	for (size_t j = 0; j < g->nm; j++) {
		struct an_rank *m = &g->m[j];
		uint64_t sum = 0;

		for (size_t k = 0; k < g->ncoll; k++) {
			lat[k] = m->entry[k] - first[k];
			sum += lat[k];
			if (lat[k] > m->lateness_max_ns)
				m->lateness_max_ns = lat[k];
		}
		m->lateness_mean_ns = sum / g->ncoll;
		m->lateness_median_ns = quantile(lat, g->ncoll, 0.5);
	}
	for (size_t k = 0; k + 1 < g->ncoll; k++)
		lat[k] = first[k + 1] - first[k];
	g->period_ns = g->ncoll > 1 ? quantile(lat, g->ncoll - 1, 0.5) : 0;
	free(lat);
	free(first);
	return 0;
}

static int rank_groups(struct builder *b)
{
	struct analysis *a = b->a;
	int r = group_threads(a);

	for (size_t gi = 0; gi < a->ngroups && r == 0; gi++) {
		struct an_group *g = &a->groups[gi];
		const struct rank_stream **st;
		long *off;

		if (g->ambiguous || g->nm < 2)
			continue;
		st = calloc(g->nm, sizeof(*st));
		off = calloc(g->nm, sizeof(*off));
		r = st && off ? match_collectives(b, g, st, off) : -ENOMEM;
		free(st);
		free(off);
		if (r == 0)
			r = group_lateness(g);
	}
	return r;
}

static void next_after_last(struct builder *b)
{
	struct analysis *a = b->a;

	for (size_t i = 0; i < a->nthreads; i++) {
		struct an_thread *th = &a->threads[i];
		const uint32_t *row;
		uint64_t total = 0, best = 0;

		if (!b->tw[i].trans || th->last_api >= AIPROF_API__MAX)
			continue;
		row = &b->tw[i].trans[(size_t)th->last_api * AIPROF_API__MAX];
		for (size_t k = 0; k < AIPROF_API__MAX; k++) {
			total += row[k];
			if (row[k] > best) {
				best = row[k];
				th->next_after_last = (uint16_t)k;
			}
		}
		th->next_after_last_share = total ? (double)best / (double)total : 0;
	}
}

static void builder_free(struct builder *b)
{
	for (size_t i = 0; b->tw && i < b->a->nthreads; i++) {
		free(b->tw[i].api);
		free(b->tw[i].gpu);
		free(b->tw[i].trans);
	}
	free(b->tw);
	for (size_t i = 0; i < b->nrs; i++)
		free(b->rs[i].v);
	free(b->rs);
	for (size_t i = 0; b->sw && i < b->a->nstreams; i++)
		free(b->sw[i].v);
	free(b->sw);
	for (size_t i = 0; i < b->ndw; i++) {
		free(b->dw[i].comm);
		free(b->dw[i].compute);
	}
	free(b->dw);
	idmap_free(&b->thread_ix);
	idmap_free(&b->kernel_ix);
	idmap_free(&b->copy_ix);
	idmap_free(&b->nccl_ix);
	idmap_free(&b->sync_ix);
	idmap_free(&b->rs_ix);
	idmap_free(&b->stream_ix);
}

static int analyse_target(struct builder *b, size_t ti)
{
	const struct target *t = &b->p->targets[ti];
	struct analysis *a = b->a;
	struct target_work tw = { .t = t, .ti = ti, .last_six = UINT32_MAX };
	struct an_memory *mem = &a->memory[ti];
	int r = 0;

	mem->pid = t->pid;
	a->events += t->store.n;
	a->dropped += t->store.drops + t->store.store_drops;
	for (size_t i = 0; i < t->store.n && r == 0; i++) {
		const struct aiprof_event *e = &t->store.v[i];

		if (e->type == AIPROF_EV_GPU_KERNEL || e->type == AIPROF_EV_GPU_MEMCPY ||
		    e->type == AIPROF_EV_STRING || e->type == AIPROF_EV_LIB_STATUS ||
		    e->type == AIPROF_EV_NONE || e->type >= AIPROF_EV__MAX)
			continue;
		r = cpu_event(b, &tw, e);
	}
	if (r == 0)
		r = corrmap_finish(&tw.corr);
	if (r == 0)
		r = corrmap_finish(&tw.ccorr);
	for (size_t i = 0; i < t->store.n && r == 0; i++) {
		const struct aiprof_event *e = &t->store.v[i];

		if (e->type == AIPROF_EV_GPU_KERNEL || e->type == AIPROF_EV_GPU_MEMCPY)
			r = gpu_event(b, t, e, &tw.corr, &tw.ccorr, &tw.last_six, &tw.last_skey);
	}
	for (size_t i = 0; i < tw.narec; i++) {
		const struct alloc_rec *ar = &tw.arec[i];

		if (ar->freed)
			continue;
		mem->unfreed_allocs++;
		mem->unfreed_bytes += ar->bytes;
		if (!mem->first_unfreed_ts || ar->ts < mem->first_unfreed_ts)
			mem->first_unfreed_ts = ar->ts;
		if (ar->ts > mem->last_unfreed_ts)
			mem->last_unfreed_ts = ar->ts;
		if (ar->bytes > mem->largest_unfreed)
			mem->largest_unfreed = ar->bytes;
	}
	free(tw.arec);
	corrmap_free(&tw.corr);
	corrmap_free(&tw.ccorr);
	idmap_free(&tw.allocs);
	return r;
}

int analysis__new(const struct profile *p, const struct analysis_opts *o, struct analysis **ret)
{
	struct analysis *a = calloc(1, sizeof(*a));
	struct builder b = { .p = p, .o = o, .a = a };
	uint64_t win;
	int r = 0;

	if (!a)
		return -ENOMEM;
	a->window_start = p->start_ns;
	a->window_end = p->end_ns > p->start_ns ? p->end_ns : p->start_ns;
	win = a->window_end - a->window_start;
	a->memory = calloc(p->ntargets ? p->ntargets : 1, sizeof(*a->memory));
	a->nmemory = p->ntargets;
	if (!a->memory) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t ti = 0; ti < p->ntargets && r == 0; ti++)
		r = analyse_target(&b, ti);
	if (r < 0)
		goto out;

	for (size_t i = 0; i < a->nthreads; i++) {
		struct an_thread *th = &a->threads[i];
		struct th_work *w = &b.tw[i];

		w->napi = an_spans_merge(w->api, w->napi);
		w->ngpu = an_spans_merge(w->gpu, w->ngpu);
		th->api = w->api;
		th->napi = w->napi;
		th->gpu = w->gpu;
		th->ngpu = w->ngpu;
		w->api = w->gpu = NULL;
		if (th->first_ts == UINT64_MAX)
			th->first_ts = 0;
	}
	for (size_t i = 0; i < a->nstreams; i++) {
		struct an_stream *s = &a->streams[i];
		struct stream_work *w = &b.sw[i];

		w->n = an_spans_merge(w->v, w->n);
		s->busy_ns = spans_total(w->v, w->n, a->window_start, a->window_end);
		s->busy_pct = win ? 100.0 * (double)s->busy_ns / (double)win : 0;
		if (s->tid) {
			const struct an_thread *th = &a->threads[s->tid - 1];

			s->tid = th->tid;
			s->rank = th->rank;   /* filled below for threads with collectives */
		}
	}
	r = thread_collectives(&b);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < a->nstreams; i++) {
		const struct an_thread *th = analysis__thread(a, a->streams[i].pid, a->streams[i].tid);

		if (th)
			a->streams[i].rank = th->rank;
	}
	r = rank_groups(&b);
	if (r < 0)
		goto out;
	next_after_last(&b);

	for (size_t i = 0; i < b.ndw; i++) {
		struct dev_work *d = &b.dw[i];

		d->ncomm = an_spans_merge(d->comm, d->ncomm);
		d->ncompute = an_spans_merge(d->compute, d->ncompute);
		a->comm_ns += spans_total(d->comm, d->ncomm, a->window_start, a->window_end);
		a->compute_ns += spans_total(d->compute, d->ncompute, a->window_start, a->window_end);
		a->overlap_ns += spans_intersection(d->comm, d->ncomm, d->compute, d->ncompute);
	}
	a->overlap_known = a->gpu_timing && a->comm_ns > 0;

	if (a->nkernels)
		qsort(a->kernels, a->nkernels, sizeof(*a->kernels),
		      a->gpu_timing ? kernel_cmp_gpu : kernel_cmp_launches);
	for (size_t i = 0; i < a->nkernels; i++)
		if (a->kernels[i].gpu_min_ns == UINT64_MAX)
			a->kernels[i].gpu_min_ns = 0;
	if (a->ncopies)
		qsort(a->copies, a->ncopies, sizeof(*a->copies), copy_cmp);
	if (a->nnccl)
		qsort(a->nccl, a->nnccl, sizeof(*a->nccl), nccl_cmp);
out:
	builder_free(&b);
	if (r < 0) {
		analysis__free(a);
		return r;
	}
	*ret = a;
	return 0;
}

const struct an_thread *analysis__thread(const struct analysis *a, pid_t pid, uint32_t tid)
{
	for (size_t i = 0; a && i < a->nthreads; i++)
		if (a->threads[i].pid == pid && a->threads[i].tid == tid)
			return &a->threads[i];
	return NULL;
}

void analysis__free(struct analysis *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nthreads; i++) {
		free(a->threads[i].api);
		free(a->threads[i].gpu);
	}
	free(a->threads);
	free(a->streams);
	free(a->kernels);
	free(a->copies);
	free(a->nccl);
	for (size_t i = 0; i < a->ngroups; i++) {
		for (size_t j = 0; j < a->groups[i].nm; j++) {
			free(a->groups[i].m[j].entry);
			free(a->groups[i].m[j].exit);
			free(a->groups[i].m[j].prev_exit);
		}
		free(a->groups[i].m);
	}
	free(a->groups);
	free(a->memory);
	free(a->syncs);
	for (size_t i = 0; i < a->nowned; i++)
		free(a->owned[i]);
	free(a->owned);
	free(a);
}
