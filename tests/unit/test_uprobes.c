/* SPDX-License-Identifier: MIT */
/*
 * injector/collect/uprobe_decode.c: records of the eBPF-only method (raw x86-64 argument words)
 * into the events libaiprof.so writes, and the ABI constants bpf/gpuprobes.h relies on.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

#include "bpf/gpuprobes.h"
#include "event.h"
#include "injector/model/profile.h"
#include "injector/attach/session.h"
#include "injector/collect/uprobes.h"
#include "injector/model/names.h"

#define JUNK 0xdeadbeef00000000ULL  /* what a 32-bit argument's upper half may hold */

struct fx {
	struct uprobe_decoder *d;
	struct event_store store;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || uprobe_decoder__new(&f->d) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	uprobe_decoder__free(f->d);
	event_store__clear(&f->store);
	free(f);
	return 0;
}

static struct gp_rec rec(uint16_t fn)
{
	struct gp_rec r;

	memset(&r, 0, sizeof(r));
	r.fn = fn;
	r.ts = 1000000;
	r.dur = 2500;
	r.pid = 4242;
	r.tid = 4243;
	r.ns_pid = 1;
	r.ns_tid = 7;
	r.flags = GP_REC_F_ARGS;
	return r;
}

/* Converts r and returns the last event added (the one the record is about). */
static const struct aiprof_event *conv(struct fx *f, const struct gp_rec *r, int want)
{
	assert_int_equal(uprobe_decoder__convert(f->d, r, &f->store), want);
	return want ? &f->store.v[f->store.n - 1] : NULL;
}

/* nvcc 13's <<<>>>: a kernel handle, named by the stub that called (the return address) */
static void test_launch_by_handle(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cudaLaunchKernelByHandle);
	const struct aiprof_event *e;

	r.arg[0] = 0x55550123000;                   /* cudaKernel_t: the driver's, means nothing */
	r.arg[1] = 64 | (1ULL << 32);
	r.arg[2] = JUNK | 1;
	r.arg[3] = 128 | (1ULL << 32);
	r.arg[4] = JUNK | 1;
	r.rd[0] = 0x401200;                         /* return address into the stub */
	r.flags |= GP_REC_F_RD0;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_cudaLaunchKernel);
	assert_int_equal(e->u.launch.func, 0x401200);
	assert_true(e->flags & AIPROF_EV_F_LAUNCH_CALLER);
	assert_int_equal(e->u.launch.grid[0], 64);
	assert_int_equal(e->u.launch.block[0], 128);

	/* no return address read: no name made up */
	r.flags &= ~GP_REC_F_RD0;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.launch.func, 0);
}

static void test_runtime_launch(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cudaLaunchKernel);
	const struct aiprof_event *e;

	r.arg[0] = 0x401136;                        /* host stub */
	r.arg[1] = 8192 | (4ULL << 32);             /* grid.x | grid.y << 32 */
	r.arg[2] = JUNK | 1;                        /* grid.z, upper half is padding */
	r.arg[3] = 256 | (1ULL << 32);
	r.arg[4] = JUNK | 1;
	r.arg[5] = 0x7ffc0000;                      /* void **args */
	r.arg[6] = JUNK | 512;                      /* size_t shmem, truncated as the library does */
	r.arg[7] = 0x55550000bc0;                   /* stream */
	r.ret = JUNK | 0;                           /* cudaSuccess in eax */
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_CUDA_LAUNCH);
	assert_int_equal(e->api, AIPROF_API_cudaLaunchKernel);
	assert_int_equal(e->u.launch.func, 0x401136);
	assert_int_equal(e->u.launch.grid[0], 8192);
	assert_int_equal(e->u.launch.grid[1], 4);
	assert_int_equal(e->u.launch.grid[2], 1);
	assert_int_equal(e->u.launch.block[0], 256);
	assert_int_equal(e->u.launch.block[1], 1);
	assert_int_equal(e->u.launch.block[2], 1);
	assert_int_equal(e->u.launch.shmem, 512);
	assert_int_equal(e->u.launch.stream, 0x55550000bc0);
	assert_int_equal(e->u.launch.name_id, 0);   /* the timeline symbolises the stub */
	assert_int_equal(e->u.launch.result, 0);
	/* ids as the target sees them, like the library's */
	assert_int_equal(e->tid, 7);
	assert_int_equal(e->pid, 1);
	assert_int_equal(e->ts, 1000000);
	assert_int_equal(e->dur, 2500);

	/* stack words that could not be read are not made up */
	r.flags = 0;
	r.ns_tid = r.ns_pid = 0;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.launch.shmem, 0);
	assert_int_equal(e->u.launch.stream, 0);
	assert_int_equal(e->tid, 4243);
	assert_int_equal(e->pid, 4242);
}

