/* SPDX-License-Identifier: MIT */
/*
 * Metrics over a recorded window (struct profile): pure computation, no I/O, so the
 * finding rules, the summary and the report share one set of numbers and unit tests can
 * feed it fixed input.
 *
 * Timing sources. With CUPTI (AIPROF_EV_GPU_KERNEL / GPU_MEMCPY records) GPU busy time,
 * kernel durations and compute/communication overlap are measured on the GPU; without it
 * only API-level timing exists (how long each host call took) and those metrics are
 * reported as unknown rather than guessed.
 *
 * Threads are identified by host pid + host tid. A "training thread" is one that issued
 * kernel launches or NCCL collectives in the window. A rank is the NCCL rank a thread's
 * collectives carry (ranks may be threads of one process or separate processes).
 */
#ifndef AIPROF_ANALYSIS_H
#define AIPROF_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct profile;

#define AN_TOP_KERNELS 20

/* Half-open interval [start, end) in CLOCK_MONOTONIC ns. */
struct an_span {
	uint64_t start, end;
};

struct an_thread {
	pid_t pid;
	uint32_t tid;                 /* host tid (the library's tid when it could not be mapped) */
	size_t target;                /* index into profile.targets */
	char comm[16];
	bool alive_at_end;            /* still in /proc when the window closed */
	int32_t rank, nranks;         /* of the communicator it used most; -1 when none */
	uint64_t comm_id;             /* that communicator (an address in its process) */
	uint64_t events;              /* library events of this thread */
	uint64_t launches, syncs, device_syncs, collectives, copies;
	uint64_t launch_api_ns, sync_ns, collective_ns, copy_ns;
	uint64_t tiny_launches;       /* launches whose grid x block is at most the rule's limit */
	uint64_t short_kernels;       /* CUPTI: its kernels shorter than the rule's limit */
	uint64_t gpu_kernels;         /* CUPTI: kernels correlated to its launches */
	uint64_t first_ts, last_end;  /* first event's start, last event's end */
	uint16_t last_api;            /* api of the event that ended last */
	struct an_span *api;          /* its CUDA/NCCL calls, merged and sorted */
	size_t napi;
	struct an_span *gpu;          /* CUPTI: kernels it launched, merged and sorted */
	size_t ngpu;
	uint64_t coll_period_ns;      /* median time between its collectives' starts, 0 if < 2 */
	uint64_t coll_p99_ns;         /* 99th percentile duration of its collectives */
	uint16_t next_after_last;     /* api that followed last_api most often earlier, or 0 */
	double next_after_last_share; /* how often (0..1) */
};

struct an_stream {
	pid_t pid;
	uint32_t device, stream;      /* CUPTI ids */
	int32_t rank;                 /* of the thread that launched onto it, -1 unknown */
	uint32_t tid;                 /* that thread, 0 unknown */
	uint64_t kernels, busy_ns;
	double busy_pct;              /* of the window */
};

struct an_kernel {
	const char *name;             /* owned by the profile's stores */
	uint64_t launches, api_ns;
	uint64_t gpu_count, gpu_ns, gpu_min_ns, gpu_max_ns;
};

struct an_copy {
	const char *kind;             /* HtoD, DtoH, DtoD, HtoH, Memset */
	const char *host_memory;      /* pinned, pageable, unknown, none */
	uint64_t count, bytes, api_ns;
	/* calls that block until the copy is done (synchronous API, or pageable memory):
	 * their duration is the transfer time as the host sees it */
	uint64_t blocking_count, blocking_bytes, blocking_ns;
	uint64_t gpu_count, gpu_bytes, gpu_ns;  /* CUPTI */
};

struct an_nccl_op {
	const char *op;
	uint64_t count, bytes, api_ns, max_ns;
};

struct an_rank {
	size_t thread;                /* index into analysis.threads */
	int32_t rank;
	uint64_t *entry, *exit;       /* per matched collective (group.ncoll), ns */
	uint64_t *prev_exit;          /* end of its previous collective (or 0) */
	uint64_t lateness_median_ns, lateness_mean_ns, lateness_max_ns;
	uint64_t last_count;          /* collectives it entered last */
};

/* The ranks of communicators of one size, their collectives matched in order. */
struct an_group {
	int32_t nranks;
	struct an_rank *m;
	size_t nm;
	size_t ncoll;                 /* collectives every member has (matched) */
	uint64_t period_ns;           /* median time between matched collectives */
	bool ambiguous;               /* a rank number appeared twice: not matched */
};

struct an_memory {
	pid_t pid;
	uint64_t allocs, frees, alloc_bytes, free_bytes;
	uint64_t unfreed_allocs, unfreed_bytes;    /* allocated in the window, not freed in it */
	uint64_t first_unfreed_ts, last_unfreed_ts;
	uint64_t largest_unfreed;
};

struct an_sync {
	const char *api;
	uint64_t count, ns;
};

struct analysis {
	uint64_t window_start, window_end;
	bool gpu_timing;              /* any CUPTI kernel record in the window */
	uint64_t events, dropped;
	uint64_t counts[10];          /* by category, in the order of analysis_categories[] */

	struct an_thread *threads;
	size_t nthreads;
	struct an_stream *streams;
	size_t nstreams;
	struct an_kernel *kernels;    /* sorted: GPU time when known, else launches */
	size_t nkernels;
	struct an_copy *copies;
	size_t ncopies;
	struct an_nccl_op *nccl;
	size_t nnccl;
	struct an_group *groups;
	size_t ngroups;
	struct an_memory *memory;     /* per target */
	size_t nmemory;
	struct an_sync *syncs;
	size_t nsyncs;

	/* compute/communication overlap (CUPTI: kernels whose name contains "nccl" are
	 * communication, all others compute); known when there are both */
	bool overlap_known;
	uint64_t comm_ns, compute_ns, overlap_ns;

	/* strings kept for names made here */
	char **owned;
	size_t nowned;
};

extern const char *const analysis_categories[10];

/*
 * Launches whose grid x block has at most this many threads count as tiny, and CUPTI kernels
 * shorter than this many ns as short (findings.c explains both numbers).
 */
struct analysis_opts {
	uint64_t tiny_threads;
	uint64_t short_kernel_ns;
};

/* Computes everything; *ret is freed with analysis__free(). 0 or -ENOMEM. */
int analysis__new(const struct profile *p, const struct analysis_opts *o, struct analysis **ret);
void analysis__free(struct analysis *a);   /* NULL-safe */

/* The thread with this host pid/tid, or NULL. */
const struct an_thread *analysis__thread(const struct analysis *a, pid_t pid, uint32_t tid);

/* Sum of the parts of [start, end) not covered by the sorted, merged spans. */
uint64_t an_spans_uncovered(const struct an_span *s, size_t n, uint64_t start, uint64_t end);
/* Sorts and merges n spans in place; returns the new count. */
size_t an_spans_merge(struct an_span *s, size_t n);

#endif
