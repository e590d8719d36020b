/* SPDX-License-Identifier: MIT */
/*
 * libaiprof.so loaded into this process (dlopen, like the injector's remote dlopen):
 * GOT patching, pass-through while idle, exact events while recording, modules loaded
 * later, dlsym / cuGetProcAddress hand-outs, pinned vs pageable copies, NCCL ranks,
 * ibverbs ops wrapping, CUPTI fail-soft, heartbeat, a second copy, fork.
 * The tests share one library instance and run in order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sys/wait.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <infiniband/verbs.h>
#include <nccl.h>

#include "preload/fixture.h"
#include "preload/got.h"
#include "preload/harness.h"

#define MAXEV 4096

static void *g_lib;
static struct aiprof_ring_hdr *g_h;
static struct aiprof_event g_ev[MAXEV];

static uint64_t fx_calls(enum fx_fn f)
{
	return __atomic_load_n(&fx.calls[f], __ATOMIC_RELAXED);
}

static uint32_t my_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

static bool in_lib(const void *p)
{
	return h_same_module(p, dlsym(g_lib, "aiprof_preload_build"));
}

static int group_setup(void **state)
{
	g_lib = h_load_lib();
	if (!g_lib)
		return -1;
	g_h = h_ring();
	if (!g_h)
		return -1;
	return 0;
}

static int test_setup(void **state)
{
	fx.ret = 0;
	h_drain(g_h, g_ev, MAXEV, true);
	return 0;
}

/* ---- lifecycle -------------------------------------------------------------------- */

static bool status_contains(const char *needle)
{
	char text[1 << 16] = "";
	size_t n = h_drain(g_h, g_ev, MAXEV, true), len = 0;

	for (size_t i = 0; i < n && i < MAXEV; i++) {
		const struct aiprof_ev_str *s = &g_ev[i].u.str;
		size_t c = s->total - s->offset < AIPROF_STR_CHUNK ? s->total - s->offset
								    : AIPROF_STR_CHUNK;

		if (g_ev[i].type != AIPROF_EV_LIB_STATUS || len + c + 2 > sizeof(text))
			continue;
		memcpy(text + len, s->s, c);
		len += c;
		if (s->offset + c == s->total)
			text[len++] = '\n';
		text[len] = '\0';
	}
	return strstr(text, needle) != NULL;
}

static void test_ring_created(void **state)
{
	const uint64_t *build = dlsym(g_lib, "aiprof_preload_build");
	char comm[64] = "";
	bool ctl_thread = false;
	DIR *d;
	struct dirent *de;

	assert_int_equal(g_h->version, AIPROF_RING_VERSION);
	assert_int_equal(g_h->event_size, AIPROF_EVENT_SIZE);
	assert_int_equal(g_h->nslots, AIPROF_RING_SLOTS);
	assert_int_equal(g_h->lib_pid, getpid());
	assert_non_null(build);
	assert_true(g_h->lib_build == *build);
	assert_int_equal(h_ring_fds(NULL), 1);
	assert_true(atomic_load(&g_h->hooks_patched) > 0);
	assert_true(atomic_load(&g_h->modules_seen) > 3);
	assert_int_equal(atomic_load(&g_h->lib_state), AIPROF_LIB_IDLE);

	d = opendir("/proc/self/task");
	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[300];
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && strcmp(comm, "aiprof-ctl\n") == 0)
			ctl_thread = true;
		fclose(f);
	}
	closedir(d);
	assert_true(ctl_thread);
}

static void test_got_patched(void **state)
{
	void **slot;
	char perms[5];

	/* -z now -z relro module: slot in a read-only page, patched, page still read-only */
	slot = got_slot("libfixture_caller.so", "cudaMemcpy", R_X86_64_JUMP_SLOT);
	assert_non_null(slot);
	assert_true(in_lib(*slot));
	assert_string_equal(maps_perms(slot, perms), "r--p");
	/* called and address-taken: ld routes the PLT through the GLOB_DAT slot (.plt.got) */
	slot = got_slot("libfixture_caller.so", "cudaLaunchKernel", R_X86_64_GLOB_DAT);
	assert_non_null(slot);
	assert_true(in_lib(*slot));
	assert_false(h_same_module(*slot, (void *)fixture_is_device));
	assert_string_equal(maps_perms(slot, perms), "r--p");

	/* the executable (lazy binding) */
	slot = got_slot("", "cudaMemcpyAsync", R_X86_64_JUMP_SLOT);
	assert_non_null(slot);
	assert_true(in_lib(*slot));
	slot = got_slot("", "dlopen", R_X86_64_JUMP_SLOT);
	assert_non_null(slot);
	assert_true(in_lib(*slot));

	/* an address taken through GLOB_DAT */
	assert_true(in_lib(caller_addr_of_launch()));

	/* libaiprof never patches itself: its own dlopen slot is libc's */
	assert_false(in_lib(*got_slot("libaiprof.so", "dlopen", R_X86_64_JUMP_SLOT)));
}

