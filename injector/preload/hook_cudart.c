/* SPDX-License-Identifier: MIT */
/*
 * CUDA runtime hooks. Each hook calls the real function and returns its result
 * unchanged; while recording it also times the call and writes one event. The _ptsz /
 * _ptds entry points (per-thread default stream builds) share the implementation and
 * are reported under the plain API name.
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
 * One launch through the runtime. `func` is the host stub (cudaLaunchKernel: the injector
 * symbolises it) or, with `handle`, a cudaKernel_t (__cudaLaunchKernel, what nvcc 13's
 * <<<>>> calls): its name comes from the driver, interned once per handle.
 */
ALWAYS_INLINE cudaError_t launch(enum hook_id id, const void *func, bool handle, dim3 grid,
				 dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
	launch_fn real = (launch_fn)hook_real_get(id);
	struct aiprof_event *e;
	uint32_t stack_id, name_id = 0;
	uint64_t corr = 0;
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(func, grid, block, args, shmem, stream);
	if (atomic_load_explicit(&g_cupti_active, memory_order_relaxed))
		corr = cupti__push();
	ret = real(func, grid, block, args, shmem, stream);
	if (corr)
		cupti__pop();
	rec_stop(&r);
	/* strings go out before the launch that first uses them */
	if (handle)
		name_id = intern__id(r.h, INTERN_CUKERNEL, (uintptr_t)func, cukernel_name);
	stack_id = callstack__id(r.h, r.tls, (uintptr_t)__builtin_frame_address(0));
	e = rec_reserve(&r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cudaLaunchKernel);
	if (e) {
		e->u.launch.name_id = name_id;
		e->u.launch.func = (uintptr_t)func;
		e->u.launch.stream = (uintptr_t)stream;
		e->u.launch.grid[0] = grid.x;
		e->u.launch.grid[1] = grid.y;
		e->u.launch.grid[2] = grid.z;
		e->u.launch.block[0] = block.x;
		e->u.launch.block[1] = block.y;
		e->u.launch.block[2] = block.z;
		e->u.launch.shmem = (uint32_t)shmem;
		e->u.launch.correlation = corr;
		e->u.launch.result = ret;
		e->u.launch.stack_id = stack_id;
	}
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(cudaError_t, cudaLaunchKernel, launch_fn,
	  (const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
	   cudaStream_t stream), (func, grid, block, args, shmem, stream))
{
	return launch(HOOK_ID_cudaLaunchKernel, func, false, grid, block, args, shmem, stream);
}

HOOK_FAST(cudaError_t, cudaLaunchKernel_ptsz, launch_fn,
	  (const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
	   cudaStream_t stream), (func, grid, block, args, shmem, stream))
{
	return launch(HOOK_ID_cudaLaunchKernel_ptsz, func, false, grid, block, args, shmem, stream);
}

HOOK_FAST(cudaError_t, __cudaLaunchKernel, launch_fn,
	  (const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem,
	   cudaStream_t stream), (kernel, grid, block, args, shmem, stream))
{
	return launch(HOOK_ID___cudaLaunchKernel, kernel, true, grid, block, args, shmem, stream);
}

HOOK_FAST(cudaError_t, __cudaLaunchKernel_ptsz, launch_fn,
	  (const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem,
	   cudaStream_t stream), (kernel, grid, block, args, shmem, stream))
{
	return launch(HOOK_ID___cudaLaunchKernel_ptsz, kernel, true, grid, block, args, shmem,
		      stream);
}

/* ---- copies and memsets ----------------------------------------------------------- */

static void fill_memcpy(struct aiprof_event *e, void *dst, const void *src, size_t count,
			enum cudaMemcpyKind kind, cudaStream_t stream, bool async,
			uint64_t corr, cudaError_t ret)
{
	uint32_t k, flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;

	hostmem__memcpy_class((uint32_t)kind, (uintptr_t)dst, (uintptr_t)src, &k, &flags);
	e->u.memcpy.bytes = count;
	e->u.memcpy.dst = (uintptr_t)dst;
	e->u.memcpy.src = (uintptr_t)src;
	e->u.memcpy.stream = (uintptr_t)stream;
	e->u.memcpy.kind = k;
	e->u.memcpy.flags = flags;
	e->u.memcpy.correlation = corr;
	e->u.memcpy.result = ret;
}

ALWAYS_INLINE cudaError_t copy(enum hook_id id, void *dst, const void *src, size_t count,
			       enum cudaMemcpyKind kind)
{
	memcpy_fn real = (memcpy_fn)hook_real_get(id);
	struct aiprof_event *e;
	uint64_t corr = 0;
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dst, src, count, kind);
	if (atomic_load_explicit(&g_cupti_active, memory_order_relaxed))
		corr = cupti__push();
	ret = real(dst, src, count, kind);
	if (corr)
		cupti__pop();
	e = rec_event(&r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cudaMemcpy);
	if (e)
		fill_memcpy(e, dst, src, count, kind, NULL, false, corr, ret);
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(cudaError_t, cudaMemcpy, memcpy_fn,
	  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind),
	  (dst, src, count, kind))
{
	return copy(HOOK_ID_cudaMemcpy, dst, src, count, kind);
}

