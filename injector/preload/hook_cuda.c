/* SPDX-License-Identifier: MIT */
/*
 * CUDA driver hooks. Launches carry an interned kernel name (cuFuncGetName, asked once
 * per CUfunction). cuGetProcAddress is hooked only to hand out our hooks in place of
 * the driver functions we hook, so code that binds the driver through entry points
 * (cudart >= 12, PyTorch, Triton) is seen too; calls from cudart into the driver then
 * nest inside the runtime hook and are not recorded twice (depth counter).
 */
#include <cuda.h>

#include "preload.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define NO_REAL CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND

typedef CUresult (*cu_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				 unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*cuMemAlloc_v2_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr);
typedef CUresult (*cu_memcpy_fn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*cu_memcpy_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*cu_htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*cu_htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*cu_dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*cu_dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*cu_dtod_fn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*cu_dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*cuCtxSynchronize_fn)(void);
typedef CUresult (*cuCtxSynchronize_v2_fn)(CUcontext);
typedef CUresult (*cu_stream_sync_fn)(CUstream);
typedef CUresult (*cuGetProcAddress_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, cuuint64_t,
					   CUdriverProcAddressQueryResult *);
typedef CUresult (*cuFuncGetName_fn)(const char **, CUfunction);

static struct lazy_sym g_func_get_name = LAZY_SYM("cuFuncGetName");

/* Called inside a recording hook (depth > 0), once per CUfunction. */
static const char *cufunc_name(uintptr_t key)
{
	cuFuncGetName_fn fn = (cuFuncGetName_fn)lazy_sym_get(&g_func_get_name);
	const char *name = NULL;

	if (!fn || fn(&name, (CUfunction)key) != CUDA_SUCCESS)
		return NULL;
	return name;
}

/* ---- launches --------------------------------------------------------------------- */

ALWAYS_INLINE CUresult launch(enum hook_id id, CUfunction f, unsigned gx, unsigned gy,
			      unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			      CUstream stream, void **params, void **extra)
{
	cu_launch_fn real = (cu_launch_fn)hook_real_get(id);
	struct aiprof_event *e;
	uint64_t corr = 0;
	uint32_t name_id, stack_id;
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
	if (atomic_load_explicit(&g_cupti_active, memory_order_relaxed))
		corr = cupti__push();
	ret = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
	if (corr)
		cupti__pop();
	rec_stop(&r);
	/* strings go out before the launch that first uses them */
	name_id = intern__id(r.h, INTERN_CUFUNC, (uintptr_t)f, cufunc_name);
	stack_id = callstack__id(r.h, r.tls, (uintptr_t)__builtin_frame_address(0));
	e = rec_reserve(&r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cuLaunchKernel);
	if (e) {
		e->u.launch.func = (uintptr_t)f;
		e->u.launch.stream = (uintptr_t)stream;
		e->u.launch.grid[0] = gx;
		e->u.launch.grid[1] = gy;
		e->u.launch.grid[2] = gz;
		e->u.launch.block[0] = bx;
		e->u.launch.block[1] = by;
		e->u.launch.block[2] = bz;
		e->u.launch.shmem = shmem;
		e->u.launch.name_id = name_id;
		e->u.launch.correlation = corr;
		e->u.launch.result = ret;
		e->u.launch.stack_id = stack_id;
	}
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(CUresult, cuLaunchKernel, cu_launch_fn,
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
	   unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra),
	  (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra))
{
	return launch(HOOK_ID_cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shmem, stream, params,
		      extra);
}

HOOK_FAST(CUresult, cuLaunchKernel_ptsz, cu_launch_fn,
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
	   unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra),
	  (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra))
{
	return launch(HOOK_ID_cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem, stream,
		      params, extra);
}

/* ---- memory ----------------------------------------------------------------------- */