/* ---- idle --------------------------------------------------------------------------- */

static void test_idle_passthrough(void **state)
{
	uint64_t before = fx_calls(FX_cudaLaunchKernel);
	uint64_t pending = ring__pending(g_h);
	dim3 one = { 1, 1, 1 };

	fx.ret = cudaErrorInvalidValue;
	errno = 0;
	assert_int_equal(caller_launch((void *)0x1, 1, 1), cudaErrorInvalidValue);
	assert_int_equal(errno, FX_ERRNO);
	assert_int_equal(cudaLaunchKernel((void *)0x2, one, one, NULL, 0, NULL),
			 cudaErrorInvalidValue);
	assert_int_equal(fx_calls(FX_cudaLaunchKernel), before + 2);
	assert_ptr_equal(fx.last_func, (void *)0x2);
	assert_int_equal(ring__pending(g_h), pending);
}

/* ---- recording ---------------------------------------------------------------------- */

static void test_launch_event(void **state)
{
	uint64_t t0, t1;
	size_t n;
	int r;

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_ALL), 0);
	h_drain(g_h, g_ev, MAXEV, true);

	errno = 0;
	t0 = h_mono_ns();
	r = caller_launch((void *)0xabc, 10, 256);
	t1 = h_mono_ns();
	assert_int_equal(r, 0);
	assert_int_equal(errno, FX_ERRNO);      /* the real function's errno, untouched */

	fx.ret = cudaErrorInvalidValue;
	assert_int_equal(caller_launch((void *)0xdef, 1, 1), cudaErrorInvalidValue);

	n = h_drain(g_h, g_ev, MAXEV, false);
	assert_int_equal(n, 2);
	assert_int_equal(g_ev[0].type, AIPROF_EV_CUDA_LAUNCH);
	assert_int_equal(g_ev[0].api, AIPROF_API_cudaLaunchKernel);
	assert_int_equal(g_ev[0].tid, my_tid());
	assert_int_equal(g_ev[0].pid, getpid());
	/* TSC-derived timestamps agree with clock_gettime to well under a microsecond */
	assert_true(g_ev[0].ts + 2000 >= t0 && g_ev[0].ts <= t1 + 2000);
	assert_true(g_ev[0].dur <= t1 - t0 + 2000);
	assert_int_equal(g_ev[0].u.launch.func, 0xabc);
	assert_int_equal(g_ev[0].u.launch.stream, 0x5151);
	assert_int_equal(g_ev[0].u.launch.grid[0], 10);
	assert_int_equal(g_ev[0].u.launch.grid[1], 2);
	assert_int_equal(g_ev[0].u.launch.grid[2], 3);
	assert_int_equal(g_ev[0].u.launch.block[0], 256);
	assert_int_equal(g_ev[0].u.launch.block[1], 5);
	assert_int_equal(g_ev[0].u.launch.block[2], 6);
	assert_int_equal(g_ev[0].u.launch.shmem, 128);
	assert_int_equal(g_ev[0].u.launch.result, 0);
	assert_int_equal(g_ev[1].u.launch.func, 0xdef);
	assert_int_equal(g_ev[1].u.launch.result, cudaErrorInvalidValue);
	assert_true(g_ev[1].ts >= g_ev[0].ts);

	/* collector bit off: nothing recorded */
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_NCCL), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	caller_launch((void *)0x1, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 0);

	assert_int_equal(h_disable(g_h), 0);
	caller_launch((void *)0x1, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 0);
}

static void test_sync_and_alloc_events(void **state)
{
	void *dev = NULL;
	size_t n;

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(cudaMalloc(&dev, 1000), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize((cudaStream_t)0x77), 0);
	assert_int_equal(cudaDeviceSynchronize(), 0);
	assert_int_equal(cudaFree(dev), cudaSuccess);
	assert_int_equal(cudaMemset(dev, 0, 64), 0);
	n = h_drain(g_h, g_ev, MAXEV, false);
	assert_int_equal(n, 5);
	assert_int_equal(g_ev[0].type, AIPROF_EV_CUDA_ALLOC);
	assert_int_equal(g_ev[0].u.mem.ptr, (uintptr_t)dev);
	assert_int_equal(g_ev[0].u.mem.bytes, 1000);
	assert_int_equal(g_ev[0].u.mem.kind, AIPROF_MEM_DEVICE);
	assert_int_equal(g_ev[1].type, AIPROF_EV_CUDA_SYNC);
	assert_int_equal(g_ev[1].api, AIPROF_API_cudaStreamSynchronize);
	assert_int_equal(g_ev[1].u.sync.handle, 0x77);
	assert_int_equal(g_ev[1].u.sync.kind, AIPROF_SYNC_STREAM);
	assert_int_equal(g_ev[2].api, AIPROF_API_cudaDeviceSynchronize);
	assert_int_equal(g_ev[2].u.sync.kind, AIPROF_SYNC_DEVICE);
	assert_int_equal(g_ev[3].type, AIPROF_EV_CUDA_FREE);
	assert_int_equal(g_ev[3].u.mem.ptr, (uintptr_t)dev);
	assert_int_equal(g_ev[4].type, AIPROF_EV_CUDA_MEMSET);
	assert_int_equal(g_ev[4].u.memcpy.bytes, 64);
	assert_int_equal(h_disable(g_h), 0);
}

