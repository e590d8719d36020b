/* SPDX-License-Identifier: MIT */
/*
 * Fake CUPTI, built as libcupti.so.13 for tests on machines without a GPU: the activity
 * API as injector/preload/cupti.c (and Kineto-style clients) use it, fed by the simulated
 * GPU of the fake libcudart.so.13 / libcuda.so.1 through their private activity sink
 * (fakegpu_activity.h). Compiled against the real <cupti.h>, so every exported signature
 * and every record layout is the header's; exported under the real version node
 * (libcupti.so.13, see libcupti.map).
 *
 * Modelled as CUPTI documents it:
 * - One subscriber at a time: another cuptiSubscribe gets
 *   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED until cuptiUnsubscribe. The activity
 *   API itself works without a subscription.
 * - Activity kinds MEMCPY, MEMSET, KERNEL, CONCURRENT_KERNEL, RUNTIME, DRIVER and
 *   EXTERNAL_CORRELATION, as CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
 *   CUpti_ActivityKernel10, CUpti_ActivityAPI and CUpti_ActivityExternalCorrelation.
 *   Any other kind: CUPTI_ERROR_INVALID_KIND ("not supported").
 * - Correlation: each entry point that enqueues work gets a correlation id, carried by its
 *   API record and by its kernel/memcpy/memset record. The external correlation records
 *   (one per external kind with an id pushed on the calling thread) precede the API
 *   record, so, as with real CUPTI, there are none unless RUNTIME (for runtime entry
 *   points) or DRIVER (for driver entry points) is enabled as well.
 * - Timestamps: cuptiGetTimestamp() and every record use the CUPTI timebase, which on
 *   Linux reads like CLOCK_REALTIME: here CLOCK_MONOTONIC plus the offset between the two
 *   clocks measured when the library was loaded.
 * - Buffers: requested from the client when a record needs room. A buffer is complete when
 *   the GPU work of all its records has finished. Full buffers are handed back in order
 *   by a worker thread once complete; cuptiActivityFlushAll(0) hands back the complete
 *   buffers at the head of the queue (and the current one if it is complete);
 *   CUPTI_ACTIVITY_FLAG_FLUSH_FORCED hands back everything, with the end timestamp (and
 *   the start, if it had not started) of still-running work set to 0, never re-delivered.
 *   A declined request (NULL) drops the record (cuptiActivityGetNumDroppedRecords); a
 *   buffer that is not 8-byte aligned or too small for the record is handed back empty.
 * - cuptiGetLastError(): the calling thread's last failure, then reset.
 *
 * Simplifications, on purpose: API records exist only for entry points that put work on a
 * stream (launches, copies, memsets); there is no callback API (a subscriber's callback is
 * never called); one context (id 1) per device; the legacy default stream has id 7, other
 * streams get ids from 13 on in the order they are first used. It needs the fake
 * libcuda.so.1 loaded (CUPTI_ERROR_NOT_INITIALIZED otherwise); libcudart.so.13 is picked
 * up when an activity kind is enabled, if it is loaded by then. Not callable from inside
 * its own buffer callbacks (except cuptiActivityGetNextRecord).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "tests/doubles/fakegpu_activity.h"

#define LEGACY_STREAM_ID     7u
#define FIRST_STREAM_ID      13u
#define CONTEXT_ID           1u
#define REGISTERS_PER_THREAD 32
#define EXT_DEPTH            64          /* pushed external ids per kind and thread */
#define RECORD_ALIGN         8u
#define NAME_BUCKETS         256u

_Static_assert(sizeof(CUpti_ActivityKernel10) % RECORD_ALIGN == 0, "kernel record size");
_Static_assert(sizeof(CUpti_ActivityMemcpy6) % RECORD_ALIGN == 0, "memcpy record size");
_Static_assert(sizeof(CUpti_ActivityMemset4) % RECORD_ALIGN == 0, "memset record size");
_Static_assert(sizeof(CUpti_ActivityAPI) % RECORD_ALIGN == 0, "API record size");
_Static_assert(sizeof(CUpti_ActivityExternalCorrelation) % RECORD_ALIGN == 0, "ext record size");

/* ---- results ----------------------------------------------------------------------------- */

