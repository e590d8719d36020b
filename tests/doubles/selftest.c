/* SPDX-License-Identifier: MIT */
/*
 * selftest: checks the behaviour of the test doubles themselves (data movement, pointer
 * classification, the timing model, NCCL collectives across processes, verbs loopback).
 * Linked like the trainer; prints one line per check and exits non-zero on a failure.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <infiniband/verbs.h>
#include <nccl.h>

#include "tests/doubles/cudart_abi.h"

static int failures;

#define CHECK(cond, ...)                                              \
	do {                                                          \
		if (!(cond)) {                                        \
			failures++;                                   \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
			printf(__VA_ARGS__);                          \
			printf("\n");                                 \
		}                                                     \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void probe_kernel(int n)
{
}

static void test_cudart(void)
{
	const size_t n = 12U << 20;
	char *dev = NULL, *pinned = NULL, *pageable = malloc(n), *reg = malloc(4096);
	struct cudaPointerAttributes a;
	cudaStream_t s = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	dim3 grid = { 1024, 1024, 1 }, block = { 1, 1, 1 }, bad = { 2048, 1, 1 };
	const char *name = NULL;
	void **fat;
	double t0, t_launch, t_sync, t_pinned, t_pageable;
	float ms = 0;
	cudaError_t (*memcpy_ptds)(void *, const void *, size_t, enum cudaMemcpyKind);

	CHECK(cudaMalloc((void **)&dev, n) == cudaSuccess && cudaMallocHost((void **)&pinned, n) == cudaSuccess,
	      "allocations");
	CHECK(cudaHostRegister(reg, 4096, 0) == cudaSuccess, "cudaHostRegister");
	CHECK(cudaHostRegister(reg, 4096, 0) == cudaErrorHostMemoryAlreadyRegistered, "double register");
	cudaGetLastError();
	CHECK(cudaPointerGetAttributes(&a, dev + 100) == cudaSuccess && a.type == cudaMemoryTypeDevice,
	      "device pointer type %d", a.type);
	CHECK(cudaPointerGetAttributes(&a, pinned) == cudaSuccess && a.type == cudaMemoryTypeHost, "pinned type");
	CHECK(cudaPointerGetAttributes(&a, reg + 10) == cudaSuccess && a.type == cudaMemoryTypeHost, "registered");
	CHECK(cudaPointerGetAttributes(&a, pageable) == cudaSuccess && a.type == cudaMemoryTypeUnregistered &&
		      a.device == -2, "pageable type %d", a.type);

	/* cudaMemcpyDefault infers directions; data moves. */
	memset(pinned, 0x5a, n);
	CHECK(cudaMemcpy(dev, pinned, n, cudaMemcpyDefault) == cudaSuccess, "H2D default");
	memset(pageable, 0, n);
	CHECK(cudaMemcpy(pageable, dev, n, cudaMemcpyDefault) == cudaSuccess && pageable[n - 1] == 0x5a, "D2H");

	/* 12 MiB: >= 1 ms pinned, >= 4 ms pageable (more when memcpy itself is slower). */
	t0 = now_ms();
	cudaMemcpy(dev, pinned, n, cudaMemcpyHostToDevice);
	t_pinned = now_ms() - t0;
	t0 = now_ms();
	cudaMemcpy(dev, pageable, n, cudaMemcpyHostToDevice);
	t_pageable = now_ms() - t0;
	CHECK(t_pinned > 0.9 && t_pageable > 3.9 && t_pageable < 100 && t_pageable > t_pinned, "copy times %.2f %.2f ms",
	      t_pinned, t_pageable);

	/* A 1M-thread kernel: quick launch, ~1 ms on the stream. */
	CHECK(cudaStreamCreate(&s) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
		      cudaEventCreate(&e1) == cudaSuccess, "stream/events");
	t0 = now_ms();
	cudaEventRecord(e0, s);
	CHECK(cudaLaunchKernel((const void *)probe_kernel, grid, block, NULL, 0, s) == cudaSuccess, "launch");
	cudaEventRecord(e1, s);
	t_launch = now_ms() - t0;
	CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "stream busy after launch");
	cudaStreamSynchronize(s);
	t_sync = now_ms() - t0;
	CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 1.0 && ms < 1.2, "elapsed %.3f ms", ms);
	CHECK(t_launch < 0.9 && t_sync > 1.0, "launch %.3f ms, sync %.3f ms", t_launch, t_sync);
	CHECK(cudaLaunchKernel((const void *)probe_kernel, grid, bad, NULL, 0, s) == cudaErrorInvalidConfiguration &&
		      cudaGetLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess,
	      "invalid configuration");

	/* Registration gives names; the per-thread entry points exist. */
	fat = __cudaRegisterFatBinary(NULL);
	__cudaRegisterFunction(fat, (const char *)probe_kernel, (char *)"_Z12probe_kerneli", "_Z12probe_kerneli",
			       -1, NULL, NULL, NULL, NULL, NULL);
	CHECK(cudaFuncGetName(&name, (const void *)probe_kernel) == cudaSuccess &&
		      strcmp(name, "_Z12probe_kerneli") == 0, "cudaFuncGetName");
	__cudaUnregisterFatBinary(fat);
	memcpy_ptds = (cudaError_t (*)(void *, const void *, size_t, enum cudaMemcpyKind))dlsym(RTLD_DEFAULT,
												"cudaMemcpy_ptds");
	CHECK(memcpy_ptds && memcpy_ptds(pageable, dev, 16, cudaMemcpyDeviceToHost) == cudaSuccess, "ptds");

	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(s);
	cudaHostUnregister(reg);
	CHECK(cudaHostUnregister(reg) == cudaErrorHostMemoryNotRegistered, "unregister twice");
	cudaGetLastError();
	cudaFree(dev);
	cudaFreeHost(pinned);
	free(pageable);
	free(reg);
	printf("cudart: done\n");
}