HOOK_FAST(cudaError_t, cudaMemcpy_ptds, memcpy_fn,
	  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind),
	  (dst, src, count, kind))
{
	return copy(HOOK_ID_cudaMemcpy_ptds, dst, src, count, kind);
}

ALWAYS_INLINE cudaError_t copy_async(enum hook_id id, void *dst, const void *src, size_t count,
				     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	memcpy_async_fn real = (memcpy_async_fn)hook_real_get(id);
	struct aiprof_event *e;
	uint64_t corr = 0;
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dst, src, count, kind, stream);
	if (atomic_load_explicit(&g_cupti_active, memory_order_relaxed))
		corr = cupti__push();
	ret = real(dst, src, count, kind, stream);
	if (corr)
		cupti__pop();
	e = rec_event(&r, AIPROF_EV_CUDA_MEMCPY, AIPROF_API_cudaMemcpyAsync);
	if (e)
		fill_memcpy(e, dst, src, count, kind, stream, true, corr, ret);
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(cudaError_t, cudaMemcpyAsync, memcpy_async_fn,
	  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
	   cudaStream_t stream), (dst, src, count, kind, stream))
{
	return copy_async(HOOK_ID_cudaMemcpyAsync, dst, src, count, kind, stream);
}

HOOK_FAST(cudaError_t, cudaMemcpyAsync_ptsz, memcpy_async_fn,
	  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
	   cudaStream_t stream), (dst, src, count, kind, stream))
{
	return copy_async(HOOK_ID_cudaMemcpyAsync_ptsz, dst, src, count, kind, stream);
}

static void fill_memset(struct aiprof_event *e, void *dst, size_t count, cudaStream_t stream,
			bool async, cudaError_t ret)
{
	e->u.memcpy.bytes = count;
	e->u.memcpy.dst = (uintptr_t)dst;
	e->u.memcpy.stream = (uintptr_t)stream;
	e->u.memcpy.kind = AIPROF_MEMCPY_D2D;
	e->u.memcpy.flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;
	e->u.memcpy.result = ret;
}

ALWAYS_INLINE cudaError_t set(enum hook_id id, void *dst, int value, size_t count)
{
	memset_fn real = (memset_fn)hook_real_get(id);
	struct aiprof_event *e;
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dst, value, count);
	ret = real(dst, value, count);
	e = rec_event(&r, AIPROF_EV_CUDA_MEMSET, AIPROF_API_cudaMemset);
	if (e)
		fill_memset(e, dst, count, NULL, false, ret);
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(cudaError_t, cudaMemset, memset_fn, (void *dst, int value, size_t count),
	  (dst, value, count))
{
	return set(HOOK_ID_cudaMemset, dst, value, count);
}