#define RESULT(x) [x] = #x
static const char *const result_names[] = {
	RESULT(CUPTI_SUCCESS),
	RESULT(CUPTI_ERROR_INVALID_PARAMETER),
	RESULT(CUPTI_ERROR_INVALID_DEVICE),
	RESULT(CUPTI_ERROR_INVALID_CONTEXT),
	RESULT(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID),
	RESULT(CUPTI_ERROR_INVALID_EVENT_ID),
	RESULT(CUPTI_ERROR_INVALID_EVENT_NAME),
	RESULT(CUPTI_ERROR_INVALID_OPERATION),
	RESULT(CUPTI_ERROR_OUT_OF_MEMORY),
	RESULT(CUPTI_ERROR_HARDWARE),
	RESULT(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT),
	RESULT(CUPTI_ERROR_API_NOT_IMPLEMENTED),
	RESULT(CUPTI_ERROR_MAX_LIMIT_REACHED),
	RESULT(CUPTI_ERROR_NOT_READY),
	RESULT(CUPTI_ERROR_NOT_COMPATIBLE),
	RESULT(CUPTI_ERROR_NOT_INITIALIZED),
	RESULT(CUPTI_ERROR_INVALID_METRIC_ID),
	RESULT(CUPTI_ERROR_INVALID_METRIC_NAME),
	RESULT(CUPTI_ERROR_QUEUE_EMPTY),
	RESULT(CUPTI_ERROR_INVALID_HANDLE),
	RESULT(CUPTI_ERROR_INVALID_STREAM),
	RESULT(CUPTI_ERROR_INVALID_KIND),
	RESULT(CUPTI_ERROR_INVALID_EVENT_VALUE),
	RESULT(CUPTI_ERROR_DISABLED),
	RESULT(CUPTI_ERROR_INVALID_MODULE),
	RESULT(CUPTI_ERROR_INVALID_METRIC_VALUE),
	RESULT(CUPTI_ERROR_HARDWARE_BUSY),
	RESULT(CUPTI_ERROR_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE),
	RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES),
	RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS),
	RESULT(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE),
	RESULT(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES),
	RESULT(CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED),
	RESULT(CUPTI_ERROR_OPENACC_UNDEFINED_ROUTINE),
	RESULT(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES),
	RESULT(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED),
	RESULT(CUPTI_ERROR_INVALID_CHIP_NAME),
};

static __thread CUptiResult t_last_error;

/* Every exported function returns through here, so cuptiGetLastError() sees failures. */
static CUptiResult ret(CUptiResult r)
{
	if (r != CUPTI_SUCCESS)
		t_last_error = r;
	return r;
}

/* ---- timebase ------------------------------------------------------------------------------ */

static uint64_t g_ts_offset;   /* CUPTI timestamp - CLOCK_MONOTONIC (mod 2^64), fixed at load */

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor)) static void timebase_init(void)
{
	uint64_t mono = clock_ns(CLOCK_MONOTONIC);

	g_ts_offset = clock_ns(CLOCK_REALTIME) - mono;
}

static uint64_t cupti_ts(uint64_t mono_ns)
{
	return mono_ns + g_ts_offset;
}

/* ---- state ----------------------------------------------------------------------------------- */

struct CUpti_Subscriber_st {
	CUpti_CallbackFunc callback;    /* kept, never called: no callback API here */
	void *userdata;
};

/* A client buffer; `done_ns` (CLOCK_MONOTONIC) is when the last of its records completes. */
struct abuf {
	uint8_t *base;
	size_t size;
	size_t used;
	size_t max_records;             /* 0: as many as fit */
	size_t records;
	uint64_t done_ns;
	struct abuf *next;
};

struct stream_id {
	uint32_t kind;                  /* enum fakegpu_stream_kind */
	uintptr_t key;                  /* the stream object, or the thread for per-thread streams */
	uint32_t id;
};

struct name {
	struct name *next;
	char s[];
};

/* A fake CUDA library and its sink setter (NULL until found). */
struct fake_lib {
	const char *soname;
	void *handle;                   /* kept open: the setter must stay mapped */
	fakegpu_set_activity_sink_fn set;
	bool installed;
};

