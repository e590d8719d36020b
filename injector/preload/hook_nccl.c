/* SPDX-License-Identifier: MIT */
/*
 * NCCL hooks. Every collective and point-to-point event carries
 *     count  = the count argument as passed (sendcount for AllGather, recvcount for
 *              ReduceScatter),
 *     bytes  = count x size of the datatype, i.e. for AllGather the bytes this rank
 *              contributes, for ReduceScatter the bytes this rank receives, for
 *              AllReduce / Broadcast / Reduce / Send / Recv the buffer size,
 * plus rank and nranks of the communicator. A communicator created before we attached
 * is unknown to us: we ask the real ncclCommUserRank / ncclCommCount once and cache the
 * answer in a small lock-free table (ncclCommDestroy / ncclCommAbort forget it, since
 * the address may be reused by a later communicator).
 */
#include <nccl.h>
#include <string.h>

#include "preload.h"

#define NO_REAL ncclInternalError
#define COMM_SLOTS 1024                    /* power of two */

typedef ncclResult_t (*ncclCommInitRank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*ncclCommDestroy_fn)(ncclComm_t);
typedef ncclResult_t (*ncclCommAbort_fn)(ncclComm_t);
typedef ncclResult_t (*ncclAllReduce_fn)(const void *, void *, size_t, ncclDataType_t,
					 ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclAllGather_fn)(const void *, void *, size_t, ncclDataType_t,
					 ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclReduceScatter_fn)(const void *, void *, size_t, ncclDataType_t,
					     ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclBroadcast_fn)(const void *, void *, size_t, ncclDataType_t, int,
					 ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclReduce_fn)(const void *, void *, size_t, ncclDataType_t,
				      ncclRedOp_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclSend_fn)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
				    cudaStream_t);
typedef ncclResult_t (*ncclRecv_fn)(void *, size_t, ncclDataType_t, int, ncclComm_t,
				    cudaStream_t);
typedef ncclResult_t (*ncclGroupStart_fn)(void);
typedef ncclResult_t (*ncclGroupEnd_fn)(void);
typedef ncclResult_t (*ncclCommUserRank_fn)(const ncclComm_t, int *);
typedef ncclResult_t (*ncclCommCount_fn)(const ncclComm_t, int *);

struct comm_slot {
	_Atomic uintptr_t comm;
	_Atomic uint64_t info;      /* (rank + 1) << 32 | nranks; 0 = unknown */
	_Atomic uint32_t seq;       /* collectives recorded on this communicator */
};

static struct comm_slot g_comms[COMM_SLOTS];
static struct lazy_sym g_user_rank = LAZY_SYM("ncclCommUserRank");
static struct lazy_sym g_count = LAZY_SYM("ncclCommCount");

static uint32_t dtype_size(ncclDataType_t t)
{
	switch ((int)t) {
	case ncclInt8: case ncclUint8:                  return 1;
	case ncclFloat16: case ncclBfloat16:            return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	case 10: case 11:                               return 1;  /* fp8 e4m3 / e5m2 */
	default:                                        return 0;  /* unknown: bytes 0 */
	}
}

static struct comm_slot *comm_slot(ncclComm_t comm, bool insert)
{
	uintptr_t key = (uintptr_t)comm;
	uint32_t i = (uint32_t)((key >> 4) * 0x9e3779b1u) & (COMM_SLOTS - 1);

	for (uint32_t probe = 0; probe < 32; probe++, i = (i + 1) & (COMM_SLOTS - 1)) {
		uintptr_t k = atomic_load_explicit(&g_comms[i].comm, memory_order_acquire);

		if (k == key)
			return &g_comms[i];
		if (k == 0) {
			uintptr_t expected = 0;

			if (!insert)
				return NULL;
			if (atomic_compare_exchange_strong(&g_comms[i].comm, &expected, key) ||
			    expected == key)
				return &g_comms[i];
		}
	}
	return NULL;
}

static void comm_remember(ncclComm_t comm, int rank, int nranks)
{
	struct comm_slot *s = comm_slot(comm, true);

	if (s)
		atomic_store_explicit(&s->info, ((uint64_t)(uint32_t)(rank + 1) << 32) |
				      (uint32_t)nranks, memory_order_release);
}

static void comm_forget(ncclComm_t comm)
{
	struct comm_slot *s = comm_slot(comm, false);

	if (s) {
		atomic_store_explicit(&s->info, 0, memory_order_release);
		atomic_store_explicit(&s->seq, 0, memory_order_relaxed);
	}
}