static void test_driver_launch_labels(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cuLaunchKernel);
	const struct aiprof_event *e;
	const char *name;
	uint32_t first;

	r.arg[0] = 0x7fa4c00020a0;                  /* CUfunction */
	r.arg[1] = JUNK | 2048;
	r.arg[2] = 4;
	r.arg[3] = 1;
	r.arg[4] = 256;
	r.arg[5] = 1;
	r.arg[6] = JUNK | 1;                        /* blockDimZ on the stack */
	r.arg[7] = 64;                              /* sharedMemBytes */
	r.arg[8] = 0xabc0;                          /* hStream */
	r.ret = 0;
	e = conv(f, &r, 2);                         /* the label's string first */
	assert_int_equal(f->store.n, 1);            /* strings are reassembled, not stored */
	assert_int_equal(e->api, AIPROF_API_cuLaunchKernel);
	assert_int_equal(e->u.launch.grid[0], 2048);
	assert_int_equal(e->u.launch.grid[1], 4);
	assert_int_equal(e->u.launch.block[2], 1);
	assert_int_equal(e->u.launch.shmem, 64);
	assert_int_equal(e->u.launch.stream, 0xabc0);
	first = e->u.launch.name_id;
	assert_int_not_equal(first, 0);
	name = event_store__string(&f->store, first);
	assert_non_null(name);
	assert_string_equal(name, "[CUfunction 0x7fa4c00020a0]");

	e = conv(f, &r, 1);                         /* known: no second string */
	assert_int_equal(e->u.launch.name_id, first);

	r.arg[0] = 0x7fa4b8003a10;
	e = conv(f, &r, 2);
	assert_int_not_equal(e->u.launch.name_id, first);

	/* many functions: the table grows and keeps its answers */
	for (uint64_t fn = 1; fn <= 3000; fn++) {
		r.arg[0] = 0x100000 + fn * 16;
		conv(f, &r, 2);
	}
	r.arg[0] = 0x7fa4c00020a0;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.launch.name_id, first);
	r.arg[0] = 0x100000 + 1234 * 16;
	e = conv(f, &r, 1);
	assert_string_equal(event_store__string(&f->store, e->u.launch.name_id),
			    "[CUfunction 0x104d20]");
}

