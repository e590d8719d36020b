/* SPDX-License-Identifier: MIT */
/*
 * The event ABI between libaiprof.so (producer, inside the target process) and the
 * injector (consumer). Both sides map the same memfd: one header page followed by
 * `nslots` fixed-size slots. Only fixed-width types; sizes are checked at compile time,
 * so drift between the two sides fails the build instead of corrupting a profile.
 *
 * Timestamps are CLOCK_MONOTONIC nanoseconds, the same timebase eBPF's
 * bpf_ktime_get_ns() uses, so every source lands on one clock.
 */
#ifndef AIPROF_EVENT_H
#define AIPROF_EVENT_H

#include <stdint.h>
#include <stdatomic.h>

#define AIPROF_RING_MAGIC    0x31474e4952504941ULL /* "AIPRING1" little-endian */
#define AIPROF_RING_VERSION  1u
#define AIPROF_EVENT_SIZE    128u
#define AIPROF_RING_HDR_SIZE 4096u
#define AIPROF_RING_SLOTS    32768u                /* power of two: 4 MiB of slots */
#define AIPROF_RING_MEMFD    "aiprof-ring"         /* memfd name; /proc/PID/fd shows it */
#define AIPROF_LIB_MEMFD     "libaiprof.so"        /* memfd name of an injected library */

enum aiprof_ev_type {
	AIPROF_EV_NONE = 0,
	AIPROF_EV_STRING,        /* payload.str: a chunk of an interned string */
	AIPROF_EV_CUDA_LAUNCH,   /* payload.launch */
	AIPROF_EV_CUDA_MEMCPY,   /* payload.memcpy */
	AIPROF_EV_CUDA_MEMSET,   /* payload.memcpy (bytes, dst) */
	AIPROF_EV_CUDA_ALLOC,    /* payload.mem */
	AIPROF_EV_CUDA_FREE,     /* payload.mem */
	AIPROF_EV_CUDA_SYNC,     /* payload.sync */
	AIPROF_EV_NCCL_INIT,     /* payload.nccl (comm, rank, nranks) */
	AIPROF_EV_NCCL_COLL,     /* payload.nccl */
	AIPROF_EV_NCCL_GROUP,    /* payload.nccl (op = start/end) */
	AIPROF_EV_IBV,           /* payload.ibv */
	AIPROF_EV_GPU_KERNEL,    /* payload.gpu: CUPTI activity record, ts/dur are GPU time */
	AIPROF_EV_GPU_MEMCPY,    /* payload.gpu */
	AIPROF_EV_LIB_STATUS,    /* payload.str: a human-readable status line from the library */
	AIPROF_EV__MAX
};

/* Which hooked function produced an event (the timeline's event name). */
enum aiprof_api {
	AIPROF_API_NONE = 0,
	/* CUDA runtime */
	AIPROF_API_cudaLaunchKernel, AIPROF_API_cudaMemcpy, AIPROF_API_cudaMemcpyAsync,
	AIPROF_API_cudaMemset, AIPROF_API_cudaMemsetAsync,
	AIPROF_API_cudaMalloc, AIPROF_API_cudaFree, AIPROF_API_cudaMallocHost,
	AIPROF_API_cudaHostAlloc, AIPROF_API_cudaFreeHost, AIPROF_API_cudaHostRegister,
	AIPROF_API_cudaHostUnregister, AIPROF_API_cudaStreamSynchronize,
	AIPROF_API_cudaDeviceSynchronize, AIPROF_API_cudaEventSynchronize,
	/* CUDA driver */
	AIPROF_API_cuLaunchKernel, AIPROF_API_cuMemAlloc_v2, AIPROF_API_cuMemFree_v2,
	AIPROF_API_cuMemcpy, AIPROF_API_cuMemcpyHtoD_v2, AIPROF_API_cuMemcpyDtoH_v2,
	AIPROF_API_cuMemcpyDtoD_v2, AIPROF_API_cuMemcpyAsync, AIPROF_API_cuMemcpyHtoDAsync_v2,
	AIPROF_API_cuMemcpyDtoHAsync_v2, AIPROF_API_cuMemcpyDtoDAsync_v2,
	AIPROF_API_cuCtxSynchronize, AIPROF_API_cuStreamSynchronize,
	/* NCCL */
	AIPROF_API_ncclCommInitRank, AIPROF_API_ncclAllReduce, AIPROF_API_ncclAllGather,
	AIPROF_API_ncclReduceScatter, AIPROF_API_ncclBroadcast, AIPROF_API_ncclReduce,
	AIPROF_API_ncclSend, AIPROF_API_ncclRecv, AIPROF_API_ncclGroupStart,
	AIPROF_API_ncclGroupEnd,
	/* ibverbs */
	AIPROF_API_ibv_reg_mr, AIPROF_API_ibv_dereg_mr, AIPROF_API_ibv_modify_qp,
	AIPROF_API_ibv_post_send, AIPROF_API_ibv_post_recv, AIPROF_API_ibv_poll_cq,
	/* CUPTI activity */
	AIPROF_API_gpu_kernel, AIPROF_API_gpu_memcpy,
	AIPROF_API__MAX
};

