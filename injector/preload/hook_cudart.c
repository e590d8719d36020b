/* SPDX-License-Identifier: MIT */
/*
 * CUDA runtime hooks. Each hook calls the real function and returns its result
 * unchanged; while recording it also times the call and writes one event. Hooks that
 * differ only in name are one definition: a macro per family (LAUNCH_HOOK, COPY_HOOK,
 * PINNED_HOOK, ...) expanded once per symbol, most of them over HOOK_RECORD's body
 * (preload.h). The _ptsz / _ptds entry points (per-thread default stream builds) are
 * such twins and are reported under the plain API name.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "preload.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*memcpy_fn)(void *, const void *, size_t, enum cudaMemcpyKind);
typedef cudaError_t (*memcpy_async_fn)(void *, const void *, size_t, enum cudaMemcpyKind,
				       cudaStream_t);
typedef cudaError_t (*memset_fn)(void *, int, size_t);
typedef cudaError_t (*memset_async_fn)(void *, int, size_t, cudaStream_t);
typedef cudaError_t (*cudaMalloc_fn)(void **, size_t);
typedef cudaError_t (*cudaFree_fn)(void *);
typedef cudaError_t (*cudaMallocHost_fn)(void **, size_t);
typedef cudaError_t (*cudaHostAlloc_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*cudaFreeHost_fn)(void *);
typedef cudaError_t (*cudaHostRegister_fn)(void *, size_t, unsigned int);
typedef cudaError_t (*cudaHostUnregister_fn)(void *);
typedef cudaError_t (*stream_sync_fn)(cudaStream_t);
typedef cudaError_t (*cudaDeviceSynchronize_fn)(void);
typedef cudaError_t (*cudaEventSynchronize_fn)(cudaEvent_t);
typedef cudaError_t (*entry_point_fn)(const char *, void **, unsigned long long,
				      enum cudaDriverEntryPointQueryResult *);
typedef cudaError_t (*entry_point_ver_fn)(const char *, void **, unsigned int,
					  unsigned long long,
					  enum cudaDriverEntryPointQueryResult *);

#define NO_REAL cudaErrorSharedObjectSymbolNotFound

/* A runtime hook recorded as one event: see HOOK_RECORD. */
#define CUDART_HOOK(correlate, name, fn_t, params, args, done) \
	HOOK_RECORD(cudaError_t, NO_REAL, AIPROF_COLLECT_CUDA, correlate, name, fn_t, params, \
		    args, done)

/* ---- launches --------------------------------------------------------------------- */

/* Called inside a recording hook (depth > 0), once per cudaKernel_t (a CUkernel). */
static struct lazy_sym g_kernel_get_name = LAZY_SYM("cuKernelGetName");

static const char *cukernel_name(uintptr_t key)
{
	typedef CUresult (*cuKernelGetName_fn)(const char **, CUkernel);
	cuKernelGetName_fn fn = (cuKernelGetName_fn)lazy_sym_get(&g_kernel_get_name);
	const char *name = NULL;

	if (!fn || fn(&name, (CUkernel)key) != CUDA_SUCCESS)
		return NULL;
	return name;
}

/*
 * Ends one launch through the runtime. `func` is the host stub (cudaLaunchKernel: the
 * injector symbolises it) or, with `handle`, a cudaKernel_t (__cudaLaunchKernel, what
 * nvcc 13's <<<>>> calls): its name comes from the driver, interned once per handle.
 * Inlined, so the stack is walked from the hook's own frame.
 */
ALWAYS_INLINE void launch_done(struct rec *r, const void *func, bool handle, dim3 grid,
			       dim3 block, size_t shmem, cudaStream_t stream, uint64_t corr,
			       cudaError_t ret)
{
	struct aiprof_event *e;
	uint32_t stack_id, name_id = 0;

	rec_stop(r);
	/* strings go out before the launch that first uses them */
	if (handle)
		name_id = intern__id(r->h, INTERN_CUKERNEL, (uintptr_t)func, cukernel_name);
	stack_id = callstack__id(r->h, r->tls, (uintptr_t)__builtin_frame_address(0));
	e = rec_reserve(r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cudaLaunchKernel);
	if (e)
		e->u.launch = (struct aiprof_ev_launch){
			.func = (uintptr_t)func, .stream = (uintptr_t)stream,
			.grid = { grid.x, grid.y, grid.z }, .block = { block.x, block.y, block.z },
			.shmem = (uint32_t)shmem, .name_id = name_id, .correlation = corr,
			.result = ret, .stack_id = stack_id,
		};
	rec_done(r, e);
}

/* `handle`: the hook's func is a cudaKernel_t, not a host stub. */
#define LAUNCH_HOOK(name, handle)                                                          \
	CUDART_HOOK(true, name, launch_fn,                                                 \
		    (const void *func, dim3 grid, dim3 block, void **args, size_t shmem,   \
		     cudaStream_t stream), (func, grid, block, args, shmem, stream),      \
		    launch_done(&r, func, handle, grid, block, shmem, stream, corr, ret))

