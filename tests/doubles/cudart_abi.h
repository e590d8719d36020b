/* SPDX-License-Identifier: MIT */
/*
 * Entry points of libcudart.so.13 that nvcc-generated host code calls but that only the
 * C++-only header crt/host_runtime.h declares: fat binary / kernel registration (run from
 * a static constructor) and the <<<grid, block, shmem, stream>>> call configuration. The
 * prototypes are the ones of CUDA 13. C programs written in the style of nvcc output (the
 * test trainer) include this; the fake runtime includes it so the compiler checks that its
 * definitions match.
 *
 * The __fakecudart_* functions are private to the test doubles (a real runtime has none):
 * the fake NCCL looks them up with dlsym() to place a collective on the simulated timeline
 * of its CUDA stream, as a collective kernel would be.
 */
#ifndef AIPROF_TESTS_CUDART_ABI_H
#define AIPROF_TESTS_CUDART_ABI_H

#include <stdint.h>
#include <cuda_runtime_api.h>

/* Layout of the wrapper nvcc passes to __cudaRegisterFatBinary (magic 0x466243b1). */
struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned long long *data;
	void *filename_or_fatbins;
};

#define FATBIN_WRAPPER_MAGIC 0x466243b1

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
			    const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize);
/* Returns 0 on success (nvcc: `if (__cudaPushCallConfiguration(...)) skip; else stub();`). */
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
				     struct CUstream_st *stream);
/* `stream` points to a cudaStream_t. */
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
				       void *stream);

/*
 * CUDA 13's <<<>>>: the host stub looks its kernel up once (__cudaGetKernel: a cudaKernel_t,
 * which is the driver's CUkernel) and launches by handle. Unless __NV_LEGACY_LAUNCH is
 * defined, nvcc 13 generates this instead of cudaLaunchKernel(stub, ...).
 */
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
			       size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
				    void **args, size_t sharedMem, cudaStream_t stream);

/*
 * The doubles' CUkernel (opaque in the real headers): the fake runtime hands these out from
 * __cudaGetKernel, and the fake driver's cuKernelGetName reads the name back, as the real
 * driver answers for a kernel of a loaded module.
 */
#define FAKE_KERNEL_MAGIC 0x6b65726eu
struct CUkern_st {
	uint32_t magic;
	const char *name;
	const void *host_fun;
};

/*
 * Time (CLOCK_MONOTONIC ns) at which work enqueued now on `stream` (NULL = legacy stream)
 * could start, i.e. when the work already on it is done. 0 or -EINVAL.
 */
int __fakecudart_stream_ready_ns(cudaStream_t stream, uint64_t *ret_ns);
/* Keeps `stream` busy until at least `end_ns`. 0 or -EINVAL. */
int __fakecudart_stream_busy_until(cudaStream_t stream, uint64_t end_ns);
typedef int (*fakecudart_stream_ready_ns_fn)(cudaStream_t stream, uint64_t *ret_ns);
typedef int (*fakecudart_stream_busy_until_fn)(cudaStream_t stream, uint64_t end_ns);
/*
 * Reports the kernel of a collective, [start_ns, end_ns) on `stream`, to the fake CUPTI (if
 * it listens) as launched by cudaLaunchKernelExC on the calling thread, the launch having
 * begun at api_start_ns: how CUPTI sees a real NCCL's ncclDevKernel_* kernels. 0 or -EINVAL.
 */
int __fakecudart_collective_kernel(cudaStream_t stream, const char *name, uint64_t api_start_ns,
				   uint64_t start_ns, uint64_t end_ns);
typedef int (*fakecudart_collective_kernel_fn)(cudaStream_t stream, const char *name, uint64_t api_start_ns,
					       uint64_t start_ns, uint64_t end_ns);
#define FAKECUDART_COLLECTIVE_KERNEL "__fakecudart_collective_kernel"
#define FAKECUDART_STREAM_READY_NS   "__fakecudart_stream_ready_ns"
#define FAKECUDART_STREAM_BUSY_UNTIL "__fakecudart_stream_busy_until"

#endif