static void test_copies(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cudaMemcpy);
	const struct aiprof_event *e;

	r.arg[0] = 0x900000000;                     /* device */
	r.arg[1] = 0x1800;                          /* host */
	r.arg[2] = 1 << 20;
	r.arg[3] = JUNK | 1;                        /* cudaMemcpyHostToDevice */
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_CUDA_MEMCPY);
	assert_int_equal(e->api, AIPROF_API_cudaMemcpy);
	assert_int_equal(e->u.memcpy.bytes, 1 << 20);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_H2D);
	assert_int_equal(e->u.memcpy.flags, 0);      /* pinned or pageable: unknown */
	assert_string_equal(memcpy_host_memory(&e->u.memcpy), "unknown");

	/* a pinned allocation seen in the window makes copies from it known-pinned */
	{
		struct gp_rec a = rec(GP_FN_cudaMallocHost);

		a.arg[0] = 0x7ffc1000;              /* void **ptr */
		a.arg[1] = 0x2000;
		a.rd[0] = 0x1000;                   /* *ptr at return */
		a.flags |= GP_REC_F_RD0;
		e = conv(f, &a, 1);
		assert_int_equal(e->type, AIPROF_EV_CUDA_ALLOC);
		assert_int_equal(e->api, AIPROF_API_cudaMallocHost);
		assert_int_equal(e->u.mem.ptr, 0x1000);
		assert_int_equal(e->u.mem.bytes, 0x2000);
		assert_int_equal(e->u.mem.kind, AIPROF_MEM_HOST_PINNED);
	}
	e = conv(f, &r, 1);
	assert_int_equal(e->u.memcpy.flags, AIPROF_MEMCPY_F_HOST_KNOWN | AIPROF_MEMCPY_F_HOST_PINNED);
	r.arg[1] = 0x3000;                          /* just past the range */
	e = conv(f, &r, 1);
	assert_int_equal(e->u.memcpy.flags, 0);

	/* DtoH looks at dst; async carries the stream */
	r = rec(GP_FN_cudaMemcpyAsync);
	r.arg[0] = 0x1ff0;
	r.arg[1] = 0x900000000;
	r.arg[2] = 16;
	r.arg[3] = 2;
	r.arg[4] = 0xbc0;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_cudaMemcpyAsync);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_D2H);
	assert_int_equal(e->u.memcpy.stream, 0xbc0);
	assert_int_equal(e->u.memcpy.flags, AIPROF_MEMCPY_F_ASYNC | AIPROF_MEMCPY_F_HOST_KNOWN |
			 AIPROF_MEMCPY_F_HOST_PINNED);

	/* freed: unknown again */
	{
		struct gp_rec fr = rec(GP_FN_cudaFreeHost);

		fr.arg[0] = 0x1000;
		e = conv(f, &fr, 1);
		assert_int_equal(e->type, AIPROF_EV_CUDA_FREE);
	}
	r = rec(GP_FN_cudaMemcpy);
	r.arg[1] = 0x1800;
	r.arg[3] = 1;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.memcpy.flags, 0);

	/* a failed cudaHostRegister pins nothing */
	{
		struct gp_rec hr = rec(GP_FN_cudaHostRegister);

		hr.arg[0] = 0x1000;
		hr.arg[1] = 0x1000;
		hr.ret = 1;                         /* cudaErrorInvalidValue */
		e = conv(f, &hr, 1);
		assert_int_equal(e->u.mem.result, 1);
		assert_int_equal(e->u.mem.kind, AIPROF_MEM_HOST_REGISTERED);
	}
	e = conv(f, &r, 1);
	assert_int_equal(e->u.memcpy.flags, 0);

	/* driver copies: direction from the function, Default where it has none */
	r = rec(GP_FN_cuMemcpyHtoDAsync_v2);
	r.arg[0] = 0x900000000;
	r.arg[1] = 0x5000;
	r.arg[2] = 4096;
	r.arg[3] = 0xbc0;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_cuMemcpyHtoDAsync_v2);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_H2D);
	assert_int_equal(e->u.memcpy.stream, 0xbc0);
	assert_true(e->u.memcpy.flags & AIPROF_MEMCPY_F_ASYNC);
	r.fn = GP_FN_cuMemcpy;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_DEFAULT);
	assert_int_equal(e->u.memcpy.stream, 0);

	/* memsets are device-to-device, bytes from the third argument */
	r = rec(GP_FN_cudaMemsetAsync);
	r.arg[0] = 0x900000000;
	r.arg[1] = JUNK;
	r.arg[2] = 77;
	r.arg[3] = 0xbc0;
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_CUDA_MEMSET);
	assert_int_equal(e->u.memcpy.bytes, 77);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_D2D);
	assert_int_equal(e->u.memcpy.stream, 0xbc0);
}

