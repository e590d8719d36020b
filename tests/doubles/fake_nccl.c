/* SPDX-License-Identifier: MIT */
/*
 * Fake NCCL, built as libnccl.so.2 for tests on machines without a GPU. Compiled against
 * the real <nccl.h>. As in the real library every entry point is defined as pnccl<Name>
 * (the profiling interface) and exported a second time as a WEAK alias nccl<Name>.
 *
 * Ranks rendezvous through POSIX shared memory named in the unique id, synchronised with a
 * process-shared robust mutex and condition variable, so the ranks of a communicator may
 * be threads of one process or separate processes. Layout of the segment:
 *     struct shm_hdr | stage[nranks][STAGE_BYTES] | mbox_hdr[nranks*nranks] | mbox data
 * Collectives move data in chunks of STAGE_BYTES: every rank copies its chunk into its
 * stage slot, all ranks pass a barrier, each rank computes its result from the slots (in
 * rank order, so every rank gets bit-identical results), a second barrier frees the slots.
 * Send/recv go through one mailbox per ordered pair of ranks. The segment is unlinked once
 * every rank has joined, so a killed test leaves nothing behind in /dev/shm.
 *
 * Differences from the real library, on purpose:
 * - A collective blocks the calling host thread until every rank has arrived and the data
 *   has moved (real NCCL enqueues a kernel and returns; its wait shows up in the next
 *   stream synchronisation). A rank that never arrives therefore blocks the others inside
 *   the collective call, forever, as a real hang does.
 * - On the simulated GPU timeline the collective behaves like a collective kernel: on each
 *   rank it cannot start before the work already queued on its stream is done, it ends
 *   when the last rank's stream was ready plus the transfer time (LATENCY_NS + algorithm
 *   bytes / BUSBW_BYTES_S), and it keeps every rank's stream busy until then. So a rank
 *   whose GPU is late delays the other ranks' streams, and they wait for it in
 *   cudaStreamSynchronize. The stream times are read and set through the private
 *   __fakecudart_stream_ready_ns / __fakecudart_stream_busy_until of the fake runtime,
 *   found with dlsym (no link dependency); without it the calling thread sleeps instead.
 * - ncclCommAbort() wakes every rank blocked on the communicator; their calls return
 *   ncclRemoteError. This is the escape hatch that keeps a failing test from hanging. It
 *   does not release the communicator's memory, so it may race with a call on another
 *   thread (as a watchdog's abort does).
 * Reductions: sum, prod, max, min, avg on int8/uint8/int32/uint32/int64/uint64, half,
 * float, double, bfloat16. fp8 types can be moved (broadcast, all-gather, send/recv) but
 * not reduced (ncclInvalidArgument).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "tests/doubles/cudart_abi.h"

#define MAX_RANKS     64
#define STAGE_BYTES   (1U << 20)
#define MBOX_BYTES    (64U << 10)
#define SHM_MAGIC     0x21434e4b41464b21ULL
#define COMM_MAGIC    0x4d4d4f434e4b4621ULL
#define ID_PREFIX     "aiprof-fake-nccl:"
#define LATENCY_NS    20000ULL
#define BUSBW_BYTES_S 20000000000ULL

struct mbox {
	uint32_t full;
	uint32_t len;
	uint64_t ready_ns;            /* sender's stream ready time, set with the first piece */
};

struct shm_hdr {
	uint64_t magic;
	int32_t nranks;
	_Atomic uint32_t ready;       /* set by the creator once lock and cond are usable */
	pthread_mutex_t lock;         /* process-shared, robust */
	pthread_cond_t cond;          /* process-shared; broadcast on every `change` */
	/* Below: protected by lock. */
	uint64_t change;              /* bumped on every state change */
	int32_t joined;
	int32_t bar_count;
	uint64_t bar_gen;
	uint32_t aborted;
	uint8_t rank_joined[MAX_RANKS];
	uint64_t ready_ns[MAX_RANKS]; /* each rank's stream ready time for the current collective */
};

struct ncclComm {
	uint64_t magic;
	struct shm_hdr *shm;
	size_t map_len;
	int rank, nranks;
	uint8_t *stage;               /* nranks slots of STAGE_BYTES */
	struct mbox *mbox_hdr;        /* [src * nranks + dst] */
	uint8_t *mbox_data;
	ncclResult_t async_error;
};

enum op_kind { OP_ALLREDUCE, OP_REDUCE, OP_BROADCAST, OP_ALLGATHER, OP_REDUCESCATTER, OP_SEND, OP_RECV };
enum op_phase { PH_STAGE, PH_COMPUTE, PH_RELEASE };

struct op {
	enum op_kind kind;
	struct ncclComm *comm;
	const uint8_t *send;
	uint8_t *recv;
	size_t count;          /* elements per rank (see each collective) */
	ncclDataType_t type;
	ncclRedOp_t red;
	int peer;              /* root for rooted collectives, peer for send/recv */
	cudaStream_t stream;
	/* progress */
	size_t esize, chunk_elems, chunk, nchunks, done_bytes;
	enum op_phase phase;
	uint64_t bar_gen;
	bool started, finished;
	uint64_t ready_ns;     /* when this rank's stream could start the operation */
	uint64_t start_ns;     /* when every participant's stream is ready */
};