/* ---- pinned vs pageable ------------------------------------------------------------------ */

static struct aiprof_event *one_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
				     bool async)
{
	h_drain(g_h, g_ev, MAXEV, true);
	if (async)
		assert_int_equal(cudaMemcpyAsync(dst, src, n, k, (cudaStream_t)0x9), 0);
	else
		assert_int_equal(caller_memcpy(dst, src, n, k), 0);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].type, AIPROF_EV_CUDA_MEMCPY);
	assert_int_equal(g_ev[0].u.memcpy.bytes, n);
	return &g_ev[0];
}

static void test_memcpy_classification(void **state)
{
	const uint32_t pinned = AIPROF_MEMCPY_F_HOST_PINNED | AIPROF_MEMCPY_F_HOST_KNOWN;
	void *dev = NULL, *early_pinned = NULL, *pinned_buf = NULL;
	char *pageable = malloc(4096), *registered = malloc(4096), *drv = malloc(4096);
	struct aiprof_event *e;

	/* allocated while idle: tracked anyway */
	assert_int_equal(cudaMallocHost(&early_pinned, 4096), cudaSuccess);
	assert_int_equal(cudaMalloc(&dev, 4096), cudaSuccess);
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);

	e = one_copy(dev, early_pinned, 4096, cudaMemcpyHostToDevice, false);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_H2D);
	assert_int_equal(e->u.memcpy.flags, pinned);
	assert_int_equal(e->api, AIPROF_API_cudaMemcpy);

	/* interior pointer of a pinned block, device to host, async */
	e = one_copy((char *)early_pinned + 100, dev, 64, cudaMemcpyDeviceToHost, true);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_D2H);
	assert_int_equal(e->u.memcpy.flags, pinned | AIPROF_MEMCPY_F_ASYNC);
	assert_int_equal(e->u.memcpy.stream, 0x9);
	assert_int_equal(e->api, AIPROF_API_cudaMemcpyAsync);

	/* pageable: unknown to us, cudaPointerGetAttributes says unregistered */
	errno = 0;
	e = one_copy(dev, pageable, 4096, cudaMemcpyHostToDevice, false);
	assert_int_equal(errno, FX_ERRNO);  /* the memcpy's errno, not the attribute query's */
	assert_int_equal(e->u.memcpy.flags, AIPROF_MEMCPY_F_HOST_KNOWN);

	/* registered, then unregistered */
	assert_int_equal(cudaHostRegister(registered, 4096, 0), cudaSuccess);
	e = one_copy(dev, registered + 4095, 1, cudaMemcpyHostToDevice, false);
	assert_int_equal(e->u.memcpy.flags, pinned);
	assert_int_equal(cudaHostUnregister(registered), cudaSuccess);
	e = one_copy(dev, registered, 1, cudaMemcpyHostToDevice, false);
	assert_int_equal(e->u.memcpy.flags, AIPROF_MEMCPY_F_HOST_KNOWN);

	/* pinned behind our back (driver API): the attribute query finds it */
	fixture_driver_pin(drv, 4096);
	e = one_copy(drv, dev, 16, cudaMemcpyDeviceToHost, false);
	assert_int_equal(e->u.memcpy.flags, pinned);

	/* cudaMemcpyDefault is resolved from both pointers */
	assert_int_equal(cudaHostAlloc(&pinned_buf, 256, 0), cudaSuccess);
	e = one_copy(dev, pinned_buf, 256, cudaMemcpyDefault, false);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_H2D);
	assert_int_equal(e->u.memcpy.flags, pinned);
	e = one_copy(pageable, dev, 256, cudaMemcpyDefault, true);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_D2H);
	assert_int_equal(e->u.memcpy.flags, AIPROF_MEMCPY_F_HOST_KNOWN | AIPROF_MEMCPY_F_ASYNC);
	e = one_copy(dev, dev, 256, cudaMemcpyDefault, false);
	assert_int_equal(e->u.memcpy.kind, AIPROF_MEMCPY_D2D);
	assert_int_equal(e->u.memcpy.flags, 0);

	/* freed: no longer pinned */
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(cudaFreeHost(pinned_buf), cudaSuccess);
	e = one_copy(dev, early_pinned, 8, cudaMemcpyHostToDevice, false);
	assert_int_equal(e->u.memcpy.flags, pinned);

	/* driver API copy: host side classified the same way */
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(cuMemcpyHtoD_v2((CUdeviceptr)dev, early_pinned, 32), 0);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].api, AIPROF_API_cuMemcpyHtoD_v2);
	assert_int_equal(g_ev[0].u.memcpy.kind, AIPROF_MEMCPY_H2D);
	assert_int_equal(g_ev[0].u.memcpy.flags, pinned);

	assert_int_equal(h_disable(g_h), 0);
	cudaFreeHost(early_pinned);
	free(pageable);
	free(registered);
	free(drv);
}

