/* SPDX-License-Identifier: MIT */
/*
 * libpylaunch.so: a stand-in for a framework's compiled extension (torch's C++ ops) for
 * tests/workloads/py_launch.py, which loads it with ctypes. Python calls pl_forward() /
 * pl_backward(); they launch kernels through this module's PLT, as an extension calls
 * cudaLaunchKernel, so the launch hooks see Python frames above a native caller.
 * Linked against the fake CUDA runtime (RUNPATH ../doubles); pl_init(1) also loads the
 * fake libcupti.so.13, as a framework linking CUPTI does, so the window has kernel times
 * (CUPTI needs libcuda in the process: linked too, as the real runtime loads it).
 */
#include <dlfcn.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "tests/doubles/cudart_abi.h"

#define LAUNCH(kernel, grid, block, stream, ...) \
	(__cudaPushCallConfiguration((grid), (block), 0, (stream)) ? (void)0 : kernel(__VA_ARGS__))

static cudaStream_t stream;
static float *buf;

static void launch_stub(const void *stub, void **args)
{
	dim3 grid, block;
	size_t shmem;
	cudaStream_t s;

	if (__cudaPopCallConfiguration(&grid, &block, &shmem, &s) != cudaSuccess)
		return;
	cudaLaunchKernel(stub, grid, block, args, shmem, s);
}

void py_matmul_kernel(float *x, int n)
{
	void *args[] = { &x, &n };

	launch_stub((const void *)py_matmul_kernel, args);
}

void py_grad_kernel(float *x, int n)
{
	void *args[] = { &x, &n };

	launch_stub((const void *)py_grad_kernel, args);
}

static const unsigned long long fatbin_data[] = { 0x00100001ba55ed50ULL, 0 };
static struct fatbin_wrapper fatbin = { FATBIN_WRAPPER_MAGIC, 1, fatbin_data, NULL };
static void **fatbin_handle;

__attribute__((constructor)) static void register_kernels(void)
{
	fatbin_handle = __cudaRegisterFatBinary(&fatbin);
	__cudaRegisterFunction(fatbin_handle, (const char *)py_matmul_kernel, (char *)"py_matmul_kernel",
			       "py_matmul_kernel", -1, NULL, NULL, NULL, NULL, NULL);
	__cudaRegisterFunction(fatbin_handle, (const char *)py_grad_kernel, (char *)"py_grad_kernel",
			       "py_grad_kernel", -1, NULL, NULL, NULL, NULL, NULL);
	__cudaRegisterFatBinaryEnd(fatbin_handle);
}

/* 0, or -1 after printing why. */
int pl_init(int cupti)
{
	if (cupti && !dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "pylaunch: %s\n", dlerror());
		return -1;
	}
	if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaMalloc((void **)&buf, 1 << 20) != cudaSuccess) {
		fprintf(stderr, "pylaunch: cannot create a stream or allocate\n");
		return -1;
	}
	return 0;
}

/* ~0.5 ms of simulated GPU time (grid x block threads at ~1 ns each) */
int pl_forward(void)
{
	dim3 grid = { 2048, 1, 1 }, block = { 256, 1, 1 };

	LAUNCH(py_matmul_kernel, grid, block, stream, buf, 1 << 18);
	return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* ~0.25 ms */
int pl_backward(void)
{
	dim3 grid = { 1024, 1, 1 }, block = { 256, 1, 1 };

	LAUNCH(py_grad_kernel, grid, block, stream, buf, 1 << 18);
	return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

int pl_sync(void)
{
	return cudaStreamSynchronize(stream) == cudaSuccess ? 0 : -1;
}