/*
 * Lock order: g_libs_lock (the fake libraries, looked up with dlopen: never taken by the
 * sink, which may run under the loader's lock) and g_deliver (serialises handing buffers
 * back), then g_lock (everything else). Client callbacks are called without g_lock:
 * buffer requests with nothing held, buffer completions with g_deliver held.
 */
static pthread_mutex_t g_libs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_deliver = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_queue_cond;
static pthread_once_t g_cond_once = PTHREAD_ONCE_INIT;

static struct CUpti_Subscriber_st g_subscriber;
static bool g_subscribed;
static bool g_kind_on[CUPTI_ACTIVITY_KIND_COUNT];
static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
static struct abuf *g_cur;                          /* being filled */
static struct abuf *g_spare;                        /* received, not used yet */
static struct abuf *g_queue, **g_queue_tail = &g_queue;   /* full or flushed, in order */
static bool g_worker_started;
static size_t g_dropped;
static int64_t g_grid_id;
static struct stream_id *g_streams;
static size_t g_nstreams, g_streams_cap;
static uint32_t g_next_stream_id = FIRST_STREAM_ID;
static struct name *g_names[NAME_BUCKETS];
static struct fake_lib g_libs[] = { { .soname = "libcuda.so.1" }, { .soname = "libcudart.so.13" } };
static _Atomic uint32_t g_next_corr = 1;

/* External correlation ids pushed by this thread, per kind. */
static __thread struct {
	uint32_t depth;
	uint64_t id[EXT_DEPTH];
} t_ext[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

static void cond_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&g_queue_cond, &a);
	pthread_condattr_destroy(&a);
}

/* ---- records --------------------------------------------------------------------------------- */

static size_t record_size(uint32_t kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
	default: return 0;
	}
}

static bool kind_valid(CUpti_ActivityKind kind)
{
	return (uint32_t)kind > CUPTI_ACTIVITY_KIND_INVALID && (uint32_t)kind < CUPTI_ACTIVITY_KIND_COUNT;
}

static bool any_kind_on_locked(void)
{
	for (size_t i = 0; i < CUPTI_ACTIVITY_KIND_COUNT; i++)
		if (g_kind_on[i])
			return true;
	return false;
}

/* Appends `b` to the hand-back queue and wakes the worker. g_lock held. */
static void queue_locked(struct abuf *b)
{
	b->next = NULL;
	*g_queue_tail = b;
	g_queue_tail = &b->next;
	pthread_cond_signal(&g_queue_cond);
}

static struct abuf *dequeue_locked(void)
{
	struct abuf *b = g_queue;

	if (b) {
		g_queue = b->next;
		if (!g_queue)
			g_queue_tail = &g_queue;
		b->next = NULL;
	}
	return b;
}

static void *worker_main(void *arg);

/* The current buffer is full: queue it, and start the worker that hands full buffers back. */
static void retire_current_locked(void)
{
	pthread_t t;

	queue_locked(g_cur);
	g_cur = NULL;
	if (!g_worker_started && pthread_create(&t, NULL, worker_main, NULL) == 0) {
		pthread_detach(t);
		g_worker_started = true;
	}
}

/* Asks the client for a buffer; called without g_lock. NULL if it declined. */
static struct abuf *buffer_request(CUpti_BuffersCallbackRequestFunc request,
				   CUpti_BuffersCallbackCompleteFunc complete)
{
	uint8_t *p = NULL;
	size_t size = 0, max_records = 0;
	struct abuf *b;

	request(&p, &size, &max_records);
	if (!p)
		return NULL;
	b = calloc(1, sizeof(*b));
	if (!b) {
		complete(NULL, 0, p, size, 0);
		return NULL;
	}
	*b = (struct abuf){ .base = p, .size = size, .max_records = max_records };
	return b;
}

static bool buffer_fits(const struct abuf *b, size_t size)
{
	return b->used + size <= b->size && (b->max_records == 0 || b->records < b->max_records);
}

/*
 * Room for a record of `size` bytes that completes at `done_ns` (CLOCK_MONOTONIC), zeroed,
 * or NULL if it is dropped. Called with g_lock held; drops it while asking the client for
 * a buffer.
 */