/* ---- small helpers ---------------------------------------------------------------------- */

static __thread char last_error[256];

static ncclResult_t fail(ncclResult_t r, const char *msg)
{
	snprintf(last_error, sizeof(last_error), "%s", msg);
	return r;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ULL), .tv_nsec = (long)(ns % 1000000000ULL) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

static bool comm_ok(const struct ncclComm *c)
{
	return c && c->magic == COMM_MAGIC;
}

/* Locks the segment; a peer that died holding the lock aborts the communicator. */
static void shm_lock(struct shm_hdr *s)
{
	if (pthread_mutex_lock(&s->lock) == EOWNERDEAD) {
		s->aborted = 1;
		s->change++;
		pthread_mutex_consistent(&s->lock);
		pthread_cond_broadcast(&s->cond);
	}
}

static void shm_unlock(struct shm_hdr *s)
{
	pthread_mutex_unlock(&s->lock);
}

/* Called with the lock held. */
static void shm_changed(struct shm_hdr *s)
{
	s->change++;
	pthread_cond_broadcast(&s->cond);
}

/* Called with the lock held: waits until something changes after `seen` or an abort. */
static void shm_wait(struct shm_hdr *s, uint64_t seen)
{
	while (s->change == seen && !s->aborted) {
		if (pthread_cond_wait(&s->cond, &s->lock) == EOWNERDEAD) {
			s->aborted = 1;
			s->change++;
			pthread_mutex_consistent(&s->lock);
		}
	}
}

/* ---- the simulated time of a finished operation ---------------------------------------- */

static fakecudart_stream_ready_ns_fn stream_ready;
static fakecudart_stream_busy_until_fn stream_busy_until;
static fakecudart_collective_kernel_fn collective_kernel;
static pthread_once_t stream_hooks_once = PTHREAD_ONCE_INIT;

static void stream_hooks_lookup(void)
{
	stream_ready = (fakecudart_stream_ready_ns_fn)dlsym(RTLD_DEFAULT, FAKECUDART_STREAM_READY_NS);
	stream_busy_until = (fakecudart_stream_busy_until_fn)dlsym(RTLD_DEFAULT, FAKECUDART_STREAM_BUSY_UNTIL);
	collective_kernel = (fakecudart_collective_kernel_fn)dlsym(RTLD_DEFAULT, FAKECUDART_COLLECTIVE_KERNEL);
	if (!stream_ready || !stream_busy_until)
		stream_ready = NULL;
}

static uint64_t op_ns(const struct op *o)
{
	int n = o->comm->nranks;
	double bytes = (double)o->count * (double)o->esize, algo;

	switch (o->kind) {
	case OP_ALLREDUCE: algo = 2.0 * (n - 1) / n * bytes; break;
	case OP_ALLGATHER:
	case OP_REDUCESCATTER: algo = (double)(n - 1) * bytes; break;
	default: algo = n > 1 ? bytes : 0; break;
	}
	return LATENCY_NS + (uint64_t)(algo * 1e9 / (double)BUSBW_BYTES_S);
}

/* When the operation could start on this rank's stream (now, without the fake runtime). */
static uint64_t op_ready_ns(const struct op *o)
{
	uint64_t t;

	pthread_once(&stream_hooks_once, stream_hooks_lookup);
	if (stream_ready && stream_ready(o->stream, &t) == 0)
		return t;
	return now_ns();
}

/* Puts the finished operation on its stream; returns the time the host must sleep until. */
static uint64_t op_finish(const struct op *o)
{
	uint64_t end = o->start_ns + op_ns(o);

	if (stream_ready && stream_busy_until(o->stream, end) == 0)
		return 0;
	return end;
}

/*
 * The name real NCCL gives the kernel of the operation, as CUPTI reports it:
 * ncclDevKernel_<Coll>[_<RedOp>_<type>]_<ALGO>_<PROTO> (ring algorithm, LL protocol).
 */
static void kernel_name(const struct op *o, char *buf, size_t len)
{
	static const char *const colls[] = { [OP_ALLREDUCE] = "AllReduce", [OP_REDUCE] = "Reduce",
		[OP_BROADCAST] = "Broadcast", [OP_ALLGATHER] = "AllGather", [OP_REDUCESCATTER] = "ReduceScatter" };
	static const char *const reds[] = { "Sum", "Prod", "Max", "Min", "PreMulSum" };
	static const char *const types[] = { "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16" };
	bool reduces = o->kind == OP_ALLREDUCE || o->kind == OP_REDUCE || o->kind == OP_REDUCESCATTER;

	if (o->kind == OP_SEND || o->kind == OP_RECV) {
		snprintf(buf, len, "ncclDevKernel_SendRecv");
		return;
	}
	if (reduces && (unsigned)o->red < sizeof(reds) / sizeof(reds[0]) &&
	    (unsigned)o->type < sizeof(types) / sizeof(types[0]))
		snprintf(buf, len, "ncclDevKernel_%s_%s_%s_RING_LL", colls[o->kind],
			 o->red == ncclAvg ? "Sum" : reds[o->red], types[o->type]);
	else
		snprintf(buf, len, "ncclDevKernel_%s_RING_LL", colls[o->kind]);
}