LAUNCH_HOOK(cudaLaunchKernel, false)
LAUNCH_HOOK(cudaLaunchKernel_ptsz, false)
LAUNCH_HOOK(__cudaLaunchKernel, true)
LAUNCH_HOOK(__cudaLaunchKernel_ptsz, true)

/* ---- copies and memsets ----------------------------------------------------------- */

#define COPY_HOOK(name)                                                                    \
	CUDART_HOOK(true, name, memcpy_fn,                                                 \
		    (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind),  \
		    (dst, src, count, kind),                                               \
		    rec_memcpy(&r, AIPROF_API_cudaMemcpy, (uint32_t)kind, (uintptr_t)dst,  \
			       (uintptr_t)src, count, 0, false, corr, ret))

COPY_HOOK(cudaMemcpy)
COPY_HOOK(cudaMemcpy_ptds)

#define COPY_ASYNC_HOOK(name)                                                              \
	CUDART_HOOK(true, name, memcpy_async_fn,                                           \
		    (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,   \
		     cudaStream_t stream), (dst, src, count, kind, stream),               \
		    rec_memcpy(&r, AIPROF_API_cudaMemcpyAsync, (uint32_t)kind,             \
			       (uintptr_t)dst, (uintptr_t)src, count, (uintptr_t)stream,   \
			       true, corr, ret))

COPY_ASYNC_HOOK(cudaMemcpyAsync)
COPY_ASYNC_HOOK(cudaMemcpyAsync_ptsz)

/* A memset is reported as a device-to-device copy of `count` bytes to `dst`. */
static void set_done(struct rec *r, uint16_t api, void *dst, size_t count,
		     cudaStream_t stream, bool async, cudaError_t ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_MEMSET, api);

	if (e)
		e->u.memcpy = (struct aiprof_ev_memcpy){
			.bytes = count, .dst = (uintptr_t)dst, .stream = (uintptr_t)stream,
			.kind = AIPROF_MEMCPY_D2D, .flags = async ? AIPROF_MEMCPY_F_ASYNC : 0,
			.result = ret,
		};
	rec_done(r, e);
}

#define SET_HOOK(name)                                                                     \
	CUDART_HOOK(false, name, memset_fn, (void *dst, int value, size_t count),          \
		    (dst, value, count),                                                   \
		    set_done(&r, AIPROF_API_cudaMemset, dst, count, NULL, false, ret))

SET_HOOK(cudaMemset)
SET_HOOK(cudaMemset_ptds)

#define SET_ASYNC_HOOK(name)                                                               \
	CUDART_HOOK(false, name, memset_async_fn,                                          \
		    (void *dst, int value, size_t count, cudaStream_t stream),            \
		    (dst, value, count, stream),                                           \
		    set_done(&r, AIPROF_API_cudaMemsetAsync, dst, count, stream, true, ret))

SET_ASYNC_HOOK(cudaMemsetAsync)
SET_ASYNC_HOOK(cudaMemsetAsync_ptsz)

/* ---- allocations ------------------------------------------------------------------ */

CUDART_HOOK(false, cudaMalloc, cudaMalloc_fn, (void **dev, size_t size), (dev, size),
	    rec_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMalloc,
		    ret == cudaSuccess && dev ? (uintptr_t)*dev : 0, size, AIPROF_MEM_DEVICE,
		    ret))

CUDART_HOOK(false, cudaFree, cudaFree_fn, (void *dev), (dev),
	    rec_mem(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFree, (uintptr_t)dev, 0,
		    AIPROF_MEM_DEVICE, ret))

/* The host range a (un)pinning call reports, and whether the call changed it. */
struct host_range {
	uintptr_t addr;
	uint64_t bytes;
	bool changed;
};

/* An allocation that returns the range through *ptr. */
static struct host_range out_range(cudaError_t ret, void **ptr, size_t size)
{
	bool ok = ret == cudaSuccess && ptr;

	return (struct host_range){ ok ? (uintptr_t)*ptr : 0, size, ok };
}

/* A call on the range at ptr (`size` 0 for the unpinning calls). */
static struct host_range in_range(cudaError_t ret, void *ptr, size_t size)
{
	return (struct host_range){ (uintptr_t)ptr, size, ret == cudaSuccess };
}

/*
 * Ends a pinning (`type` CUDA_ALLOC) or unpinning (CUDA_FREE) call: the range is tracked
 * whether or not we record (`r` NULL), so that later copies know their host side.
 */
static void pinned_done(struct rec *r, uint16_t type, uint16_t api, uint32_t kind,
			struct host_range range, cudaError_t ret)
{
	if (range.changed) {
		int saved = errno;

		if (type == AIPROF_EV_CUDA_ALLOC)
			hostmem__add(range.addr, range.bytes);
		else
			hostmem__del(range.addr);
		errno = saved;
	}
	if (r)
		rec_mem(r, type, api, range.addr, range.bytes, kind, ret);
}

