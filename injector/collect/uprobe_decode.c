/* SPDX-License-Identifier: MIT */
/*
 * Records of the eBPF-only method (struct gp_rec, bpf/gpuprobes.h) into the events the
 * interception library writes (struct aiprof_event): raw x86-64 argument words decoded
 * per function, as the System V ABI passes them. Pure: no I/O, no BPF; the state kept
 * across records is what one target's window taught us (pinned host ranges, NCCL
 * communicators, labels of driver kernels). Declared in uprobes.h.
 *
 * Argument words come from the target and are not trusted: every value is only copied
 * or masked, never used as a size, index or pointer here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "u64map.h"
#include "bpf/gpuprobes.h"
#include "model/names.h"
#include "model/profile.h"
#include "uprobes.h"

#define MAX_PINNED      65536
#define MAX_COMMS       4096
#define MAX_LABELS      (1u << 19)
#define IBV_QP_STATE_BIT 1u                 /* IBV_QP_STATE in enum ibv_qp_attr_mask */

/* ---- record -> event ------------------------------------------------------------------- */

struct range {
	uint64_t start, len;
};

struct comm_info {
	uint64_t comm;
	int32_t rank, nranks;
};

struct uprobe_decoder {
	struct range *pinned;      /* sorted by start, disjoint as the runtime keeps them */
	size_t npinned, cap_pinned;
	struct comm_info *comms;
	size_t ncomms, cap_comms;
	struct u64map labels;      /* CUfunction -> string id */
	uint32_t next_id;
	uint64_t unknown_rank;
};

int uprobe_decoder__new(struct uprobe_decoder **ret)
{
	struct uprobe_decoder *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->next_id = 1;
	*ret = d;
	return 0;
}

void uprobe_decoder__free(struct uprobe_decoder *d)
{
	if (!d)
		return;
	free(d->pinned);
	free(d->comms);
	u64map_clear(&d->labels);
	free(d);
}

uint64_t uprobe_decoder__unknown_rank(const struct uprobe_decoder *d)
{
	return d ? d->unknown_rank : 0;
}