/* The operation's kernel, for the fake CUPTI (through the fake runtime, as a launch would). */
static void op_report_kernel(const struct op *o, uint64_t api_start_ns)
{
	char name[96];

	if (!stream_ready || !collective_kernel)
		return;
	kernel_name(o, name, sizeof(name));
	collective_kernel(o->stream, name, api_start_ns, o->start_ns, o->start_ns + op_ns(o));
}

/* ---- reductions ------------------------------------------------------------------------- */

static float bf16_to_float(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	if ((u & 0x7fffffffU) > 0x7f800000U)
		return (uint16_t)((u >> 16) | 0x40);  /* quiet NaN */
	u += 0x7fffU + ((u >> 16) & 1);              /* round to nearest even */
	return (uint16_t)(u >> 16);
}

#define RED_APPLY(acc, b, red)                                                   \
	switch (red) {                                                           \
	case ncclProd: acc = acc * b; break;                                     \
	case ncclMax: acc = b > acc ? b : acc; break;                            \
	case ncclMin: acc = b < acc ? b : acc; break;                            \
	default: acc = acc + b; break;                                           \
	}

/* Integers accumulate in the unsigned type: wrap-around instead of signed overflow. */
#define REDUCE_INT(T, UT)                                                        \
	for (size_t i = 0; i < count; i++) {                                     \
		T acc = ((const T *)srcs[0])[i];                                  \
		for (int r = 1; r < n; r++) {                                     \
			T b = ((const T *)srcs[r])[i];                           \
			if (red == ncclSum || red == ncclAvg)                     \
				acc = (T)((UT)acc + (UT)b);                       \
			else if (red == ncclProd)                                 \
				acc = (T)((UT)acc * (UT)b);                       \
			else if (red == ncclMax)                                  \
				acc = b > acc ? b : acc;                          \
			else                                                      \
				acc = b < acc ? b : acc;                          \
		}                                                                 \
		((T *)dst)[i] = red == ncclAvg ? (T)(acc / (T)n) : acc;           \
	}

#define REDUCE_FLT(T, LOAD, STORE)                                               \
	for (size_t i = 0; i < count; i++) {                                     \
		T acc = LOAD(srcs[0], i);                                          \
		for (int r = 1; r < n; r++) {                                     \
			T b = LOAD(srcs[r], i);                                   \
			RED_APPLY(acc, b, red)                                    \
		}                                                                 \
		if (red == ncclAvg)                                               \
			acc = acc / (T)n;                                         \
		STORE(dst, i, acc);                                               \
	}

#define LOAD_F32(p, i)     (((const float *)(p))[i])
#define LOAD_F64(p, i)     (((const double *)(p))[i])
#define LOAD_F16(p, i)     ((float)((const _Float16 *)(p))[i])
#define LOAD_BF16(p, i)    bf16_to_float(((const uint16_t *)(p))[i])
#define STORE_F32(p, i, v) (((float *)(p))[i] = (v))
#define STORE_F64(p, i, v) (((double *)(p))[i] = (v))
#define STORE_F16(p, i, v) (((_Float16 *)(p))[i] = (_Float16)(v))
#define STORE_BF16(p, i, v) (((uint16_t *)(p))[i] = float_to_bf16(v))

/* dst[i] = srcs[0][i] (red) srcs[1][i] (red) ... in rank order. */
static void reduce(void *dst, const void *const *srcs, int n, size_t count, ncclDataType_t type,
		   ncclRedOp_t red)
{
	switch (type) {
	case ncclInt8: REDUCE_INT(int8_t, uint8_t); break;
	case ncclUint8: REDUCE_INT(uint8_t, uint8_t); break;
	case ncclInt32: REDUCE_INT(int32_t, uint32_t); break;
	case ncclUint32: REDUCE_INT(uint32_t, uint32_t); break;
	case ncclInt64: REDUCE_INT(int64_t, uint64_t); break;
	case ncclUint64: REDUCE_INT(uint64_t, uint64_t); break;
	case ncclFloat16: REDUCE_FLT(float, LOAD_F16, STORE_F16); break;
	case ncclBfloat16: REDUCE_FLT(float, LOAD_BF16, STORE_BF16); break;
	case ncclFloat32: REDUCE_FLT(float, LOAD_F32, STORE_F32); break;
	case ncclFloat64: REDUCE_FLT(double, LOAD_F64, STORE_F64); break;
	default: break;  /* rejected by validation */
	}
}

