/* SPDX-License-Identifier: MIT */
/*
 * CUDA driver hooks. Launches carry an interned kernel name (cuFuncGetName, asked once
 * per CUfunction). cuGetProcAddress is hooked only to hand out our hooks in place of
 * the driver functions we hook, so code that binds the driver through entry points
 * (cudart >= 12, PyTorch, Triton) is seen too; calls from cudart into the driver then
 * nest inside the runtime hook and are not recorded twice (depth counter). Hooks that
 * differ only in name, signature and event fields are one definition each, as in
 * hook_cudart.c.
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

/* A driver hook recorded as one event: see HOOK_RECORD. */
#define CUDA_HOOK(correlate, name, fn_t, params, args, done) \
	HOOK_RECORD(CUresult, NO_REAL, AIPROF_COLLECT_CUDA, correlate, name, fn_t, params, \
		    args, done)

/* ---- launches --------------------------------------------------------------------- */

/* Ends one launch; inlined, so the stack is walked from the hook's own frame. */
ALWAYS_INLINE void launch_done(struct rec *r, CUfunction f, unsigned gx, unsigned gy,
			       unsigned gz, unsigned bx, unsigned by, unsigned bz,
			       unsigned shmem, CUstream stream, uint64_t corr, CUresult ret)
{
	struct aiprof_event *e;
	uint32_t name_id, stack_id;

	rec_stop(r);
	/* strings go out before the launch that first uses them */
	name_id = intern__id(r->h, INTERN_CUFUNC, (uintptr_t)f, cufunc_name);
	stack_id = callstack__id(r->h, r->tls, (uintptr_t)__builtin_frame_address(0));
	e = rec_reserve(r, AIPROF_EV_CUDA_LAUNCH, AIPROF_API_cuLaunchKernel);
	if (e)
		e->u.launch = (struct aiprof_ev_launch){
			.func = (uintptr_t)f, .stream = (uintptr_t)stream, .grid = { gx, gy, gz },
			.block = { bx, by, bz }, .shmem = shmem, .name_id = name_id,
			.correlation = corr, .result = ret, .stack_id = stack_id,
		};
	rec_done(r, e);
}

#define LAUNCH_HOOK(name)                                                                  \
	CUDA_HOOK(true, name, cu_launch_fn,                                                \
		  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,       \
		   unsigned by, unsigned bz, unsigned shmem, CUstream stream, void **params, \
		   void **extra), (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra), \
		  launch_done(&r, f, gx, gy, gz, bx, by, bz, shmem, stream, corr, ret))

LAUNCH_HOOK(cuLaunchKernel)
LAUNCH_HOOK(cuLaunchKernel_ptsz)

/* ---- memory ----------------------------------------------------------------------- */

CUDA_HOOK(false, cuMemAlloc_v2, cuMemAlloc_v2_fn, (CUdeviceptr *dptr, size_t bytes),
	  (dptr, bytes),
	  rec_mem(&r, AIPROF_EV_CUDA_ALLOC, AIPROF_API_cuMemAlloc_v2,
		  ret == CUDA_SUCCESS && dptr ? *dptr : 0, bytes, AIPROF_MEM_DEVICE, ret))

CUDA_HOOK(false, cuMemFree_v2, cuMemFree_v2_fn, (CUdeviceptr dptr), (dptr),
	  rec_mem(&r, AIPROF_EV_CUDA_FREE, AIPROF_API_cuMemFree_v2, dptr, 0, AIPROF_MEM_DEVICE,
		  ret))

/*
 * The copy entry points, one family per signature: COPY_<dst><src>[_ASYNC] is
 *     fn_t, (params), (args), stream, async
 * with the pointers always named dst and src and the size n.
 */
#define COPY_DD cu_memcpy_fn, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), 0, false
#define COPY_DH cu_dtoh_fn, (void *dst, CUdeviceptr src, size_t n), (dst, src, n), 0, false
#define COPY_HD cu_htod_fn, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), 0, false
#define COPY_DD_ASYNC cu_memcpy_async_fn, (CUdeviceptr dst, CUdeviceptr src, size_t n, \
	CUstream s), (dst, src, n, s), (uintptr_t)s, true
