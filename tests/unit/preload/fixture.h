/* SPDX-License-Identifier: MIT */
/*
 * Fixtures for the libaiprof.so unit tests: libfixture_cuda.so defines a few CUDA
 * runtime / driver / NCCL / ibverbs functions with the real prototypes; each counts its
 * calls, remembers its arguments, sets errno to FX_ERRNO and returns a value the test
 * chooses, so a test can tell "the hook called through and returned the result
 * unchanged" from "the hook made something up".
 *
 * libfixture_caller.so (linked -z now: read-only GOT) calls them through its PLT.
 */
#ifndef AIPROF_TEST_FIXTURE_H
#define AIPROF_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#define FX_ERRNO 4242

enum fx_fn {
	FX_cudaLaunchKernel, FX_cudaMemcpy, FX_cudaMemcpyAsync, FX_cudaMemset, FX_cudaMalloc,
	FX_cudaFree, FX_cudaMallocHost, FX_cudaHostAlloc, FX_cudaFreeHost, FX_cudaHostRegister,
	FX_cudaHostUnregister, FX_cudaStreamSynchronize, FX_cudaDeviceSynchronize,
	FX_cudaPointerGetAttributes, FX_cuLaunchKernel, FX_cuFuncGetName, FX_cuMemcpyHtoD_v2,
	FX_cuDeviceGetCount, FX_ncclCommInitRank, FX_ncclCommUserRank, FX_ncclCommCount,
	FX_ncclAllReduce, FX_ncclAllGather, FX_ncclGroupStart, FX_ncclGroupEnd,
	FX_ncclCommDestroy, FX_ibv_open_device, FX_ibv_reg_mr, FX_ibv_dereg_mr,
	FX_ibv_modify_qp,
	FX__COUNT
};

struct fx_state {
	uint64_t calls[FX__COUNT];      /* updated atomically */
	int ret;                        /* what the next calls return (cudaError_t, ...) */
	const void *last_func;
};

extern struct fx_state fx;

/* A CUfunction for the fake driver: cuFuncGetName returns `name`. */
struct CUfunc_st {
	uint32_t magic;
	const char *name;
};
#define FX_FUNC_MAGIC 0xf00dfeedu

/* Not hooked: a communicator that exists before libaiprof was loaded. */
void *fixture_nccl_comm(int rank, int nranks);
/* Not hooked: page-locks a range "through the driver" (cudaPointerGetAttributes says Host). */
void fixture_driver_pin(void *p, size_t len);
/* Not hooked: true if `p` is fake device memory from cudaMalloc. */
int fixture_is_device(const void *p);

/* libfixture_caller.so */
int caller_launch(const void *func, unsigned gx, unsigned bx);
int caller_memcpy(void *dst, const void *src, size_t n, int kind);
void *caller_addr_of_launch(void);

/* libfixture_nofp.so: built without frame pointers; nofp_outer -> nofp_inner ->
 * caller_launch n times; nofp_ra_*: their return addresses */
int nofp_outer(const void *func, int n);
extern void *volatile nofp_ra_inner, *volatile nofp_ra_outer;

/* libfixture_late.so (lazy PLT) and libfixture_noplt.so (-fno-plt: GLOB_DAT) */
typedef int (*fixture_launch_fn)(const void *func);

#endif
