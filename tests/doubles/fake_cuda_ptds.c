/* SPDX-License-Identifier: MIT */
/*
 * Per-thread default stream entry points of the fake CUDA driver. With
 * CUDA_API_PER_THREAD_DEFAULT_STREAM defined, <cuda.h> maps cuMemcpyHtoD to
 * cuMemcpyHtoD_v2_ptds, cuLaunchKernel to cuLaunchKernel_ptsz and so on: the definitions
 * below therefore export the real per-thread names with compiler-checked signatures.
 */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1

#include <stdint.h>
#include <cuda.h>

#include "tests/doubles/fake_cuda.h"

static void *dptr(CUdeviceptr p)
{
	return (void *)(uintptr_t)p;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return cu__memcpy(dptr(dst), dptr(src), ByteCount, CU_COPY_UNIFIED, NULL, false, true);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dptr(dst), dptr(src), ByteCount, CU_COPY_UNIFIED, hStream, true, true);
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return cu__memcpy(dptr(dstDevice), srcHost, ByteCount, CU_COPY_HTOD, NULL, false, true);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return cu__memcpy(dstHost, dptr(srcDevice), ByteCount, CU_COPY_DTOH, NULL, false, true);
}

CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return cu__memcpy(dptr(dstDevice), dptr(srcDevice), ByteCount, CU_COPY_DTOD, NULL, false, true);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dptr(dstDevice), srcHost, ByteCount, CU_COPY_HTOD, hStream, true, true);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dstHost, dptr(srcDevice), ByteCount, CU_COPY_DTOH, hStream, true, true);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dptr(dstDevice), dptr(srcDevice), ByteCount, CU_COPY_DTOD, hStream, true, true);
}

CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return cu__memset(dstDevice, uc, 1, N, NULL, false, true);
}

CUresult cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return cu__memset(dstDevice, ui, 4, N, NULL, false, true);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return cu__memset(dstDevice, uc, 1, N, hStream, true, true);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return cu__memset(dstDevice, ui, 4, N, hStream, true, true);
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	return cu__stream_sync(hStream, true);
}

CUresult cuStreamQuery(CUstream hStream)
{
	return cu__stream_query(hStream, true);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	return cu__stream_wait_event(hStream, hEvent, Flags, true);
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return cu__event_record(hEvent, hStream, true);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	return cu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			  sharedMemBytes, hStream, kernelParams, extra, true);
}
