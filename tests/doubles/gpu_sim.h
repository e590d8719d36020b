/* SPDX-License-Identifier: MIT */
/*
 * Simulated GPU shared by the fake CUDA runtime (libcudart.so.13) and the fake CUDA driver
 * (libcuda.so.1). Each library links its own private copy of this code (hidden visibility),
 * so the two doubles never call each other and a hook sees every API call exactly once.
 *
 * Device memory is host memory; data really moves. Time is simulated per stream: every
 * stream keeps `busy_until`, a CLOCK_MONOTONIC timestamp in ns. Enqueuing work of duration
 * d on a stream sets busy_until = max(now + SUBMIT_LATENCY_NS, busy_until, implicit
 * dependencies) + d and returns at once; synchronising sleeps until busy_until. (Work on
 * an idle stream starts SUBMIT_LATENCY_NS after it was enqueued, as on a real GPU, where
 * a kernel never starts within nanoseconds of its launch call.)
 *
 * Timing model (constants below):
 *   kernel      max(KERNEL_FLOOR_NS, threads * KERNEL_NS_PER_THREAD), threads = grid * block;
 *               the launching thread spins LAUNCH_HOST_NS of host cost.
 *   H2D / D2H   COPY_LATENCY_NS + bytes / bandwidth; 12 GB/s when the host side is pinned
 *               (cudaMallocHost, cudaHostAlloc, cudaHostRegister, cuMemAllocHost...),
 *               3 GB/s when it is pageable. Copies touching pageable memory block the host
 *               until they finish, even the *Async ones (as on real hardware).
 *   D2D         COPY_LATENCY_NS + bytes / 600 GB/s.    memset: bytes / 1 TB/s.
 * Legacy default stream semantics: work on the legacy stream starts after all blocking
 * streams are idle, and work on a blocking stream starts after the legacy stream is idle.
 * Streams created non-blocking and per-thread default streams do not take part.
 * The model has unlimited parallelism between streams (no engine contention).
 *
 * Activity: while the fake CUPTI has installed its sink (fakegpu_activity.h), every
 * kernel, copy and memset is reported to it with its simulated start and end on the
 * stream, described by the `struct sim_work` the entry point passes in.
 */
#ifndef AIPROF_TESTS_GPU_SIM_H
#define AIPROF_TESTS_GPU_SIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/doubles/fakegpu_activity.h"

#pragma GCC visibility push(hidden)

#define KERNEL_NS_PER_THREAD     1ULL
#define KERNEL_FLOOR_NS          5000ULL
#define LAUNCH_HOST_NS           3000ULL
#define SUBMIT_LATENCY_NS        2000ULL
#define COPY_LATENCY_NS          5000ULL
#define COPY_HOST_NS             2000ULL
#define BW_PINNED_BYTES_PER_S    12000000000ULL
#define BW_PAGEABLE_BYTES_PER_S  3000000000ULL
#define BW_D2D_BYTES_PER_S       600000000000ULL
#define BW_MEMSET_BYTES_PER_S    1000000000000ULL

#define SIM_STREAM_MAGIC 0x5354524d41534947ULL  /* "GISAMRTS" */
#define SIM_EVENT_MAGIC  0x5456454d41534947ULL

/*
 * Stream and event objects. Both libraries use this exact layout for struct CUstream_st
 * and struct CUevent_st (the types behind cudaStream_t/CUstream and cudaEvent_t/CUevent),
 * so a stream created with one API may be passed to the other, as with real CUDA.
 */
struct CUstream_st {
	uint64_t magic;
	uint64_t busy_until;       /* ns, CLOCK_MONOTONIC; protected by the device lock */
	bool blocking;             /* takes part in legacy default stream semantics */
	bool per_thread;
	int priority;
	unsigned int flags;
	struct CUstream_st *next;  /* in the owning sim_device's list */
};

struct CUevent_st {
	uint64_t magic;
	uint64_t when;             /* ns at which all work captured by the record is done */
	bool recorded;
	unsigned int flags;
};

/* One simulated device per library; to the program it is device 0 of both. */
#define SIM_DEVICE_ORDINAL 0u

struct sim_device {
	pthread_mutex_t lock;
	struct CUstream_st legacy;
	struct CUstream_st *streams;  /* created and per-thread streams */
};

#define SIM_DEVICE_INIT(d) { .lock = PTHREAD_MUTEX_INITIALIZER, \
	.legacy = { .magic = SIM_STREAM_MAGIC, .blocking = true } }

/* ns since an arbitrary point (CLOCK_MONOTONIC). */
uint64_t sim__now_ns(void);
/* Sleeps until CLOCK_MONOTONIC reaches `when_ns`; restarts after signals. */
void sim__sleep_until(uint64_t when_ns);
/* Burns `ns` of CPU on the calling thread (host cost of an API call). */
void sim__spin(uint64_t ns);

