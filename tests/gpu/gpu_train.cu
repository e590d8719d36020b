/* SPDX-License-Identifier: MIT */
/*
 * gpu_train: a real CUDA + NCCL workload for tests/gpu/gpu_check.py, built here with nvcc
 * (sm_80 and sm_90 code plus compute_90 PTX) against the real CUDA runtime (shared) and
 * the real NCCL. It runs steps until SIGTERM/SIGINT or --seconds, each step:
 *
 *   memset        d_y = 0                                      (cudaMemsetAsync)
 *   copy H->D     d_x <- 4 MiB pinned host buffer of 1.0f       (cudaMemcpyAsync, pinned)
 *   copy H->D     d_y <- 3 MiB pageable host buffer of 0.5f     (cudaMemcpy, pageable)
 *   kernel        scale_add_kernel: y = 2x + y                  (<<<>>>: __cudaLaunchKernel)
 *   alloc         scratch of --alloc-bytes, fill_kernel, free   (cudaMalloc / cudaFree)
 *   copy D->D     d_z <- d_y                                    (cudaMemcpyAsync)
 *   NCCL          per communicator: all-reduce avg y -> y2, all-reduce sum y2 -> z
 *   kernel        square_sum_kernel: sum of (4 * y2)^2 as an integer (exact)
 *   copy D->H     the sum into pinned memory, stream synchronise
 *
 * and checks the sum against the value the arithmetic must give: a wrong result exits 1
 * (--no-verify: on the test doubles of tests/doubles, whose simulated GPU runs no code).
 * Communicators have one rank each (NCCL refuses two ranks of one communicator on one
 * GPU); a one-rank all-reduce with ncclAvg still runs a kernel of NCCL's own, a sum
 * between two buffers a device-to-device copy.
 *
 * Prints "ready" once set up, then one line per step: "step N START_NS DUR_NS"
 * (CLOCK_MONOTONIC, the clock of aiprof's window). SIGUSR1 asks for a CUPTI probe between
 * two steps: libcupti is loaded and cuptiSubscribe tried; "probe subscribe=RC NAME" says
 * whether the subscriber slot was free (it is not while aiprof records, and must be once
 * aiprof has detached).
 */
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK_CUDA(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "gpu_train: %s: %s\n", #call, cudaGetErrorString(e_)); exit(2); } } while (0)
#define CHECK_NCCL(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
	fprintf(stderr, "gpu_train: %s: %s\n", #call, ncclGetErrorString(r_)); exit(2); } } while (0)

static volatile sig_atomic_t g_stop, g_probe;

static void on_stop(int sig) { (void)sig; g_stop = 1; }
static void on_probe(int sig) { (void)sig; g_probe = 1; }

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__global__ void scale_add_kernel(float *y, const float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + y[i];
}

__global__ void fill_kernel(float *p, float v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = v;
}

/* (4 * v)^2 is an integer for every v this workload makes: the sum is exact */
__global__ void square_sum_kernel(const float *y, unsigned long long *sum, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		unsigned long long q = (unsigned long long)(4.0f * y[i]);

		atomicAdd(sum, q * q);
	}
}

/* Tries to subscribe to CUPTI as a second tool would; 0 if the slot was free. */
static int probe_cupti(void)
{
	typedef CUptiResult (*sub_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	typedef CUptiResult (*unsub_fn)(CUpti_SubscriberHandle);
	typedef CUptiResult (*str_fn)(CUptiResult, const char **);
	void *lib = dlopen("libcupti.so.13", RTLD_LAZY | RTLD_LOCAL);
	CUpti_SubscriberHandle h;
	const char *what = "?";
	CUptiResult r;

	if (!lib) {
		printf("probe subscribe=-1 libcupti.so.13 not found: %s\n", dlerror());
		return -1;
	}
	sub_fn sub = (sub_fn)dlsym(lib, "cuptiSubscribe");
	unsub_fn unsub = (unsub_fn)dlsym(lib, "cuptiUnsubscribe");
	str_fn str = (str_fn)dlsym(lib, "cuptiGetResultString");
	if (!sub || !unsub || !str) {
		printf("probe subscribe=-1 libcupti lacks cuptiSubscribe\n");
		return -1;
	}
	r = sub(&h, NULL, NULL);
	str(r, &what);
	printf("probe subscribe=%d %s\n", (int)r, what);
	if (r == CUPTI_SUCCESS)
		unsub(h);
	fflush(stdout);
	return r == CUPTI_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
	const int n = 1 << 20;                  /* 4 MiB of floats */
	const int n_pageable = 3 * (n / 4);     /* 3 MiB */
	double seconds = 60;
	size_t alloc_bytes = 8u << 20;
	int ncomms = 2;
	bool verify = true;
	float *h_pinned, *h_pageable, *d_x, *d_y, *d_y2, *d_z;
	unsigned long long *d_sum, *h_sum, want;
	ncclComm_t *comms;
	cudaStream_t stream;
	uint64_t t_end;
	int dev = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--comms") && i + 1 < argc)
			ncomms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--alloc-bytes") && i + 1 < argc)
			alloc_bytes = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--no-verify"))
			verify = false;
		else {
			fprintf(stderr, "usage: gpu_train [--seconds S] [--comms K] [--alloc-bytes B] "
				"[--no-verify]\n");
			return 2;
		}
	}
	if (ncomms < 1 || ncomms > 16) {
		fprintf(stderr, "gpu_train: --comms takes 1 to 16\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);        /* step lines as they happen, into a file too */
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	signal(SIGUSR1, on_probe);

	CHECK_CUDA(cudaSetDevice(dev));
	/* a blocking stream: it waits for the legacy stream, where the pageable cudaMemcpy runs
	 * (that copy may return before its DMA is done) */
	CHECK_CUDA(cudaStreamCreate(&stream));
	CHECK_CUDA(cudaMallocHost((void **)&h_pinned, n * sizeof(float)));
	CHECK_CUDA(cudaMallocHost((void **)&h_sum, sizeof(*h_sum)));
	h_pageable = (float *)malloc(n_pageable * sizeof(float));
	if (!h_pageable)
		return 2;
	for (int i = 0; i < n; i++)
		h_pinned[i] = 1.0f;
	for (int i = 0; i < n_pageable; i++)
		h_pageable[i] = 0.5f;
	CHECK_CUDA(cudaMalloc((void **)&d_x, n * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&d_y, n * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&d_y2, n * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&d_z, n * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&d_sum, sizeof(*d_sum)));

	comms = (ncclComm_t *)calloc(ncomms, sizeof(*comms));
	for (int c = 0; c < ncomms; c++) {
		ncclUniqueId id;

		CHECK_NCCL(ncclGetUniqueId(&id));
		CHECK_NCCL(ncclCommInitRank(&comms[c], 1, id, 0));
	}
	/* y = 2 * 1.0 + 0.5 over the pageable part, 2 * 1.0 + 0 beyond: (4y)^2 = 100 or 64 */
	want = 100ull * n_pageable + 64ull * (n - n_pageable);
	printf("ready pid=%d comms=%d\n", (int)getpid(), ncomms);
	fflush(stdout);

	t_end = mono_ns() + (uint64_t)(seconds * 1e9);
	for (long step = 0; !g_stop && mono_ns() < t_end; step++) {
		uint64_t t0 = mono_ns();
		int blocks = (n + 255) / 256;
		float *scratch;

		if (g_probe) {
			g_probe = 0;
			probe_cupti();
		}
		CHECK_CUDA(cudaMemsetAsync(d_y, 0, n * sizeof(float), stream));
		CHECK_CUDA(cudaMemcpyAsync(d_x, h_pinned, n * sizeof(float), cudaMemcpyHostToDevice,
					   stream));
		CHECK_CUDA(cudaStreamSynchronize(stream));
		CHECK_CUDA(cudaMemcpy(d_y, h_pageable, n_pageable * sizeof(float),
				      cudaMemcpyHostToDevice));
		scale_add_kernel<<<blocks, 256, 0, stream>>>(d_y, d_x, 2.0f, n);
		CHECK_CUDA(cudaMalloc((void **)&scratch, alloc_bytes));
		fill_kernel<<<(int)((alloc_bytes / sizeof(float) + 255) / 256), 256, 0, stream>>>(
			scratch, 3.0f, (int)(alloc_bytes / sizeof(float)));
		CHECK_CUDA(cudaMemcpyAsync(d_z, d_y, n * sizeof(float), cudaMemcpyDeviceToDevice,
					   stream));
		for (int c = 0; c < ncomms; c++) {
			CHECK_NCCL(ncclAllReduce(d_y, d_y2, n, ncclFloat, ncclAvg, comms[c], stream));
			CHECK_NCCL(ncclAllReduce(d_y2, d_z, n, ncclFloat, ncclSum, comms[c], stream));
		}
		CHECK_CUDA(cudaMemsetAsync(d_sum, 0, sizeof(*d_sum), stream));
		square_sum_kernel<<<blocks, 256, 0, stream>>>(d_y2, d_sum, n);
		CHECK_CUDA(cudaMemcpyAsync(h_sum, d_sum, sizeof(*h_sum), cudaMemcpyDeviceToHost,
					   stream));
		CHECK_CUDA(cudaStreamSynchronize(stream));
		CHECK_CUDA(cudaFree(scratch));
		if (verify && *h_sum != want) {
			fprintf(stderr, "gpu_train: step %ld: sum %llu, want %llu\n", step, *h_sum, want);
			return 1;
		}
		printf("step %ld %llu %llu\n", step, (unsigned long long)t0,
		       (unsigned long long)(mono_ns() - t0));
	}
	for (int c = 0; c < ncomms; c++)
		CHECK_NCCL(ncclCommDestroy(comms[c]));
	CHECK_CUDA(cudaStreamDestroy(stream));
	printf("done\n");
	fflush(stdout);
	return 0;
}