/* Called while recording only. */
static void comm_info(ncclComm_t comm, int32_t *rank, int32_t *nranks)
{
	struct comm_slot *s;
	ncclCommUserRank_fn user_rank;
	ncclCommCount_fn count;
	uint64_t info;
	int rk, n;

	*rank = -1;
	*nranks = -1;
	if (!comm)
		return;
	s = comm_slot(comm, false);
	info = s ? atomic_load_explicit(&s->info, memory_order_acquire) : 0;
	if (!info) {
		user_rank = (ncclCommUserRank_fn)lazy_sym_get(&g_user_rank);
		count = (ncclCommCount_fn)lazy_sym_get(&g_count);
		if (!user_rank || !count || user_rank(comm, &rk) != ncclSuccess ||
		    count(comm, &n) != ncclSuccess)
			return;
		comm_remember(comm, rk, n);
		*rank = rk;
		*nranks = n;
		return;
	}
	*rank = (int32_t)(info >> 32) - 1;
	*nranks = (int32_t)(uint32_t)info;
}

/* ---- events ----------------------------------------------------------------------- */

static void coll_done(struct rec *r, uint16_t api, size_t count, ncclDataType_t dt, int redop,
		      int peer, ncclComm_t comm, cudaStream_t stream, ncclResult_t ret, uint64_t corr)
{
	struct aiprof_event *e;
	struct comm_slot *slot;
	int32_t rank, nranks;

	rec_stop(r);
	comm_info(comm, &rank, &nranks);
	slot = comm ? comm_slot(comm, true) : NULL;
	e = rec_reserve(r, AIPROF_EV_NCCL_COLL, api);
	if (e) {
		e->u.nccl.seq = slot ? atomic_fetch_add_explicit(&slot->seq, 1, memory_order_relaxed) + 1 : 0;
		e->u.nccl.count = count;
		e->u.nccl.bytes = (uint64_t)count * dtype_size(dt);
		e->u.nccl.comm = (uintptr_t)comm;
		e->u.nccl.stream = (uintptr_t)stream;
		e->u.nccl.datatype = (int32_t)dt;
		e->u.nccl.redop = redop;
		e->u.nccl.peer = peer;
		e->u.nccl.rank = rank;
		e->u.nccl.nranks = nranks;
		e->u.nccl.result = ret;
		e->u.nccl.correlation = corr;
	}
	rec_done(r, e);
}

