/* SPDX-License-Identifier: MIT */
/*
 * Synthetic profiles for the analysis, findings and artifact tests and the artifact
 * benchmark: targets with event stores filled by hand, times in ns from a fixed origin
 * (an injected clock: nothing here reads the real one).
 */
#ifndef AIPROF_TESTS_SYNTH_PROFILE_H
#define AIPROF_TESTS_SYNTH_PROFILE_H

#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "injector/model/profile.h"

#define SYNTH_MAX_TARGETS 4
#define MS 1000000ULL

struct synth {
	struct profile p;
	struct target t[SYNTH_MAX_TARGETS];
};

static inline void synth_init(struct synth *s, size_t ntargets, uint64_t start, uint64_t end)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < ntargets; i++) {
		s->t[i].pid = (pid_t)(1000 + 1000 * i);
		strcpy(s->t[i].comm, "trainer");
	}
	s->p.targets = s->t;
	s->p.ntargets = ntargets;
	s->p.start_ns = start;
	s->p.end_ns = end;
	s->p.requested_ns = end - start;
	s->p.start_realtime_ns = 1700000000ULL * 1000000000ULL;
}

static inline void synth_thread(struct target *t, uint32_t tid, const char *comm)
{
	struct tid_name *nv = realloc(t->threads, (t->nthreads + 1) * sizeof(*nv));

	if (!nv)
		abort();
	t->threads = nv;
	t->threads[t->nthreads].ns_tid = tid;
	t->threads[t->nthreads].host_tid = tid;
	snprintf(t->threads[t->nthreads].comm, sizeof(t->threads[0].comm), "%s", comm);
	t->nthreads++;
}

static inline void synth_string(struct target *t, uint32_t id, const char *str)
{
	struct aiprof_event e = { .type = AIPROF_EV_STRING };
	size_t n = strlen(str);

	e.u.str.id = id;
	e.u.str.offset = 0;
	e.u.str.total = (uint16_t)n;
	memcpy(e.u.str.s, str, n < AIPROF_STR_CHUNK ? n : AIPROF_STR_CHUNK);
	event_store__add(&t->store, &e);
}

static inline struct aiprof_event synth_ev(uint16_t type, uint16_t api, uint32_t tid, uint64_t ts,
					   uint64_t dur)
{
	struct aiprof_event e;

	memset(&e, 0, sizeof(e));
	e.type = type;
	e.api = api;
	e.tid = tid;
	e.ts = ts;
	e.dur = dur;
	return e;
}

/* a driver launch of kernel name_id with grid gx x 1 x 1 and block bx x 1 x 1 */
static inline void synth_launch(struct target *t, uint32_t tid, uint64_t ts, uint64_t dur,
				uint32_t name_id, uint32_t gx, uint32_t bx, uint64_t corr)
{
	struct aiprof_event e = synth_ev(AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cuLaunchKernel, tid, ts, dur);

	e.u.launch.name_id = name_id;
	e.u.launch.grid[0] = gx;
	e.u.launch.grid[1] = e.u.launch.grid[2] = 1;
	e.u.launch.block[0] = bx;
	e.u.launch.block[1] = e.u.launch.block[2] = 1;
	e.u.launch.stream = 0x10 + tid;
	e.u.launch.correlation = corr;
	event_store__add(&t->store, &e);
}

static inline void synth_gpu_kernel(struct target *t, uint64_t ts, uint64_t dur, uint32_t name_id,
				    uint32_t stream, uint64_t corr)
{
	struct aiprof_event e = synth_ev(AIPROF_EV_GPU_KERNEL, AIPROF_API_gpu_kernel, 0, ts, dur);

	e.u.gpu.name_id = name_id;
	e.u.gpu.stream = stream;
	e.u.gpu.correlation = corr;
	e.u.gpu.grid[0] = e.u.gpu.grid[1] = e.u.gpu.grid[2] = 1;
	e.u.gpu.block[0] = e.u.gpu.block[1] = e.u.gpu.block[2] = 1;
	event_store__add(&t->store, &e);
}

static inline void synth_sync(struct target *t, uint32_t tid, uint64_t ts, uint64_t dur, bool device)
{
	struct aiprof_event e = synth_ev(AIPROF_EV_CUDA_SYNC, device ? AIPROF_API_cudaDeviceSynchronize :
					 AIPROF_API_cudaStreamSynchronize, tid, ts, dur);

	e.u.sync.kind = device ? AIPROF_SYNC_DEVICE : AIPROF_SYNC_STREAM;
	event_store__add(&t->store, &e);
}

static inline void synth_memcpy(struct target *t, uint32_t tid, uint64_t ts, uint64_t dur,
				uint32_t kind, uint64_t bytes, bool pinned, bool async)
{
	struct aiprof_event e = synth_ev(AIPROF_EV_CUDA_MEMCPY, async ? AIPROF_API_cudaMemcpyAsync :
					 AIPROF_API_cudaMemcpy, tid, ts, dur);

	e.u.memcpy.kind = kind;
	e.u.memcpy.bytes = bytes;
	e.u.memcpy.flags = AIPROF_MEMCPY_F_HOST_KNOWN | (pinned ? AIPROF_MEMCPY_F_HOST_PINNED : 0) |
			   (async ? AIPROF_MEMCPY_F_ASYNC : 0);
	event_store__add(&t->store, &e);
}

static inline void synth_coll(struct target *t, uint32_t tid, uint64_t ts, uint64_t dur, int rank,
			      int nranks, uint64_t bytes)
{
	struct aiprof_event e = synth_ev(AIPROF_EV_NCCL_COLL, AIPROF_API_ncclAllReduce, tid, ts, dur);

	e.u.nccl.count = bytes / 4;
	e.u.nccl.bytes = bytes;
	e.u.nccl.comm = 0xc000 + (uint64_t)rank;
	e.u.nccl.datatype = 7;
	e.u.nccl.redop = 0;
	e.u.nccl.peer = -1;
	e.u.nccl.rank = rank;
	e.u.nccl.nranks = nranks;
	event_store__add(&t->store, &e);
}

static inline void synth_mem(struct target *t, uint32_t tid, uint64_t ts, bool alloc, uint64_t ptr,
			     uint64_t bytes)
{
	struct aiprof_event e = synth_ev(alloc ? AIPROF_EV_CUDA_ALLOC : AIPROF_EV_CUDA_FREE,
					 alloc ? AIPROF_API_cudaMalloc : AIPROF_API_cudaFree, tid, ts, 1000);

	e.u.mem.ptr = ptr;
	e.u.mem.bytes = bytes;
	e.u.mem.kind = AIPROF_MEM_DEVICE;
	event_store__add(&t->store, &e);
}

static inline void synth_free_all(struct synth *s)
{
	for (size_t i = 0; i < s->p.ntargets; i++) {
		event_store__clear(&s->t[i].store);
		free(s->t[i].threads);
	}
}

#endif