static void *record_alloc_locked(size_t size, uint64_t done_ns)
{
	bool fresh = false;
	void *rec;

	for (;;) {
		CUpti_BuffersCallbackRequestFunc request = g_request;
		CUpti_BuffersCallbackCompleteFunc complete = g_complete;
		struct abuf *b;

		if (g_cur && buffer_fits(g_cur, size))
			break;
		if (g_cur && g_cur->used > 0) {
			retire_current_locked();
			continue;
		}
		if (g_cur) {
			/* unused and too small for this record: hand it back empty */
			queue_locked(g_cur);
			g_cur = NULL;
			if (fresh)
				goto drop;
		}
		if (g_spare) {
			g_cur = g_spare;
			g_spare = g_spare->next;
			g_cur->next = NULL;
			continue;
		}
		if (!request || fresh)
			goto drop;
		pthread_mutex_unlock(&g_lock);
		b = buffer_request(request, complete);
		pthread_mutex_lock(&g_lock);
		if (!b)
			goto drop;
		fresh = true;
		if ((uintptr_t)b->base % RECORD_ALIGN) {
			queue_locked(b);
			goto drop;
		}
		b->next = g_spare;
		g_spare = b;
	}
	rec = g_cur->base + g_cur->used;
	memset(rec, 0, size);
	g_cur->used += size;
	g_cur->records++;
	if (done_ns > g_cur->done_ns)
		g_cur->done_ns = done_ns;
	return rec;
drop:
	g_dropped++;
	return NULL;
}

/* Forced flush: work still running at `now_ns` gets end 0 (and start 0 if not started). */
static void truncate_running(struct abuf *b, uint64_t now_ns)
{
	uint64_t now = cupti_ts(now_ns);

	for (size_t off = 0; off + sizeof(CUpti_Activity) <= b->used;) {
		CUpti_Activity *r = (CUpti_Activity *)(b->base + off);
		size_t size = record_size(r->kind);
		uint64_t *start = NULL, *end = NULL, *completed = NULL;

		if (size == 0)
			break;
		if (r->kind == CUPTI_ACTIVITY_KIND_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
			CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;

			start = &k->start;
			end = &k->end;
			completed = &k->completed;
		} else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
			start = &((CUpti_ActivityMemcpy6 *)r)->start;
			end = &((CUpti_ActivityMemcpy6 *)r)->end;
		} else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
			start = &((CUpti_ActivityMemset4 *)r)->start;
			end = &((CUpti_ActivityMemset4 *)r)->end;
		}
		if (end && *end > now) {
			*end = CUPTI_TIMESTAMP_UNKNOWN;
			if (completed)
				*completed = CUPTI_TIMESTAMP_UNKNOWN;
			if (*start > now)
				*start = CUPTI_TIMESTAMP_UNKNOWN;
		}
		off += size;
	}
}

/* Hands `b` back to the client. g_deliver held, g_lock not. */
static void deliver(struct abuf *b, CUpti_BuffersCallbackCompleteFunc complete)
{
	complete(NULL, 0, b->base, b->size, b->used);
	free(b);
}

/* Hands full buffers back, in order, each once its records are complete. */
static void *worker_main(void *arg)
{
	pthread_once(&g_cond_once, cond_init);
	for (;;) {
		CUpti_BuffersCallbackCompleteFunc complete;
		struct abuf *b = NULL;

		pthread_mutex_lock(&g_lock);
		for (;;) {
			uint64_t now = clock_ns(CLOCK_MONOTONIC);

			if (g_queue && g_queue->done_ns <= now)
				break;
			if (g_queue) {
				struct timespec until = { .tv_sec = (time_t)(g_queue->done_ns / 1000000000ULL),
							  .tv_nsec = (long)(g_queue->done_ns % 1000000000ULL) };

				pthread_cond_timedwait(&g_queue_cond, &g_lock, &until);
			} else {
				pthread_cond_wait(&g_queue_cond, &g_lock);
			}
		}
		pthread_mutex_unlock(&g_lock);

		pthread_mutex_lock(&g_deliver);
		pthread_mutex_lock(&g_lock);
		/* a flush may have handed it back meanwhile */
		if (g_queue && g_queue->done_ns <= clock_ns(CLOCK_MONOTONIC))
			b = dequeue_locked();
		complete = g_complete;
		pthread_mutex_unlock(&g_lock);
		if (b)
			deliver(b, complete);
		pthread_mutex_unlock(&g_deliver);
	}
	return NULL;
}