/*
 * hook_<name> of a call that pins or unpins host memory: `range` is out_range() or
 * in_range() of `ret` and the parameters. Tracking must see every call, so these hooks
 * have no idle fast path.
 */
#define PINNED_HOOK(name, params, args, type, kind, range)                                 \
	static cudaError_t hook_##name params                                              \
	{                                                                                  \
		name##_fn real = REAL(name);                                               \
		cudaError_t ret;                                                           \
		struct rec r;                                                              \
		bool rec;                                                                  \
											   \
		if (unlikely(!real))                                                       \
			return NO_REAL;                                                    \
		rec = rec_begin(&r, AIPROF_COLLECT_CUDA);                                  \
		ret = real args;                                                           \
		pinned_done(rec ? &r : NULL, type, AIPROF_API_##name, kind, range, ret);   \
		return ret;                                                                \
	}

PINNED_HOOK(cudaMallocHost, (void **ptr, size_t size), (ptr, size), AIPROF_EV_CUDA_ALLOC,
	    AIPROF_MEM_HOST_PINNED, out_range(ret, ptr, size))
PINNED_HOOK(cudaHostAlloc, (void **ptr, size_t size, unsigned int flags), (ptr, size, flags),
	    AIPROF_EV_CUDA_ALLOC, AIPROF_MEM_HOST_PINNED, out_range(ret, ptr, size))
PINNED_HOOK(cudaFreeHost, (void *ptr), (ptr), AIPROF_EV_CUDA_FREE, AIPROF_MEM_HOST_PINNED,
	    in_range(ret, ptr, 0))
PINNED_HOOK(cudaHostRegister, (void *ptr, size_t size, unsigned int flags), (ptr, size, flags),
	    AIPROF_EV_CUDA_ALLOC, AIPROF_MEM_HOST_REGISTERED, in_range(ret, ptr, size))
PINNED_HOOK(cudaHostUnregister, (void *ptr), (ptr), AIPROF_EV_CUDA_FREE,
	    AIPROF_MEM_HOST_REGISTERED, in_range(ret, ptr, 0))

/* ---- synchronisation -------------------------------------------------------------- */

#define STREAM_SYNC_HOOK(name)                                                             \
	CUDART_HOOK(false, name, stream_sync_fn, (cudaStream_t stream), (stream),          \
		    rec_sync(&r, AIPROF_API_cudaStreamSynchronize, (uintptr_t)stream,      \
			     AIPROF_SYNC_STREAM, ret))

STREAM_SYNC_HOOK(cudaStreamSynchronize)
STREAM_SYNC_HOOK(cudaStreamSynchronize_ptsz)

CUDART_HOOK(false, cudaDeviceSynchronize, cudaDeviceSynchronize_fn, (void), (),
	    rec_sync(&r, AIPROF_API_cudaDeviceSynchronize, 0, AIPROF_SYNC_DEVICE, ret))

CUDART_HOOK(false, cudaEventSynchronize, cudaEventSynchronize_fn, (cudaEvent_t event), (event),
	    rec_sync(&r, AIPROF_API_cudaEventSynchronize, (uintptr_t)event, AIPROF_SYNC_EVENT,
		     ret))

/* ---- driver entry points: hand out our driver hooks (no events) ------------------- */

#define HAND_OUT_HOOK(name, fn_t, params, args) \
	HOOK_HAND_OUT(cudaError_t, cudaSuccess, NO_REAL, HOOK_GROUP_CUDA, name, fn_t, params, \
		      args, fn)

#define ENTRY_POINT_HOOK(name)                                                             \
	HAND_OUT_HOOK(name, entry_point_fn, (const char *symbol, void **fn,                \
		      unsigned long long flags, enum cudaDriverEntryPointQueryResult *status), \
		      (symbol, fn, flags, status))

ENTRY_POINT_HOOK(cudaGetDriverEntryPoint)
ENTRY_POINT_HOOK(cudaGetDriverEntryPoint_ptsz)

#define ENTRY_POINT_VER_HOOK(name)                                                         \
	HAND_OUT_HOOK(name, entry_point_ver_fn, (const char *symbol, void **fn,            \
		      unsigned int version, unsigned long long flags,                      \
		      enum cudaDriverEntryPointQueryResult *status),                       \
		      (symbol, fn, version, flags, status))

ENTRY_POINT_VER_HOOK(cudaGetDriverEntryPointByVersion)
ENTRY_POINT_VER_HOOK(cudaGetDriverEntryPointByVersion_ptsz)

const struct hook_impl hook_impls_cudart[] = {
#define HOOK(name, group) HOOK_IMPL_IF(group, CUDART, HOOK_ID_##name, hook_##name)
#include "hooks.def"
#undef HOOK
	{ 0, NULL },
};