/* ---- driver launches: interned names ---------------------------------------------------- */

static size_t count_strings(size_t n, uint32_t id, char *name, size_t len)
{
	size_t chunks = 0;

	for (size_t i = 0; i < n; i++) {
		const struct aiprof_ev_str *s = &g_ev[i].u.str;

		if (g_ev[i].type != AIPROF_EV_STRING || s->id != id)
			continue;
		chunks++;
		if (s->offset < len) {
			size_t c = s->total - s->offset < AIPROF_STR_CHUNK ? s->total - s->offset
									    : AIPROF_STR_CHUNK;
			memcpy(name + s->offset, s->s, c);
			name[s->offset + c] = '\0';
		}
	}
	return chunks;
}

static void test_driver_launch_names(void **state)
{
	static char long_name[300];
	struct CUfunc_st f1 = { FX_FUNC_MAGIC, "_Z6matmulPfS_S_i" }, f2 = { FX_FUNC_MAGIC, long_name };
	char name[400];
	uint32_t id1, id2;
	size_t n, launch = 0, at[3] = { 0, 0, 0 };

	memset(long_name, 'k', sizeof(long_name) - 1);
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(cuLaunchKernel(&f1, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL), 0);
	assert_int_equal(cuLaunchKernel(&f2, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), 0);
	assert_int_equal(cuLaunchKernel(&f1, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL), 0);
	n = h_drain(g_h, g_ev, MAXEV, true);
	/* order: strings of f1 (name, call stack), launch f1, strings of f2, launch f2, launch f1 */
	for (size_t i = 0; i < n; i++) {
		if (g_ev[i].type != AIPROF_EV_CUDA_LAUNCH)
			continue;
		if (launch < 3)
			at[launch] = i;
		launch++;
	}
	assert_int_equal(launch, 3);
	assert_int_equal(at[2], n - 1);
	assert_int_equal(g_ev[at[0]].api, AIPROF_API_cuLaunchKernel);
	id1 = g_ev[at[0]].u.launch.name_id;
	assert_true(id1 != 0);
	assert_int_equal(g_ev[at[0]].u.launch.func, (uintptr_t)&f1);
	assert_int_equal(g_ev[at[0]].u.launch.grid[0], 4);
	assert_int_equal(g_ev[at[0]].u.launch.block[0], 128);
	assert_int_equal(count_strings(n, id1, name, sizeof(name)), 1);
	assert_string_equal(name, "_Z6matmulPfS_S_i");
	id2 = g_ev[at[1]].u.launch.name_id;
	assert_true(id2 != 0 && id2 != id1);
	assert_int_equal(count_strings(n, id2, name, sizeof(name)), 4);   /* 299 bytes / 80 */
	assert_string_equal(name, long_name);
	assert_int_equal(g_ev[at[2]].u.launch.name_id, id1);
	assert_int_equal(fx_calls(FX_cuFuncGetName), 2);

	/* a new session (generation) gets the strings again */
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(cuLaunchKernel(&f1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), 0);
	n = h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(count_strings(n, id1, name, sizeof(name)), 1);
	assert_int_equal(fx_calls(FX_cuFuncGetName), 2);
	assert_int_equal(h_disable(g_h), 0);
}

/* ---- NCCL -------------------------------------------------------------------------------- */