/* ---- operations -------------------------------------------------------------------------- */

static uint8_t *stage_slot(const struct ncclComm *c, int rank)
{
	return c->stage + (size_t)rank * STAGE_BYTES;
}

/*
 * Arrives at the communicator barrier; the op remembers which generation it waits for.
 * The first arrival of a collective publishes the rank's stream ready time.
 */
static void bar_arrive(struct op *o)
{
	struct shm_hdr *s = o->comm->shm;

	shm_lock(s);
	if (o->chunk == 0 && o->phase == PH_STAGE)
		s->ready_ns[o->comm->rank] = o->ready_ns;
	o->bar_gen = s->bar_gen;
	if (++s->bar_count == o->comm->nranks) {
		s->bar_count = 0;
		s->bar_gen++;
	}
	shm_changed(s);
	shm_unlock(s);
}

/* 1 when the barrier the op arrived at has opened, 0 if not yet, -1 on abort. */
static int bar_passed(struct op *o)
{
	struct shm_hdr *s = o->comm->shm;
	int r;

	shm_lock(s);
	r = s->aborted ? -1 : s->bar_gen != o->bar_gen;
	shm_unlock(s);
	return r;
}

static void coll_stage(struct op *o)
{
	struct ncclComm *c = o->comm;
	size_t off = o->chunk * o->chunk_elems, es = o->esize;
	size_t len = o->count - off < o->chunk_elems ? o->count - off : o->chunk_elems;
	uint8_t *mine = stage_slot(c, c->rank);

	switch (o->kind) {
	case OP_BROADCAST:
		if (c->rank == o->peer) {
			memcpy(mine, o->send + off * es, len * es);
			if (o->recv != o->send)
				memmove(o->recv + off * es, o->send + off * es, len * es);
		}
		break;
	case OP_REDUCESCATTER:
		for (int q = 0; q < c->nranks; q++)
			memcpy(mine + (size_t)q * o->chunk_elems * es, o->send + ((size_t)q * o->count + off) * es,
			       len * es);
		break;
	default:
		memcpy(mine, o->send + off * es, len * es);
		break;
	}
}

static void coll_compute(struct op *o)
{
	struct ncclComm *c = o->comm;
	size_t off = o->chunk * o->chunk_elems, es = o->esize;
	size_t len = o->count - off < o->chunk_elems ? o->count - off : o->chunk_elems;
	const void *srcs[MAX_RANKS];

	for (int q = 0; q < c->nranks; q++)
		srcs[q] = stage_slot(c, q);
	switch (o->kind) {
	case OP_ALLREDUCE:
		reduce(o->recv + off * es, srcs, c->nranks, len, o->type, o->red);
		break;
	case OP_REDUCE:
		if (c->rank == o->peer)
			reduce(o->recv + off * es, srcs, c->nranks, len, o->type, o->red);
		break;
	case OP_BROADCAST:
		if (c->rank != o->peer)
			memcpy(o->recv + off * es, srcs[o->peer], len * es);
		break;
	case OP_ALLGATHER:
		for (int q = 0; q < c->nranks; q++)
			memcpy(o->recv + ((size_t)q * o->count + off) * es, srcs[q], len * es);
		break;
	case OP_REDUCESCATTER:
		for (int q = 0; q < c->nranks; q++)
			srcs[q] = stage_slot(c, q) + (size_t)c->rank * o->chunk_elems * es;
		reduce(o->recv + off * es, srcs, c->nranks, len, o->type, o->red);
		break;
	default:
		break;
	}
}

/* After the first barrier of a collective: the latest stream ready time of all ranks. */
static void coll_start_time(struct op *o)
{
	struct shm_hdr *s = o->comm->shm;

	shm_lock(s);
	for (int q = 0; q < o->comm->nranks; q++)
		if (s->ready_ns[q] > o->start_ns)
			o->start_ns = s->ready_ns[q];
	shm_unlock(s);
}

/* Advances a collective as far as possible without blocking. */
static ncclResult_t coll_progress(struct op *o, bool *progressed)
{
	int r;

	for (;;) {
		if (o->chunk == o->nchunks) {
			o->finished = true;
			*progressed = true;
			return ncclSuccess;
		}
		switch (o->phase) {
		case PH_STAGE:
			coll_stage(o);
			bar_arrive(o);
			o->phase = PH_COMPUTE;
			*progressed = true;
			break;
		case PH_COMPUTE:
			r = bar_passed(o);
			if (r <= 0)
				return r < 0 ? ncclRemoteError : ncclSuccess;
			if (o->chunk == 0)
				coll_start_time(o);
			coll_compute(o);
			bar_arrive(o);
			o->phase = PH_RELEASE;
			*progressed = true;
			break;
		case PH_RELEASE:
			r = bar_passed(o);
			if (r <= 0)
				return r < 0 ? ncclRemoteError : ncclSuccess;
			o->chunk++;
			o->phase = PH_STAGE;
			break;
		}
	}
}