/* ---- stream ids and kernel names ------------------------------------------------------- */

static uint32_t stream_id_locked(uint32_t kind, const void *stream)
{
	uintptr_t key = kind == FAKEGPU_STREAM_PER_THREAD ? (uintptr_t)gettid() : (uintptr_t)stream;
	struct stream_id *v;

	if (kind == FAKEGPU_STREAM_LEGACY)
		return LEGACY_STREAM_ID;
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i].kind == kind && g_streams[i].key == key)
			return g_streams[i].id;
	if (g_nstreams == g_streams_cap) {
		size_t cap = g_streams_cap ? 2 * g_streams_cap : 16;

		v = realloc(g_streams, cap * sizeof(*v));
		if (!v)
			return CUPTI_INVALID_STREAM_ID;
		g_streams = v;
		g_streams_cap = cap;
	}
	g_streams[g_nstreams] = (struct stream_id){ .kind = kind, .key = key, .id = g_next_stream_id++ };
	return g_streams[g_nstreams++].id;
}

static void stream_forget_locked(const void *stream)
{
	for (size_t i = 0; i < g_nstreams; i++) {
		if (g_streams[i].kind == FAKEGPU_STREAM_CREATED && g_streams[i].key == (uintptr_t)stream) {
			g_streams[i] = g_streams[--g_nstreams];
			return;
		}
	}
}

/* CUPTI owns kernel names: one copy per name, alive as long as the library. */
static const char *name_intern_locked(const char *s)
{
	uint32_t h = 2166136261u;
	size_t len;
	struct name *n;

	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	for (n = g_names[h % NAME_BUCKETS]; n; n = n->next)
		if (strcmp(n->s, s) == 0)
			return n->s;
	len = strlen(s);
	n = malloc(sizeof(*n) + len + 1);
	if (!n)
		return NULL;
	memcpy(n->s, s, len + 1);
	n->next = g_names[h % NAME_BUCKETS];
	g_names[h % NAME_BUCKETS] = n;
	return n->s;
}

/* ---- the activity sink --------------------------------------------------------------------- */

static uint8_t memory_kind(uint32_t m)
{
	switch (m) {
	case FAKEGPU_MEM_DEVICE: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	case FAKEGPU_MEM_PINNED: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
	case FAKEGPU_MEM_PAGEABLE: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
	default: return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
	}
}

static uint8_t copy_kind(uint32_t src, uint32_t dst)
{
	bool s = src == FAKEGPU_MEM_DEVICE, d = dst == FAKEGPU_MEM_DEVICE;

	if (s && d)
		return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
	if (d)
		return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
	if (s)
		return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
	return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
}

static void write_external_locked(uint32_t corr)
{
	for (uint32_t k = CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; k++) {
		CUpti_ActivityExternalCorrelation *x;

		if (t_ext[k].depth == 0)
			continue;
		x = record_alloc_locked(sizeof(*x), 0);
		if (!x)
			continue;
		x->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
		x->externalKind = (CUpti_ExternalCorrelationKind)k;
		x->externalId = t_ext[k].id[t_ext[k].depth - 1];
		x->correlationId = corr;
	}
}

static void write_api_locked(const struct fakegpu_activity *a, CUpti_ActivityKind kind, uint32_t corr)
{
	CUpti_ActivityAPI *r = record_alloc_locked(sizeof(*r), 0);

	if (!r)
		return;
	r->kind = kind;
	r->cbid = a->cbid;
	r->start = cupti_ts(a->api_start_ns);
	r->end = cupti_ts(a->api_end_ns);
	r->processId = (uint32_t)getpid();
	r->threadId = (uint32_t)pthread_self();   /* CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT */
	r->correlationId = corr;
	r->returnValue = (uint32_t)a->result;
}