static void test_nccl(void **state)
{
	ncclUniqueId uid = { { 0 } };
	ncclComm_t comm = NULL, old = fixture_nccl_comm(3, 8);
	size_t n;

	/* initialised while idle: remembered anyway */
	assert_int_equal(ncclCommInitRank(&comm, 4, uid, 1), ncclSuccess);
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_NCCL), 0);
	h_drain(g_h, g_ev, MAXEV, true);

	assert_int_equal(ncclGroupStart(), ncclSuccess);
	assert_int_equal(ncclAllReduce((void *)1, (void *)2, 1000, ncclFloat32, ncclSum, comm,
				       (cudaStream_t)0x33), 0);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	/* a communicator from before we attached: asked once, then cached */
	assert_int_equal(ncclAllGather((void *)1, (void *)2, 10, ncclBfloat16, old, NULL), 0);
	assert_int_equal(ncclAllGather((void *)1, (void *)2, 10, ncclBfloat16, old, NULL), 0);
	n = h_drain(g_h, g_ev, MAXEV, false);
	assert_int_equal(n, 5);
	assert_int_equal(g_ev[0].type, AIPROF_EV_NCCL_GROUP);
	assert_int_equal(g_ev[0].u.nccl.op, AIPROF_NCCL_GROUP_START);
	assert_int_equal(g_ev[1].type, AIPROF_EV_NCCL_COLL);
	assert_int_equal(g_ev[1].api, AIPROF_API_ncclAllReduce);
	assert_int_equal(g_ev[1].u.nccl.count, 1000);
	assert_int_equal(g_ev[1].u.nccl.bytes, 4000);
	assert_int_equal(g_ev[1].u.nccl.datatype, ncclFloat32);
	assert_int_equal(g_ev[1].u.nccl.redop, ncclSum);
	assert_int_equal(g_ev[1].u.nccl.peer, -1);
	assert_int_equal(g_ev[1].u.nccl.rank, 1);
	assert_int_equal(g_ev[1].u.nccl.nranks, 4);
	assert_int_equal(g_ev[1].u.nccl.comm, (uintptr_t)comm);
	assert_int_equal(g_ev[1].u.nccl.stream, 0x33);
	assert_int_equal(g_ev[2].u.nccl.op, AIPROF_NCCL_GROUP_END);
	assert_int_equal(g_ev[3].api, AIPROF_API_ncclAllGather);
	assert_int_equal(g_ev[3].u.nccl.bytes, 20);   /* what this rank sends */
	assert_int_equal(g_ev[3].u.nccl.rank, 3);
	assert_int_equal(g_ev[3].u.nccl.nranks, 8);
	assert_int_equal(g_ev[4].u.nccl.rank, 3);
	assert_int_equal(fx_calls(FX_ncclCommUserRank), 1);
	assert_int_equal(fx_calls(FX_ncclCommCount), 1);

	/* ncclCommInitRank itself while recording */
	assert_int_equal(ncclCommInitRank(&comm, 16, uid, 15), ncclSuccess);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].type, AIPROF_EV_NCCL_INIT);
	assert_int_equal(g_ev[0].u.nccl.comm, (uintptr_t)comm);
	assert_int_equal(g_ev[0].u.nccl.rank, 15);
	assert_int_equal(g_ev[0].u.nccl.nranks, 16);
	assert_int_equal(h_disable(g_h), 0);
}

/* ---- ibverbs ------------------------------------------------------------------------------ */

static int fake_post_send_calls, fake_post_recv_calls, fake_poll_ret;

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	fake_post_send_calls++;
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	fake_post_recv_calls++;
	return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	for (int i = 0; i < fake_poll_ret && i < num; i++) {
		memset(&wc[i], 0, sizeof(wc[i]));
		wc[i].byte_len = 1000;
		wc[i].qp_num = 77;
		wc[i].opcode = IBV_WC_RECV;
	}
	return fake_poll_ret;
}

static void test_ibverbs(void **state)
{
	static struct ibv_context ctx;
	struct ibv_qp qp = { .context = &ctx, .qp_num = 77 };
	struct ibv_cq cq = { .context = &ctx };
	struct ibv_pd pd = { .context = &ctx };
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTS };
	struct ibv_sge sge[3] = { { .addr = 0x1000, .length = 100 }, { .length = 200 },
				  { .length = 300 } };
	struct ibv_send_wr w2 = { .sg_list = &sge[2], .num_sge = 1, .opcode = IBV_WR_SEND };
	struct ibv_send_wr w1 = { .next = &w2, .sg_list = sge, .num_sge = 2,
				  .opcode = IBV_WR_RDMA_WRITE };
	struct ibv_recv_wr rw = { .sg_list = sge, .num_sge = 1 }, *rbad;
	struct ibv_send_wr *bad;
	struct ibv_wc wc[4];
	struct ibv_mr *mr;
	char buf[64];
	size_t n;

	ctx.ops.post_send = fake_post_send;
	ctx.ops.post_recv = fake_post_recv;
	ctx.ops.poll_cq = fake_poll_cq;

	/* idle: the context is wrapped on first sight, calls pass through */
	assert_int_equal(ibv_modify_qp(&qp, &attr, IBV_QP_STATE), 0);
	assert_true(in_lib((void *)ctx.ops.post_send));
	assert_true(in_lib((void *)ctx.ops.poll_cq));
	assert_int_equal(ibv_post_send(&qp, &w1, &bad), 0);
	assert_int_equal(fake_post_send_calls, 1);

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_RDMA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(ibv_post_send(&qp, &w1, &bad), 0);
	assert_int_equal(ibv_post_recv(&qp, &rw, &rbad), 0);
	fake_poll_ret = 0;
	assert_int_equal(ibv_poll_cq(&cq, 4, wc), 0);        /* empty poll: no event */
	fake_poll_ret = 2;
	assert_int_equal(ibv_poll_cq(&cq, 4, wc), 2);
	attr.qp_state = IBV_QPS_ERR;
	assert_int_equal(ibv_modify_qp(&qp, &attr, IBV_QP_STATE | IBV_QP_PORT), 0);
	mr = ibv_reg_mr(&pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	n = h_drain(g_h, g_ev, MAXEV, false);
	assert_int_equal(n, 6);
	assert_int_equal(fake_post_send_calls, 2);
	assert_int_equal(fake_post_recv_calls, 1);

	assert_int_equal(g_ev[0].api, AIPROF_API_ibv_post_send);
	assert_int_equal(g_ev[0].u.ibv.length, 600);
	assert_int_equal(g_ev[0].u.ibv.count, 2);
	assert_int_equal(g_ev[0].u.ibv.attr, IBV_WR_RDMA_WRITE);
	assert_int_equal(g_ev[0].u.ibv.qp_num, 77);
	assert_int_equal(g_ev[0].u.ibv.addr, 0x1000);
	assert_int_equal(g_ev[0].u.ibv.handle, (uintptr_t)&qp);
	assert_int_equal(g_ev[1].api, AIPROF_API_ibv_post_recv);
	assert_int_equal(g_ev[1].u.ibv.length, 100);
	assert_int_equal(g_ev[1].u.ibv.count, 1);
	assert_int_equal(g_ev[2].api, AIPROF_API_ibv_poll_cq);
	assert_int_equal(g_ev[2].u.ibv.count, 2);
	assert_int_equal(g_ev[2].u.ibv.length, 2000);
	assert_int_equal(g_ev[2].u.ibv.handle, (uintptr_t)&cq);
	assert_int_equal(g_ev[3].api, AIPROF_API_ibv_modify_qp);
	assert_int_equal(g_ev[3].u.ibv.state, IBV_QPS_ERR);
	assert_int_equal(g_ev[3].u.ibv.attr, IBV_QP_STATE | IBV_QP_PORT);
	assert_int_equal(g_ev[4].api, AIPROF_API_ibv_reg_mr);
	assert_int_equal(g_ev[4].u.ibv.addr, (uintptr_t)buf);
	assert_int_equal(g_ev[4].u.ibv.length, sizeof(buf));
	assert_int_equal(g_ev[4].u.ibv.attr, IBV_ACCESS_LOCAL_WRITE);
	assert_int_equal(g_ev[4].u.ibv.handle, (uintptr_t)mr);
	assert_int_equal(g_ev[5].api, AIPROF_API_ibv_dereg_mr);
	assert_int_equal(g_ev[5].u.ibv.length, sizeof(buf));

	/* a context re-created at the same address with fresh provider ops is re-wrapped */
	ctx.ops.post_send = fake_post_send;
	assert_int_equal(ibv_modify_qp(&qp, &attr, 0), 0);
	assert_true(in_lib((void *)ctx.ops.post_send));
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(ibv_post_send(&qp, &w2, &bad), 0);
	assert_int_equal(fake_post_send_calls, 3);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(h_disable(g_h), 0);
}