/* Moves at most one mailbox-full of a send or receive. */
static ncclResult_t p2p_progress(struct op *o, bool *progressed)
{
	struct ncclComm *c = o->comm;
	size_t total = o->count * o->esize;
	bool send = o->kind == OP_SEND;
	size_t box = send ? (size_t)c->rank * c->nranks + o->peer : (size_t)o->peer * c->nranks + c->rank;
	struct mbox *h = &c->mbox_hdr[box];
	uint8_t *data = c->mbox_data + box * MBOX_BYTES;
	ncclResult_t r = ncclSuccess;

	shm_lock(c->shm);
	if (c->shm->aborted) {
		r = ncclRemoteError;
	} else if (send && !h->full) {
		size_t len = total - o->done_bytes < MBOX_BYTES ? total - o->done_bytes : MBOX_BYTES;

		memcpy(data, o->send + o->done_bytes, len);
		if (o->done_bytes == 0)
			h->ready_ns = o->ready_ns;
		h->len = (uint32_t)len;
		h->full = 1;
		o->done_bytes += len;
		shm_changed(c->shm);
		*progressed = true;
	} else if (!send && h->full) {
		size_t len = total - o->done_bytes < h->len ? total - o->done_bytes : h->len;

		memcpy(o->recv + o->done_bytes, data, len);
		if (o->done_bytes == 0 && h->ready_ns > o->start_ns)
			o->start_ns = h->ready_ns;
		h->full = 0;
		o->done_bytes += len;
		shm_changed(c->shm);
		*progressed = true;
	}
	shm_unlock(c->shm);
	if (o->done_bytes >= total)
		o->finished = true;
	return r;
}

/* May ops[i] progress now? Operations of one kind on one comm (and peer) keep their order. */
static bool op_eligible(const struct op *ops, size_t i)
{
	for (size_t j = 0; j < i; j++) {
		if (ops[j].finished || ops[j].comm != ops[i].comm)
			continue;
		if (ops[i].kind == OP_SEND || ops[i].kind == OP_RECV) {
			if (ops[j].kind == ops[i].kind && ops[j].peer == ops[i].peer)
				return false;
		} else if (ops[j].kind != OP_SEND && ops[j].kind != OP_RECV) {
			return false;
		}
	}
	return true;
}

/* Runs the operations to completion, progressing them together (a group). */
static ncclResult_t run_ops(struct op *ops, size_t n)
{
	bool one_comm = true;
	uint64_t host_until = 0, api_start = now_ns();
	ncclResult_t r = ncclSuccess;

	for (size_t i = 1; i < n; i++)
		one_comm = one_comm && ops[i].comm == ops[0].comm;
	for (;;) {
		bool progressed = false, all_done = true;
		uint64_t seen = 0;

		if (n > 0) {
			shm_lock(ops[0].comm->shm);
			seen = ops[0].comm->shm->change;
			shm_unlock(ops[0].comm->shm);
		}
		for (size_t i = 0; i < n && r == ncclSuccess; i++) {
			struct op *o = &ops[i];

			if (o->finished)
				continue;
			if (op_eligible(ops, i)) {
				if (!o->started) {
					o->started = true;
					o->ready_ns = o->start_ns = op_ready_ns(o);
				}
				r = o->kind == OP_SEND || o->kind == OP_RECV ? p2p_progress(o, &progressed) :
									       coll_progress(o, &progressed);
				if (r != ncclSuccess)
					o->comm->async_error = r;
				else if (o->finished) {
					uint64_t t = op_finish(o);

					host_until = t > host_until ? t : host_until;
				}
			}
			all_done = all_done && o->finished;
		}
		if (r != ncclSuccess || all_done)
			break;
		if (progressed)
			continue;
		if (one_comm) {
			shm_lock(ops[0].comm->shm);
			shm_wait(ops[0].comm->shm, seen);
			shm_unlock(ops[0].comm->shm);
		} else {
			sleep_ns(20000);
		}
	}
	if (host_until > now_ns())
		sleep_ns(host_until - now_ns());
	for (size_t i = 0; i < n && r == ncclSuccess; i++)
		op_report_kernel(&ops[i], api_start);
	return r == ncclRemoteError ? fail(r, "fake NCCL: communicator aborted by a peer") : r;
}

/* ---- groups ------------------------------------------------------------------------------ */

static __thread int group_depth;
static __thread struct op *group_ops;
static __thread size_t group_n, group_cap;
static __thread struct ncclComm **group_inits;  /* communicators whose join is pending */
static __thread size_t group_ninits, group_inits_cap;
static __thread ncclResult_t group_error;

static ncclResult_t enqueue_or_run(const struct op *o)
{
	struct op copy = *o;

	if (group_depth == 0)
		return run_ops(&copy, 1);
	if (group_n == group_cap) {
		size_t cap = group_cap ? group_cap * 2 : 16;
		struct op *v = realloc(group_ops, cap * sizeof(*v));

		if (!v)
			return group_error = fail(ncclSystemError, "fake NCCL: out of memory");
		group_ops = v;
		group_cap = cap;
	}
	group_ops[group_n++] = copy;
	return ncclSuccess;
}