static void test_allocations(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cudaMalloc);
	const struct aiprof_event *e;

	r.arg[0] = 0x7ffc0000;
	r.arg[1] = 1 << 20;
	r.rd[0] = 0x900000000;
	r.flags |= GP_REC_F_RD0;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.mem.ptr, 0x900000000);
	assert_int_equal(e->u.mem.bytes, 1 << 20);
	assert_int_equal(e->u.mem.kind, AIPROF_MEM_DEVICE);

	r.ret = 2;                                  /* cudaErrorMemoryAllocation */
	e = conv(f, &r, 1);
	assert_int_equal(e->u.mem.ptr, 0);          /* *devPtr means nothing on failure */
	assert_int_equal(e->u.mem.result, 2);

	r.ret = 0;
	r.flags &= ~GP_REC_F_RD0;                   /* the out-pointer could not be read */
	e = conv(f, &r, 1);
	assert_int_equal(e->u.mem.ptr, 0);

	r = rec(GP_FN_cuMemFree_v2);
	r.arg[0] = 0x900000000;
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_CUDA_FREE);
	assert_int_equal(e->api, AIPROF_API_cuMemFree_v2);
	assert_int_equal(e->u.mem.ptr, 0x900000000);
}

static void test_sync(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_cudaDeviceSynchronize);
	const struct aiprof_event *e;

	r.arg[0] = 0x1234;                          /* whatever rdi held: not an argument */
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_CUDA_SYNC);
	assert_int_equal(e->u.sync.kind, AIPROF_SYNC_DEVICE);
	assert_int_equal(e->u.sync.handle, 0);
	r.fn = GP_FN_cuCtxSynchronize_v2;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_cuCtxSynchronize);
	assert_int_equal(e->u.sync.kind, AIPROF_SYNC_CTX);
	assert_int_equal(e->u.sync.handle, 0x1234);
	r.fn = GP_FN_cudaStreamSynchronize;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.sync.kind, AIPROF_SYNC_STREAM);
	assert_int_equal(e->u.sync.handle, 0x1234);
}

