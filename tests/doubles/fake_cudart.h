/* SPDX-License-Identifier: MIT */
/*
 * Internal interface of the fake CUDA runtime, shared by fake_cudart.c (legacy default
 * stream entry points) and fake_cudart_ptds.c (the *_ptds / *_ptsz entry points compiled
 * with CUDA_API_PER_THREAD_DEFAULT_STREAM). Each helper records the thread's last error,
 * as every real runtime call does, and returns the error.
 */
#ifndef AIPROF_TESTS_FAKE_CUDART_H
#define AIPROF_TESTS_FAKE_CUDART_H

#include <stdbool.h>
#include <cuda_runtime_api.h>

#pragma GCC visibility push(hidden)

/* `ptds`: the NULL stream means the per-thread default stream instead of the legacy one. */
cudaError_t cudart__memcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			   cudaStream_t stream, bool async, bool ptds);
cudaError_t cudart__memset(void *dst, int value, size_t count, cudaStream_t stream, bool async,
			   bool ptds);
cudaError_t cudart__launch(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
			   cudaStream_t stream, bool ptds);
cudaError_t cudart__launch_kernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
				  size_t shmem, cudaStream_t stream, bool ptds);
cudaError_t cudart__stream_sync(cudaStream_t stream, bool ptds);
cudaError_t cudart__stream_query(cudaStream_t stream, bool ptds);
cudaError_t cudart__stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
				      bool ptds);
cudaError_t cudart__event_record(cudaEvent_t event, cudaStream_t stream, bool ptds);

#pragma GCC visibility pop

#endif
