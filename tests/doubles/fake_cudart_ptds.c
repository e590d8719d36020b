/* SPDX-License-Identifier: MIT */
/*
 * The per-thread default stream entry points of the fake CUDA runtime. With
 * CUDA_API_PER_THREAD_DEFAULT_STREAM defined, <cuda_runtime_api.h> renames cudaMemcpy to
 * cudaMemcpy_ptds, cudaMemcpyAsync to cudaMemcpyAsync_ptsz and so on, so the definitions
 * below export exactly the names (and signatures) a program built with
 * `nvcc --default-stream per-thread` links to. The NULL stream means the calling thread's
 * default stream here.
 */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1

#include <cuda_runtime_api.h>

#include "tests/doubles/fake_cudart.h"

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return cudart__memcpy(dst, src, count, kind, NULL, false, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	return cudart__memcpy(dst, src, count, kind, stream, true, true);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return cudart__memset(devPtr, value, count, NULL, false, true);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return cudart__memset(devPtr, value, count, stream, true, true);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return cudart__stream_sync(stream, true);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return cudart__stream_query(stream, true);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return cudart__stream_wait_event(stream, event, flags, true);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return cudart__event_record(event, stream, true);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			     size_t sharedMem, cudaStream_t stream)
{
	return cudart__launch(func, gridDim, blockDim, args, sharedMem, stream, true);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
				    size_t sharedMem, cudaStream_t stream)
{
	return cudart__launch_kernel(kernel, gridDim, blockDim, args, sharedMem, stream, true);
}