HOOK_FAST(cudaError_t, cudaMemset_ptds, memset_fn, (void *dst, int value, size_t count),
	  (dst, value, count))
{
	return set(HOOK_ID_cudaMemset_ptds, dst, value, count);
}

ALWAYS_INLINE cudaError_t set_async(enum hook_id id, void *dst, int value, size_t count,
				    cudaStream_t stream)
{
	memset_async_fn real = (memset_async_fn)hook_real_get(id);
	struct aiprof_event *e;
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dst, value, count, stream);
	ret = real(dst, value, count, stream);
	e = rec_event(&r, AIPROF_EV_CUDA_MEMSET, AIPROF_API_cudaMemsetAsync);
	if (e)
		fill_memset(e, dst, count, stream, true, ret);
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(cudaError_t, cudaMemsetAsync, memset_async_fn,
	  (void *dst, int value, size_t count, cudaStream_t stream), (dst, value, count, stream))
{
	return set_async(HOOK_ID_cudaMemsetAsync, dst, value, count, stream);
}

HOOK_FAST(cudaError_t, cudaMemsetAsync_ptsz, memset_async_fn,
	  (void *dst, int value, size_t count, cudaStream_t stream), (dst, value, count, stream))
{
	return set_async(HOOK_ID_cudaMemsetAsync_ptsz, dst, value, count, stream);
}

/* ---- allocations ------------------------------------------------------------------ */

static void emit_mem(struct rec *r, uint16_t type, uint16_t api, uintptr_t ptr, uint64_t bytes,
		     uint32_t kind, cudaError_t ret)
{
	struct aiprof_event *e = rec_event(r, type, api);

	if (e) {
		e->u.mem.ptr = ptr;
		e->u.mem.bytes = bytes;
		e->u.mem.kind = kind;
		e->u.mem.result = ret;
	}
	rec_done(r, e);
}

HOOK_FAST(cudaError_t, cudaMalloc, cudaMalloc_fn, (void **dev, size_t size), (dev, size))
{
	cudaMalloc_fn real = REAL(cudaMalloc);
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dev, size);
	ret = real(dev, size);
	emit_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMalloc,
		 ret == cudaSuccess && dev ? (uintptr_t)*dev : 0, size, AIPROF_MEM_DEVICE, ret);
	return ret;
}

HOOK_FAST(cudaError_t, cudaFree, cudaFree_fn, (void *dev), (dev))
{
	cudaFree_fn real = REAL(cudaFree);
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dev);
	ret = real(dev);
	emit_mem(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFree, (uintptr_t)dev, 0,
		 AIPROF_MEM_DEVICE, ret);
	return ret;
}

/* Pinned allocations are tracked whether or not we record. */
static cudaError_t hook_cudaMallocHost(void **ptr, size_t size)
{
	cudaMallocHost_fn real = REAL(cudaMallocHost);
	cudaError_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_CUDA);
	ret = real(ptr, size);
	if (ret == cudaSuccess && ptr) {
		int saved = errno;

		hostmem__add((uintptr_t)*ptr, size);
		errno = saved;
	}
	if (rec)
		emit_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaMallocHost,
			 ret == cudaSuccess && ptr ? (uintptr_t)*ptr : 0, size,
			 AIPROF_MEM_HOST_PINNED, ret);
	return ret;
}

static cudaError_t hook_cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
	cudaHostAlloc_fn real = REAL(cudaHostAlloc);
	cudaError_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_CUDA);
	ret = real(ptr, size, flags);
	if (ret == cudaSuccess && ptr) {
		int saved = errno;

		hostmem__add((uintptr_t)*ptr, size);
		errno = saved;
	}
	if (rec)
		emit_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaHostAlloc,
			 ret == cudaSuccess && ptr ? (uintptr_t)*ptr : 0, size,
			 AIPROF_MEM_HOST_PINNED, ret);
	return ret;
}

