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

struct label {
	uint64_t func;             /* 0: free slot */
	uint32_t id;
};

struct uprobe_decoder {
	struct range *pinned;      /* sorted by start, disjoint as the runtime keeps them */
	size_t npinned, cap_pinned;
	struct comm_info *comms;
	size_t ncomms, cap_comms;
	struct label *labels;      /* open addressing by CUfunction */
	size_t nlabels, cap_labels;
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
	free(d->labels);
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

static size_t label_slot(uint64_t func, size_t cap)
{
	return (size_t)((func * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

/*
 * The string id naming a driver kernel; 0 if it cannot be had. *fresh says the id is new
 * and its AIPROF_EV_STRING must go out before the launch that uses it.
 */
static uint32_t label_id(struct uprobe_decoder *d, uint64_t func, bool *fresh)
{
	size_t i;

	*fresh = false;
	if (!func)
		return 0;
	if ((d->nlabels + 1) * 2 > d->cap_labels) {
		size_t ncap = d->cap_labels ? d->cap_labels * 2 : 256;
		struct label *nv;

		if (d->nlabels >= MAX_LABELS)
			goto lookup_only;
		nv = calloc(ncap, sizeof(*nv));
		if (!nv)
			goto lookup_only;
		for (size_t k = 0; k < d->cap_labels; k++) {
			if (!d->labels[k].func)
				continue;
			for (i = label_slot(d->labels[k].func, ncap); nv[i].func; i = (i + 1) & (ncap - 1))
				;
			nv[i] = d->labels[k];
		}
		free(d->labels);
		d->labels = nv;
		d->cap_labels = ncap;
	}
	for (i = label_slot(func, d->cap_labels);; i = (i + 1) & (d->cap_labels - 1)) {
		if (d->labels[i].func == func)
			return d->labels[i].id;
		if (!d->labels[i].func)
			break;
	}
	d->labels[i].func = func;
	d->labels[i].id = d->next_id++;
	d->nlabels++;
	*fresh = true;
	return d->labels[i].id;

lookup_only:
	if (!d->cap_labels)
		return 0;
	for (i = label_slot(func, d->cap_labels); d->labels[i].func;
	     i = (i + 1) & (d->cap_labels - 1))
		if (d->labels[i].func == func)
			return d->labels[i].id;
	return 0;
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

int uprobe_decoder__convert(struct uprobe_decoder *d, const struct gp_rec *r,
			    struct event_store *store)
{
	const __u64 *a = r->arg;
	int32_t res = i32(r->ret);
	bool stack_ok = r->flags & GP_REC_F_ARGS;
	uint64_t out = (r->flags & GP_REC_F_RD0) && res == 0 ? r->rd[0] : 0;
	struct aiprof_event e;
	int added = 0;

	if (r->fn == GP_FN_NONE || r->fn >= GP_FN__MAX)
		return -EINVAL;

	switch (r->fn) {
	/* ---- launches ---- */
	case GP_FN_cudaLaunchKernel:
	case GP_FN_cudaLaunchKernelByHandle:
		event_init(&e, r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cudaLaunchKernel);
		e.u.launch.func = a[0];
		if (r->fn == GP_FN_cudaLaunchKernelByHandle) {
			/* a handle means nothing to us: the stub that called is the kernel's */
			e.u.launch.func = (r->flags & GP_REC_F_RD0) ? r->rd[0] : 0;
			e.flags |= AIPROF_EV_F_LAUNCH_CALLER;
		}
		/* dim3 by value: 12 bytes, two INTEGER eightbytes each (x | y << 32, z) */
		e.u.launch.grid[0] = u32(a[1]);
		e.u.launch.grid[1] = u32(a[1] >> 32);
		e.u.launch.grid[2] = u32(a[2]);
		e.u.launch.block[0] = u32(a[3]);
		e.u.launch.block[1] = u32(a[3] >> 32);
		e.u.launch.block[2] = u32(a[4]);
		e.u.launch.shmem = stack_ok ? u32(a[6]) : 0;
		e.u.launch.stream = stack_ok ? a[7] : 0;
		e.u.launch.result = res;
		break;
	case GP_FN_cuLaunchKernel: {
		bool fresh;
		uint32_t id = label_id(d, a[0], &fresh);

		if (fresh) {
			add_label(store, r, id, a[0]);
			added++;
		}
		event_init(&e, r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cuLaunchKernel);
		e.u.launch.func = a[0];
		e.u.launch.grid[0] = u32(a[1]);
		e.u.launch.grid[1] = u32(a[2]);
		e.u.launch.grid[2] = u32(a[3]);
		e.u.launch.block[0] = u32(a[4]);
		e.u.launch.block[1] = u32(a[5]);
		e.u.launch.block[2] = stack_ok ? u32(a[6]) : 0;
		e.u.launch.shmem = stack_ok ? u32(a[7]) : 0;
		e.u.launch.stream = stack_ok ? a[8] : 0;
		e.u.launch.name_id = id;
		e.u.launch.result = res;
		break;
	}

	/* ---- copies and memsets ---- */
	case GP_FN_cudaMemcpy:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cudaMemcpy);
		fill_memcpy(d, &e, a[0], a[1], a[2], u32(a[3]), 0, false, res);
		break;
	case GP_FN_cudaMemcpyAsync:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cudaMemcpyAsync);
		fill_memcpy(d, &e, a[0], a[1], a[2], u32(a[3]), a[4], true, res);
		break;
	case GP_FN_cuMemcpy:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpy);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_DEFAULT, 0, false, res);
		break;
	case GP_FN_cuMemcpyAsync:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyAsync);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_DEFAULT, a[3], true, res);
		break;
	case GP_FN_cuMemcpyHtoD_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyHtoD_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_H2D, 0, false, res);
		break;
	case GP_FN_cuMemcpyDtoH_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyDtoH_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_D2H, 0, false, res);
		break;
	case GP_FN_cuMemcpyDtoD_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyDtoD_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_D2D, 0, false, res);
		break;
	case GP_FN_cuMemcpyHtoDAsync_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyHtoDAsync_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_H2D, a[3], true, res);
		break;
	case GP_FN_cuMemcpyDtoHAsync_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyDtoHAsync_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_D2H, a[3], true, res);
		break;
	case GP_FN_cuMemcpyDtoDAsync_v2:
		event_init(&e, r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cuMemcpyDtoDAsync_v2);
		fill_memcpy(d, &e, a[0], a[1], a[2], AIPROF_MEMCPY_D2D, a[3], true, res);
		break;
	case GP_FN_cudaMemset:
	case GP_FN_cudaMemsetAsync: {
		bool async = r->fn == GP_FN_cudaMemsetAsync;

		event_init(&e, r, AIPROF_EV_CUDA_MEMSET,
			   async ? AIPROF_API_cudaMemsetAsync : AIPROF_API_cudaMemset);
		e.u.memcpy.bytes = a[2];
		e.u.memcpy.dst = a[0];
		e.u.memcpy.stream = async ? a[3] : 0;
		e.u.memcpy.kind = AIPROF_MEMCPY_D2D;
		e.u.memcpy.flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;
		e.u.memcpy.result = res;
		break;
	}

	/* ---- allocations ---- */
	case GP_FN_cudaMalloc:
		event_init(&e, r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMalloc);
		fill_mem(&e, out, a[1], AIPROF_MEM_DEVICE, res);
		break;
	case GP_FN_cuMemAlloc_v2:
		event_init(&e, r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cuMemAlloc_v2);
		fill_mem(&e, out, a[1], AIPROF_MEM_DEVICE, res);
		break;
	case GP_FN_cudaFree:
		event_init(&e, r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFree);
		fill_mem(&e, a[0], 0, AIPROF_MEM_DEVICE, res);
		break;
	case GP_FN_cuMemFree_v2:
		event_init(&e, r, AIPROF_EV_CUDA_FREE, AIPROF_API_cuMemFree_v2);
		fill_mem(&e, a[0], 0, AIPROF_MEM_DEVICE, res);
		break;
	case GP_FN_cudaMallocHost:
	case GP_FN_cudaHostAlloc:
		event_init(&e, r, AIPROF_EV_CUDA_ALLOC, r->fn == GP_FN_cudaMallocHost ?
			   AIPROF_API_cudaMallocHost : AIPROF_API_cudaHostAlloc);
		fill_mem(&e, out, a[1], AIPROF_MEM_HOST_PINNED, res);
		if (res == 0)
			pinned_add(d, out, a[1]);
		break;
	case GP_FN_cudaFreeHost:
		event_init(&e, r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFreeHost);
		fill_mem(&e, a[0], 0, AIPROF_MEM_HOST_PINNED, res);
		if (res == 0)
			pinned_del(d, a[0]);
		break;
	case GP_FN_cudaHostRegister:
		event_init(&e, r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaHostRegister);
		fill_mem(&e, a[0], a[1], AIPROF_MEM_HOST_REGISTERED, res);
		if (res == 0)
			pinned_add(d, a[0], a[1]);
		break;
	case GP_FN_cudaHostUnregister:
		event_init(&e, r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaHostUnregister);
		fill_mem(&e, a[0], 0, AIPROF_MEM_HOST_REGISTERED, res);
		if (res == 0)
			pinned_del(d, a[0]);
		break;

	/* ---- synchronisation ---- */
	case GP_FN_cudaStreamSynchronize:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cudaStreamSynchronize);
		fill_sync(&e, a[0], AIPROF_SYNC_STREAM, res);
		break;
	case GP_FN_cudaDeviceSynchronize:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cudaDeviceSynchronize);
		fill_sync(&e, 0, AIPROF_SYNC_DEVICE, res);
		break;
	case GP_FN_cudaEventSynchronize:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cudaEventSynchronize);
		fill_sync(&e, a[0], AIPROF_SYNC_EVENT, res);
		break;
	case GP_FN_cuCtxSynchronize:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cuCtxSynchronize);
		fill_sync(&e, 0, AIPROF_SYNC_CTX, res);
		break;
	case GP_FN_cuCtxSynchronize_v2:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cuCtxSynchronize);
		fill_sync(&e, a[0], AIPROF_SYNC_CTX, res);
		break;
	case GP_FN_cuStreamSynchronize:
		event_init(&e, r, AIPROF_EV_CUDA_SYNC, AIPROF_API_cuStreamSynchronize);
		fill_sync(&e, a[0], AIPROF_SYNC_STREAM, res);
		break;

	/* ---- NCCL ---- */
	case GP_FN_ncclCommInitRank:
	case GP_FN_ncclCommInitRankConfig:
		/* (comm *, nranks, id on the stack, rank[, config]) */
		event_init(&e, r, AIPROF_EV_NCCL_INIT, AIPROF_API_ncclCommInitRank);
		e.u.nccl.comm = out;
		e.u.nccl.datatype = -1;
		e.u.nccl.redop = -1;
		e.u.nccl.peer = -1;
		e.u.nccl.rank = i32(a[2]);
		e.u.nccl.nranks = i32(a[1]);
		e.u.nccl.result = res;
		if (res == 0)
			comm_remember(d, out, i32(a[2]), i32(a[1]));
		break;
	case GP_FN_ncclCommDestroy:
	case GP_FN_ncclCommAbort:
		comm_forget(d, a[0]);          /* the address may come back as another comm */
		return added;
	case GP_FN_ncclAllReduce:     /* (sbuf, rbuf, count, dt, op, comm | stream) */
		event_init(&e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclAllReduce);
		fill_nccl(d, &e, a[2], i32(a[3]), i32(a[4]), -1, a[5], stack_ok ? a[6] : 0, res);
		break;
	case GP_FN_ncclAllGather:     /* (sbuf, rbuf, sendcount, dt, comm, stream) */
		event_init(&e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclAllGather);
		fill_nccl(d, &e, a[2], i32(a[3]), -1, -1, a[4], a[5], res);
		break;
	case GP_FN_ncclReduceScatter: /* (sbuf, rbuf, recvcount, dt, op, comm | stream) */
		event_init(&e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclReduceScatter);
		fill_nccl(d, &e, a[2], i32(a[3]), i32(a[4]), -1, a[5], stack_ok ? a[6] : 0, res);
		break;
	case GP_FN_ncclBroadcast:     /* (sbuf, rbuf, count, dt, root, comm | stream) */
		event_init(&e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclBroadcast);
		fill_nccl(d, &e, a[2], i32(a[3]), -1, i32(a[4]), a[5], stack_ok ? a[6] : 0, res);
		break;
	case GP_FN_ncclReduce:        /* (sbuf, rbuf, count, dt, op, root | comm, stream) */
		event_init(&e, r, AIPROF_EV_NCCL_COLL, AIPROF_API_ncclReduce);
		fill_nccl(d, &e, a[2], i32(a[3]), i32(a[4]), i32(a[5]), stack_ok ? a[6] : 0,
			  stack_ok ? a[7] : 0, res);
		break;
	case GP_FN_ncclSend:          /* (sbuf, count, dt, peer, comm, stream) */
	case GP_FN_ncclRecv:
		event_init(&e, r, AIPROF_EV_NCCL_COLL, r->fn == GP_FN_ncclSend ?
			   AIPROF_API_ncclSend : AIPROF_API_ncclRecv);
		fill_nccl(d, &e, a[1], i32(a[2]), -1, i32(a[3]), a[4], a[5], res);
		break;
	case GP_FN_ncclGroupStart:
		event_init(&e, r, AIPROF_EV_NCCL_GROUP, AIPROF_API_ncclGroupStart);
		fill_group(&e, AIPROF_NCCL_GROUP_START, res);
		break;
	case GP_FN_ncclGroupEnd:
		event_init(&e, r, AIPROF_EV_NCCL_GROUP, AIPROF_API_ncclGroupEnd);
		fill_group(&e, AIPROF_NCCL_GROUP_END, res);
		break;

	/* ---- ibverbs ---- */
	case GP_FN_ibv_reg_mr:        /* (pd, addr, length, access) -> mr */
	case GP_FN_ibv_reg_mr_iova:   /* (pd, addr, length, iova, access) -> mr */
	case GP_FN_ibv_reg_mr_iova2:
		event_init(&e, r, AIPROF_EV_IBV, AIPROF_API_ibv_reg_mr);
		e.u.ibv.handle = r->ret;
		e.u.ibv.addr = a[1];
		e.u.ibv.length = a[2];
		e.u.ibv.attr = u32(r->fn == GP_FN_ibv_reg_mr ? a[3] : a[4]);
		e.u.ibv.result = r->ret ? 0 : -1;
		break;
	case GP_FN_ibv_dereg_mr:      /* (mr); addr and length read before the free */
		event_init(&e, r, AIPROF_EV_IBV, AIPROF_API_ibv_dereg_mr);
		e.u.ibv.handle = a[0];
		e.u.ibv.addr = (r->flags & GP_REC_F_RD0) ? r->rd[0] : 0;
		e.u.ibv.length = (r->flags & GP_REC_F_RD1) ? r->rd[1] : 0;
		e.u.ibv.result = res;
		break;
	case GP_FN_ibv_modify_qp:     /* (qp, attr, attr_mask) */
		event_init(&e, r, AIPROF_EV_IBV, AIPROF_API_ibv_modify_qp);
		e.u.ibv.handle = a[0];
		e.u.ibv.qp_num = (r->flags & GP_REC_F_RD0) ? u32(r->rd[0]) : 0;
		e.u.ibv.attr = u32(a[2]);
		/* UINT32_MAX: the call did not change the state (as the library reports it) */
		e.u.ibv.state = (u32(a[2]) & IBV_QP_STATE_BIT) && (r->flags & GP_REC_F_RD1) ?
				u32(r->rd[1]) : UINT32_MAX;
		e.u.ibv.result = res;
		break;
	default:
		return added;
	}
	event_store__add(store, &e);
	return added + 1;
}