static void write_kernel_locked(const struct fakegpu_activity *a, CUpti_ActivityKind kind, uint32_t corr)
{
	CUpti_ActivityKernel10 *k = record_alloc_locked(sizeof(*k), a->end_ns);

	if (!k)
		return;
	k->kind = kind;
	k->registersPerThread = REGISTERS_PER_THREAD;
	k->partitionedGlobalCacheRequested = CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED;
	k->partitionedGlobalCacheExecuted = CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_NOT_SUPPORTED;
	k->start = cupti_ts(a->start_ns);
	k->end = cupti_ts(a->end_ns);
	k->completed = k->end;
	k->deviceId = a->device;
	k->contextId = CONTEXT_ID;
	k->streamId = stream_id_locked(a->stream_kind, a->stream);
	k->gridX = (int32_t)a->grid[0];
	k->gridY = (int32_t)a->grid[1];
	k->gridZ = (int32_t)a->grid[2];
	k->blockX = (int32_t)a->block[0];
	k->blockY = (int32_t)a->block[1];
	k->blockZ = (int32_t)a->block[2];
	k->dynamicSharedMemory = (int32_t)a->shmem;
	k->correlationId = corr;
	k->gridId = ++g_grid_id;
	k->name = name_intern_locked(a->name);
	k->queued = CUPTI_TIMESTAMP_UNKNOWN;       /* cuptiActivityEnableLatencyTimestamps: off */
	k->submitted = CUPTI_TIMESTAMP_UNKNOWN;
	k->launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
	k->sharedMemoryExecuted = a->shmem;
	k->channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
}

static void write_memcpy_locked(const struct fakegpu_activity *a, uint32_t corr)
{
	CUpti_ActivityMemcpy6 *m = record_alloc_locked(sizeof(*m), a->end_ns);

	if (!m)
		return;
	m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m->copyKind = copy_kind(a->src_mem, a->dst_mem);
	m->srcKind = memory_kind(a->src_mem);
	m->dstKind = memory_kind(a->dst_mem);
	m->flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
	m->bytes = a->bytes;
	m->start = cupti_ts(a->start_ns);
	m->end = cupti_ts(a->end_ns);
	m->deviceId = a->device;
	m->contextId = CONTEXT_ID;
	m->streamId = stream_id_locked(a->stream_kind, a->stream);
	m->correlationId = corr;
	m->runtimeCorrelationId = a->api == FAKEGPU_API_RUNTIME ? corr : 0;
	m->channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
	m->copyCount = 1;
}

static void write_memset_locked(const struct fakegpu_activity *a, uint32_t corr)
{
	CUpti_ActivityMemset4 *m = record_alloc_locked(sizeof(*m), a->end_ns);

	if (!m)
		return;
	m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
	m->value = a->value;
	m->bytes = a->bytes;
	m->start = cupti_ts(a->start_ns);
	m->end = cupti_ts(a->end_ns);
	m->deviceId = a->device;
	m->contextId = CONTEXT_ID;
	m->streamId = stream_id_locked(a->stream_kind, a->stream);
	m->correlationId = corr;
	m->flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
	m->memoryKind = memory_kind(a->dst_mem);
	m->channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
}

/* Installed in the fake CUDA libraries while any kind is enabled; runs on their callers. */
static void on_activity(const struct fakegpu_activity *a)
{
	CUpti_ActivityKind api_kind = a->api == FAKEGPU_API_DRIVER ? CUPTI_ACTIVITY_KIND_DRIVER :
								     CUPTI_ACTIVITY_KIND_RUNTIME;
	uint32_t corr;

	if (a->op == FAKEGPU_OP_STREAM_DESTROYED) {
		pthread_mutex_lock(&g_lock);
		stream_forget_locked(a->stream);
		pthread_mutex_unlock(&g_lock);
		return;
	}
	corr = atomic_fetch_add_explicit(&g_next_corr, 1, memory_order_relaxed);
	pthread_mutex_lock(&g_lock);
	if (g_kind_on[api_kind]) {
		if (g_kind_on[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION])
			write_external_locked(corr);
		write_api_locked(a, api_kind, corr);
	}
	switch (a->op) {
	case FAKEGPU_OP_KERNEL:
		if (g_kind_on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL])
			write_kernel_locked(a, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, corr);
		else if (g_kind_on[CUPTI_ACTIVITY_KIND_KERNEL])
			write_kernel_locked(a, CUPTI_ACTIVITY_KIND_KERNEL, corr);
		break;
	case FAKEGPU_OP_MEMCPY:
		if (g_kind_on[CUPTI_ACTIVITY_KIND_MEMCPY])
			write_memcpy_locked(a, corr);
		break;
	case FAKEGPU_OP_MEMSET:
		if (g_kind_on[CUPTI_ACTIVITY_KIND_MEMSET])
			write_memset_locked(a, corr);
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&g_lock);
}

