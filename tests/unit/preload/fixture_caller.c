/* SPDX-License-Identifier: MIT */
/* libfixture_caller.so: calls the fixture through its PLT. Linked -z now -z relro, so
 * its GOT is read-only by the time libaiprof patches it. */
#include <cuda_runtime_api.h>

#include "fixture.h"

int caller_launch(const void *func, unsigned gx, unsigned bx)
{
	dim3 grid = { gx, 2, 3 }, block = { bx, 5, 6 };

	return cudaLaunchKernel(func, grid, block, NULL, 128, (cudaStream_t)0x5151);
}

int caller_memcpy(void *dst, const void *src, size_t n, int kind)
{
	return cudaMemcpy(dst, src, n, (enum cudaMemcpyKind)kind);
}

/* Taking the address goes through a GLOB_DAT slot. */
void *caller_addr_of_launch(void)
{
	return (void *)&cudaLaunchKernel;
}