/* Copy direction, the values of enum cudaMemcpyKind. */
enum aiprof_memcpy_kind {
	AIPROF_MEMCPY_H2H = 0, AIPROF_MEMCPY_H2D = 1, AIPROF_MEMCPY_D2H = 2,
	AIPROF_MEMCPY_D2D = 3, AIPROF_MEMCPY_DEFAULT = 4,
};

#define AIPROF_MEMCPY_F_ASYNC        (1u << 0)
#define AIPROF_MEMCPY_F_HOST_PINNED  (1u << 1) /* the host side is page-locked */
#define AIPROF_MEMCPY_F_HOST_KNOWN   (1u << 2) /* pinned/pageable could be decided */

enum aiprof_mem_kind {
	AIPROF_MEM_DEVICE = 0, AIPROF_MEM_HOST_PINNED = 1, AIPROF_MEM_HOST_REGISTERED = 2,
};

enum aiprof_sync_kind {
	AIPROF_SYNC_DEVICE = 0, AIPROF_SYNC_STREAM = 1, AIPROF_SYNC_EVENT = 2, AIPROF_SYNC_CTX = 3,
};

/* NCCL collective ops; names in the timeline come from aiprof_api. */
#define AIPROF_NCCL_GROUP_START 0
#define AIPROF_NCCL_GROUP_END   1

struct aiprof_ev_launch {
	uint64_t func;        /* host stub (runtime) or CUfunction (driver) */
	uint64_t stream;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shmem;
	uint32_t name_id;     /* interned name (driver launches), 0 = symbolise func */
	uint64_t correlation; /* ties an API event to a CUPTI record, 0 = none */
	int32_t  result;
	uint32_t stack_id;    /* AIPROF_EV_STRING id of the caller's stack, 0 = none: return
			       * addresses "hex,hex,...", innermost first */
};

struct aiprof_ev_memcpy {
	uint64_t bytes;
	uint64_t dst;
	uint64_t src;
	uint64_t stream;
	uint32_t kind;        /* enum aiprof_memcpy_kind, resolved (never DEFAULT if known) */
	uint32_t flags;       /* AIPROF_MEMCPY_F_* */
	uint64_t correlation;
	int32_t  result;
	uint32_t pad;
};

struct aiprof_ev_mem {
	uint64_t ptr;
	uint64_t bytes;
	uint32_t kind;        /* enum aiprof_mem_kind */
	int32_t  result;
};

struct aiprof_ev_sync {
	uint64_t handle;      /* stream or event, 0 for device */
	uint32_t kind;        /* enum aiprof_sync_kind */
	int32_t  result;
};

