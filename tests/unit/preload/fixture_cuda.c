/* SPDX-License-Identifier: MIT */
/* libfixture_cuda.so: see fixture.h. Not a CUDA simulator, just a call recorder. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <infiniband/verbs.h>
#include <nccl.h>

#include "fixture.h"

struct fx_state fx;

#define CALLED(name) __atomic_fetch_add(&fx.calls[FX_##name], 1, __ATOMIC_RELAXED)

static char device_arena[1 << 20];
static size_t device_used;

struct pin {
	uintptr_t p;
	size_t len;
};
static struct pin pins[64];
static int npins;

int fixture_is_device(const void *p)
{
	return (const char *)p >= device_arena && (const char *)p < device_arena + sizeof(device_arena);
}

void fixture_driver_pin(void *p, size_t len)
{
	if (npins < 64)
		pins[npins++] = (struct pin){ (uintptr_t)p, len };
}

/* ---- runtime ------------------------------------------------------------------------- */

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			     size_t shmem, cudaStream_t stream)
{
	CALLED(cudaLaunchKernel);
	fx.last_func = func;
	errno = FX_ERRNO;
	return (cudaError_t)fx.ret;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	CALLED(cudaMemcpy);
	errno = FX_ERRNO;
	return (cudaError_t)fx.ret;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	CALLED(cudaMemcpyAsync);
	errno = FX_ERRNO;
	return (cudaError_t)fx.ret;
}

cudaError_t cudaMemset(void *dst, int value, size_t n)
{
	CALLED(cudaMemset);
	return (cudaError_t)fx.ret;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	CALLED(cudaMalloc);
	size = (size + 255) & ~(size_t)255;
	if (device_used + size > sizeof(device_arena))
		return cudaErrorMemoryAllocation;
	*p = device_arena + device_used;
	device_used += size;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	CALLED(cudaFree);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
	CALLED(cudaMallocHost);
	*p = malloc(size);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	CALLED(cudaHostAlloc);
	*p = malloc(size);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
	CALLED(cudaFreeHost);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags)
{
	CALLED(cudaHostRegister);
	return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
	CALLED(cudaHostUnregister);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	CALLED(cudaStreamSynchronize);
	return (cudaError_t)fx.ret;
}

cudaError_t cudaDeviceSynchronize(void)
{
	CALLED(cudaDeviceSynchronize);
	return (cudaError_t)fx.ret;
}

/* Knows fake device memory and driver-pinned ranges only: everything else is pageable. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	CALLED(cudaPointerGetAttributes);
	memset(a, 0, sizeof(*a));
	a->type = cudaMemoryTypeUnregistered;
	if (fixture_is_device(p)) {
		a->type = cudaMemoryTypeDevice;
		return cudaSuccess;
	}
	for (int i = 0; i < npins; i++)
		if ((uintptr_t)p >= pins[i].p && (uintptr_t)p - pins[i].p < pins[i].len)
			a->type = cudaMemoryTypeHost;
	errno = FX_ERRNO;       /* the hook must hide this from its caller */
	return cudaSuccess;
}

/* ---- driver --------------------------------------------------------------------------- */

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			void **extra)
{
	CALLED(cuLaunchKernel);
	fx.last_func = f;
	return (CUresult)fx.ret;
}

CUresult cuFuncGetName(const char **name, CUfunction f)
{
	CALLED(cuFuncGetName);
	if (!f || f->magic != FX_FUNC_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = f->name;
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	CALLED(cuMemcpyHtoD_v2);
	return (CUresult)fx.ret;
}

CUresult cuDeviceGetCount(int *n)
{
	CALLED(cuDeviceGetCount);
	*n = 0;
	return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	if (strcmp(symbol, "cuLaunchKernel") == 0)
		*pfn = (void *)cuLaunchKernel;
	else if (strcmp(symbol, "cuDeviceGetCount") == 0)
		*pfn = (void *)cuDeviceGetCount;
	else
		return CUDA_ERROR_NOT_FOUND;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

/* ---- NCCL ----------------------------------------------------------------------------- */

struct ncclComm {
	int rank, nranks;
};

void *fixture_nccl_comm(int rank, int nranks)
{
	struct ncclComm *c = malloc(sizeof(*c));

	c->rank = rank;
	c->nranks = nranks;
	return c;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	CALLED(ncclCommInitRank);
	*comm = fixture_nccl_comm(rank, nranks);
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	CALLED(ncclCommDestroy);
	free(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	CALLED(ncclCommUserRank);
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	CALLED(ncclCommCount);
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	CALLED(ncclAllReduce);
	return (ncclResult_t)fx.ret;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t sendcount, ncclDataType_t dt,
			   ncclComm_t comm, cudaStream_t stream)
{
	CALLED(ncclAllGather);
	return (ncclResult_t)fx.ret;
}

ncclResult_t ncclGroupStart(void)
{
	CALLED(ncclGroupStart);
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	CALLED(ncclGroupEnd);
	return ncclSuccess;
}

/* ---- ibverbs (verbs.h makes some of these macros: parenthesised names) ------------------- */

struct ibv_context *(ibv_open_device)(struct ibv_device *dev)
{
	CALLED(ibv_open_device);
	return NULL;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));

	CALLED(ibv_reg_mr);
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->lkey = 0x1234;
	return mr;
}

int (ibv_dereg_mr)(struct ibv_mr *mr)
{
	CALLED(ibv_dereg_mr);
	free(mr);
	return 0;
}

int (ibv_modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	CALLED(ibv_modify_qp);
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return fx.ret;
}
