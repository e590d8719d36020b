/* SPDX-License-Identifier: MIT */
/* Names the artifacts use for hooked functions, copy kinds and NCCL enums. */
#include <stddef.h>
#include "event.h"
#include "names.h"

#define API(n) [AIPROF_API_##n] = #n

static const char *const api_names[AIPROF_API__MAX] = {
	[AIPROF_API_NONE] = "unknown",
	API(cudaLaunchKernel), API(cudaMemcpy), API(cudaMemcpyAsync), API(cudaMemset),
	API(cudaMemsetAsync), API(cudaMalloc), API(cudaFree), API(cudaMallocHost),
	API(cudaHostAlloc), API(cudaFreeHost), API(cudaHostRegister), API(cudaHostUnregister),
	API(cudaStreamSynchronize), API(cudaDeviceSynchronize), API(cudaEventSynchronize),
	API(cuLaunchKernel), API(cuMemAlloc_v2), API(cuMemFree_v2), API(cuMemcpy),
	API(cuMemcpyHtoD_v2), API(cuMemcpyDtoH_v2), API(cuMemcpyDtoD_v2), API(cuMemcpyAsync),
	API(cuMemcpyHtoDAsync_v2), API(cuMemcpyDtoHAsync_v2), API(cuMemcpyDtoDAsync_v2),
	API(cuCtxSynchronize), API(cuStreamSynchronize),
	API(ncclCommInitRank), API(ncclAllReduce), API(ncclAllGather), API(ncclReduceScatter),
	API(ncclBroadcast), API(ncclReduce), API(ncclSend), API(ncclRecv), API(ncclGroupStart),
	API(ncclGroupEnd),
	API(ibv_reg_mr), API(ibv_dereg_mr), API(ibv_modify_qp), API(ibv_post_send),
	API(ibv_post_recv), API(ibv_poll_cq),
	API(gpu_kernel), API(gpu_memcpy),
};

const char *api_name(uint16_t api)
{
	if (api < AIPROF_API__MAX && api_names[api])
		return api_names[api];
	return "unknown";
}

const char *memcpy_kind_name(uint32_t kind)
{
	static const char *const k[] = { "HtoH", "HtoD", "DtoH", "DtoD", "Default" };

	return kind < sizeof(k) / sizeof(k[0]) ? k[kind] : "unknown";
}

const char *nccl_op_name(uint16_t api)
{
	switch (api) {
	case AIPROF_API_ncclAllReduce: return "AllReduce";
	case AIPROF_API_ncclAllGather: return "AllGather";
	case AIPROF_API_ncclReduceScatter: return "ReduceScatter";
	case AIPROF_API_ncclBroadcast: return "Broadcast";
	case AIPROF_API_ncclReduce: return "Reduce";
	case AIPROF_API_ncclSend: return "Send";
	case AIPROF_API_ncclRecv: return "Recv";
	case AIPROF_API_ncclCommInitRank: return "CommInitRank";
	case AIPROF_API_ncclGroupStart: return "GroupStart";
	case AIPROF_API_ncclGroupEnd: return "GroupEnd";
	default: return "unknown";
	}
}

static const struct { const char *name; size_t size; } nccl_types[] = {
	{ "int8", 1 }, { "uint8", 1 }, { "int32", 4 }, { "uint32", 4 }, { "int64", 8 },
	{ "uint64", 8 }, { "float16", 2 }, { "float32", 4 }, { "float64", 8 },
	{ "bfloat16", 2 }, { "float8e4m3", 1 }, { "float8e5m2", 1 },
};

const char *nccl_dtype_name(int32_t dt)
{
	if (dt >= 0 && (size_t)dt < sizeof(nccl_types) / sizeof(nccl_types[0]))
		return nccl_types[dt].name;
	return "unknown";
}

size_t nccl_dtype_size(int32_t dt)
{
	if (dt >= 0 && (size_t)dt < sizeof(nccl_types) / sizeof(nccl_types[0]))
		return nccl_types[dt].size;
	return 0;
}

const char *nccl_redop_name(int32_t op)
{
	static const char *const ops[] = { "sum", "prod", "max", "min", "avg" };

	if (op >= 0 && (size_t)op < sizeof(ops) / sizeof(ops[0]))
		return ops[op];
	return op < 0 ? "none" : "custom";
}

const char *memcpy_host_memory_of(uint32_t kind, uint32_t flags)
{
	if (kind == AIPROF_MEMCPY_D2D)
		return "none";
	if (!(flags & AIPROF_MEMCPY_F_HOST_KNOWN))
		return "unknown";
	return (flags & AIPROF_MEMCPY_F_HOST_PINNED) ? "pinned" : "pageable";
}

const char *memcpy_host_memory(const struct aiprof_ev_memcpy *m)
{
	return memcpy_host_memory_of(m->kind, m->flags);
}