static ncclResult_t wait_joined(struct ncclComm *c)
{
	struct shm_hdr *s = c->shm;
	ncclResult_t r = ncclSuccess;

	shm_lock(s);
	while (s->joined < c->nranks && !s->aborted)
		shm_wait(s, s->change);
	if (s->aborted)
		r = fail(ncclRemoteError, "fake NCCL: communicator aborted during init");
	shm_unlock(s);
	return r;
}

ncclResult_t pncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

static ncclResult_t group_end(void)
{
	ncclResult_t r;

	if (group_depth == 0)
		return fail(ncclInvalidUsage, "fake NCCL: ncclGroupEnd without ncclGroupStart");
	if (--group_depth > 0)
		return ncclSuccess;
	r = group_error;
	for (size_t i = 0; i < group_ninits && r == ncclSuccess; i++)
		r = wait_joined(group_inits[i]);
	if (r == ncclSuccess)
		r = run_ops(group_ops, group_n);
	free(group_ops);
	free(group_inits);
	group_ops = NULL;
	group_inits = NULL;
	group_n = group_cap = group_ninits = group_inits_cap = 0;
	group_error = ncclSuccess;
	return r;
}

ncclResult_t pncclGroupEnd(void)
{
	return group_end();
}

/* ---- communicators ----------------------------------------------------------------------- */

static size_t shm_size(int nranks)
{
	size_t n = (size_t)nranks;

	return sizeof(struct shm_hdr) + n * STAGE_BYTES + n * n * sizeof(struct mbox) + n * n * MBOX_BYTES;
}

static ncclResult_t unique_id(ncclUniqueId *uniqueId)
{
	static _Atomic unsigned int counter;
	uint64_t rnd = 0;

	if (!uniqueId)
		return fail(ncclInvalidArgument, "fake NCCL: uniqueId is NULL");
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = now_ns() ^ ((uint64_t)getpid() << 32);
	memset(uniqueId, 0, sizeof(*uniqueId));
	snprintf(uniqueId->internal, sizeof(uniqueId->internal), ID_PREFIX "/fakenccl-%d-%u-%016llx",
		 (int)getpid(), atomic_fetch_add(&counter, 1), (unsigned long long)rnd);
	return ncclSuccess;
}

ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
	return unique_id(uniqueId);
}

static int shm_init(struct shm_hdr *s, int nranks)
{
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;

	s->magic = SHM_MAGIC;
	s->nranks = nranks;
	if (pthread_mutexattr_init(&ma) || pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) ||
	    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST) || pthread_mutex_init(&s->lock, &ma))
		return -EINVAL;
	pthread_mutexattr_destroy(&ma);
	if (pthread_condattr_init(&ca) || pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED) ||
	    pthread_cond_init(&s->cond, &ca))
		return -EINVAL;
	pthread_condattr_destroy(&ca);
	atomic_store_explicit(&s->ready, 1, memory_order_release);
	return 0;
}

/* Opens (or creates) the segment named `name`; returns the mapping or NULL. */
static struct shm_hdr *shm_attach(const char *name, int nranks, size_t size)
{
	struct shm_hdr *s = MAP_FAILED;
	bool creator = false;
	struct stat st;
	int fd;

	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0) {
		creator = true;
		if (ftruncate(fd, (off_t)size) < 0)
			goto out;
	} else {
		if (errno != EEXIST)
			return NULL;
		fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0)
			return NULL;
		/* The creator may not have sized the segment yet. */
		while (fstat(fd, &st) == 0 && (size_t)st.st_size < size)
			sleep_ns(100000);
	}
	s = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s == MAP_FAILED)
		goto out;
	if (creator) {
		if (shm_init(s, nranks) < 0) {
			munmap(s, size);
			s = MAP_FAILED;
		}
	} else {
		while (atomic_load_explicit(&s->ready, memory_order_acquire) == 0)
			sleep_ns(100000);
	}
out:
	if (s == MAP_FAILED && creator)
		shm_unlink(name);
	close(fd);
	return s == MAP_FAILED ? NULL : s;
}

