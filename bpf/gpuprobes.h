/* SPDX-License-Identifier: MIT */
/*
 * gpuprobes: the eBPF-only way to see CUDA runtime/driver, NCCL and ibverbs calls
 * (`aiprof profile --method ebpf`). What the kernel side (gpuprobes.bpf.c) and user space
 * (injector/collect/uprobes.c) share: the attach cookie that tells the one entry program and the
 * one return program which function they are on, and the record the return program
 * writes to the ring buffer. Fixed-width types only; sizes are asserted on both sides.
 *
 * The kernel side stays generic: it copies raw argument words (x86-64 SysV: six registers,
 * then the stack) and reads the few words of target memory a record needs. Which word is
 * what is user space's business (uprobe_decoder__convert()).
 */
#ifndef AIPROF_GPUPROBES_H
#define AIPROF_GPUPROBES_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Which probed function produced a record. Aliases (_ptsz/_ptds, the _v2 of
 * cuCtxSynchronize) share the id of the function whose arguments they take. */
enum gp_fn {
	GP_FN_NONE = 0,
	/* CUDA runtime */
	GP_FN_cudaLaunchKernel, GP_FN_cudaMemcpy, GP_FN_cudaMemcpyAsync, GP_FN_cudaMemset,
	GP_FN_cudaMemsetAsync, GP_FN_cudaMalloc, GP_FN_cudaFree, GP_FN_cudaMallocHost,
	GP_FN_cudaHostAlloc, GP_FN_cudaFreeHost, GP_FN_cudaHostRegister, GP_FN_cudaHostUnregister,
	GP_FN_cudaStreamSynchronize, GP_FN_cudaDeviceSynchronize, GP_FN_cudaEventSynchronize,
	GP_FN_cudaLaunchKernelByHandle,   /* __cudaLaunchKernel: nvcc 13's <<<>>> */
	/* CUDA driver */
	GP_FN_cuLaunchKernel, GP_FN_cuMemAlloc_v2, GP_FN_cuMemFree_v2, GP_FN_cuMemcpy,
	GP_FN_cuMemcpyAsync, GP_FN_cuMemcpyHtoD_v2, GP_FN_cuMemcpyDtoH_v2, GP_FN_cuMemcpyDtoD_v2,
	GP_FN_cuMemcpyHtoDAsync_v2, GP_FN_cuMemcpyDtoHAsync_v2, GP_FN_cuMemcpyDtoDAsync_v2,
	GP_FN_cuCtxSynchronize, GP_FN_cuCtxSynchronize_v2, GP_FN_cuStreamSynchronize,
	/* NCCL */
	GP_FN_ncclCommInitRank, GP_FN_ncclCommInitRankConfig, GP_FN_ncclCommDestroy,
	GP_FN_ncclCommAbort, GP_FN_ncclAllReduce, GP_FN_ncclAllGather, GP_FN_ncclReduceScatter,
	GP_FN_ncclBroadcast, GP_FN_ncclReduce, GP_FN_ncclSend, GP_FN_ncclRecv,
	GP_FN_ncclGroupStart, GP_FN_ncclGroupEnd,
	/* ibverbs (control path only: the data path is inline calls into the provider) */
	GP_FN_ibv_reg_mr, GP_FN_ibv_reg_mr_iova, GP_FN_ibv_reg_mr_iova2, GP_FN_ibv_dereg_mr,
	GP_FN_ibv_modify_qp,
	GP_FN__MAX
};

/* Target memory a record needs besides the argument registers (into gp_rec.rd[]). */
enum gp_read {
	GP_READ_NONE = 0,
	GP_READ_OUT_PTR,   /* at return: rd[0] = *(u64 *)arg[0] (cudaMalloc's *devPtr, *comm) */
	GP_READ_IBV_MR,    /* at entry: rd[0] = mr->addr, rd[1] = mr->length (before the free) */
	GP_READ_IBV_QP,    /* at entry: rd[0] = qp->qp_num, rd[1] = attr->qp_state */
	GP_READ_CALLER,    /* at entry: rd[0] = the return address (where the caller is) */
};

/* libibverbs ABI (verbs.h, stable since rdma-core v13); tests/unit/test_uprobes.c checks
 * them against the installed header. */
#define GP_IBV_MR_ADDR_OFF     16u
#define GP_IBV_MR_LENGTH_OFF   24u
#define GP_IBV_QP_QP_NUM_OFF   52u
#define GP_IBV_QP_ATTR_STATE_OFF 0u

#define GP_REG_ARGS   6u   /* rdi rsi rdx rcx r8 r9 */
#define GP_STACK_ARGS 3u   /* most eightbytes any probed function passes on the stack */
#define GP_ARGS       (GP_REG_ARGS + GP_STACK_ARGS)

/*
 * The bpf_cookie of each attachment (entry and return alike):
 *   bits  0..15  enum gp_fn
 *   bits 16..19  stack argument eightbytes to copy (0..GP_STACK_ARGS)
 *   bits 20..23  enum gp_read
 */
#define GP_COOKIE(fn, nstack, rd) \
	((__u64)(fn) | ((__u64)(nstack) << 16) | ((__u64)(rd) << 20))
#define GP_COOKIE_FN(c)     ((__u32)((c) & 0xffff))
#define GP_COOKIE_NSTACK(c) ((__u32)(((c) >> 16) & 0xf))
#define GP_COOKIE_READ(c)   ((__u32)(((c) >> 20) & 0xf))

#define GP_REC_F_RD0  (1u << 0)  /* rd[0] was read */
#define GP_REC_F_RD1  (1u << 1)  /* rd[1] was read */
#define GP_REC_F_ARGS (1u << 2)  /* every stack argument word was read */

/* One completed call of a probed function in the target. */
struct gp_rec {
	__u64 ts;           /* CLOCK_MONOTONIC ns at entry (bpf_ktime_get_ns) */
	__u64 dur;          /* ns from entry to return */
	__u32 pid, tid;     /* as the host sees them */
	__u32 ns_pid, ns_tid; /* in the target's pid namespace; 0 if the kernel could not say */
	__u16 fn;           /* enum gp_fn */
	__u16 flags;        /* GP_REC_F_* */
	__u32 pad;
	__u64 ret;          /* rax at return */
	__u64 arg[GP_ARGS]; /* argument eightbytes: registers, then the stack above the return
			     * address; words beyond the function's arguments are 0 */
	__u64 rd[2];        /* enum gp_read */
};

_Static_assert(sizeof(struct gp_rec) == 136, "struct gp_rec drifted between BPF and user space");

#endif