/* First index whose start is > p. */
static size_t pinned_upper(const struct uprobe_decoder *d, uint64_t p)
{
	size_t lo = 0, hi = d->npinned;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->pinned[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool pinned_contains(const struct uprobe_decoder *d, uint64_t p)
{
	size_t i = pinned_upper(d, p);

	return i > 0 && p - d->pinned[i - 1].start < d->pinned[i - 1].len;
}

static void pinned_add(struct uprobe_decoder *d, uint64_t start, uint64_t len)
{
	size_t i;

	if (!start || !len)
		return;
	i = pinned_upper(d, start);
	if (i > 0 && d->pinned[i - 1].start == start) {
		d->pinned[i - 1].len = len;
		return;
	}
	if (d->npinned == d->cap_pinned) {
		size_t ncap = d->cap_pinned ? d->cap_pinned * 2 : 64;
		struct range *nv;

		if (ncap > MAX_PINNED)
			return;
		nv = reallocarray(d->pinned, ncap, sizeof(*nv));
		if (!nv)
			return;
		d->pinned = nv;
		d->cap_pinned = ncap;
	}
	memmove(&d->pinned[i + 1], &d->pinned[i], (d->npinned - i) * sizeof(*d->pinned));
	d->pinned[i] = (struct range){ start, len };
	d->npinned++;
}

static void pinned_del(struct uprobe_decoder *d, uint64_t start)
{
	size_t i = pinned_upper(d, start);

	if (i == 0 || d->pinned[i - 1].start != start)
		return;
	memmove(&d->pinned[i - 1], &d->pinned[i], (d->npinned - i) * sizeof(*d->pinned));
	d->npinned--;
}

static struct comm_info *comm_find(struct uprobe_decoder *d, uint64_t comm)
{
	for (size_t i = 0; i < d->ncomms; i++)
		if (d->comms[i].comm == comm)
			return &d->comms[i];
	return NULL;
}

static void comm_remember(struct uprobe_decoder *d, uint64_t comm, int32_t rank, int32_t nranks)
{
	struct comm_info *c = comm_find(d, comm);

	if (!comm)
		return;
	if (!c) {
		if (d->ncomms == d->cap_comms) {
			size_t ncap = d->cap_comms ? d->cap_comms * 2 : 16;
			struct comm_info *nv;

			if (ncap > MAX_COMMS)
				return;
			nv = reallocarray(d->comms, ncap, sizeof(*nv));
			if (!nv)
				return;
			d->comms = nv;
			d->cap_comms = ncap;
		}
		c = &d->comms[d->ncomms++];
		c->comm = comm;
	}
	c->rank = rank;
	c->nranks = nranks;
}

static void comm_forget(struct uprobe_decoder *d, uint64_t comm)
{
	struct comm_info *c = comm_find(d, comm);

	if (c)
		*c = d->comms[--d->ncomms];
}

/*
 * The string id naming a driver kernel; 0 if it cannot be had (past MAX_LABELS kernels, or
 * out of memory). *fresh says the id is new and its AIPROF_EV_STRING must go out before the
 * launch that uses it.
 */
static uint32_t label_id(struct uprobe_decoder *d, uint64_t func, bool *fresh)
{
	uint64_t id;

	*fresh = false;
	if (!func)
		return 0;
	if (u64map_get(&d->labels, func, &id))
		return (uint32_t)id;
	if (d->labels.n >= MAX_LABELS || u64map_put(&d->labels, func, d->next_id) < 0)
		return 0;
	*fresh = true;
	return d->next_id++;
}

static uint32_t u32(uint64_t v)
{
	return (uint32_t)v;
}

/* A 32-bit argument: the upper half of its register or stack slot is undefined. */
static int32_t i32(uint64_t v)
{
	return (int32_t)(uint32_t)v;
}

static void event_init(struct aiprof_event *e, const struct gp_rec *r, uint16_t type,
		       uint16_t api)
{
	memset(e, 0, sizeof(*e));
	e->type = type;
	e->api = api;
	/* as the library would have seen them: ids in the target's pid namespace */
	e->tid = r->ns_tid ? r->ns_tid : r->tid;
	e->pid = r->ns_pid ? r->ns_pid : r->pid;
	e->ts = r->ts;
	e->dur = r->dur;
}

/* Copies' host side: pinned if it lies in a range we saw become pinned, else unknown. */
static void fill_memcpy(const struct uprobe_decoder *d, struct aiprof_event *e, uint64_t dst,
			uint64_t src, uint64_t bytes, uint32_t kind, uint64_t stream, bool async,
			int32_t result)
{
	struct aiprof_ev_memcpy *m = &e->u.memcpy;
	uint64_t host;

	m->bytes = bytes;
	m->dst = dst;
	m->src = src;
	m->stream = stream;
	m->kind = kind;
	m->flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;
	m->result = result;
	switch (kind) {
	case AIPROF_MEMCPY_H2D:
	case AIPROF_MEMCPY_H2H:
		host = src;
		break;
	case AIPROF_MEMCPY_D2H:
		host = dst;
		break;
	default:
		return;
	}
	if (pinned_contains(d, host))
		m->flags |= AIPROF_MEMCPY_F_HOST_KNOWN | AIPROF_MEMCPY_F_HOST_PINNED;
}

static void fill_nccl(struct uprobe_decoder *d, struct aiprof_event *e, uint64_t count,
		      int32_t dt, int32_t redop, int32_t peer, uint64_t comm, uint64_t stream,
		      int32_t result)
{
	struct aiprof_ev_nccl *n = &e->u.nccl;
	const struct comm_info *c = comm_find(d, comm);

	n->count = count;
	n->bytes = count * nccl_dtype_size(dt);
	n->comm = comm;
	n->stream = stream;
	n->datatype = dt;
	n->redop = redop;
	n->peer = peer;
	n->rank = c ? c->rank : -1;
	n->nranks = c ? c->nranks : -1;
	n->result = result;
	if (!c)
		d->unknown_rank++;
}

static void fill_group(struct aiprof_event *e, uint32_t op, int32_t result)
{
	e->u.nccl.op = op;
	e->u.nccl.datatype = -1;
	e->u.nccl.redop = -1;
	e->u.nccl.peer = -1;
	e->u.nccl.rank = -1;
	e->u.nccl.nranks = -1;
	e->u.nccl.result = result;
}

static void fill_mem(struct aiprof_event *e, uint64_t ptr, uint64_t bytes, uint32_t kind,
		     int32_t result)
{
	e->u.mem.ptr = ptr;
	e->u.mem.bytes = bytes;
	e->u.mem.kind = kind;
	e->u.mem.result = result;
}

static void fill_sync(struct aiprof_event *e, uint64_t handle, uint32_t kind, int32_t result)
{
	e->u.sync.handle = handle;
	e->u.sync.kind = kind;
	e->u.sync.result = result;
}

static void add_label(struct event_store *store, const struct gp_rec *r, uint32_t id,
		      uint64_t func)
{
	struct aiprof_event s;
	int n;

	event_init(&s, r, AIPROF_EV_STRING, AIPROF_API_NONE);
	s.u.str.id = id;
	n = snprintf(s.u.str.s, sizeof(s.u.str.s), "[CUfunction 0x%" PRIx64 "]", func);
	s.u.str.total = (uint16_t)(n > 0 && (size_t)n < sizeof(s.u.str.s) ? n : 0);
	event_store__add(store, &s);
}

/* Launches: the runtime's (dim3 by value), by handle (nvcc 13's <<<>>>), the driver's. */
static void decode_launch(struct uprobe_decoder *d, const struct gp_rec *r,
			  struct event_store *store, struct aiprof_event *e, int *added)
{
	const __u64 *a = r->arg;
	bool stack_ok = r->flags & GP_REC_F_ARGS;

	if (r->fn == GP_FN_cuLaunchKernel) {
		bool fresh;
		uint32_t id = label_id(d, a[0], &fresh);

		if (fresh) {
			add_label(store, r, id, a[0]);
			(*added)++;
		}
		event_init(e, r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cuLaunchKernel);
		e->u.launch.func = a[0];
		e->u.launch.grid[0] = u32(a[1]);
		e->u.launch.grid[1] = u32(a[2]);
		e->u.launch.grid[2] = u32(a[3]);
		e->u.launch.block[0] = u32(a[4]);
		e->u.launch.block[1] = u32(a[5]);
		e->u.launch.block[2] = stack_ok ? u32(a[6]) : 0;
		e->u.launch.shmem = stack_ok ? u32(a[7]) : 0;
		e->u.launch.stream = stack_ok ? a[8] : 0;
		e->u.launch.name_id = id;
		e->u.launch.result = i32(r->ret);
		return;
	}
	event_init(e, r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cudaLaunchKernel);
	e->u.launch.func = a[0];
	if (r->fn == GP_FN_cudaLaunchKernelByHandle) {
		/* a handle means nothing to us: the stub that called is the kernel's */
		e->u.launch.func = (r->flags & GP_REC_F_RD0) ? r->rd[0] : 0;
		e->flags |= AIPROF_EV_F_LAUNCH_CALLER;
	}
	/* dim3 by value: 12 bytes, two INTEGER eightbytes each (x | y << 32, z) */
	e->u.launch.grid[0] = u32(a[1]);
	e->u.launch.grid[1] = u32(a[1] >> 32);
	e->u.launch.grid[2] = u32(a[2]);
	e->u.launch.block[0] = u32(a[3]);
	e->u.launch.block[1] = u32(a[3] >> 32);
	e->u.launch.block[2] = u32(a[4]);
	e->u.launch.shmem = stack_ok ? u32(a[6]) : 0;
	e->u.launch.stream = stack_ok ? a[7] : 0;
	e->u.launch.result = i32(r->ret);
}

#define ARG_NONE  (-1)
#define KIND_ARG3 UINT32_MAX  /* the copy's kind is its fourth argument */

/* Copies (dst, src, bytes, ...): where the kind and the stream are. */
static const struct copy_fn {
	uint16_t fn, api;
	uint32_t kind;
	int8_t stream_arg;
} copy_fns[] = {
	{ GP_FN_cudaMemcpy, AIPROF_API_cudaMemcpy, KIND_ARG3, ARG_NONE },
	{ GP_FN_cudaMemcpyAsync, AIPROF_API_cudaMemcpyAsync, KIND_ARG3, 4 },
	{ GP_FN_cuMemcpy, AIPROF_API_cuMemcpy, AIPROF_MEMCPY_DEFAULT, ARG_NONE },
	{ GP_FN_cuMemcpyAsync, AIPROF_API_cuMemcpyAsync, AIPROF_MEMCPY_DEFAULT, 3 },
	{ GP_FN_cuMemcpyHtoD_v2, AIPROF_API_cuMemcpyHtoD_v2, AIPROF_MEMCPY_H2D, ARG_NONE },
	{ GP_FN_cuMemcpyDtoH_v2, AIPROF_API_cuMemcpyDtoH_v2, AIPROF_MEMCPY_D2H, ARG_NONE },
	{ GP_FN_cuMemcpyDtoD_v2, AIPROF_API_cuMemcpyDtoD_v2, AIPROF_MEMCPY_D2D, ARG_NONE },
	{ GP_FN_cuMemcpyHtoDAsync_v2, AIPROF_API_cuMemcpyHtoDAsync_v2, AIPROF_MEMCPY_H2D, 3 },
	{ GP_FN_cuMemcpyDtoHAsync_v2, AIPROF_API_cuMemcpyDtoHAsync_v2, AIPROF_MEMCPY_D2H, 3 },
	{ GP_FN_cuMemcpyDtoDAsync_v2, AIPROF_API_cuMemcpyDtoDAsync_v2, AIPROF_MEMCPY_D2D, 3 },
};

enum mem_ptr { PTR_OUT, PTR_ARG0 };   /* the pointer: written through arg 0, or arg 0 itself */

/* Allocations and frees: which event, where the pointer and size are, pinned bookkeeping. */
static const struct mem_fn {
	uint16_t fn, type, api;
	uint8_t ptr;                    /* enum mem_ptr */
	int8_t bytes_arg;
	uint32_t kind;                  /* AIPROF_MEM_* */
	int8_t pinned;                  /* +1: host memory now pinned, -1: no longer, 0 */
} mem_fns[] = {
	{ GP_FN_cudaMalloc, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMalloc, PTR_OUT, 1,
	  AIPROF_MEM_DEVICE, 0 },
	{ GP_FN_cuMemAlloc_v2, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cuMemAlloc_v2, PTR_OUT, 1,
	  AIPROF_MEM_DEVICE, 0 },
	{ GP_FN_cudaFree, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFree, PTR_ARG0, ARG_NONE,
	  AIPROF_MEM_DEVICE, 0 },
	{ GP_FN_cuMemFree_v2, AIPROF_EV_CUDA_FREE, AIPROF_API_cuMemFree_v2, PTR_ARG0, ARG_NONE,
	  AIPROF_MEM_DEVICE, 0 },
	{ GP_FN_cudaMallocHost, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMallocHost, PTR_OUT, 1,
	  AIPROF_MEM_HOST_PINNED, +1 },
	{ GP_FN_cudaHostAlloc, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaHostAlloc, PTR_OUT, 1,
	  AIPROF_MEM_HOST_PINNED, +1 },
	{ GP_FN_cudaFreeHost, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFreeHost, PTR_ARG0, ARG_NONE,
	  AIPROF_MEM_HOST_PINNED, -1 },
	{ GP_FN_cudaHostRegister, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaHostRegister, PTR_ARG0, 1,
	  AIPROF_MEM_HOST_REGISTERED, +1 },
	{ GP_FN_cudaHostUnregister, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaHostUnregister, PTR_ARG0,
	  ARG_NONE, AIPROF_MEM_HOST_REGISTERED, -1 },
};

/* Synchronisations: the kind, and the argument that is its handle (none: 0). */
static const struct sync_fn {
	uint16_t fn, api;
	uint32_t kind;
	int8_t handle_arg;
} sync_fns[] = {
	{ GP_FN_cudaStreamSynchronize, AIPROF_API_cudaStreamSynchronize, AIPROF_SYNC_STREAM, 0 },
	{ GP_FN_cudaDeviceSynchronize, AIPROF_API_cudaDeviceSynchronize, AIPROF_SYNC_DEVICE,
	  ARG_NONE },
	{ GP_FN_cudaEventSynchronize, AIPROF_API_cudaEventSynchronize, AIPROF_SYNC_EVENT, 0 },
	{ GP_FN_cuCtxSynchronize, AIPROF_API_cuCtxSynchronize, AIPROF_SYNC_CTX, ARG_NONE },
	{ GP_FN_cuCtxSynchronize_v2, AIPROF_API_cuCtxSynchronize, AIPROF_SYNC_CTX, 0 },
	{ GP_FN_cuStreamSynchronize, AIPROF_API_cuStreamSynchronize, AIPROF_SYNC_STREAM, 0 },
};

#define FIND(table, f) ({ \
	const __typeof__((table)[0]) *found_ = NULL; \
	for (size_t i_ = 0; i_ < sizeof(table) / sizeof((table)[0]); i_++) \
		if ((table)[i_].fn == (f)) { \
			found_ = &(table)[i_]; \
			break; \
		} \
	found_; })

