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

/* ncclCommDestroy, ncclCommAbort: the address may be reused by a later communicator. */
#define FORGET_HOOK(name)                                                                  \
	static ncclResult_t hook_##name(ncclComm_t comm)                                   \
	{                                                                                  \
		name##_fn real = REAL(name);                                               \
											   \
		if (unlikely(!real))                                                       \
			return NO_REAL;                                                    \
		comm_forget(comm);                                                         \
		return real(comm);                                                         \
	}

FORGET_HOOK(ncclCommDestroy)
FORGET_HOOK(ncclCommAbort)

/* An NCCL hook recorded as one event: see HOOK_RECORD. */
#define NCCL_HOOK(correlate, name, params, args, done) \
	HOOK_RECORD(ncclResult_t, NO_REAL, AIPROF_COLLECT_NCCL, correlate, name, name##_fn, \
		    params, args, done)

/*
 * hook_<name> of a collective or point-to-point call: `count`, `redop` and `peer` as
 * the event reports them. The kernel the call launches carries `corr` in CUPTI.
 */
#define COLL_HOOK(name, params, args, count, redop, peer) \
	NCCL_HOOK(true, name, params, args, \
		  coll_done(&r, AIPROF_API_##name, count, dt, redop, peer, comm, stream, ret, corr))

COLL_HOOK(ncclAllReduce, (const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt,
	  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, count, dt, op, comm, stream), count, (int)op, -1)

COLL_HOOK(ncclAllGather, (const void *sbuf, void *rbuf, size_t sendcount, ncclDataType_t dt,
	  ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, sendcount, dt, comm, stream), sendcount, -1, -1)

COLL_HOOK(ncclReduceScatter, (const void *sbuf, void *rbuf, size_t recvcount,
	  ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, recvcount, dt, op, comm, stream), recvcount, (int)op, -1)

COLL_HOOK(ncclBroadcast, (const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt,
	  int root, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, count, dt, root, comm, stream), count, -1, root)

COLL_HOOK(ncclReduce, (const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt,
	  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream),
	  (sbuf, rbuf, count, dt, op, root, comm, stream), count, (int)op, root)

COLL_HOOK(ncclSend, (const void *sbuf, size_t count, ncclDataType_t dt, int peer,
	  ncclComm_t comm, cudaStream_t stream),
	  (sbuf, count, dt, peer, comm, stream), count, -1, peer)

COLL_HOOK(ncclRecv, (void *rbuf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
	  cudaStream_t stream),
	  (rbuf, count, dt, peer, comm, stream), count, -1, peer)

static void group_done(struct rec *r, uint16_t api, uint32_t op, ncclResult_t ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_NCCL_GROUP, api);

	if (e)
		e->u.nccl = (struct aiprof_ev_nccl){ .op = op, .datatype = -1, .redop = -1,
						     .peer = -1, .rank = -1, .nranks = -1,
						     .result = ret };
	rec_done(r, e);
}

NCCL_HOOK(false, ncclGroupStart, (void), (),
	  group_done(&r, AIPROF_API_ncclGroupStart, AIPROF_NCCL_GROUP_START, ret))

NCCL_HOOK(false, ncclGroupEnd, (void), (),
	  group_done(&r, AIPROF_API_ncclGroupEnd, AIPROF_NCCL_GROUP_END, ret))

const struct hook_impl hook_impls_nccl[] = {
#define HOOK(name, group) HOOK_IMPL_IF(group, NCCL, HOOK_ID_##name, hook_##name)
#include "hooks.def"
#undef HOOK
	{ 0, NULL },
};