/* Finds the sink setters of the loaded fake CUDA libraries. g_libs_lock held, g_lock not. */
static CUptiResult find_libs_locked(void)
{
	for (size_t i = 0; i < sizeof(g_libs) / sizeof(g_libs[0]); i++) {
		struct fake_lib *l = &g_libs[i];

		if (l->set)
			continue;
		l->handle = dlopen(l->soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
		if (!l->handle)
			continue;
		l->set = (fakegpu_set_activity_sink_fn)dlsym(l->handle, FAKEGPU_SET_ACTIVITY_SINK);
		if (!l->set) {
			dlclose(l->handle);
			l->handle = NULL;
		}
	}
	(void)dlerror();
	/* the driver is what CUPTI needs; a runtime alone is not enough */
	return g_libs[0].set ? CUPTI_SUCCESS : CUPTI_ERROR_NOT_INITIALIZED;
}

/* Installs the sink while any kind is enabled, removes it when none is. Both locks held. */
static void update_sinks_locked(void)
{
	bool want = any_kind_on_locked();

	for (size_t i = 0; i < sizeof(g_libs) / sizeof(g_libs[0]); i++) {
		struct fake_lib *l = &g_libs[i];

		if (l->set && l->installed != want && l->set(FAKEGPU_ACTIVITY_VERSION, want ? on_activity : NULL) == 0)
			l->installed = want;
	}
}

/* ---- exported: version, errors, time ----------------------------------------------------- */

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
	if (!version)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	*version = CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
	if (!str)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	if (result == CUPTI_ERROR_UNKNOWN) {
		*str = "CUPTI_ERROR_UNKNOWN";
		return CUPTI_SUCCESS;
	}
	if ((uint32_t)result >= sizeof(result_names) / sizeof(result_names[0]) || !result_names[result]) {
		*str = "CUPTI_ERROR_UNKNOWN";
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	}
	*str = result_names[result];
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetLastError(void)
{
	CUptiResult r = t_last_error;

	t_last_error = CUPTI_SUCCESS;
	return r;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	*timestamp = cupti_ts(clock_ns(CLOCK_MONOTONIC));
	return CUPTI_SUCCESS;
}

/* ---- exported: subscription ------------------------------------------------------------- */

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
				    void *userdata)
{
	CUptiResult r;

	if (!subscriber)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	pthread_mutex_lock(&g_libs_lock);
	r = find_libs_locked();
	pthread_mutex_unlock(&g_libs_lock);
	pthread_mutex_lock(&g_lock);
	if (r == CUPTI_SUCCESS && g_subscribed)
		r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	if (r == CUPTI_SUCCESS) {
		g_subscriber = (struct CUpti_Subscriber_st){ .callback = callback, .userdata = userdata };
		g_subscribed = true;
		*subscriber = &g_subscriber;
	}
	pthread_mutex_unlock(&g_lock);
	return ret(r);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
	CUptiResult r = CUPTI_ERROR_INVALID_PARAMETER;

	pthread_mutex_lock(&g_lock);
	if (subscriber && subscriber == &g_subscriber && g_subscribed) {
		g_subscribed = false;
		g_subscriber = (struct CUpti_Subscriber_st){ 0 };
		r = CUPTI_SUCCESS;
	}
	pthread_mutex_unlock(&g_lock);
	return ret(r);
}