HOOK_FAST(CUresult, cuMemAlloc_v2, cuMemAlloc_v2_fn, (CUdeviceptr *dptr, size_t bytes),
	  (dptr, bytes))
{
	cuMemAlloc_v2_fn real = REAL(cuMemAlloc_v2);
	struct aiprof_event *e;
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dptr, bytes);
	ret = real(dptr, bytes);
	e = rec_event(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cuMemAlloc_v2);
	if (e) {
		e->u.mem.ptr = ret == CUDA_SUCCESS && dptr ? *dptr : 0;
		e->u.mem.bytes = bytes;
		e->u.mem.kind = AIPROF_MEM_DEVICE;
		e->u.mem.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

HOOK_FAST(CUresult, cuMemFree_v2, cuMemFree_v2_fn, (CUdeviceptr dptr), (dptr))
{
	cuMemFree_v2_fn real = REAL(cuMemFree_v2);
	struct aiprof_event *e;
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(dptr);
	ret = real(dptr);
	e = rec_event(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cuMemFree_v2);
	if (e) {
		e->u.mem.ptr = dptr;
		e->u.mem.kind = AIPROF_MEM_DEVICE;
		e->u.mem.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

/* Ends a recorded copy: classifies the host side and publishes the event. */
static void copy_done(struct rec *r, uint16_t api, uint32_t kind, uintptr_t dst, uintptr_t src,
		      size_t bytes, CUstream stream, bool async, uint64_t corr, CUresult ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_MEMCPY, api);

	if (e) {
		uint32_t k, flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;

		hostmem__memcpy_class(kind, dst, src, &k, &flags);
		e->u.memcpy.bytes = bytes;
		e->u.memcpy.dst = dst;
		e->u.memcpy.src = src;
		e->u.memcpy.stream = (uintptr_t)stream;
		e->u.memcpy.kind = k;
		e->u.memcpy.flags = flags;
		e->u.memcpy.correlation = corr;
		e->u.memcpy.result = ret;
	}
	rec_done(r, e);
}

static uint64_t corr_push(void)
{
	return atomic_load_explicit(&g_cupti_active, memory_order_relaxed) ? cupti__push() : 0;
}

static void corr_pop(uint64_t corr)
{
	if (corr)
		cupti__pop();
}

/*
 * One body per signature shape. `real_call` is the call expression; dst/src are the
 * pointers as integers; `stream` is the stream expression (NULL when synchronous).
 */
#define COPY_BODY(fn_t, id, api, kind, dst, src, bytes, stream, async, real_call) \
	do {                                                                      \
		fn_t real = (fn_t)hook_real_get(id);                              \
		uint64_t corr;                                                    \
		CUresult ret;                                                     \
		struct rec r;                                                     \
		if (unlikely(!real))                                              \
			return NO_REAL;                                           \
		if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))                  \
			return real_call;                                         \
		corr = corr_push();                                               \
		ret = real_call;                                                  \
		corr_pop(corr);                                                   \
		copy_done(&r, api, kind, (uintptr_t)(dst), (uintptr_t)(src),      \
			  bytes, stream, async, corr, ret);                       \
		return ret;                                                       \
	} while (0)