static ncclResult_t comm_init(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank)
{
	char name[NCCL_UNIQUE_ID_BYTES];
	struct ncclComm *c = NULL;
	struct shm_hdr *s;
	size_t size, n;
	bool dup, last;
	ncclResult_t r;

	if (!comm)
		return fail(ncclInvalidArgument, "fake NCCL: comm is NULL");
	if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
		return fail(ncclInvalidArgument, "fake NCCL: invalid nranks or rank");
	if (strncmp(id->internal, ID_PREFIX, strlen(ID_PREFIX)) != 0 ||
	    !memchr(id->internal, '\0', sizeof(id->internal)))
		return fail(ncclInvalidArgument, "fake NCCL: unique id not made by ncclGetUniqueId");
	snprintf(name, sizeof(name), "%s", id->internal + strlen(ID_PREFIX));
	size = shm_size(nranks);
	s = shm_attach(name, nranks, size);
	if (!s)
		return fail(ncclSystemError, "fake NCCL: cannot open the shared memory segment");
	if (s->magic != SHM_MAGIC || s->nranks != nranks) {
		munmap(s, size);
		return fail(ncclInvalidArgument, "fake NCCL: nranks differs between ranks");
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		munmap(s, size);
		return fail(ncclSystemError, "fake NCCL: out of memory");
	}
	n = (size_t)nranks;
	*c = (struct ncclComm){
		.magic = COMM_MAGIC, .shm = s, .map_len = size, .rank = rank, .nranks = nranks,
		.stage = (uint8_t *)(s + 1),
		.mbox_hdr = (struct mbox *)((uint8_t *)(s + 1) + n * STAGE_BYTES),
	};
	c->mbox_data = (uint8_t *)(c->mbox_hdr + n * n);
	shm_lock(s);
	dup = s->rank_joined[rank];
	if (!dup) {
		s->rank_joined[rank] = 1;
		s->joined++;
		shm_changed(s);
	}
	last = s->joined == nranks;
	shm_unlock(s);
	if (dup) {
		munmap(s, size);
		free(c);
		return fail(ncclInvalidUsage, "fake NCCL: two ranks with the same rank number");
	}
	if (last)
		shm_unlink(name);
	if (group_depth > 0) {
		/* Inside a group (one thread initialising several ranks): wait in ncclGroupEnd. */
		if (group_ninits == group_inits_cap) {
			size_t cap = group_inits_cap ? group_inits_cap * 2 : 8;
			struct ncclComm **v = realloc(group_inits, cap * sizeof(*v));

			if (!v) {
				group_error = fail(ncclSystemError, "fake NCCL: out of memory");
				*comm = c;
				return group_error;
			}
			group_inits = v;
			group_inits_cap = cap;
		}
		group_inits[group_ninits++] = c;
		*comm = c;
		return ncclSuccess;
	}
	r = wait_joined(c);
	*comm = c;
	return r;
}

ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return comm_init(comm, nranks, &commId, rank);
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				     ncclConfig_t *config)
{
	return comm_init(comm, nranks, &commId, rank);
}

ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	ncclUniqueId id;
	ncclResult_t r;

	if (!comm || ndev < 1)
		return fail(ncclInvalidArgument, "fake NCCL: invalid comm or ndev");
	r = unique_id(&id);
	if (r != ncclSuccess)
		return r;
	/* One thread, several ranks: join all of them in a group, wait for all in group_end. */
	group_depth++;
	for (int i = 0; i < ndev && r == ncclSuccess; i++)
		r = comm_init(&comm[i], ndev, &id, i);
	if (r != ncclSuccess)
		group_error = r;
	return group_end();
}

static void comm_free(struct ncclComm *c)
{
	munmap(c->shm, c->map_len);
	c->magic = 0;
	free(c);
}

ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	if (!comm_ok(comm))
		return fail(ncclInvalidArgument, "fake NCCL: invalid communicator");
	comm_free(comm);
	return ncclSuccess;
}

ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
	return comm_ok(comm) ? ncclSuccess : fail(ncclInvalidArgument, "fake NCCL: invalid communicator");
}

ncclResult_t pncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	if (!comm_ok(comm))
		return fail(ncclInvalidArgument, "fake NCCL: invalid communicator");
	shm_lock(comm->shm);
	comm->shm->aborted = 1;
	shm_changed(comm->shm);
	shm_unlock(comm->shm);
	comm->async_error = ncclRemoteError;
	return ncclSuccess;
}

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm_ok(comm) || !asyncError)
		return fail(ncclInvalidArgument, "fake NCCL: invalid argument");
	*asyncError = comm->async_error;
	return ncclSuccess;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm_ok(comm) || !count)
		return fail(ncclInvalidArgument, "fake NCCL: invalid argument");
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm_ok(comm) || !rank)
		return fail(ncclInvalidArgument, "fake NCCL: invalid argument");
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm_ok(comm) || !device)
		return fail(ncclInvalidArgument, "fake NCCL: invalid argument");
	*device = 0;
	return ncclSuccess;
}

