/* SPDX-License-Identifier: MIT */
/*
 * Private interface between the simulated GPU of the fake CUDA libraries (gpu_sim.c, linked
 * into the fake libcudart.so.13 and the fake libcuda.so.1) and the fake CUPTI
 * (libcupti.so.13, fake_cupti.c): how the profiling double learns what the GPU did. A real
 * driver has nothing like it (real CUPTI gets this through the driver's private export
 * tables); nothing outside tests/doubles/ uses it.
 *
 * Each fake library exports FAKEGPU_SET_ACTIVITY_SINK. The fake CUPTI looks it up in each
 * loaded library (dlopen(RTLD_NOLOAD) + dlsym on that handle, the name being the same in
 * both) and installs its sink while any activity kind is enabled. While a sink is
 * installed, every entry point that puts work on a stream calls it exactly once, on the
 * calling thread, just before returning; stream destruction is reported too.
 */
#ifndef AIPROF_TESTS_FAKEGPU_ACTIVITY_H
#define AIPROF_TESTS_FAKEGPU_ACTIVITY_H

#include <stdbool.h>
#include <stdint.h>

#define FAKEGPU_ACTIVITY_VERSION  1u
#define FAKEGPU_SET_ACTIVITY_SINK "__fakegpu_set_activity_sink"

enum fakegpu_op {
	FAKEGPU_OP_KERNEL = 1,
	FAKEGPU_OP_MEMCPY,
	FAKEGPU_OP_MEMSET,
	FAKEGPU_OP_STREAM_DESTROYED,  /* only `stream`/`stream_kind` are set */
};

/* Which library's entry point was called. */
enum fakegpu_api {
	FAKEGPU_API_RUNTIME = 1,
	FAKEGPU_API_DRIVER,
};

/*
 * The legacy default stream, and each thread's per-thread default stream, are one stream
 * to the program although each library keeps its own object for them: a consumer must
 * identify them by kind (and calling thread), and created streams by `stream`.
 */
enum fakegpu_stream_kind {
	FAKEGPU_STREAM_LEGACY = 1,
	FAKEGPU_STREAM_PER_THREAD,
	FAKEGPU_STREAM_CREATED,
};

enum fakegpu_mem {
	FAKEGPU_MEM_PAGEABLE = 1,
	FAKEGPU_MEM_PINNED,           /* page-locked host memory (allocated or registered) */
	FAKEGPU_MEM_DEVICE,
};

struct fakegpu_activity {
	uint32_t op;                  /* enum fakegpu_op */
	uint32_t api;                 /* enum fakegpu_api */
	uint32_t cbid;                /* the entry point as a CUPTI callback id: a
					 CUpti_runtime_api_trace_cbid or CUpti_driver_api_trace_cbid */
	int32_t result;               /* what the entry point returns (work is only reported
					 when it succeeds) */
	uint64_t api_start_ns;        /* CLOCK_MONOTONIC: the entry point began enqueuing ... */
	uint64_t api_end_ns;          /* ... and returns */
	uint64_t start_ns;            /* CLOCK_MONOTONIC: simulated execution on the stream; */
	uint64_t end_ns;              /*   may lie in the future of the call */
	uint32_t device;
	uint32_t stream_kind;         /* enum fakegpu_stream_kind */
	const void *stream;           /* the library's stream object: identity only */
	/* FAKEGPU_OP_KERNEL */
	const char *name;             /* as registered; NULL if unknown; valid during the call */
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shmem;               /* dynamic shared memory bytes */
	/* FAKEGPU_OP_MEMCPY, FAKEGPU_OP_MEMSET (dst_mem only) */
	uint32_t src_mem;             /* enum fakegpu_mem */
	uint32_t dst_mem;
	uint64_t bytes;
	uint32_t value;               /* memset: the byte or 32-bit word written */
	bool async;                   /* an *Async entry point */
};

/* Called on the thread that enqueued the work; must not call back into the library. */
typedef void (*fakegpu_activity_fn)(const struct fakegpu_activity *a);

/* Installs `fn` (NULL removes it). 0, or -EINVAL if `version` is not ours. */
typedef int (*fakegpu_set_activity_sink_fn)(uint32_t version, fakegpu_activity_fn fn);
int __fakegpu_set_activity_sink(uint32_t version, fakegpu_activity_fn fn);

#endif