struct aiprof_ev_nccl {
	uint64_t count;
	uint64_t bytes;
	uint64_t comm;
	uint64_t stream;
	int32_t  datatype;    /* ncclDataType_t */
	int32_t  redop;       /* ncclRedOp_t, -1 where none */
	int32_t  peer;        /* root or peer, -1 where none */
	int32_t  rank;        /* -1 if unknown */
	int32_t  nranks;      /* -1 if unknown */
	int32_t  result;
	uint32_t op;          /* group start/end for AIPROF_EV_NCCL_GROUP */
	uint32_t seq;         /* AIPROF_EV_NCCL_COLL: the communicator's collectives the library
	                       * has recorded, this one included (1, 2, ...); 0 = unknown. Gaps
	                       * show events lost in between; `aiprof merge` matches ranks by it */
	uint64_t correlation; /* AIPROF_EV_NCCL_COLL with CUPTI active: the external correlation id
	                       * pushed around the call, so its kernel (GPU_KERNEL) can be found; 0 = none */
};

struct aiprof_ev_ibv {
	uint64_t handle;      /* mr, qp or cq */
	uint64_t addr;
	uint64_t length;      /* bytes registered, or bytes posted */
	uint32_t qp_num;
	uint32_t count;       /* work requests posted or completions polled */
	uint32_t attr;        /* access flags, attr_mask, or opcode of the first WR */
	uint32_t state;       /* qp_state for modify_qp */
	int32_t  result;
	uint32_t pad;
};

struct aiprof_ev_gpu {
	uint64_t correlation;
	uint64_t bytes;       /* memcpy */
	uint32_t device;
	uint32_t stream;
	uint32_t name_id;     /* kernel name */
	uint32_t kind;        /* memcpy kind */
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t flags;       /* memcpy: AIPROF_MEMCPY_F_HOST_*, from the record's memory kinds */
};

#define AIPROF_STR_CHUNK 80
struct aiprof_ev_str {
	uint32_t id;          /* AIPROF_EV_STRING: string id; LIB_STATUS: 0 */
	uint16_t offset;      /* where this chunk starts in the string */
	uint16_t total;       /* whole string length (bytes, no NUL) */
	char     s[AIPROF_STR_CHUNK];
};

/* aiprof_event.flags */
/* CUDA_LAUNCH, from the uprobes: u.launch.func is the return address into the host stub
 * that launched by kernel handle (__cudaLaunchKernel), not the stub itself */
#define AIPROF_EV_F_LAUNCH_CALLER (1u << 0)

struct aiprof_event {
	_Atomic uint64_t seq; /* ring protocol, not data */
	uint16_t type;        /* enum aiprof_ev_type */
	uint16_t api;         /* enum aiprof_api */
	uint32_t tid;         /* in the target's pid namespace */
	uint32_t pid;
	uint32_t flags;       /* AIPROF_EV_F_* */
	uint64_t ts;          /* CLOCK_MONOTONIC ns at entry */
	uint64_t dur;         /* ns spent in the call (0 for instants) */
	union {
		struct aiprof_ev_launch launch;
		struct aiprof_ev_memcpy memcpy;
		struct aiprof_ev_mem mem;
		struct aiprof_ev_sync sync;
		struct aiprof_ev_nccl nccl;
		struct aiprof_ev_ibv ibv;
		struct aiprof_ev_gpu gpu;
		struct aiprof_ev_str str;
		uint8_t raw[88];
	} u;
};

_Static_assert(sizeof(struct aiprof_event) == AIPROF_EVENT_SIZE, "event slot size drifted");

/* Bits in aiprof_ring_hdr.collectors: what the injector asked the library to record. */
#define AIPROF_COLLECT_CUDA  (1u << 0)
#define AIPROF_COLLECT_NCCL  (1u << 1)
#define AIPROF_COLLECT_RDMA  (1u << 2)
#define AIPROF_COLLECT_CUPTI (1u << 3)
#define AIPROF_COLLECT_ALL   (AIPROF_COLLECT_CUDA | AIPROF_COLLECT_NCCL | \
			      AIPROF_COLLECT_RDMA | AIPROF_COLLECT_CUPTI)
/* a modifier: launches are recorded without their call stack (u.launch.stack_id = 0) */
#define AIPROF_COLLECT_NO_STACKS (1u << 4)
/* a modifier: launch stacks by frame pointers alone, never by the process's CFI unwinder */
#define AIPROF_COLLECT_FP_STACKS (1u << 5)