/* A copy, memset, allocation, free or synchronisation into e; false if r is none of them. */
static bool decode_memory(struct uprobe_decoder *d, const struct gp_rec *r, struct aiprof_event *e)
{
	const __u64 *a = r->arg;
	int32_t res = i32(r->ret);
	const struct copy_fn *cf = FIND(copy_fns, r->fn);
	const struct mem_fn *mf = FIND(mem_fns, r->fn);
	const struct sync_fn *sf = FIND(sync_fns, r->fn);

	if (cf) {
		event_init(e, r, AIPROF_EV_CUDA_MEMCPY, cf->api);
		fill_memcpy(d, e, a[0], a[1], a[2], cf->kind == KIND_ARG3 ? u32(a[3]) : cf->kind,
			    cf->stream_arg == ARG_NONE ? 0 : a[cf->stream_arg],
			    cf->stream_arg != ARG_NONE, res);
	} else if (mf) {
		uint64_t ptr = mf->ptr == PTR_ARG0 ? a[0] :
			       (r->flags & GP_REC_F_RD0) && res == 0 ? r->rd[0] : 0;
		uint64_t bytes = mf->bytes_arg == ARG_NONE ? 0 : a[mf->bytes_arg];

		event_init(e, r, mf->type, mf->api);
		fill_mem(e, ptr, bytes, mf->kind, res);
		if (res == 0 && mf->pinned > 0)
			pinned_add(d, ptr, bytes);
		else if (res == 0 && mf->pinned < 0)
			pinned_del(d, ptr);
	} else if (sf) {
		event_init(e, r, AIPROF_EV_CUDA_SYNC, sf->api);
		fill_sync(e, sf->handle_arg == ARG_NONE ? 0 : a[sf->handle_arg], sf->kind, res);
	} else if (r->fn == GP_FN_cudaMemset || r->fn == GP_FN_cudaMemsetAsync) {
		bool async = r->fn == GP_FN_cudaMemsetAsync;

		event_init(e, r, AIPROF_EV_CUDA_MEMSET,
			   async ? AIPROF_API_cudaMemsetAsync : AIPROF_API_cudaMemset);
		e->u.memcpy.bytes = a[2];
		e->u.memcpy.dst = a[0];
		e->u.memcpy.stream = async ? a[3] : 0;
		e->u.memcpy.kind = AIPROF_MEMCPY_D2D;
		e->u.memcpy.flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;
		e->u.memcpy.result = res;
	} else {
		return false;
	}
	return true;
}