static void test_nccl(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_ncclAllReduce);
	const struct aiprof_event *e;

	r.arg[2] = 65536;                           /* count */
	r.arg[3] = JUNK | 7;                        /* ncclFloat32 */
	r.arg[4] = JUNK | 0;                        /* ncclSum */
	r.arg[5] = 0xc0111;                         /* comm */
	r.arg[6] = 0xbc0;                           /* stream, on the stack */
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_NCCL_COLL);
	assert_int_equal(e->api, AIPROF_API_ncclAllReduce);
	assert_int_equal(e->u.nccl.count, 65536);
	assert_int_equal(e->u.nccl.bytes, 65536 * 4);
	assert_int_equal(e->u.nccl.datatype, 7);
	assert_int_equal(e->u.nccl.redop, 0);
	assert_int_equal(e->u.nccl.peer, -1);
	assert_int_equal(e->u.nccl.comm, 0xc0111);
	assert_int_equal(e->u.nccl.stream, 0xbc0);
	assert_int_equal(e->u.nccl.rank, -1);       /* communicator created before the window */
	assert_int_equal(e->u.nccl.nranks, -1);
	assert_int_equal(uprobe_decoder__unknown_rank(f->d), 1);

	/* ncclCommInitRank(comm *, nranks, id by value on the stack, rank) */
	{
		struct gp_rec in = rec(GP_FN_ncclCommInitRank);

		in.arg[0] = 0x7ffc0010;
		in.arg[1] = JUNK | 4;
		in.arg[2] = JUNK | 2;
		in.rd[0] = 0xc0111;
		in.flags |= GP_REC_F_RD0;
		e = conv(f, &in, 1);
		assert_int_equal(e->type, AIPROF_EV_NCCL_INIT);
		assert_int_equal(e->api, AIPROF_API_ncclCommInitRank);
		assert_int_equal(e->u.nccl.comm, 0xc0111);
		assert_int_equal(e->u.nccl.rank, 2);
		assert_int_equal(e->u.nccl.nranks, 4);
		assert_int_equal(e->u.nccl.datatype, -1);
	}
	e = conv(f, &r, 1);
	assert_int_equal(e->u.nccl.rank, 2);
	assert_int_equal(e->u.nccl.nranks, 4);
	assert_int_equal(uprobe_decoder__unknown_rank(f->d), 1);

	/* ncclReduce(sbuf, rbuf, count, dt, op, root | comm, stream) */
	r = rec(GP_FN_ncclReduce);
	r.arg[2] = 10;
	r.arg[3] = 9;                               /* bfloat16 */
	r.arg[4] = 2;                               /* max */
	r.arg[5] = 3;                               /* root */
	r.arg[6] = 0xc0111;
	r.arg[7] = 0xbc1;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.nccl.bytes, 20);
	assert_int_equal(e->u.nccl.peer, 3);
	assert_int_equal(e->u.nccl.comm, 0xc0111);
	assert_int_equal(e->u.nccl.stream, 0xbc1);
	assert_int_equal(e->u.nccl.rank, 2);

	/* ncclSend(sbuf, count, dt, peer, comm, stream) */
	r = rec(GP_FN_ncclSend);
	r.arg[1] = 100;
	r.arg[2] = 0;                               /* int8 */
	r.arg[3] = 1;
	r.arg[4] = 0xc0111;
	r.arg[5] = 0xbc2;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_ncclSend);
	assert_int_equal(e->u.nccl.bytes, 100);
	assert_int_equal(e->u.nccl.peer, 1);
	assert_int_equal(e->u.nccl.redop, -1);
	assert_int_equal(e->u.nccl.stream, 0xbc2);

	/* destroyed: no event, and the address no longer names that communicator */
	r = rec(GP_FN_ncclCommDestroy);
	r.arg[0] = 0xc0111;
	assert_int_equal(uprobe_decoder__convert(f->d, &r, &f->store), 0);
	r = rec(GP_FN_ncclBroadcast);               /* (sbuf, rbuf, count, dt, root, comm | stream) */
	r.arg[2] = 1;
	r.arg[3] = 8;                               /* float64 */
	r.arg[4] = 0;
	r.arg[5] = 0xc0111;
	r.arg[6] = 0xbc3;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.nccl.rank, -1);
	assert_int_equal(e->u.nccl.peer, 0);
	assert_int_equal(e->u.nccl.bytes, 8);

	/* an unknown datatype gives 0 bytes rather than a guess */
	r.arg[3] = 99;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.nccl.bytes, 0);

	r = rec(GP_FN_ncclGroupEnd);
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_NCCL_GROUP);
	assert_int_equal(e->u.nccl.op, AIPROF_NCCL_GROUP_END);
	assert_int_equal(e->u.nccl.rank, -1);
}

