/* SPDX-License-Identifier: MIT */
/*
 * Internal interface of the fake CUDA driver, shared by fake_cuda.c (legacy default stream
 * entry points) and fake_cuda_ptds.c (the *_ptds / *_ptsz entry points).
 */
#ifndef AIPROF_TESTS_FAKE_CUDA_H
#define AIPROF_TESTS_FAKE_CUDA_H

#include <stdbool.h>
#include <cuda.h>

#pragma GCC visibility push(hidden)

/* Which side of a copy is device memory; the host side is classified from the tables. */
enum cu_copy_dir { CU_COPY_HTOD, CU_COPY_DTOH, CU_COPY_DTOD, CU_COPY_UNIFIED };

/* `ptds`: the NULL stream means the per-thread default stream instead of the legacy one. */
CUresult cu__memcpy(void *dst, const void *src, size_t bytes, enum cu_copy_dir dir, CUstream stream,
		    bool async, bool ptds);
CUresult cu__memset(CUdeviceptr dst, unsigned int value, size_t elem_size, size_t n, CUstream stream,
		    bool async, bool ptds);
CUresult cu__launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
		    unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
		    void **extra, bool ptds);
CUresult cu__stream_sync(CUstream stream, bool ptds);
CUresult cu__stream_query(CUstream stream, bool ptds);
CUresult cu__stream_wait_event(CUstream stream, CUevent event, unsigned int flags, bool ptds);
CUresult cu__event_record(CUevent event, CUstream stream, bool ptds);

#pragma GCC visibility pop

#endif