/* An NCCL call into e: 1, 0 when it records no event (a comm destroyed), -1 if not NCCL. */
static int decode_nccl(struct uprobe_decoder *d, const struct gp_rec *r, struct aiprof_event *e)
{
	const __u64 *a = r->arg;
	int32_t res = i32(r->ret);
	bool stack_ok = r->flags & GP_REC_F_ARGS;
	uint64_t out = (r->flags & GP_REC_F_RD0) && res == 0 ? r->rd[0] : 0;

	switch (r->fn) {
	case GP_FN_ncclCommInitRank:
	case GP_FN_ncclCommInitRankConfig:
		/* (comm *, nranks, id on the stack, rank[, config]) */
		event_init(e, r, AIPROF_EV_NCCL_INIT, AIPROF_API_ncclCommInitRank);
		e->u.nccl.comm = out;
		e->u.nccl.datatype = -1;
		e->u.nccl.redop = -1;
		e->u.nccl.peer = -1;
		e->u.nccl.rank = i32(a[2]);
		e->u.nccl.nranks = i32(a[1]);
		e->u.nccl.result = res;
		if (res == 0)
			comm_remember(d, out, i32(a[2]), i32(a[1]));
		return 1;
	case GP_FN_ncclCommDestroy:
	case GP_FN_ncclCommAbort:
		comm_forget(d, a[0]);          /* the address may come back as another comm */
		return 0;
	case GP_FN_ncclAllReduce:     /* (sbuf, rbuf, count, dt, op, comm | stream) */
		event_init(e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclAllReduce);
		fill_nccl(d, e, a[2], i32(a[3]), i32(a[4]), -1, a[5], stack_ok ? a[6] : 0, res);
		return 1;
	case GP_FN_ncclAllGather:     /* (sbuf, rbuf, sendcount, dt, comm, stream) */
		event_init(e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclAllGather);
		fill_nccl(d, e, a[2], i32(a[3]), -1, -1, a[4], a[5], res);
		return 1;
	case GP_FN_ncclReduceScatter: /* (sbuf, rbuf, recvcount, dt, op, comm | stream) */
		event_init(e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclReduceScatter);
		fill_nccl(d, e, a[2], i32(a[3]), i32(a[4]), -1, a[5], stack_ok ? a[6] : 0, res);
		return 1;
	case GP_FN_ncclBroadcast:     /* (sbuf, rbuf, count, dt, root, comm | stream) */
		event_init(e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclBroadcast);
		fill_nccl(d, e, a[2], i32(a[3]), -1, i32(a[4]), a[5], stack_ok ? a[6] : 0, res);
		return 1;
	case GP_FN_ncclReduce:        /* (sbuf, rbuf, count, dt, op, root | comm, stream) */
		event_init(e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclReduce);
		fill_nccl(d, e, a[2], i32(a[3]), i32(a[4]), i32(a[5]), stack_ok ? a[6] : 0,
			  stack_ok ? a[7] : 0, res);
		return 1;
	case GP_FN_ncclSend:          /* (sbuf, count, dt, peer, comm, stream) */
	case GP_FN_ncclRecv:
		event_init(e, r, AIPROF_EV_NCCL_COLL, r->fn == GP_FN_ncclSend ?
			   AIPROF_API_ncclSend : AIPROF_API_ncclRecv);
		fill_nccl(d, e, a[1], i32(a[2]), -1, i32(a[3]), a[4], a[5], res);
		return 1;
	case GP_FN_ncclGroupStart:
	case GP_FN_ncclGroupEnd: {
		bool start = r->fn == GP_FN_ncclGroupStart;

		event_init(e, r, AIPROF_EV_NCCL_GROUP, start ? AIPROF_API_ncclGroupStart :
			   AIPROF_API_ncclGroupEnd);
		fill_group(e, start ? AIPROF_NCCL_GROUP_START : AIPROF_NCCL_GROUP_END, res);
		return 1;
	}
	default:
		return -1;
	}
}