/*
 * The header page. Written by the library at creation (magic..lib_pid), then the
 * injector owns `enabled`, `collectors`, `generation`, `heartbeat_ns`; the library owns
 * the status fields. Producers and the consumer share head/tail/drops.
 */
struct aiprof_ring_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t event_size;
	uint32_t nslots;
	uint32_t lib_pid;               /* getpid() in the target's namespace */
	uint64_t lib_build;             /* identifies the library build that made the ring */

	_Atomic uint32_t enabled;       /* 1 while recording; hooks test only this when idle */
	_Atomic uint32_t collectors;    /* AIPROF_COLLECT_* */
	_Atomic uint32_t generation;    /* bumped by the injector at each attach */
	_Atomic uint32_t ctl;           /* futex word: bumped on every control change */
	_Atomic uint64_t heartbeat_ns;  /* injector's CLOCK_MONOTONIC; stale => library idles */
	_Atomic uint32_t attached_pid;  /* injector's pid (its namespace), 0 when detached */
	_Atomic uint32_t lib_state;     /* enum aiprof_lib_state */

	/* library status, for the summary */
	_Atomic uint32_t hooks_patched; /* GOT entries currently pointing at hooks */
	_Atomic uint32_t modules_seen;
	_Atomic uint32_t cupti_state;   /* enum aiprof_cupti_state */
	/* set by the injector when it is done with the ring (after the last drain): the
	 * library goes dormant, its control thread exits and the ring's fd is closed */
	_Atomic uint32_t release;
	char cupti_reason[192];         /* NUL-terminated; why CUPTI is or is not in use */

	uint8_t pad1[64];
	_Atomic uint64_t head;          /* next slot producers reserve */
	uint8_t pad2[56];
	_Atomic uint64_t tail;          /* next slot the consumer reads */
	uint8_t pad3[56];
	_Atomic uint64_t drops;         /* events lost because the ring was full */
	_Atomic uint64_t recorded;      /* events committed */

	/*
	 * CPython frames in the call stacks at launches (injector/preload/callstack.c): the
	 * injector fills `py` for a target whose CPython it recognised and checked, then sets
	 * py_valid, before `enabled`. 0 (as a ring is created): no Python frames.
	 */
	_Atomic uint32_t py_valid;
	uint32_t pad4;
	struct aiprof_py_walk {
		/* PyThreadState -> innermost _PyInterpreterFrame: tstate->cframe->current_frame
		 * (3.11, 3.12) or tstate->current_frame (ts_cframe == 0xffff, 3.13+) */
		uint16_t ts_cframe, cframe_current_frame, ts_current_frame;
		/* _PyInterpreterFrame; fr_is_entry 0xffff after 3.11 */
		uint16_t fr_code, fr_previous, fr_instr, fr_owner, fr_is_entry;
		uint64_t code_mask;
	} py;
	/* the control thread's id (gettid() in the target's namespace), once it runs: the
	 * injector leaves it out of the target's data */
	_Atomic uint32_t ctl_tid;
	/* 1: loaded with LD_PRELOAD, the copy stays live between windows (never released) */
	_Atomic uint32_t stays_live;
};

_Static_assert(sizeof(struct aiprof_ring_hdr) <= AIPROF_RING_HDR_SIZE, "ring header too big");

enum aiprof_lib_state {
	AIPROF_LIB_IDLE = 0, AIPROF_LIB_RECORDING = 1,
	AIPROF_LIB_RELEASED = 2,    /* dormant: no thread, no fd; the ring is let go */
};

enum aiprof_cupti_state {
	AIPROF_CUPTI_UNKNOWN = 0,   /* not tried yet (no CUDA in the process) */
	AIPROF_CUPTI_ACTIVE,        /* activity records flow */
	AIPROF_CUPTI_UNAVAILABLE,   /* see cupti_reason; API-level timing only */
};

#define AIPROF_RING_BYTES(nslots) \
	((uint64_t)AIPROF_RING_HDR_SIZE + (uint64_t)(nslots) * AIPROF_EVENT_SIZE)

#endif