static void test_driver(void)
{
	static const char ptx[] = ".version 8.0\n.target sm_90\n.visible .entry my_kernel(\n)\n{\n\tret;\n}\n";
	CUmodule mod = NULL;
	CUfunction f = NULL, g = NULL;
	CUdeviceptr d = 0;
	const char *name = NULL;
	char buf[64] = { 0 };
	void *pfn = NULL;
	CUdriverProcAddressQueryResult q;

	CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
	CHECK(cuModuleLoadData(&mod, ptx) == CUDA_SUCCESS, "cuModuleLoadData");
	CHECK(cuModuleGetFunction(&f, mod, "my_kernel") == CUDA_SUCCESS, "known entry");
	CHECK(cuModuleGetFunction(&g, mod, "other") == CUDA_ERROR_NOT_FOUND, "unknown entry");
	CHECK(cuFuncGetName(&name, f) == CUDA_SUCCESS && strcmp(name, "my_kernel") == 0, "cuFuncGetName");
	CHECK(cuLaunchKernel(f, 10, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernel");
	CHECK(cuLaunchKernel(f, 10, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL) == CUDA_ERROR_INVALID_VALUE, "bad block");
	CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "cuCtxSynchronize");
	CHECK(cuMemAlloc(&d, 64) == CUDA_SUCCESS && cuMemcpyHtoD(d, "hello", 6) == CUDA_SUCCESS &&
		      cuMemcpyDtoH(buf, d, 6) == CUDA_SUCCESS && strcmp(buf, "hello") == 0, "driver copies");
	CHECK(cuGetProcAddress("cuMemAlloc", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&
		      pfn == (void *)cuMemAlloc_v2, "cuGetProcAddress");
	cuMemFree(d);
	cuModuleUnload(mod);
	printf("driver: done\n");
}

/* Rank body of the NCCL test; returns the number of failed checks. */
static int nccl_rank(ncclUniqueId id, int rank, int n)
{
	const size_t big = (3U << 20) / sizeof(float) + 7;   /* several staging chunks */
	ncclComm_t comm = NULL;
	float *f = malloc(big * sizeof(float));
	double dv[3];
	long long ll[2];
	int *ig = malloc((size_t)n * 4 * sizeof(int)), rs[4], bc[5], ring = -1, fails = 0, c;

	if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess)
		return 1;
	ncclCommCount(comm, &c);
	fails += c != n;
	for (size_t i = 0; i < big; i++)
		f[i] = (float)(rank + 1) * (float)(i % 7);
	ncclAllReduce(f, f, big, ncclFloat, ncclSum, comm, NULL);
	for (size_t i = 0; i < big; i++)
		fails += f[i] != (float)(n * (n + 1) / 2) * (float)(i % 7);
	dv[0] = rank; dv[1] = -rank; dv[2] = rank + 2;
	ncclAllReduce(dv, dv, 1, ncclDouble, ncclMax, comm, NULL);
	ncclAllReduce(dv + 1, dv + 1, 1, ncclDouble, ncclMin, comm, NULL);
	ncclAllReduce(dv + 2, dv + 2, 1, ncclDouble, ncclProd, comm, NULL);
	fails += dv[0] != n - 1 || dv[1] != -(n - 1);
	ll[0] = (long long)rank << 40;
	ncclAllReduce(ll, ll + 1, 1, ncclInt64, ncclSum, comm, NULL);
	fails += ll[1] != ((long long)(n * (n - 1) / 2) << 40);
	for (int i = 0; i < 4; i++)
		rs[i] = rank * 10 + i;
	ncclAllGather(rs, ig, 4, ncclInt32, comm, NULL);
	for (int q = 0; q < n; q++)
		fails += ig[q * 4 + 3] != q * 10 + 3;
	for (int i = 0; i < n * 4; i++)
		ig[i] = i;
	ncclReduceScatter(ig, rs, 4, ncclInt32, ncclSum, comm, NULL);
	fails += rs[1] != n * (rank * 4 + 1);
	for (int i = 0; i < 5; i++)
		bc[i] = rank == 1 % n ? 100 + i : 0;
	ncclBroadcast(bc, bc, 5, ncclInt32, 1 % n, comm, NULL);
	fails += bc[4] != 104;
	/* A ring of send/recv in a group. */
	ncclGroupStart();
	ncclSend(&rank, 1, ncclInt32, (rank + 1) % n, comm, NULL);
	ncclRecv(&ring, 1, ncclInt32, (rank + n - 1) % n, comm, NULL);
	ncclGroupEnd();
	fails += ring != (rank + n - 1) % n;
	ncclCommDestroy(comm);
	free(f);
	free(ig);
	return fails;
}

struct thread_rank {
	ncclUniqueId id;
	int rank, n, fails;
	pthread_t t;
};

static void *nccl_thread(void *arg)
{
	struct thread_rank *tr = arg;

	tr->fails = nccl_rank(tr->id, tr->rank, tr->n);
	return NULL;
}

static void test_nccl(void)
{
	const int n = 4;
	ncclUniqueId id;
	struct thread_rank tr[4];
	ncclComm_t comms[3];
	int v[3] = { 1, 2, 3 }, status, fails = 0;
	pid_t pids[3];

	/* Ranks as processes. */
	ncclGetUniqueId(&id);
	for (int r = 1; r < n; r++) {
		pids[r - 1] = fork();
		if (pids[r - 1] == 0)
			_exit(nccl_rank(id, r, n) ? 1 : 0);
	}
	fails = nccl_rank(id, 0, n);
	for (int r = 1; r < n; r++) {
		waitpid(pids[r - 1], &status, 0);
		fails += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	CHECK(fails == 0, "NCCL across processes: %d failures", fails);

	/* Ranks as threads. */
	ncclGetUniqueId(&id);
	for (int r = 0; r < n; r++) {
		tr[r] = (struct thread_rank){ .id = id, .rank = r, .n = n };
		pthread_create(&tr[r].t, NULL, nccl_thread, &tr[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(tr[r].t, NULL);
		CHECK(tr[r].fails == 0, "NCCL thread rank %d: %d failures", r, tr[r].fails);
	}

	/* One thread, three ranks. */
	CHECK(ncclCommInitAll(comms, 3, NULL) == ncclSuccess, "ncclCommInitAll");
	ncclGroupStart();
	for (int r = 0; r < 3; r++)
		ncclAllReduce(&v[r], &v[r], 1, ncclInt32, ncclSum, comms[r], NULL);
	CHECK(ncclGroupEnd() == ncclSuccess && v[0] == 6 && v[1] == 6 && v[2] == 6, "grouped all-reduce %d %d %d",
	      v[0], v[1], v[2]);
	for (int r = 0; r < 3; r++)
		ncclCommDestroy(comms[r]);
	printf("nccl: done\n");
}

static void test_verbs(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *src_mr, *dst_mr;
	struct ibv_port_attr port;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .cap = { 4, 4, 1, 1, 0 } };
	struct ibv_qp_attr a = { 0 };
	char src[64] = "rdma payload", dst[64] = { 0 };
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int n = 0, got;

	list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "device list");
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	CHECK(ctx && ibv_query_port(ctx, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE, "port");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	src_mr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	dst_mr = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	a.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "INIT");
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = qp->qp_num;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN) == 0, "RTR");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTS");
	sge = (struct ibv_sge){ (uintptr_t)src, sizeof(src), src_mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = (uintptr_t)dst, .rkey = dst_mr->rkey } };
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post_send");
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && strcmp(dst, src) == 0, "RDMA write");
	wr.wr.rdma.rkey = dst_mr->rkey + 100;
	ibv_post_send(qp, &wr, &bad);
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey: %s", ibv_wc_status_str(wc.status));
	ibv_destroy_qp(qp);
	ibv_dereg_mr(src_mr);
	ibv_dereg_mr(dst_mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("verbs: done\n");
}

int main(void)
{
	test_cudart();
	test_driver();
	test_nccl();
	test_verbs();
	printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
	return failures ? 1 : 0;
}