static void test_verbs(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_ibv_reg_mr_iova2);
	const struct aiprof_event *e;

	r.arg[1] = 0x5000;
	r.arg[2] = 4096;
	r.arg[3] = 0x5000;                          /* iova */
	r.arg[4] = JUNK | 7;                        /* access */
	r.ret = 0x6000;                             /* struct ibv_mr * */
	e = conv(f, &r, 1);
	assert_int_equal(e->type, AIPROF_EV_IBV);
	assert_int_equal(e->api, AIPROF_API_ibv_reg_mr);
	assert_int_equal(e->u.ibv.handle, 0x6000);
	assert_int_equal(e->u.ibv.addr, 0x5000);
	assert_int_equal(e->u.ibv.length, 4096);
	assert_int_equal(e->u.ibv.attr, 7);
	assert_int_equal(e->u.ibv.result, 0);
	r.fn = GP_FN_ibv_reg_mr;                    /* (pd, addr, length, access) */
	r.arg[3] = 1;
	r.ret = 0;                                  /* NULL: failed, errno unknown */
	e = conv(f, &r, 1);
	assert_int_equal(e->u.ibv.attr, 1);
	assert_int_equal(e->u.ibv.result, -1);

	r = rec(GP_FN_ibv_dereg_mr);
	r.arg[0] = 0x6000;
	r.rd[0] = 0x5000;
	r.rd[1] = 4096;
	r.flags |= GP_REC_F_RD0 | GP_REC_F_RD1;
	e = conv(f, &r, 1);
	assert_int_equal(e->api, AIPROF_API_ibv_dereg_mr);
	assert_int_equal(e->u.ibv.addr, 0x5000);
	assert_int_equal(e->u.ibv.length, 4096);

	r = rec(GP_FN_ibv_modify_qp);
	r.arg[0] = 0x7000;
	r.arg[1] = 0x7100;
	r.arg[2] = IBV_QP_STATE | IBV_QP_PORT;
	r.rd[0] = 0x11;
	r.rd[1] = IBV_QPS_RTS;
	r.flags |= GP_REC_F_RD0 | GP_REC_F_RD1;
	e = conv(f, &r, 1);
	assert_int_equal(e->u.ibv.qp_num, 0x11);
	assert_int_equal(e->u.ibv.attr, IBV_QP_STATE | IBV_QP_PORT);
	assert_int_equal(e->u.ibv.state, IBV_QPS_RTS);
	r.arg[2] = IBV_QP_PORT;                     /* the state was not changed */
	e = conv(f, &r, 1);
	assert_int_equal(e->u.ibv.state, UINT32_MAX);
}

static void test_bad_records(void **state)
{
	struct fx *f = *state;
	struct gp_rec r = rec(GP_FN_NONE);

	assert_int_equal(uprobe_decoder__convert(f->d, &r, &f->store), -EINVAL);
	r.fn = GP_FN__MAX;
	assert_int_equal(uprobe_decoder__convert(f->d, &r, &f->store), -EINVAL);
	r.fn = 0xffff;
	assert_int_equal(uprobe_decoder__convert(f->d, &r, &f->store), -EINVAL);
	assert_int_equal(f->store.n, 0);
}

/* bpf/gpuprobes.h reads these fields of libibverbs' structs from the target's memory. */
static void test_verbs_abi(void **state)
{
	(void)state;
	assert_int_equal(offsetof(struct ibv_mr, addr), GP_IBV_MR_ADDR_OFF);
	assert_int_equal(offsetof(struct ibv_mr, length), GP_IBV_MR_LENGTH_OFF);
	assert_int_equal(offsetof(struct ibv_qp, qp_num), GP_IBV_QP_QP_NUM_OFF);
	assert_int_equal(offsetof(struct ibv_qp_attr, qp_state), GP_IBV_QP_ATTR_STATE_OFF);
	assert_int_equal(sizeof(((struct ibv_qp *)0)->qp_num), 4);
	assert_int_equal(sizeof(enum ibv_qp_state), 4);
}

static void test_limits(void **state)
{
	size_t n = 0;

	(void)state;
	while (uprobe_session__limit(n))
		n++;
	assert_true(n >= 5);
	assert_non_null(strstr(uprobe_session__limits(), "cuFuncGetName"));
	assert_non_null(strstr(uprobe_session__limits(), "ibv_post_send"));
	assert_non_null(strstr(uprobe_session__limits(), "CUPTI"));
	assert_non_null(strstr(uprobe_session__limits(), "; "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_runtime_launch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_launch_by_handle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_driver_launch_labels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_allocations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nccl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verbs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_records, setup, teardown),
		cmocka_unit_test(test_verbs_abi),
		cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