HOOK_FAST(CUresult, cuMemcpy, cu_memcpy_fn, (CUdeviceptr dst, CUdeviceptr src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_memcpy_fn, HOOK_ID_cuMemcpy, AIPROF_API_cuMemcpy, AIPROF_MEMCPY_DEFAULT,
		  dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpy_ptds, cu_memcpy_fn, (CUdeviceptr dst, CUdeviceptr src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_memcpy_fn, HOOK_ID_cuMemcpy_ptds, AIPROF_API_cuMemcpy,
		  AIPROF_MEMCPY_DEFAULT, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyAsync, cu_memcpy_async_fn, (CUdeviceptr dst, CUdeviceptr src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_memcpy_async_fn, HOOK_ID_cuMemcpyAsync, AIPROF_API_cuMemcpyAsync,
		  AIPROF_MEMCPY_DEFAULT, dst, src, n, s, true, real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyAsync_ptsz, cu_memcpy_async_fn, (CUdeviceptr dst, CUdeviceptr src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_memcpy_async_fn, HOOK_ID_cuMemcpyAsync_ptsz, AIPROF_API_cuMemcpyAsync,
		  AIPROF_MEMCPY_DEFAULT, dst, src, n, s, true, real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyHtoD_v2, cu_htod_fn, (CUdeviceptr dst, const void *src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_htod_fn, HOOK_ID_cuMemcpyHtoD_v2, AIPROF_API_cuMemcpyHtoD_v2,
		  AIPROF_MEMCPY_H2D, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyHtoD_v2_ptds, cu_htod_fn, (CUdeviceptr dst, const void *src,
	   size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_htod_fn, HOOK_ID_cuMemcpyHtoD_v2_ptds, AIPROF_API_cuMemcpyHtoD_v2,
		  AIPROF_MEMCPY_H2D, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyDtoH_v2, cu_dtoh_fn, (void *dst, CUdeviceptr src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_dtoh_fn, HOOK_ID_cuMemcpyDtoH_v2, AIPROF_API_cuMemcpyDtoH_v2,
		  AIPROF_MEMCPY_D2H, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyDtoH_v2_ptds, cu_dtoh_fn, (void *dst, CUdeviceptr src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_dtoh_fn, HOOK_ID_cuMemcpyDtoH_v2_ptds, AIPROF_API_cuMemcpyDtoH_v2,
		  AIPROF_MEMCPY_D2H, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyDtoD_v2, cu_dtod_fn, (CUdeviceptr dst, CUdeviceptr src, size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_dtod_fn, HOOK_ID_cuMemcpyDtoD_v2, AIPROF_API_cuMemcpyDtoD_v2,
		  AIPROF_MEMCPY_D2D, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyDtoD_v2_ptds, cu_dtod_fn, (CUdeviceptr dst, CUdeviceptr src,
	   size_t n),
	  (dst, src, n))
{
	COPY_BODY(cu_dtod_fn, HOOK_ID_cuMemcpyDtoD_v2_ptds, AIPROF_API_cuMemcpyDtoD_v2,
		  AIPROF_MEMCPY_D2D, dst, src, n, NULL, false, real(dst, src, n));
}

HOOK_FAST(CUresult, cuMemcpyHtoDAsync_v2, cu_htod_async_fn, (CUdeviceptr dst, const void *src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_htod_async_fn, HOOK_ID_cuMemcpyHtoDAsync_v2,
		  AIPROF_API_cuMemcpyHtoDAsync_v2, AIPROF_MEMCPY_H2D, dst, src, n, s, true,
		  real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyHtoDAsync_v2_ptsz, cu_htod_async_fn, (CUdeviceptr dst,
	   const void *src, size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_htod_async_fn, HOOK_ID_cuMemcpyHtoDAsync_v2_ptsz,
		  AIPROF_API_cuMemcpyHtoDAsync_v2, AIPROF_MEMCPY_H2D, dst, src, n, s, true,
		  real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyDtoHAsync_v2, cu_dtoh_async_fn, (void *dst, CUdeviceptr src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_dtoh_async_fn, HOOK_ID_cuMemcpyDtoHAsync_v2,
		  AIPROF_API_cuMemcpyDtoHAsync_v2, AIPROF_MEMCPY_D2H, dst, src, n, s, true,
		  real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyDtoHAsync_v2_ptsz, cu_dtoh_async_fn, (void *dst, CUdeviceptr src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_dtoh_async_fn, HOOK_ID_cuMemcpyDtoHAsync_v2_ptsz,
		  AIPROF_API_cuMemcpyDtoHAsync_v2, AIPROF_MEMCPY_D2H, dst, src, n, s, true,
		  real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyDtoDAsync_v2, cu_dtod_async_fn, (CUdeviceptr dst, CUdeviceptr src,
	   size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_dtod_async_fn, HOOK_ID_cuMemcpyDtoDAsync_v2,
		  AIPROF_API_cuMemcpyDtoDAsync_v2, AIPROF_MEMCPY_D2D, dst, src, n, s, true,
		  real(dst, src, n, s));
}

HOOK_FAST(CUresult, cuMemcpyDtoDAsync_v2_ptsz, cu_dtod_async_fn, (CUdeviceptr dst,
	   CUdeviceptr src, size_t n, CUstream s),
	  (dst, src, n, s))
{
	COPY_BODY(cu_dtod_async_fn, HOOK_ID_cuMemcpyDtoDAsync_v2_ptsz,
		  AIPROF_API_cuMemcpyDtoDAsync_v2, AIPROF_MEMCPY_D2D, dst, src, n, s, true,
		  real(dst, src, n, s));
}

/* ---- synchronisation -------------------------------------------------------------- */

static void sync_done(struct rec *r, uint16_t api, uintptr_t handle, uint32_t kind,
		      CUresult ret)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_SYNC, api);

	if (e) {
		e->u.sync.handle = handle;
		e->u.sync.kind = kind;
		e->u.sync.result = ret;
	}
	rec_done(r, e);
}

HOOK_FAST(CUresult, cuCtxSynchronize, cuCtxSynchronize_fn, (void), ())
{
	cuCtxSynchronize_fn real = REAL(cuCtxSynchronize);
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real();
	ret = real();
	sync_done(&r, AIPROF_API_cuCtxSynchronize, 0, AIPROF_SYNC_CTX, ret);
	return ret;
}

HOOK_FAST(CUresult, cuCtxSynchronize_v2, cuCtxSynchronize_v2_fn, (CUcontext ctx), (ctx))
{
	cuCtxSynchronize_v2_fn real = REAL(cuCtxSynchronize_v2);
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(ctx);
	ret = real(ctx);
	sync_done(&r, AIPROF_API_cuCtxSynchronize, (uintptr_t)ctx, AIPROF_SYNC_CTX, ret);
	return ret;
}

ALWAYS_INLINE CUresult stream_sync(enum hook_id id, CUstream stream)
{
	cu_stream_sync_fn real = (cu_stream_sync_fn)hook_real_get(id);
	CUresult ret;
	struct rec r;

	if (unlikely(!real))
		return NO_REAL;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_CUDA)))
		return real(stream);
	ret = real(stream);
	sync_done(&r, AIPROF_API_cuStreamSynchronize, (uintptr_t)stream, AIPROF_SYNC_STREAM, ret);
	return ret;
}

HOOK_FAST(CUresult, cuStreamSynchronize, cu_stream_sync_fn, (CUstream stream), (stream))
{
	return stream_sync(HOOK_ID_cuStreamSynchronize, stream);
}

HOOK_FAST(CUresult, cuStreamSynchronize_ptsz, cu_stream_sync_fn, (CUstream stream),
	  (stream))
{
	return stream_sync(HOOK_ID_cuStreamSynchronize_ptsz, stream);
}

/* ---- entry points ----------------------------------------------------------------- */

static CUresult hook_cuGetProcAddress(const char *symbol, void **pfn, int version,
				      cuuint64_t flags)
{
	cuGetProcAddress_fn real = REAL(cuGetProcAddress);
	CUresult ret;

	if (unlikely(!real))
		return NO_REAL;
	ret = real(symbol, pfn, version, flags);
	if (ret == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hook_substitute(*pfn, HOOK_GROUP_CUDA);
	return ret;
}

static CUresult hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
					 cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status)
{
	cuGetProcAddress_v2_fn real = REAL(cuGetProcAddress_v2);
	CUresult ret;

	if (unlikely(!real))
		return NO_REAL;
	ret = real(symbol, pfn, version, flags, status);
	if (ret == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hook_substitute(*pfn, HOOK_GROUP_CUDA);
	return ret;
}

const struct hook_impl hook_impls_cuda[] = {
	HOOK_IMPL(cuLaunchKernel),
	HOOK_IMPL(cuLaunchKernel_ptsz),
	HOOK_IMPL(cuMemAlloc_v2),
	HOOK_IMPL(cuMemFree_v2),
	HOOK_IMPL(cuMemcpy),
	HOOK_IMPL(cuMemcpy_ptds),
	HOOK_IMPL(cuMemcpyAsync),
	HOOK_IMPL(cuMemcpyAsync_ptsz),
	HOOK_IMPL(cuMemcpyHtoD_v2),
	HOOK_IMPL(cuMemcpyHtoD_v2_ptds),
	HOOK_IMPL(cuMemcpyDtoH_v2),
	HOOK_IMPL(cuMemcpyDtoH_v2_ptds),
	HOOK_IMPL(cuMemcpyDtoD_v2),
	HOOK_IMPL(cuMemcpyDtoD_v2_ptds),
	HOOK_IMPL(cuMemcpyHtoDAsync_v2),
	HOOK_IMPL(cuMemcpyHtoDAsync_v2_ptsz),
	HOOK_IMPL(cuMemcpyDtoHAsync_v2),
	HOOK_IMPL(cuMemcpyDtoHAsync_v2_ptsz),
	HOOK_IMPL(cuMemcpyDtoDAsync_v2),
	HOOK_IMPL(cuMemcpyDtoDAsync_v2_ptsz),
	HOOK_IMPL(cuCtxSynchronize),
	HOOK_IMPL(cuCtxSynchronize_v2),
	HOOK_IMPL(cuStreamSynchronize),
	HOOK_IMPL(cuStreamSynchronize_ptsz),
	HOOK_IMPL(cuGetProcAddress),
	HOOK_IMPL(cuGetProcAddress_v2),
	{ 0, NULL },
};