static cudaError_t hook_cudaFreeHost(void *ptr)
{
	cudaFreeHost_fn real = REAL(cudaFreeHost);
	cudaError_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_CUDA);
	ret = real(ptr);
	if (ret == cudaSuccess) {
		int saved = errno;

		hostmem__del((uintptr_t)ptr);
		errno = saved;
	}
	if (rec)
		emit_mem(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaFreeHost, (uintptr_t)ptr, 0,
			 AIPROF_MEM_HOST_PINNED, ret);
	return ret;
}

static cudaError_t hook_cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	cudaHostRegister_fn real = REAL(cudaHostRegister);
	cudaError_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_CUDA);
	ret = real(ptr, size, flags);
	if (ret == cudaSuccess) {
		int saved = errno;

		hostmem__add((uintptr_t)ptr, size);
		errno = saved;
	}
	if (rec)
		emit_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cudaHostRegister, (uintptr_t)ptr,
			 size, AIPROF_MEM_HOST_REGISTERED, ret);
	return ret;
}

static cudaError_t hook_cudaHostUnregister(void *ptr)
{
	cudaHostUnregister_fn real = REAL(cudaHostUnregister);
	cudaError_t ret;
	struct rec r;
	bool rec;

	if (unlikely(!real))
		return NO_REAL;
	rec = rec_begin(&r, AIPROF_COLLECT_CUDA);
	ret = real(ptr);
	if (ret == cudaSuccess) {
		int saved = errno;

		hostmem__del((uintptr_t)ptr);
		errno = saved;
	}
	if (rec)
		emit_mem(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cudaHostUnregister, (uintptr_t)ptr,
			 0, AIPROF_MEM_HOST_REGISTERED, ret);
	return ret;
}

/* ---- synchronisation -------------------------------------------------------------- */

static void emit_sync(struct rec *r, uint16_t api, uintptr_t handle, uint32_t kind,
		      int32_t ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_SYNC, api);

	if (e) {
		e->u.sync.handle = handle;
		e->u.sync.kind = kind;
		e->u.sync.result = ret;
	}
	rec_done(r, e);
}

ALWAYS_INLINE cudaError_t stream_sync(enum hook_id id, cudaStream_t stream)
{
	stream_sync_fn real = (stream_sync_fn)hook_real_get(id);
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(stream);
	ret = real(stream);
	emit_sync(&r, AIPROF_API_cudaStreamSynchronize, (uintptr_t)stream, AIPROF_SYNC_STREAM,
		  ret);
	return ret;
}

HOOK_FAST(cudaError_t, cudaStreamSynchronize, stream_sync_fn, (cudaStream_t stream), (stream))
{
	return stream_sync(HOOK_ID_cudaStreamSynchronize, stream);
}

HOOK_FAST(cudaError_t, cudaStreamSynchronize_ptsz, stream_sync_fn, (cudaStream_t stream),
	  (stream))
{
	return stream_sync(HOOK_ID_cudaStreamSynchronize_ptsz, stream);
}

HOOK_FAST(cudaError_t, cudaDeviceSynchronize, cudaDeviceSynchronize_fn, (void), ())
{
	cudaDeviceSynchronize_fn real = REAL(cudaDeviceSynchronize);
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real();
	ret = real();
	emit_sync(&r, AIPROF_API_cudaDeviceSynchronize, 0, AIPROF_SYNC_DEVICE, ret);
	return ret;
}

HOOK_FAST(cudaError_t, cudaEventSynchronize, cudaEventSynchronize_fn, (cudaEvent_t event),
	  (event))
{
	cudaEventSynchronize_fn real = REAL(cudaEventSynchronize);
	cudaError_t ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(event);
	ret = real(event);
	emit_sync(&r, AIPROF_API_cudaEventSynchronize, (uintptr_t)event, AIPROF_SYNC_EVENT, ret);
	return ret;
}

/* ---- driver entry points: hand out our driver hooks (no events) ------------------- */