static ncclResult_t hook_ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id,
					  int rank)
{
	ncclCommInitRank_fn real = REAL(ncclCommInitRank);
	struct aiprof_event *e;
	ncclResult_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_NCCL);
	ret = real(comm, nranks, id, rank);
	if (ret == ncclSuccess && comm && *comm)
		comm_remember(*comm, rank, nranks);     /* always: sessions start later */
	if (!rec)
		return ret;
	e = rec_event(&r, AIPROF_EV_NCCL_INIT, AIPROF_API_ncclCommInitRank);
	if (e) {
		e->u.nccl.comm = comm ? (uintptr_t)*comm : 0;
		e->u.nccl.datatype = -1;
		e->u.nccl.redop = -1;
		e->u.nccl.peer = -1;
		e->u.nccl.rank = rank;
		e->u.nccl.nranks = nranks;
		e->u.nccl.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

static ncclResult_t hook_ncclCommDestroy(ncclComm_t comm)
{
	ncclCommDestroy_fn real = REAL(ncclCommDestroy);

	if (unlikely(!real))
		return NO_REAL;
	comm_forget(comm);
	return real(comm);
}

static ncclResult_t hook_ncclCommAbort(ncclComm_t comm)
{
	ncclCommAbort_fn real = REAL(ncclCommAbort);

	if (unlikely(!real))
		return NO_REAL;
	comm_forget(comm);
	return real(comm);
}

#define COLL_BODY(name, call, count, dt, redop, peer, comm, stream)                   \
	do {                                                                          \
		name##_fn real = REAL(name);                                          \
		ncclResult_t ret;                                                     \
		uint64_t corr;                                                        \
		struct rec r;                                                         \
		if (unlikely(!real))                                                  \
			return NO_REAL;                                               \
		if (likely(!rec_begin(&r, AIPROF_COLLECT_NCCL)))                      \
			return call;                                                  \
		/* the kernel the call launches carries this id in CUPTI */        \
		corr = atomic_load_explicit(&g_cupti_active, memory_order_relaxed) ?  \
			       cupti__push() : 0;                                     \
		ret = call;                                                           \
		if (corr)                                                             \
			cupti__pop();                                                 \
		coll_done(&r, AIPROF_API_##name, count, dt, redop, peer, comm, stream, \
			  ret, corr);                                                 \
		return ret;                                                           \
	} while (0)

HOOK_FAST(ncclResult_t, ncclAllReduce, ncclAllReduce_fn, (const void *sbuf, void *rbuf,
	   size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
	   cudaStream_t stream),
	  (sbuf, rbuf, count, dt, op, comm, stream))
{
	COLL_BODY(ncclAllReduce, real(sbuf, rbuf, count, dt, op, comm, stream), count, dt,
		  (int)op, -1, comm, stream);
}

HOOK_FAST(ncclResult_t, ncclAllGather, ncclAllGather_fn, (const void *sbuf, void *rbuf,
	   size_t sendcount, ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, sendcount, dt, comm, stream))
{
	COLL_BODY(ncclAllGather, real(sbuf, rbuf, sendcount, dt, comm, stream), sendcount, dt,
		  -1, -1, comm, stream);
}

HOOK_FAST(ncclResult_t, ncclReduceScatter, ncclReduceScatter_fn, (const void *sbuf, void *rbuf,
	   size_t recvcount, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
	   cudaStream_t stream),
	  (sbuf, rbuf, recvcount, dt, op, comm, stream))
{
	COLL_BODY(ncclReduceScatter, real(sbuf, rbuf, recvcount, dt, op, comm, stream),
		  recvcount, dt, (int)op, -1, comm, stream);
}

HOOK_FAST(ncclResult_t, ncclBroadcast, ncclBroadcast_fn, (const void *sbuf, void *rbuf,
	   size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, count, dt, root, comm, stream))
{
	COLL_BODY(ncclBroadcast, real(sbuf, rbuf, count, dt, root, comm, stream), count, dt,
		  -1, root, comm, stream);
}

HOOK_FAST(ncclResult_t, ncclReduce, ncclReduce_fn, (const void *sbuf, void *rbuf, size_t count,
	   ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, count, dt, op, root, comm, stream))
{
	COLL_BODY(ncclReduce, real(sbuf, rbuf, count, dt, op, root, comm, stream), count, dt,
		  (int)op, root, comm, stream);
}

HOOK_FAST(ncclResult_t, ncclSend, ncclSend_fn, (const void *sbuf, size_t count,
	   ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, count, dt, peer, comm, stream))
{
	COLL_BODY(ncclSend, real(sbuf, count, dt, peer, comm, stream), count, dt, -1, peer,
		  comm, stream);
}

HOOK_FAST(ncclResult_t, ncclRecv, ncclRecv_fn, (void *rbuf, size_t count, ncclDataType_t dt,
	   int peer, ncclComm_t comm, cudaStream_t stream),
	  (rbuf, count, dt, peer, comm, stream))
{
	COLL_BODY(ncclRecv, real(rbuf, count, dt, peer, comm, stream), count, dt, -1, peer,
		  comm, stream);
}

static ncclResult_t group_done(struct rec *r, uint16_t api, uint32_t op, ncclResult_t ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_NCCL_GROUP, api);

	if (e) {
		e->u.nccl.op = op;
		e->u.nccl.datatype = -1;
		e->u.nccl.redop = -1;
		e->u.nccl.peer = -1;
		e->u.nccl.rank = -1;
		e->u.nccl.nranks = -1;
		e->u.nccl.result = ret;
	}
	rec_done(r, e);
	return ret;
}

HOOK_FAST(ncclResult_t, ncclGroupStart, ncclGroupStart_fn, (void), ())
{
	ncclGroupStart_fn real = REAL(ncclGroupStart);
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_NCCL)))
		return real();
	return group_done(&r, AIPROF_API_ncclGroupStart, AIPROF_NCCL_GROUP_START, real());
}

HOOK_FAST(ncclResult_t, ncclGroupEnd, ncclGroupEnd_fn, (void), ())
{
	ncclGroupEnd_fn real = REAL(ncclGroupEnd);
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_NCCL)))
		return real();
	return group_done(&r, AIPROF_API_ncclGroupEnd, AIPROF_NCCL_GROUP_END, real());
}

const struct hook_impl hook_impls_nccl[] = {
	HOOK_IMPL(ncclCommInitRank),
	HOOK_IMPL(ncclCommDestroy),
	HOOK_IMPL(ncclCommAbort),
	HOOK_IMPL(ncclAllReduce),
	HOOK_IMPL(ncclAllGather),
	HOOK_IMPL(ncclReduceScatter),
	HOOK_IMPL(ncclBroadcast),
	HOOK_IMPL(ncclReduce),
	HOOK_IMPL(ncclSend),
	HOOK_IMPL(ncclRecv),
	HOOK_IMPL(ncclGroupStart),
	HOOK_IMPL(ncclGroupEnd),
	{ 0, NULL },
};
