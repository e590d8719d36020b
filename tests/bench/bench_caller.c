/* SPDX-License-Identifier: MIT */
/* libbench_caller.so: the calling module whose GOT libaiprof patches. */
#include <cuda_runtime_api.h>

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);

/* n launches through this module's PLT slot (hooked once libaiprof is loaded) */
void bench_launch_plt(long n)
{
	dim3 grid = { 128, 1, 1 }, block = { 256, 1, 1 };

	for (long i = 0; i < n; i++)
		cudaLaunchKernel((const void *)bench_launch_plt, grid, block, 0, 0, 0);
}

/* n launches through a function pointer (never hooked) */
void bench_launch_ptr(long n, launch_fn fn)
{
	dim3 grid = { 128, 1, 1 }, block = { 256, 1, 1 };

	for (long i = 0; i < n; i++)
		fn((const void *)bench_launch_plt, grid, block, 0, 0, 0);
}