#define COPY_DH_ASYNC cu_dtoh_async_fn, (void *dst, CUdeviceptr src, size_t n, CUstream s), \
	(dst, src, n, s), (uintptr_t)s, true
#define COPY_HD_ASYNC cu_htod_async_fn, (CUdeviceptr dst, const void *src, size_t n, \
	CUstream s), (dst, src, n, s), (uintptr_t)s, true

/*
 * hook_<name> of a copy of `kind`, reported as AIPROF_API_<api>; the rest is a COPY_*
 * signature, expanded by COPY_HOOKS.
 */
#define COPY_HOOK(name, api, kind, fn_t, params, args, stream, async)                      \
	CUDA_HOOK(true, name, fn_t, params, args,                                          \
		  rec_memcpy(&r, AIPROF_API_##api, kind, (uintptr_t)dst, (uintptr_t)src, n, \
			     stream, async, corr, ret))

/* An entry point and its _ptds / _ptsz twin, both reported under the plain name. */
#define COPY_HOOKS(plain, twin, kind, sig) \
	COPY_HOOK(plain, plain, kind, sig) \
	COPY_HOOK(twin, plain, kind, sig)

COPY_HOOKS(cuMemcpy, cuMemcpy_ptds, AIPROF_MEMCPY_DEFAULT, COPY_DD)
COPY_HOOKS(cuMemcpyAsync, cuMemcpyAsync_ptsz, AIPROF_MEMCPY_DEFAULT, COPY_DD_ASYNC)
COPY_HOOKS(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, AIPROF_MEMCPY_H2D, COPY_HD)
COPY_HOOKS(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, AIPROF_MEMCPY_D2H, COPY_DH)
COPY_HOOKS(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, AIPROF_MEMCPY_D2D, COPY_DD)
COPY_HOOKS(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, AIPROF_MEMCPY_H2D, COPY_HD_ASYNC)
COPY_HOOKS(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, AIPROF_MEMCPY_D2H, COPY_DH_ASYNC)
COPY_HOOKS(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, AIPROF_MEMCPY_D2D, COPY_DD_ASYNC)

/* ---- synchronisation -------------------------------------------------------------- */

CUDA_HOOK(false, cuCtxSynchronize, cuCtxSynchronize_fn, (void), (),
	  rec_sync(&r, AIPROF_API_cuCtxSynchronize, 0, AIPROF_SYNC_CTX, ret))

CUDA_HOOK(false, cuCtxSynchronize_v2, cuCtxSynchronize_v2_fn, (CUcontext ctx), (ctx),
	  rec_sync(&r, AIPROF_API_cuCtxSynchronize, (uintptr_t)ctx, AIPROF_SYNC_CTX, ret))

#define STREAM_SYNC_HOOK(name)                                                             \
	CUDA_HOOK(false, name, cu_stream_sync_fn, (CUstream stream), (stream),             \
		  rec_sync(&r, AIPROF_API_cuStreamSynchronize, (uintptr_t)stream,          \
			   AIPROF_SYNC_STREAM, ret))

STREAM_SYNC_HOOK(cuStreamSynchronize)
STREAM_SYNC_HOOK(cuStreamSynchronize_ptsz)

/* ---- entry points ----------------------------------------------------------------- */

HOOK_HAND_OUT(CUresult, CUDA_SUCCESS, NO_REAL, HOOK_GROUP_CUDA, cuGetProcAddress,
	      cuGetProcAddress_fn, (const char *symbol, void **pfn, int version,
	      cuuint64_t flags), (symbol, pfn, version, flags), pfn)

HOOK_HAND_OUT(CUresult, CUDA_SUCCESS, NO_REAL, HOOK_GROUP_CUDA, cuGetProcAddress_v2,
	      cuGetProcAddress_v2_fn, (const char *symbol, void **pfn, int version,
	      cuuint64_t flags, CUdriverProcAddressQueryResult *status),
	      (symbol, pfn, version, flags, status), pfn)

const struct hook_impl hook_impls_cuda[] = {
#define HOOK(name, group) HOOK_IMPL_IF(group, CUDA, HOOK_ID_##name, hook_##name)
#include "hooks.def"
#undef HOOK
	{ 0, NULL },
};