ncclResult_t pncclGetVersion(int *version)
{
	if (!version)
		return fail(ncclInvalidArgument, "fake NCCL: version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

const char *pncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *pncclGetLastError(ncclComm_t comm)
{
	return last_error;
}

/* ---- collectives and point-to-point ------------------------------------------------------ */

static ncclResult_t op_prepare(struct op *o, bool reduces)
{
	size_t stage_elems;

	if (!comm_ok(o->comm))
		return fail(ncclInvalidArgument, "fake NCCL: invalid communicator");
	o->esize = type_size(o->type);
	if (o->esize == 0 || (int)o->type < 0 || o->type >= ncclNumTypes)
		return fail(ncclInvalidArgument, "fake NCCL: invalid data type");
	if (reduces && ((int)o->red < 0 || o->red >= ncclNumOps || o->type == ncclFloat8e4m3 ||
			o->type == ncclFloat8e5m2))
		return fail(ncclInvalidArgument, "fake NCCL: invalid or unsupported reduction");
	if ((o->kind == OP_REDUCE || o->kind == OP_BROADCAST || o->kind == OP_SEND || o->kind == OP_RECV) &&
	    (o->peer < 0 || o->peer >= o->comm->nranks))
		return fail(ncclInvalidArgument, "fake NCCL: invalid root or peer");
	if (o->count > ((size_t)1 << 40) / o->esize)
		return fail(ncclInvalidArgument, "fake NCCL: count too large");
	if (o->count && ((!o->send && o->kind != OP_RECV) || (!o->recv && o->kind != OP_SEND)))
		return fail(ncclInvalidArgument, "fake NCCL: NULL buffer");
	stage_elems = STAGE_BYTES / o->esize;
	o->chunk_elems = o->kind == OP_REDUCESCATTER ? stage_elems / (size_t)o->comm->nranks : stage_elems;
	o->nchunks = (o->count + o->chunk_elems - 1) / o->chunk_elems;
	return ncclSuccess;
}

static ncclResult_t submit(struct op *o, bool reduces)
{
	ncclResult_t r = op_prepare(o, reduces);

	return r != ncclSuccess ? r : enqueue_or_run(o);
}

ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_ALLREDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff, .count = count,
			.type = datatype, .red = op, .stream = stream };

	return submit(&o, true);
}

ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_REDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff, .count = count,
			.type = datatype, .red = op, .peer = root, .stream = stream };

	/* Only the root needs a receive buffer. */
	if (comm_ok(comm) && comm->rank != root && !recvbuff)
		o.recv = (void *)sendbuff;
	return submit(&o, true);
}

ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			    int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_BROADCAST, .comm = comm, .send = sendbuff, .recv = recvbuff, .count = count,
			.type = datatype, .peer = root, .stream = stream };

	/* Only the root reads sendbuff. */
	if (comm_ok(comm) && comm->rank != root && !sendbuff)
		o.send = recvbuff;
	return submit(&o, false);
}

ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
			cudaStream_t stream)
{
	struct op o = { .kind = OP_BROADCAST, .comm = comm, .send = buff, .recv = buff, .count = count,
			.type = datatype, .peer = root, .stream = stream };

	return submit(&o, false);
}

ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
			    ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_ALLGATHER, .comm = comm, .send = sendbuff, .recv = recvbuff,
			.count = sendcount, .type = datatype, .stream = stream };

	return submit(&o, false);
}

ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
				ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_REDUCESCATTER, .comm = comm, .send = sendbuff, .recv = recvbuff,
			.count = recvcount, .type = datatype, .red = op, .stream = stream };

	return submit(&o, true);
}

ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
		       cudaStream_t stream)
{
	struct op o = { .kind = OP_SEND, .comm = comm, .send = sendbuff, .count = count, .type = datatype,
			.peer = peer, .stream = stream };

	return submit(&o, false);
}

ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
		       cudaStream_t stream)
{
	struct op o = { .kind = OP_RECV, .comm = comm, .recv = recvbuff, .count = count, .type = datatype,
			.peer = peer, .stream = stream };

	return submit(&o, false);
}

/* ---- the nccl* names: weak aliases of the pnccl* definitions, as in the real library ---- */

#define NCCL_ALIAS(name) __typeof__(p##name) name __attribute__((weak, alias("p" #name)))

NCCL_ALIAS(ncclGetVersion);
NCCL_ALIAS(ncclGetUniqueId);
NCCL_ALIAS(ncclCommInitRank);
NCCL_ALIAS(ncclCommInitRankConfig);
NCCL_ALIAS(ncclCommInitAll);
NCCL_ALIAS(ncclCommFinalize);
NCCL_ALIAS(ncclCommDestroy);
NCCL_ALIAS(ncclCommAbort);
NCCL_ALIAS(ncclCommGetAsyncError);
NCCL_ALIAS(ncclCommCount);
NCCL_ALIAS(ncclCommUserRank);
NCCL_ALIAS(ncclCommCuDevice);
NCCL_ALIAS(ncclGetErrorString);
NCCL_ALIAS(ncclGetLastError);
NCCL_ALIAS(ncclAllReduce);
NCCL_ALIAS(ncclReduce);
NCCL_ALIAS(ncclBroadcast);
NCCL_ALIAS(ncclBcast);
NCCL_ALIAS(ncclAllGather);
NCCL_ALIAS(ncclReduceScatter);
NCCL_ALIAS(ncclSend);
NCCL_ALIAS(ncclRecv);
NCCL_ALIAS(ncclGroupStart);
NCCL_ALIAS(ncclGroupEnd);