/* ---- modules loaded later, dlsym, cuGetProcAddress -------------------------------------- */

static void test_late_dlopen(void **state)
{
	const char *libs[] = { "tests/unit/preload/libfixture_late.so",
			       "tests/unit/preload/libfixture_noplt.so" };
	uint32_t patched = atomic_load(&g_h->hooks_patched);

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	for (size_t i = 0; i < 2; i++) {
		char path[PATH_MAX];
		void *h = dlopen(h_build_path(libs[i], path, sizeof(path)), RTLD_NOW | RTLD_LOCAL);
		fixture_launch_fn launch;

		assert_non_null(h);
		launch = (fixture_launch_fn)dlsym(h, "fixture_late_launch");
		assert_non_null(launch);
		h_drain(g_h, g_ev, MAXEV, true);
		/* patched by the dlopen hook before dlopen returned: no waiting */
		assert_int_equal(launch((void *)(0x100 + i)), 0);
		assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
		assert_int_equal(g_ev[0].u.launch.func, 0x100 + i);
	}
	assert_true(atomic_load(&g_h->hooks_patched) >= patched + 2);
	assert_true(in_lib(*got_slot("libfixture_noplt.so", "cudaLaunchKernel",
				    R_X86_64_GLOB_DAT)));
	assert_int_equal(h_disable(g_h), 0);
}

typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, cuuint64_t,
					   CUdriverProcAddressQueryResult *);

static void test_dlsym_and_proc_address(void **state)
{
	void *fixture = dlopen("libfixture_cuda.so", RTLD_NOLOAD | RTLD_NOW);
	void *from_definer = dlsym(fixture, "cudaLaunchKernel");
	void *p, *next;
	CUdriverProcAddressQueryResult st;
	dim3 one = { 1, 1, 1 };

	dlclose(fixture);
	/* dlsym(handle) of the definer hands out our hook (same definition) */
	assert_true(in_lib(from_definer));
	p = dlsym(RTLD_DEFAULT, "cudaLaunchKernel");
	assert_true(in_lib(p));
	/* RTLD_NEXT is resolved from the caller (this executable): the real function */
	next = dlsym(RTLD_NEXT, "cudaLaunchKernel");
	assert_non_null(next);
	assert_false(in_lib(next));
	assert_true(h_same_module(next, (void *)fixture_is_device));
	/* unhooked names are untouched */
	assert_ptr_equal(dlsym(RTLD_DEFAULT, "fixture_is_device"), (void *)fixture_is_device);

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	assert_int_equal(((cudaError_t(*)(const void *, dim3, dim3, void **, size_t,
					  cudaStream_t))p)((void *)0x42, one, one, NULL, 0, NULL), 0);
	assert_int_equal(cuGetProcAddress_v2("cuLaunchKernel", &p, 13000, 0, &st), CUDA_SUCCESS);
	assert_true(in_lib(p));
	assert_int_equal(cuGetProcAddress_v2("cuDeviceGetCount", &p, 13000, 0, &st), CUDA_SUCCESS);
	assert_false(in_lib(p));
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].u.launch.func, 0x42);
	assert_int_equal(h_disable(g_h), 0);
}