/* ---- exported: activity ------------------------------------------------------------------- */

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
						    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
	if (!funcBufferRequested || !funcBufferCompleted)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	pthread_once(&g_cond_once, cond_init);
	pthread_mutex_lock(&g_lock);
	g_request = funcBufferRequested;
	g_complete = funcBufferCompleted;
	pthread_mutex_unlock(&g_lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
	CUptiResult r;

	if (!kind_valid(kind) || record_size(kind) == 0)
		return ret(CUPTI_ERROR_INVALID_KIND);
	pthread_once(&g_cond_once, cond_init);
	pthread_mutex_lock(&g_libs_lock);
	r = find_libs_locked();
	if (r == CUPTI_SUCCESS) {
		pthread_mutex_lock(&g_lock);
		g_kind_on[kind] = true;
		update_sinks_locked();
		pthread_mutex_unlock(&g_lock);
	}
	pthread_mutex_unlock(&g_libs_lock);
	return ret(r);
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if (!kind_valid(kind) || record_size(kind) == 0)
		return ret(CUPTI_ERROR_INVALID_KIND);
	pthread_mutex_lock(&g_libs_lock);
	pthread_mutex_lock(&g_lock);
	g_kind_on[kind] = false;
	update_sinks_locked();
	pthread_mutex_unlock(&g_lock);
	pthread_mutex_unlock(&g_libs_lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
	bool forced = flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED;
	struct abuf *list = NULL, **tail = &list;
	CUpti_BuffersCallbackCompleteFunc complete;
	uint64_t now;

	pthread_mutex_lock(&g_deliver);
	pthread_mutex_lock(&g_lock);
	complete = g_complete;
	if (!complete) {
		pthread_mutex_unlock(&g_lock);
		pthread_mutex_unlock(&g_deliver);
		return ret(CUPTI_ERROR_INVALID_OPERATION);
	}
	now = clock_ns(CLOCK_MONOTONIC);
	if (g_cur && g_cur->used > 0 && (forced || g_cur->done_ns <= now)) {
		queue_locked(g_cur);
		g_cur = NULL;
	}
	/* in order: a buffer waits for the ones before it (external correlation records
	 * may sit in an earlier buffer than the records they describe) */
	while (g_queue && (forced || g_queue->done_ns <= now)) {
		struct abuf *b = dequeue_locked();

		if (b->done_ns > now)
			truncate_running(b, now);
		*tail = b;
		tail = &b->next;
	}
	pthread_mutex_unlock(&g_lock);
	while (list) {
		struct abuf *b = list;

		list = b->next;
		deliver(b, complete);
	}
	pthread_mutex_unlock(&g_deliver);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
						CUpti_Activity **record)
{
	size_t off = 0, size;
	uint32_t kind;

	if (!buffer || !record)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	if (*record) {
		if ((uint8_t *)*record < buffer || (uint8_t *)*record >= buffer + validBufferSizeBytes)
			return ret(CUPTI_ERROR_INVALID_PARAMETER);
		size = record_size((*record)->kind);
		if (size == 0)
			return ret(CUPTI_ERROR_INVALID_KIND);
		off = (size_t)((uint8_t *)*record - buffer) + size;
	}
	if (off + sizeof(CUpti_Activity) > validBufferSizeBytes)
		return ret(CUPTI_ERROR_MAX_LIMIT_REACHED);
	memcpy(&kind, buffer + off, sizeof(kind));
	size = record_size(kind);
	if (size == 0 || off + size > validBufferSizeBytes)
		return ret(CUPTI_ERROR_INVALID_KIND);
	*record = (CUpti_Activity *)(buffer + off);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *dropped)
{
	if (!dropped)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	pthread_mutex_lock(&g_lock);
	*dropped = g_dropped;
	g_dropped = 0;
	pthread_mutex_unlock(&g_lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id)
{
	if ((uint32_t)kind == CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
	    (uint32_t)kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	if (t_ext[kind].depth == EXT_DEPTH)
		return ret(CUPTI_ERROR_OUT_OF_MEMORY);
	t_ext[kind].id[t_ext[kind].depth++] = id;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *lastId)
{
	if ((uint32_t)kind == CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
	    (uint32_t)kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
		return ret(CUPTI_ERROR_INVALID_PARAMETER);
	if (t_ext[kind].depth == 0)
		return ret(CUPTI_ERROR_QUEUE_EMPTY);
	t_ext[kind].depth--;
	if (lastId)
		*lastId = t_ext[kind].id[t_ext[kind].depth];
	return CUPTI_SUCCESS;
}