/* An ibverbs call into e; false if r is not one. */
static bool decode_ibv(const struct gp_rec *r, struct aiprof_event *e)
{
	const __u64 *a = r->arg;

	switch (r->fn) {
	case GP_FN_ibv_reg_mr:        /* (pd, addr, length, access) -> mr */
	case GP_FN_ibv_reg_mr_iova:   /* (pd, addr, length, iova, access) -> mr */
	case GP_FN_ibv_reg_mr_iova2:
		event_init(e, r, AIPROF_EV_IBV, AIPROF_API_ibv_reg_mr);
		e->u.ibv.handle = r->ret;
		e->u.ibv.addr = a[1];
		e->u.ibv.length = a[2];
		e->u.ibv.attr = u32(r->fn == GP_FN_ibv_reg_mr ? a[3] : a[4]);
		e->u.ibv.result = r->ret ? 0 : -1;
		return true;
	case GP_FN_ibv_dereg_mr:      /* (mr); addr and length read before the free */
		event_init(e, r, AIPROF_EV_IBV, AIPROF_API_ibv_dereg_mr);
		e->u.ibv.handle = a[0];
		e->u.ibv.addr = (r->flags & GP_REC_F_RD0) ? r->rd[0] : 0;
		e->u.ibv.length = (r->flags & GP_REC_F_RD1) ? r->rd[1] : 0;
		e->u.ibv.result = i32(r->ret);
		return true;
	case GP_FN_ibv_modify_qp:     /* (qp, attr, attr_mask) */
		event_init(e, r, AIPROF_EV_IBV, AIPROF_API_ibv_modify_qp);
		e->u.ibv.handle = a[0];
		e->u.ibv.qp_num = (r->flags & GP_REC_F_RD0) ? u32(r->rd[0]) : 0;
		e->u.ibv.attr = u32(a[2]);
		/* UINT32_MAX: the call did not change the state (as the library reports it) */
		e->u.ibv.state = (u32(a[2]) & IBV_QP_STATE_BIT) && (r->flags & GP_REC_F_RD1) ?
				 u32(r->rd[1]) : UINT32_MAX;
		e->u.ibv.result = i32(r->ret);
		return true;
	default:
		return false;
	}
}

int uprobe_decoder__convert(struct uprobe_decoder *d, const struct gp_rec *r,
			    struct event_store *store)
{
	struct aiprof_event e;
	int added = 0, k;

	if (r->fn == GP_FN_NONE || r->fn >= GP_FN__MAX)
		return -EINVAL;
	if (r->fn == GP_FN_cudaLaunchKernel || r->fn == GP_FN_cudaLaunchKernelByHandle ||
	    r->fn == GP_FN_cuLaunchKernel) {
		decode_launch(d, r, store, &e, &added);
	} else if (!decode_memory(d, r, &e) && !decode_ibv(r, &e)) {
		k = decode_nccl(d, r, &e);
		if (k <= 0)
			return added;   /* no event: a comm forgotten, or a function not decoded */
	}
	event_store__add(store, &e);
	return added + 1;
}