/* ---- CUPTI, heartbeat --------------------------------------------------------------------- */

static void test_cupti_fails_soft(void **state)
{
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_ALL), 0);
	assert_int_equal(atomic_load(&g_h->cupti_state), AIPROF_CUPTI_UNAVAILABLE);
	assert_non_null(strstr(g_h->cupti_reason, "no CUDA device"));
	/* API-level recording goes on */
	h_drain(g_h, g_ev, MAXEV, true);
	caller_launch((void *)1, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].u.launch.correlation, 0);
	assert_int_equal(h_disable(g_h), 0);
}

static void test_heartbeat_stale(void **state)
{
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	atomic_store(&h_beat_paused, 1);
	atomic_store(&g_h->heartbeat_ns, h_mono_ns() - 6000000000ull);
	h_kick(g_h);
	assert_int_equal(h_wait_state(g_h, AIPROF_LIB_IDLE, 3000), 0);
	assert_int_equal(atomic_load(&g_h->enabled), 0);
	assert_true(status_contains("heartbeat"));
	caller_launch((void *)1, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 0);
	atomic_store(&h_beat_paused, 0);

	/* and without a kick, the 1 s timeout notices too */
	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	atomic_store(&h_beat_paused, 1);
	atomic_store(&g_h->heartbeat_ns, h_mono_ns() - 6000000000ull);
	assert_int_equal(h_wait_state(g_h, AIPROF_LIB_IDLE, 3000), 0);
	atomic_store(&h_beat_paused, 0);
}

/* ---- a second copy, fork ------------------------------------------------------------------ */