uint64_t sim__kernel_ns(uint64_t threads);
/* Threads of a launch: grid * block. */
uint64_t sim__threads(const uint32_t grid[3], const uint32_t block[3]);
uint64_t sim__bytes_ns(size_t bytes, uint64_t bytes_per_s);

/*
 * The entry point behind a piece of work, for the activity sink; only read while a sink is
 * installed (and for the launch geometry).
 */
struct sim_work {
	uint32_t api;              /* enum fakegpu_api */
	uint32_t cbid;             /* CUPTI callback id of the entry point */
	const char *name;          /* kernels: registered name, NULL if unknown */
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shmem;
	uint32_t value;            /* memsets: the value written */
	bool async;                /* an *Async entry point */
};

/* Whether a sink is installed: entry points look kernel names up only then. */
bool sim__activity_on(void);

/* Streams: the stream is allocated by the caller, then registered. */
void sim_device__add_stream(struct sim_device *d, struct CUstream_st *s);
void sim_device__remove_stream(struct sim_device *d, struct CUstream_st *s);
/* The calling thread's per-thread default stream; never freed (NULL on ENOMEM). */
struct CUstream_st *sim_device__per_thread_stream(struct sim_device *d);
/* Enqueues `dur_ns` of work on `s`; returns the time it completes. */
uint64_t sim_device__enqueue(struct sim_device *d, struct CUstream_st *s, uint64_t dur_ns);
/* Time at which everything enqueued so far on `s` (with implicit dependencies) is done. */
uint64_t sim_device__stream_done(struct sim_device *d, struct CUstream_st *s);
/* Time at which every stream of the device is idle. */
uint64_t sim_device__idle_at(struct sim_device *d);
/* Makes `s` wait for `when_ns` (cudaStreamWaitEvent). */
void sim_device__stream_wait(struct sim_device *d, struct CUstream_st *s, uint64_t when_ns);

/* Address ranges (device allocations, pinned host memory); thread safe. */
enum sim_mem {
	SIM_MEM_PAGEABLE = 0,  /* not in any table: ordinary host memory */
	SIM_MEM_PINNED,        /* allocated pinned by the library */
	SIM_MEM_REGISTERED,    /* pinned by *HostRegister; the caller owns the memory */
	SIM_MEM_DEVICE,
};

struct sim_range {
	uintptr_t start;
	size_t len;
	enum sim_mem kind;
};

struct sim_ranges {
	pthread_rwlock_t lock;
	struct sim_range *v;   /* sorted by start, non-overlapping */
	size_t n, cap;
	size_t device_bytes;   /* sum of len over SIM_MEM_DEVICE ranges */
};

#define SIM_RANGES_INIT { .lock = PTHREAD_RWLOCK_INITIALIZER }

/* Returns 0, -EEXIST if [start, start+len) overlaps a range, -ENOMEM. */
int sim_ranges__add(struct sim_ranges *t, const void *start, size_t len, enum sim_mem kind);
/* Removes the range starting exactly at `start` if it has kind `kind`; -ENOENT otherwise. */
int sim_ranges__remove(struct sim_ranges *t, const void *start, enum sim_mem kind);
/* Kind of the memory at `p` (SIM_MEM_PAGEABLE when unknown); ret_range may be NULL. */
enum sim_mem sim_ranges__lookup(struct sim_ranges *t, const void *p, struct sim_range *ret_range);
size_t sim_ranges__device_bytes(struct sim_ranges *t);

static inline bool sim_mem__is_host_pinned(enum sim_mem k)
{
	return k == SIM_MEM_PINNED || k == SIM_MEM_REGISTERED;
}

/*
 * Performs a copy between classified memories and models its time on stream `s`.
 * `w->async` is the API flavour; copies that touch pageable host memory are synchronous
 * anyway. Host-to-host copies take no device time (and are not reported).
 */
void sim_device__copy(struct sim_device *d, struct CUstream_st *s, void *dst, enum sim_mem dst_kind,
		      const void *src, enum sim_mem src_kind, size_t bytes, const struct sim_work *w);
/* memset of `bytes` at `dst` (of kind `dst_kind`): asynchronous w.r.t. the host unless `sync`. */
void sim_device__memset(struct sim_device *d, struct CUstream_st *s, void *dst, enum sim_mem dst_kind,
			int value, size_t bytes, bool sync, const struct sim_work *w);
/* Kernel of w->grid * w->block threads: spins the host launch cost and enqueues its duration. */
void sim_device__launch(struct sim_device *d, struct CUstream_st *s, const struct sim_work *w);
/*
 * Reports a kernel whose place on the stream's timeline the caller set itself (the fake
 * NCCL's collective kernels: [start, end) is the same moment on every rank) to the sink, if
 * any, as launched by the entry point `w` that began at api_start_ns.
 */
void sim_device__report_kernel(struct sim_device *d, struct CUstream_st *s, const struct sim_work *w,
			       uint64_t api_start_ns, uint64_t start_ns, uint64_t end_ns);

#pragma GCC visibility pop

#endif