static void substitute_driver_fn(cudaError_t ret, void **fn)
{
	if (ret == cudaSuccess && fn && *fn)
		*fn = hook_substitute(*fn, HOOK_GROUP_CUDA);
}

ALWAYS_INLINE cudaError_t entry_point(enum hook_id id, const char *symbol, void **fn,
				      unsigned long long flags,
				      enum cudaDriverEntryPointQueryResult *status)
{
	entry_point_fn real = (entry_point_fn)hook_real_get(id);
	cudaError_t ret;

	if (unlikely(!real))
		return NO_REAL;
	ret = real(symbol, fn, flags, status);
	substitute_driver_fn(ret, fn);
	return ret;
}

static cudaError_t hook_cudaGetDriverEntryPoint(const char *symbol, void **fn,
						unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point(HOOK_ID_cudaGetDriverEntryPoint, symbol, fn, flags, status);
}

static cudaError_t hook_cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn,
						     unsigned long long flags,
						     enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point(HOOK_ID_cudaGetDriverEntryPoint_ptsz, symbol, fn, flags, status);
}

ALWAYS_INLINE cudaError_t entry_point_ver(enum hook_id id, const char *symbol, void **fn,
					  unsigned int version, unsigned long long flags,
					  enum cudaDriverEntryPointQueryResult *status)
{
	entry_point_ver_fn real = (entry_point_ver_fn)hook_real_get(id);
	cudaError_t ret;

	if (unlikely(!real))
		return NO_REAL;
	ret = real(symbol, fn, version, flags, status);
	substitute_driver_fn(ret, fn);
	return ret;
}

static cudaError_t hook_cudaGetDriverEntryPointByVersion(
	const char *symbol, void **fn, unsigned int version, unsigned long long flags,
	enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point_ver(HOOK_ID_cudaGetDriverEntryPointByVersion, symbol, fn, version,
			       flags, status);
}

static cudaError_t hook_cudaGetDriverEntryPointByVersion_ptsz(
	const char *symbol, void **fn, unsigned int version, unsigned long long flags,
	enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point_ver(HOOK_ID_cudaGetDriverEntryPointByVersion_ptsz, symbol, fn,
			       version, flags, status);
}

const struct hook_impl hook_impls_cudart[] = {
	HOOK_IMPL(cudaLaunchKernel),
	HOOK_IMPL(cudaLaunchKernel_ptsz),
	HOOK_IMPL(__cudaLaunchKernel),
	HOOK_IMPL(__cudaLaunchKernel_ptsz),
	HOOK_IMPL(cudaMemcpy),
	HOOK_IMPL(cudaMemcpy_ptds),
	HOOK_IMPL(cudaMemcpyAsync),
	HOOK_IMPL(cudaMemcpyAsync_ptsz),
	HOOK_IMPL(cudaMemset),
	HOOK_IMPL(cudaMemset_ptds),
	HOOK_IMPL(cudaMemsetAsync),
	HOOK_IMPL(cudaMemsetAsync_ptsz),
	HOOK_IMPL(cudaMalloc),
	HOOK_IMPL(cudaFree),
	HOOK_IMPL(cudaMallocHost),
	HOOK_IMPL(cudaHostAlloc),
	HOOK_IMPL(cudaFreeHost),
	HOOK_IMPL(cudaHostRegister),
	HOOK_IMPL(cudaHostUnregister),
	HOOK_IMPL(cudaStreamSynchronize),
	HOOK_IMPL(cudaStreamSynchronize_ptsz),
	HOOK_IMPL(cudaDeviceSynchronize),
	HOOK_IMPL(cudaEventSynchronize),
	HOOK_IMPL(cudaGetDriverEntryPoint),
	HOOK_IMPL(cudaGetDriverEntryPoint_ptsz),
	HOOK_IMPL(cudaGetDriverEntryPointByVersion),
	HOOK_IMPL(cudaGetDriverEntryPointByVersion_ptsz),
	{ 0, NULL },
};