static void test_second_copy_inert(void **state)
{
	char src[PATH_MAX], path[64], buf[65536];
	int in = open(h_build_path("libaiprof.so", src, sizeof(src)), O_RDONLY | O_CLOEXEC);
	int mfd = memfd_create(AIPROF_LIB_MEMFD, MFD_CLOEXEC);
	void **slot = got_slot("libfixture_caller.so", "cudaLaunchKernel", R_X86_64_GLOB_DAT);
	void *before, *copy;
	ssize_t n;

	assert_non_null(slot);
	before = *slot;
	assert_true(in >= 0 && mfd >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(mfd, buf, (size_t)n), n);
	close(in);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
	h_drain(g_h, g_ev, MAXEV, true);
	copy = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(copy);
	assert_true(copy != g_lib);
	assert_int_equal(h_ring_fds(NULL), 1);
	assert_true(status_contains("loaded again"));
	assert_ptr_equal(*slot, before);

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	caller_launch((void *)1, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_ptr_equal(*slot, before);
	assert_int_equal(h_disable(g_h), 0);
}

static void test_fork_child_isolated(void **state)
{
	pid_t pid;
	int status;
	size_t n;

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint64_t before = fx_calls(FX_cudaLaunchKernel);
		int bad = 0;

		for (int i = 0; i < 100; i++)
			bad |= caller_launch((void *)0xc41d, 1, 1) != 0;
		bad |= fx_calls(FX_cudaLaunchKernel) != before + 100;
		bad |= h_ring_fds(NULL) != 0;   /* the parent's ring is closed in the child */
		_exit(bad ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	caller_launch((void *)0xbeef, 1, 1);
	n = h_drain(g_h, g_ev, MAXEV, false);
	assert_int_equal(n, 1);
	assert_int_equal(g_ev[0].pid, getpid());
	assert_int_equal(g_ev[0].u.launch.func, 0xbeef);
	assert_int_equal(h_disable(g_h), 0);
}

/* What the injector does to a forked child (attach/inject.c): its dormant copy's own
 * aiprof_rearm(), found in its symbol table, gives it a ring and a control thread. */
static void test_fork_child_woken(void **state)
{
	void *(*rearm)(const char *, int) = (void *(*)(const char *, int))dlsym(g_lib, "aiprof_rearm");
	const char *(*rearm_error)(void) = (const char *(*)(void))dlsym(g_lib, "aiprof_rearm_error");
	pid_t pid;
	int status;

	assert_non_null(rearm);
	assert_non_null(rearm_error);
	/* a copy that is not a forked child's is never woken: the parent keeps its one ring */
	assert_null(rearm(NULL, 0));
	assert_non_null(strstr(rearm_error(), "not a forked child"));
	assert_int_equal(h_ring_fds(NULL), 1);

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct aiprof_ring_hdr *c;
		struct stat st;
		int fd = -1, bad = 0;
		size_t n;

		bad |= (rearm(NULL, 0) == NULL) << 0;
		bad |= (h_ring_fds(&fd) != 1 || fstat(fd, &st) < 0) << 1;
		if (bad)
			_exit(bad);
		c = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (c == MAP_FAILED || c == g_h || c->lib_pid != (uint32_t)getpid())
			_exit(4);
		bad |= (h_enable(c, AIPROF_COLLECT_CUDA) != 0) << 3;
		h_drain(c, g_ev, MAXEV, true);
		caller_launch((void *)0xc41d, 1, 1);
		n = h_drain(c, g_ev, MAXEV, false);
		bad |= (n != 1 || g_ev[0].pid != (uint32_t)getpid() ||
			g_ev[0].u.launch.func != 0xc41d) << 4;
		/* woken once per fork */
		bad |= (rearm(NULL, 0) != NULL) << 5;
		bad |= (h_disable(c) != 0) << 6;
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the parent's ring saw nothing of the child's */
	caller_launch((void *)0xbeef, 1, 1);
	assert_int_equal(h_drain(g_h, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].pid, getpid());
	assert_int_equal(h_disable(g_h), 0);
}

/* threads of this process named name */
static int threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[96], comm[32] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		f = fopen(path, "re");
		if (f && fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		if (f)
			fclose(f);
		n += strcmp(comm, name) == 0;
	}
	closedir(d);
	return n;
}

/*
 * The end of a window (attach/session.c session__release): the library goes dormant, its
 * control thread exits and its ring's fd is closed; hooks pass through; the next window
 * wakes it with aiprof_rearm() (a new ring at the same address). Last: it changes g_h.
 */
static void test_release_and_wake(void **state)
{
	void *(*rearm)(const char *, int) = (void *(*)(const char *, int))dlsym(g_lib, "aiprof_rearm");
	struct aiprof_ring_hdr *old = g_h, *c;
	uint64_t before = fx_calls(FX_cudaLaunchKernel);
	struct stat st;
	int fd = -1;

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	assert_int_equal(threads_named("aiprof-ctl"), 1);
	assert_int_equal(h_disable(g_h), 0);
	atomic_store(&g_h->release, 1);
	h_kick(g_h);
	assert_int_equal(h_wait_state(g_h, AIPROF_LIB_RELEASED, 3000), 0);
	for (int i = 0; i < 200 && threads_named("aiprof-ctl"); i++)
		usleep(5000);
	assert_int_equal(threads_named("aiprof-ctl"), 0);
	assert_int_equal(h_ring_fds(NULL), 0);
	/* the hooks pass through, and nothing is recorded anywhere */
	assert_int_equal(caller_launch((void *)0x51, 1, 1), 0);
	assert_int_equal(fx_calls(FX_cudaLaunchKernel), before + 1);
	/* woken: a ring and a control thread again, events flow */
	assert_non_null(rearm(NULL, 0));
	assert_null(rearm(NULL, 0));            /* once */
	assert_int_equal(h_ring_fds(&fd), 1);
	assert_int_equal(fstat(fd, &st), 0);
	c = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(c != MAP_FAILED);
	assert_true(c != old);
	assert_int_equal(h_enable(c, AIPROF_COLLECT_CUDA), 0);
	h_drain(c, g_ev, MAXEV, true);
	caller_launch((void *)0x52, 1, 1);
	assert_int_equal(h_drain(c, g_ev, MAXEV, false), 1);
	assert_int_equal(g_ev[0].u.launch.func, 0x52);
	assert_int_equal(threads_named("aiprof-ctl"), 1);
	assert_int_equal(h_disable(c), 0);
	munmap(c, (size_t)st.st_size);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_ring_created, test_setup),
		cmocka_unit_test_setup(test_got_patched, test_setup),
		cmocka_unit_test_setup(test_idle_passthrough, test_setup),
		cmocka_unit_test_setup(test_launch_event, test_setup),
		cmocka_unit_test_setup(test_sync_and_alloc_events, test_setup),
		cmocka_unit_test_setup(test_memcpy_classification, test_setup),
		cmocka_unit_test_setup(test_driver_launch_names, test_setup),
		cmocka_unit_test_setup(test_nccl, test_setup),
		cmocka_unit_test_setup(test_ibverbs, test_setup),
		cmocka_unit_test_setup(test_late_dlopen, test_setup),
		cmocka_unit_test_setup(test_dlsym_and_proc_address, test_setup),
		cmocka_unit_test_setup(test_cupti_fails_soft, test_setup),
		cmocka_unit_test_setup(test_heartbeat_stale, test_setup),
		cmocka_unit_test_setup(test_second_copy_inert, test_setup),
		cmocka_unit_test_setup(test_fork_child_isolated, test_setup),
		cmocka_unit_test_setup(test_fork_child_woken, test_setup),
		cmocka_unit_test_setup(test_release_and_wake, test_setup),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
