/* SPDX-License-Identifier: MIT */
/*
 * trainer: a deterministic stand-in for a data-parallel training job, linked against the
 * test doubles of libcudart.so.13, libcuda.so.1, libnccl.so.2 and libibverbs.so.1 (rpath
 * $ORIGIN/../doubles, so it starts with no environment). Each rank is a thread; per step a
 * rank loads a batch, copies it to the device, launches kernels (runtime API through
 * nvcc-style host stubs, and one driver API launch), all-reduces its gradients, copies the
 * result back and synchronises its stream. Faults that later diagnosis tests must find can
 * be planted with --fault. --cupti loads libcupti.so.13 (the fake one, through the RUNPATH)
 * at start without using it, as a framework that links CUPTI does; --cupti-subscribe also
 * holds the CUPTI subscription for the whole run, as Kineto or Nsight Systems do.
 *
 * --rank R --world N --nccl-id-file PATH runs one rank per process instead (N processes, or N
 * containers sharing /dev/shm and PATH's folder): rank 0 writes the NCCL unique id to PATH
 * (which must not exist yet) and removes it once every rank has joined; the others wait for
 * it. The faults work across processes; the checksum then covers this rank only.
 *
 * Output contract (tests rely on it):
 *   stdout  "ready pid=<pid>" once every rank is initialised (flushed);
 *           at exit "steps=<n>" then exactly one "checksum=<16 hex digits>".
 *   stderr  "step_ms_mean=<float>" at exit, diagnostics.
 *   exit    0 success, 1 runtime failure, 2 usage error.
 * The checksum hashes, per rank and step, the bytes that came back from the device after
 * the all-reduce (and through the RDMA loopback with --rdma). It depends on --ranks,
 * --steps (or the step count reached with --run-seconds), --batch-bytes, --grad-bytes and
 * --rdma only: never on timing, pinned/pageable memory, --stress, --cupti* or the faults.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <nccl.h>

#include "tests/doubles/cudart_abi.h"

#define MAX_RANKS          64
#define LABEL_FLOATS       1024
#define RDMA_MAX_BYTES     (256U << 10)
#define SYNC_CKPT_BYTES    (32U << 20)
#define LOADER_PERIOD_NS   60000000ULL
#define STRAGGLER_NS       15000000ULL
#define SMALL_KERNELS_PER  50
#define LEAK_BYTES         (16U << 20)

/* ---- configuration ------------------------------------------------------------------------ */

enum fault {
	FAULT_PAGEABLE_MEMCPY = 1 << 0,
	FAULT_SMALL_KERNELS   = 1 << 1,
	FAULT_SYNC_CHECKPOINT = 1 << 2,
	FAULT_DATALOADER      = 1 << 3,
	FAULT_NCCL_HANG       = 1 << 4,
	FAULT_STRAGGLER       = 1 << 5,
	FAULT_EXCESSIVE_SYNC  = 1 << 6,
	FAULT_MEMORY_GROWTH   = 1 << 7,
};

static const struct {
	const char *name;
	enum fault bit;
	const char *help;
} faults[] = {
	{ "pageable-memcpy", FAULT_PAGEABLE_MEMCPY, "host buffers are pageable; copies use synchronous cudaMemcpy" },
	{ "small-kernels", FAULT_SMALL_KERNELS, "each compute kernel becomes 50 tiny launches" },
	{ "sync-checkpoint", FAULT_SYNC_CHECKPOINT, "rank 0 writes a 32 MiB checkpoint + fsync every 5 steps (or --checkpoint-every)" },
	{ "dataloader-stall", FAULT_DATALOADER, "the training thread blocks in read() on a loader that delivers a batch every 60 ms" },
	{ "nccl-hang", FAULT_NCCL_HANG, "the fault rank never enters the all-reduce of the fault step: the others block" },
	{ "straggler", FAULT_STRAGGLER, "the fault rank syncs and spends 15 ms of CPU before every all-reduce" },
	{ "excessive-sync", FAULT_EXCESSIVE_SYNC, "cudaDeviceSynchronize after every kernel launch" },
	{ "memory-growth", FAULT_MEMORY_GROWTH, "16 MiB cudaMalloc per step, never freed" },
};

struct config {
	int ranks;
	int steps;
	int kernels;
	size_t batch_bytes;
	size_t grad_bytes;
	int checkpoint_every;
	const char *checkpoint_dir;
	bool checkpoint_dir_is_temp;
	bool rdma;
	bool pageable;
	bool stress;
	bool cupti;              /* load libcupti.so.13 at start */
	bool cupti_subscribe;    /* ... and subscribe to it for the whole run */
	unsigned int faults;
	int fault_rank;          /* -1: not given */
	int fault_step;          /* -1: not given; FAULT_STEP_USR2: after SIGUSR2 */
	double run_seconds;      /* 0: run --steps steps */
	int only_rank;           /* --rank: this process runs only this rank; -1: all, as threads */
	const char *nccl_id_file; /* --nccl-id-file: where the ranks' processes meet */
};

/* ---- kernels: host stubs written the way nvcc generates them ------------------------------- */

#define LAUNCH(kernel, grid, block, stream, ...) \
	(__cudaPushCallConfiguration((grid), (block), 0, (stream)) ? (void)0 : kernel(__VA_ARGS__))

/*
 * Pops the <<<>>> configuration and launches `stub`; errors surface in cudaGetLastError().
 * With `handle`, the way nvcc 13 generates it: the stub's kernel is looked up once
 * (__cudaGetKernel) and launched by handle (__cudaLaunchKernel). Without, the way older
 * nvcc, __NV_LEGACY_LAUNCH builds and libraries that launch by hand do: cudaLaunchKernel.
 */
/* inlined into each stub, as nvcc inlines __cudaLaunchKernel_helper: the launch is the stub's */
static inline __attribute__((always_inline)) void launch_stub(const void *stub, cudaKernel_t *handle,
							       void **args)
{
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;

	if (__cudaPopCallConfiguration(&grid, &block, &shmem, &stream) != cudaSuccess)
		return;
	if (!handle) {
		cudaLaunchKernel(stub, grid, block, args, shmem, stream);
		return;
	}
	if (!__atomic_load_n(handle, __ATOMIC_ACQUIRE)) {
		cudaKernel_t k = NULL;

		if (__cudaGetKernel(&k, stub) != cudaSuccess)
			return;
		__atomic_store_n(handle, k, __ATOMIC_RELEASE);
	}
	__cudaLaunchKernel(*handle, grid, block, args, shmem, stream);
}

void sgemm_fwd_kernel(const float *x, const float *w, float *y, int m, int n, int k)
{
	void *args[] = { &x, &w, &y, &m, &n, &k };

	launch_stub((const void *)sgemm_fwd_kernel, NULL, args);
}

void relu_fwd_kernel(const float *x, float *y, int n)
{
	static cudaKernel_t handle;
	void *args[] = { &x, &y, &n };

	launch_stub((const void *)relu_fwd_kernel, &handle, args);
}

void sgemm_bwd_kernel(const float *dy, const float *w, float *dx, int m, int n, int k)
{
	void *args[] = { &dy, &w, &dx, &m, &n, &k };

	launch_stub((const void *)sgemm_bwd_kernel, NULL, args);
}

void relu_bwd_kernel(const float *dy, const float *y, float *dx, int n)
{
	static cudaKernel_t handle;
	void *args[] = { &dy, &y, &dx, &n };

	launch_stub((const void *)relu_bwd_kernel, &handle, args);
}

void adam_update_kernel(float *p, const float *g, float *m, float *v, float lr, float beta1, float beta2, int n,
			int step)
{
	static cudaKernel_t handle;
	void *args[] = { &p, &g, &m, &v, &lr, &beta1, &beta2, &n, &step };

	launch_stub((const void *)adam_update_kernel, &handle, args);
}

void elementwise_add_kernel(const float *a, const float *b, float *c, int n)
{
	static cudaKernel_t handle;
	void *args[] = { &a, &b, &c, &n };

	launch_stub((const void *)elementwise_add_kernel, &handle, args);
}

/*
 * What nvcc's static constructor does: register the fat binary and the kernels in it. The
 * device names are those of extern "C" kernels, equal to the host stub symbols.
 */
static const unsigned long long fatbin_data[] = { 0x00100001ba55ed50ULL, 0 };
static struct fatbin_wrapper fatbin = { FATBIN_WRAPPER_MAGIC, 1, fatbin_data, NULL };
static void **fatbin_handle;

#define REGISTER(stub) \
	__cudaRegisterFunction(fatbin_handle, (const char *)(stub), (char *)#stub, #stub, -1, NULL, NULL, \
			       NULL, NULL, NULL)

__attribute__((constructor)) static void register_kernels(void)
{
	fatbin_handle = __cudaRegisterFatBinary(&fatbin);
	REGISTER(sgemm_fwd_kernel);
	REGISTER(relu_fwd_kernel);
	REGISTER(sgemm_bwd_kernel);
	REGISTER(relu_bwd_kernel);
	REGISTER(adam_update_kernel);
	REGISTER(elementwise_add_kernel);
	__cudaRegisterFatBinaryEnd(fatbin_handle);
}

__attribute__((destructor)) static void unregister_kernels(void)
{
	if (fatbin_handle)
		__cudaUnregisterFatBinary(fatbin_handle);
}

/* Loaded through the driver API (cuModuleLoadData / cuModuleGetFunction). */
static const char layernorm_ptx[] =
	"//\n// aiprof test trainer: fused layer norm\n//\n"
	".version 8.0\n"
	".target sm_90\n"
	".address_size 64\n\n"
	".visible .entry fused_layernorm_kernel(\n"
	"\t.param .u64 fused_layernorm_kernel_param_0,\n"
	"\t.param .u64 fused_layernorm_kernel_param_1,\n"
	"\t.param .u32 fused_layernorm_kernel_param_2\n"
	")\n{\n\tret;\n}\n";

/* ---- per-rank state ---------------------------------------------------------------------- */

struct rdma {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *src_mr, *dst_mr, *hdr_mr;
	uint8_t *dst;
	size_t bytes;
	struct { uint32_t rank, step; } hdr[2];  /* [0] sent, [1] received */
};

struct rank {
	int id;
	const struct config *cfg;
	ncclUniqueId nccl_id;
	pthread_t thread;
	_Atomic pid_t tid;
	unsigned int faults;          /* faults that apply to this rank */
	bool pinned;

	cudaStream_t stream;
	ncclComm_t comm;
	CUmodule module;
	CUfunction layernorm;
	float *host_batch, *host_out, *host_labels;
	int *host_vote;
	float *dev_batch, *dev_grads, *dev_labels, *dev_params, *dev_m, *dev_v, *dev_act;
	int *dev_vote;
	struct rdma rdma;
	int loader_pipe[2];
	pthread_t loader;
	bool loader_started;
	_Atomic bool loader_stop;

	uint64_t hash;
	int steps_done;
	double step_ms_total;
	int err;
	char errmsg[256];
};

/* Records the first failure of a rank; returns -EIO for `return rank_fail(...)`. */
__attribute__((format(printf, 2, 3))) static int rank_fail(struct rank *rk, const char *fmt, ...)
{
	va_list ap;

	if (rk->errmsg[0] == '\0') {
		va_start(ap, fmt);
		vsnprintf(rk->errmsg, sizeof(rk->errmsg), fmt, ap);
		va_end(ap);
	}
	return -EIO;
}

static int check_cuda(struct rank *rk, cudaError_t e, const char *what)
{
	return e == cudaSuccess ? 0 : rank_fail(rk, "%s: %s", what, cudaGetErrorString(e));
}

static int check_cu(struct rank *rk, CUresult e, const char *what)
{
	const char *s = NULL;

	if (e == CUDA_SUCCESS)
		return 0;
	cuGetErrorString(e, &s);
	return rank_fail(rk, "%s: %s", what, s ? s : "unknown driver error");
}

static int check_nccl(struct rank *rk, ncclResult_t e, const char *what)
{
	return e == ncclSuccess ? 0 : rank_fail(rk, "%s: %s", what, ncclGetErrorString(e));
}

#define CK_CUDA(x) check_cuda(rk, (x), #x)
#define CK_CU(x)   check_cu(rk, (x), #x)
#define CK_NCCL(x) check_nccl(rk, (x), #x)
#define TRY(x)                   \
	do {                     \
		r = (x);         \
		if (r < 0)       \
			goto out; \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* --fault-step usr2: the fault strikes at the first step after SIGUSR2, so that a test can
 * place it inside a window however slow the machine is. */
#define FAULT_STEP_USR2 (-2)
static volatile sig_atomic_t usr2_seen;

static void on_sigusr2(int sig)
{
	(void)sig;
	usr2_seen = 1;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ULL), .tv_nsec = (long)(ns % 1000000000ULL) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void spin_ns(uint64_t ns)
{
	uint64_t end = now_ns() + ns;
	volatile uint64_t sink = 0;

	while (now_ns() < end)
		sink = sink * 6364136223846793005ULL + 1;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, sizeof(w));
		h = (h ^ w) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

/* ---- host memory ------------------------------------------------------------------------- */

static void *host_alloc(struct rank *rk, size_t bytes)
{
	void *p = NULL;

	if (rk->pinned)
		return cudaMallocHost(&p, bytes) == cudaSuccess ? p : NULL;
	return posix_memalign(&p, 4096, bytes) == 0 ? p : NULL;
}

static void host_free(struct rank *rk, void *p)
{
	if (!p)
		return;
	if (rk->pinned)
		cudaFreeHost(p);
	else
		free(p);
}

/* Batch contents: small multiples of 1/4, exact in float, so sums are exact in any order. */
static void load_batch(float *batch, size_t n, int rank, int step)
{
	uint32_t seed = (uint32_t)rank * 40503u + (uint32_t)step * 9973u;

	for (size_t i = 0; i < n; i++) {
		uint32_t x = (uint32_t)i * 2654435761u + seed;

		batch[i] = (float)((int)((x >> 20) & 1023) - 512) * 0.25f;
	}
}

static void load_labels(float *labels, int rank, int step)
{
	for (int i = 0; i < LABEL_FLOATS; i++)
		labels[i] = (float)((rank * 7 + step * 3 + i) % 100);
}

/* ---- data loader thread (fault dataloader-stall) ------------------------------------------ */

static void *loader_main(void *arg)
{
	struct rank *rk = arg;
	const char token = 'b';

	while (!atomic_load(&rk->loader_stop)) {
		sleep_ns(LOADER_PERIOD_NS);
		while (write(rk->loader_pipe[1], &token, 1) < 0 && errno == EINTR)
			;
	}
	return NULL;
}

static int wait_for_batch(struct rank *rk)
{
	char token;
	ssize_t n;

	do
		n = read(rk->loader_pipe[0], &token, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : rank_fail(rk, "data loader pipe: %s", n < 0 ? strerror(errno) : "closed");
}

/* ---- RDMA loopback ----------------------------------------------------------------------- */

static int rdma_setup(struct rank *rk)
{
	struct rdma *d = &rk->rdma;
	struct ibv_device **list = NULL;
	struct ibv_port_attr port;
	struct ibv_qp_init_attr qpa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a;
	int n = 0, r = 0;

	d->bytes = rk->cfg->grad_bytes < RDMA_MAX_BYTES ? rk->cfg->grad_bytes : RDMA_MAX_BYTES;
	list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		r = rank_fail(rk, "ibv_get_device_list: no RDMA device");
		goto out;
	}
	d->ctx = ibv_open_device(list[0]);
	if (!d->ctx || ibv_query_port(d->ctx, 1, &port) != 0 || port.state != IBV_PORT_ACTIVE) {
		r = rank_fail(rk, "ibv_open_device/ibv_query_port failed on %s", ibv_get_device_name(list[0]));
		goto out;
	}
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = d->pd ? ibv_create_cq(d->ctx, 64, NULL, NULL, 0) : NULL;
	if (!d->cq) {
		r = rank_fail(rk, "ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
		goto out;
	}
	qpa.send_cq = qpa.recv_cq = d->cq;
	d->qp = ibv_create_qp(d->pd, &qpa);
	d->dst = calloc(1, d->bytes);
	if (!d->qp || !d->dst) {
		r = rank_fail(rk, "ibv_create_qp: %s", strerror(errno));
		goto out;
	}
	d->src_mr = ibv_reg_mr(d->pd, rk->host_out, rk->cfg->grad_bytes, IBV_ACCESS_LOCAL_WRITE);
	d->dst_mr = ibv_reg_mr(d->pd, d->dst, d->bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	d->hdr_mr = ibv_reg_mr(d->pd, d->hdr, sizeof(d->hdr), IBV_ACCESS_LOCAL_WRITE);
	if (!d->src_mr || !d->dst_mr || !d->hdr_mr) {
		r = rank_fail(rk, "ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
		r = rank_fail(rk, "ibv_modify_qp(INIT) failed");
		goto out;
	}
	/* Loopback: the QP is its own destination. */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = d->qp->qp_num,
				  .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				  .ah_attr = { .dlid = port.lid, .port_num = 1 } };
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
		r = rank_fail(rk, "ibv_modify_qp(RTR) failed");
		goto out;
	}
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				  .max_rd_atomic = 1 };
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
		r = rank_fail(rk, "ibv_modify_qp(RTS) failed");
out:
	if (list)
		ibv_free_device_list(list);
	return r;
}

static void rdma_teardown(struct rdma *d)
{
	if (d->qp)
		ibv_destroy_qp(d->qp);
	if (d->src_mr)
		ibv_dereg_mr(d->src_mr);
	if (d->dst_mr)
		ibv_dereg_mr(d->dst_mr);
	if (d->hdr_mr)
		ibv_dereg_mr(d->hdr_mr);
	if (d->cq)
		ibv_destroy_cq(d->cq);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d->dst);
	memset(d, 0, sizeof(*d));
}

/* RDMA-writes the start of host_out and sends a step header to itself; waits for both. */
static int rdma_step(struct rank *rk, int step)
{
	struct rdma *d = &rk->rdma;
	struct ibv_sge src = { .addr = (uintptr_t)rk->host_out, .length = (uint32_t)d->bytes, .lkey = d->src_mr->lkey };
	struct ibv_sge hs = { .addr = (uintptr_t)&d->hdr[0], .length = sizeof(d->hdr[0]), .lkey = d->hdr_mr->lkey };
	struct ibv_sge hr = { .addr = (uintptr_t)&d->hdr[1], .length = sizeof(d->hdr[1]), .lkey = d->hdr_mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &hr, .num_sge = 1 }, *bad_rwr;
	struct ibv_send_wr send = { .wr_id = 2, .sg_list = &hs, .num_sge = 1, .opcode = IBV_WR_SEND,
				    .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr write = { .wr_id = 1, .next = &send, .sg_list = &src, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				     .wr.rdma = { .remote_addr = (uintptr_t)d->dst, .rkey = d->dst_mr->rkey } };
	struct ibv_send_wr *bad_swr;
	struct ibv_wc wc[4];
	int got = 0;

	d->hdr[0].rank = (uint32_t)rk->id;
	d->hdr[0].step = (uint32_t)step;
	if (ibv_post_recv(d->qp, &rwr, &bad_rwr) != 0 || ibv_post_send(d->qp, &write, &bad_swr) != 0)
		return rank_fail(rk, "ibv_post_recv/ibv_post_send failed");
	while (got < 3) {
		int n = ibv_poll_cq(d->cq, 4, wc);

		if (n < 0)
			return rank_fail(rk, "ibv_poll_cq failed");
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				return rank_fail(rk, "RDMA work request %" PRIu64 ": %s", wc[i].wr_id,
						 ibv_wc_status_str(wc[i].status));
		got += n;
	}
	rk->hash = hash_bytes(rk->hash, d->dst, d->bytes);
	rk->hash = hash_bytes(rk->hash, &d->hdr[1], sizeof(d->hdr[1]));
	return 0;
}

/* ---- checkpoints --------------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Copies parameters to the host and writes them to <dir>/rank<N>.ckpt (via a temporary file
 * and rename), with fsync, on the training thread. The sync-checkpoint fault makes it big,
 * device-synchronising and written in small pieces with an fsync every 4 MiB.
 */
static int write_checkpoint(struct rank *rk)
{
	const struct config *cfg = rk->cfg;
	bool slow = rk->faults & FAULT_SYNC_CHECKPOINT;
	size_t bytes = slow ? SYNC_CKPT_BYTES : cfg->batch_bytes + cfg->grad_bytes;
	size_t piece = slow ? (64U << 10) : (1U << 20), off = 0;
	char path[4096], tmp[4200];
	uint8_t *buf = NULL;
	int fd = -1, r = 0;

	snprintf(path, sizeof(path), "%s/rank%d.ckpt", cfg->checkpoint_dir, rk->id);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	buf = malloc(bytes);
	if (!buf) {
		r = rank_fail(rk, "checkpoint: out of memory");
		goto out;
	}
	if (slow)
		TRY(CK_CUDA(cudaDeviceSynchronize()));
	while (off < bytes) {
		size_t n = bytes - off < cfg->batch_bytes ? bytes - off : cfg->batch_bytes;

		TRY(CK_CUDA(cudaMemcpy(buf + off, rk->dev_batch, n, cudaMemcpyDeviceToHost)));
		off += n;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = rank_fail(rk, "checkpoint: open %s: %s", tmp, strerror(errno));
		goto out;
	}
	for (off = 0; off < bytes; off += piece) {
		size_t n = bytes - off < piece ? bytes - off : piece;

		r = write_all(fd, buf + off, n);
		if (r == 0 && slow && (off + n) % (4U << 20) == 0 && fsync(fd) < 0)
			r = -errno;
		if (r < 0) {
			r = rank_fail(rk, "checkpoint: write %s: %s", tmp, strerror(-r));
			goto out;
		}
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		fd = -1;
		r = rank_fail(rk, "checkpoint: fsync/close %s: %s", tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		r = rank_fail(rk, "checkpoint: rename %s: %s", path, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return r;
}

/* ---- one rank ------------------------------------------------------------------------------ */

static int rank_init(struct rank *rk)
{
	const struct config *cfg = rk->cfg;
	int r;

	/* First, so a rank failing later still lets the others finish initialising. */
	TRY(CK_NCCL(ncclCommInitRank(&rk->comm, cfg->ranks, rk->nccl_id, rk->id)));
	TRY(CK_CUDA(cudaSetDevice(0)));
	TRY(CK_CUDA(cudaStreamCreateWithFlags(&rk->stream, cudaStreamNonBlocking)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_batch, cfg->batch_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_grads, cfg->grad_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_params, cfg->grad_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_m, cfg->grad_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_v, cfg->grad_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_act, cfg->batch_bytes)));
	TRY(CK_CUDA(cudaMalloc((void **)&rk->dev_vote, sizeof(int))));
	TRY(CK_CUDA(cudaMemsetAsync(rk->dev_params, 0, cfg->grad_bytes, rk->stream)));
	rk->host_batch = host_alloc(rk, cfg->batch_bytes);
	rk->host_out = host_alloc(rk, cfg->grad_bytes);
	rk->host_labels = host_alloc(rk, LABEL_FLOATS * sizeof(float));
	rk->host_vote = host_alloc(rk, sizeof(int));
	if (!rk->host_batch || !rk->host_out || !rk->host_labels || !rk->host_vote) {
		r = rank_fail(rk, "host buffers of %zu bytes: out of memory", cfg->batch_bytes);
		goto out;
	}

	TRY(CK_CU(cuInit(0)));
	TRY(CK_CU(cuMemAlloc((CUdeviceptr *)&rk->dev_labels, LABEL_FLOATS * sizeof(float))));
	TRY(CK_CU(cuModuleLoadData(&rk->module, layernorm_ptx)));
	TRY(CK_CU(cuModuleGetFunction(&rk->layernorm, rk->module, "fused_layernorm_kernel")));

	if (cfg->rdma)
		TRY(rdma_setup(rk));
	if (rk->faults & FAULT_DATALOADER) {
		if (pipe2(rk->loader_pipe, O_CLOEXEC) < 0) {
			r = rank_fail(rk, "pipe2: %s", strerror(errno));
			goto out;
		}
		r = -pthread_create(&rk->loader, NULL, loader_main, rk);
		if (r < 0) {
			r = rank_fail(rk, "cannot start the data loader thread: %s", strerror(-r));
			goto out;
		}
		rk->loader_started = true;
	}
	TRY(CK_CUDA(cudaStreamSynchronize(rk->stream)));
out:
	return r;
}

static void rank_fini(struct rank *rk)
{
	if (rk->loader_started) {
		atomic_store(&rk->loader_stop, true);
		pthread_join(rk->loader, NULL);
	}
	if (rk->loader_pipe[0] >= 0)
		close(rk->loader_pipe[0]);
	if (rk->loader_pipe[1] >= 0)
		close(rk->loader_pipe[1]);
	rdma_teardown(&rk->rdma);
	if (rk->module)
		cuModuleUnload(rk->module);
	if (rk->dev_labels)
		cuMemFree((CUdeviceptr)(uintptr_t)rk->dev_labels);
	cudaFree(rk->dev_batch);
	cudaFree(rk->dev_grads);
	cudaFree(rk->dev_params);
	cudaFree(rk->dev_m);
	cudaFree(rk->dev_v);
	cudaFree(rk->dev_act);
	cudaFree(rk->dev_vote);
	host_free(rk, rk->host_batch);
	host_free(rk, rk->host_out);
	host_free(rk, rk->host_labels);
	host_free(rk, rk->host_vote);
	if (rk->stream)
		cudaStreamDestroy(rk->stream);
	if (rk->comm)
		ncclCommDestroy(rk->comm);
	rk->comm = NULL;
}

static int after_launch(struct rank *rk)
{
	int r = CK_CUDA(cudaGetLastError());

	if (r == 0 && (rk->faults & FAULT_EXCESSIVE_SYNC))
		r = CK_CUDA(cudaDeviceSynchronize());
	return r;
}

/*
 * Forward and backward: --kernels launches cycling through four kernels. compute() and
 * train_step() stay real frames (not inlined into rank_main) so that call stacks at the
 * launches read rank_main;train_step;compute;<kernel stub>;cudaLaunchKernel.
 */
__attribute__((noinline)) static int compute(struct rank *rk)
{
	const struct config *cfg = rk->cfg;
	int n = (int)(cfg->grad_bytes / sizeof(float)), r = 0;
	/* grid * block threads at ~1 ns each: 8.4 ms, 1 ms, 12.6 ms, 1 ms of simulated GPU time. */
	static const struct { unsigned int gx, gy; } sizes[] = { { 8192, 4 }, { 4096, 1 }, { 8192, 6 }, { 4096, 1 } };
	dim3 block = { 256, 1, 1 };

	for (int i = 0; i < cfg->kernels && r == 0; i++) {
		dim3 grid = { sizes[i % 4].gx, sizes[i % 4].gy, 1 };

		if (rk->faults & FAULT_SMALL_KERNELS) {
			dim3 g1 = { 1, 1, 1 }, b64 = { 64, 1, 1 };

			for (int j = 0; j < SMALL_KERNELS_PER && r == 0; j++) {
				LAUNCH(elementwise_add_kernel, g1, b64, rk->stream, rk->dev_act, rk->dev_batch,
				       rk->dev_act, 64);
				r = after_launch(rk);
			}
			continue;
		}
		switch (i % 4) {
		case 0:
			LAUNCH(sgemm_fwd_kernel, grid, block, rk->stream, rk->dev_batch, rk->dev_params, rk->dev_act,
			       1024, n / 1024, 1024);
			break;
		case 1:
			LAUNCH(relu_fwd_kernel, grid, block, rk->stream, rk->dev_act, rk->dev_act, n);
			break;
		case 2:
			LAUNCH(sgemm_bwd_kernel, grid, block, rk->stream, rk->dev_act, rk->dev_params, rk->dev_act,
			       1024, n / 1024, 1024);
			break;
		default:
			LAUNCH(relu_bwd_kernel, grid, block, rk->stream, rk->dev_act, rk->dev_act, rk->dev_act, n);
			break;
		}
		r = after_launch(rk);
	}
	return r;
}

__attribute__((noinline)) static int train_step(struct rank *rk, int step)
{
	const struct config *cfg = rk->cfg;
	size_t grad_floats = cfg->grad_bytes / sizeof(float);
	const float *grad_src = (const float *)((const uint8_t *)rk->dev_batch + cfg->batch_bytes - cfg->grad_bytes);
	unsigned int n = (unsigned int)grad_floats;
	void *ln_args[] = { &rk->dev_act, &rk->dev_act, &n };
	bool sync_copies = rk->faults & FAULT_PAGEABLE_MEMCPY;
	dim3 adam_grid = { 8192, 1, 1 }, block = { 256, 1, 1 };
	int r = 0;

	/* Data loading. */
	if (rk->faults & FAULT_DATALOADER)
		TRY(wait_for_batch(rk));
	load_batch(rk->host_batch, cfg->batch_bytes / sizeof(float), rk->id, step);
	load_labels(rk->host_labels, rk->id, step);

	/* Host to device. */
	if (sync_copies)
		TRY(CK_CUDA(cudaMemcpy(rk->dev_batch, rk->host_batch, cfg->batch_bytes, cudaMemcpyHostToDevice)));
	else
		TRY(CK_CUDA(cudaMemcpyAsync(rk->dev_batch, rk->host_batch, cfg->batch_bytes, cudaMemcpyHostToDevice,
					    rk->stream)));
	TRY(CK_CU(cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)rk->dev_labels, rk->host_labels,
				    LABEL_FLOATS * sizeof(float), (CUstream)rk->stream)));

	/* Forward / backward. */
	TRY(compute(rk));
	TRY(CK_CU(cuLaunchKernel(rk->layernorm, 2048, 4, 1, 256, 1, 1, 0, (CUstream)rk->stream, ln_args, NULL)));
	if (rk->faults & FAULT_EXCESSIVE_SYNC)
		TRY(CK_CUDA(cudaDeviceSynchronize()));
	/* "Gradients": the tail of the batch, with the labels written over their head. */
	TRY(CK_CUDA(cudaMemcpyAsync(rk->dev_grads, grad_src, cfg->grad_bytes, cudaMemcpyDeviceToDevice, rk->stream)));
	TRY(CK_CU(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)rk->dev_grads, (CUdeviceptr)(uintptr_t)rk->dev_labels,
				    LABEL_FLOATS * sizeof(float), (CUstream)rk->stream)));

	/* Gradient all-reduce. */
	if ((rk->faults & FAULT_NCCL_HANG) && (step == cfg->fault_step ||
					       (cfg->fault_step == FAULT_STEP_USR2 && usr2_seen))) {
		fprintf(stderr, "trainer: rank %d never enters the all-reduce of step %d (fault nccl-hang)\n", rk->id,
			step);
		for (;;)
			pause();
	}
	if (rk->faults & FAULT_STRAGGLER) {
		/* Host work that needs this step's results (think loss.item() and slow logging). */
		TRY(CK_CUDA(cudaStreamSynchronize(rk->stream)));
		spin_ns(STRAGGLER_NS);
	}
	TRY(CK_NCCL(ncclAllReduce(rk->dev_grads, rk->dev_grads, grad_floats, ncclFloat, ncclSum, rk->comm,
				  rk->stream)));

	/* Optimizer. */
	LAUNCH(adam_update_kernel, adam_grid, block, rk->stream, rk->dev_params, rk->dev_grads, rk->dev_m, rk->dev_v,
	       1e-3f, 0.9f, 0.999f, (int)grad_floats, step + 1);
	TRY(after_launch(rk));

	/* Loss and gradient statistics back to the host. */
	if (sync_copies) {
		TRY(CK_CUDA(cudaStreamSynchronize(rk->stream)));
		TRY(CK_CUDA(cudaMemcpy(rk->host_out, rk->dev_grads, cfg->grad_bytes, cudaMemcpyDeviceToHost)));
	} else {
		TRY(CK_CUDA(cudaMemcpyAsync(rk->host_out, rk->dev_grads, cfg->grad_bytes, cudaMemcpyDeviceToHost,
					    rk->stream)));
	}
	TRY(CK_CUDA(cudaStreamSynchronize(rk->stream)));
	rk->hash = hash_bytes(rk->hash, rk->host_out, cfg->grad_bytes);

	if (rk->faults & FAULT_MEMORY_GROWTH) {
		void *leak;

		TRY(CK_CUDA(cudaMalloc(&leak, LEAK_BYTES)));
	}
	if (cfg->rdma)
		TRY(rdma_step(rk, step));
	if (rk->id == 0 && cfg->checkpoint_every > 0 && (step + 1) % cfg->checkpoint_every == 0)
		TRY(write_checkpoint(rk));
out:
	return r;
}

/* --run-seconds: every rank votes; the max decides, so all ranks stop at the same step. */
static int should_stop(struct rank *rk, uint64_t start_ns)
{
	const struct config *cfg = rk->cfg;
	int r;

	*rk->host_vote = (double)(now_ns() - start_ns) / 1e9 >= cfg->run_seconds;
	TRY(CK_CUDA(cudaMemcpyAsync(rk->dev_vote, rk->host_vote, sizeof(int), cudaMemcpyHostToDevice, rk->stream)));
	TRY(CK_NCCL(ncclAllReduce(rk->dev_vote, rk->dev_vote, 1, ncclInt32, ncclMax, rk->comm, rk->stream)));
	TRY(CK_CUDA(cudaMemcpyAsync(rk->host_vote, rk->dev_vote, sizeof(int), cudaMemcpyDeviceToHost, rk->stream)));
	TRY(CK_CUDA(cudaStreamSynchronize(rk->stream)));
	r = *rk->host_vote != 0;
out:
	return r;
}

static int rank_train(struct rank *rk)
{
	const struct config *cfg = rk->cfg;
	uint64_t start = now_ns();
	int r = 0;

	for (int step = 0; cfg->run_seconds > 0 || step < cfg->steps; step++) {
		uint64_t t0 = now_ns();

		TRY(train_step(rk, step));
		rk->steps_done = step + 1;
		rk->step_ms_total += (double)(now_ns() - t0) / 1e6;
		if (cfg->run_seconds > 0) {
			TRY(should_stop(rk, start));
			if (r == 1) {
				r = 0;
				break;
			}
		}
	}
out:
	return r;
}

/* ---- ranks and the ready line ---------------------------------------------------------------- */

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t init_cond = PTHREAD_COND_INITIALIZER;
static int init_reported, init_failed;

static void *rank_main(void *arg)
{
	struct rank *rk = arg;
	int r;

	atomic_store(&rk->tid, (pid_t)syscall(SYS_gettid));
	r = rank_init(rk);
	pthread_mutex_lock(&init_lock);
	init_reported++;
	init_failed += r < 0;
	pthread_cond_broadcast(&init_cond);
	pthread_mutex_unlock(&init_lock);
	if (r == 0)
		r = rank_train(rk);
	if (r < 0 && rk->comm) {
		/* Wake the other ranks blocked in a collective; they fail in turn. */
		ncclCommAbort(rk->comm);
		rk->comm = NULL;
	}
	rank_fini(rk);
	atomic_store(&rk->tid, 0);
	rk->err = r;
	return NULL;
}

/* ---- --stress: allocator churn and a signal storm ------------------------------------------ */

#define CHURN_THREADS 2
#define CHURN_SLOTS   256

static _Atomic bool stress_stop;
static _Atomic unsigned long n_sigalrm, n_sigusr1;
static pthread_t churn_threads[CHURN_THREADS], signal_thread;
static struct rank *stress_ranks;
static int stress_nranks;

static void on_sigalrm(int sig)
{
	atomic_fetch_add(&n_sigalrm, 1);
}

static void on_sigusr1(int sig)
{
	atomic_fetch_add(&n_sigusr1, 1);
}

static void *churn_main(void *arg)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ (uintptr_t)arg;
	void *slots[CHURN_SLOTS] = { 0 };

	for (unsigned long it = 0; !atomic_load(&stress_stop); it++) {
		size_t i, size;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		i = x % CHURN_SLOTS;
		size = 16 + (x >> 20) % (256U << 10);
		free(slots[i]);
		slots[i] = malloc(size);
		if (slots[i])
			memset(slots[i], (int)i, size < 4096 ? size : 4096);
		if (it % 64 == 0)
			sleep_ns(50000);
	}
	for (int i = 0; i < CHURN_SLOTS; i++)
		free(slots[i]);
	return NULL;
}

/* SIGUSR1 (no SA_RESTART) at the process and at each rank thread in turn, every 500 us. */
static void *signal_main(void *arg)
{
	pid_t pid = getpid();

	for (unsigned long it = 0; !atomic_load(&stress_stop); it++) {
		pid_t tid = atomic_load(&stress_ranks[it % (unsigned long)stress_nranks].tid);

		if (it % 2 == 0)
			kill(pid, SIGUSR1);
		else if (tid > 0)
			syscall(SYS_tgkill, pid, tid, SIGUSR1);
		sleep_ns(500000);
	}
	return NULL;
}

static int stress_start(struct rank *ranks, int nranks)
{
	struct sigaction alrm = { .sa_handler = on_sigalrm, .sa_flags = SA_RESTART };
	struct sigaction usr1 = { .sa_handler = on_sigusr1, .sa_flags = 0 };
	struct itimerval every_ms = { .it_interval = { 0, 1000 }, .it_value = { 0, 1000 } };
	int r;

	stress_ranks = ranks;
	stress_nranks = nranks;
	sigemptyset(&alrm.sa_mask);
	sigemptyset(&usr1.sa_mask);
	if (sigaction(SIGALRM, &alrm, NULL) < 0 || sigaction(SIGUSR1, &usr1, NULL) < 0 ||
	    setitimer(ITIMER_REAL, &every_ms, NULL) < 0)
		return -errno;
	for (int i = 0; i < CHURN_THREADS; i++) {
		r = pthread_create(&churn_threads[i], NULL, churn_main, (void *)(uintptr_t)(i + 1));
		if (r)
			return -r;
	}
	r = pthread_create(&signal_thread, NULL, signal_main, NULL);
	return -r;
}

static void stress_stop_all(void)
{
	struct itimerval off = { 0 };

	atomic_store(&stress_stop, true);
	setitimer(ITIMER_REAL, &off, NULL);
	for (int i = 0; i < CHURN_THREADS; i++)
		pthread_join(churn_threads[i], NULL);
	pthread_join(signal_thread, NULL);
}

/* ---- command line -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: trainer [OPTIONS]\n"
		"Deterministic fake data-parallel training job for aiprof tests (simulated GPU).\n\n"
		"  --ranks N             ranks, one thread each (default 2, max %d)\n"
		"  --rank R --world N --nccl-id-file PATH\n"
		"                        run only rank R of N, one process per rank: rank 0 writes the\n"
		"                        NCCL id to PATH (must not exist), the others wait for it\n"
		"  --steps N             training steps (default 50)\n"
		"  --run-seconds S       run steps until S seconds have elapsed (overrides --steps)\n"
		"  --kernels N           compute kernel launches per step (default 4)\n"
		"  --batch-bytes B       host-to-device batch per rank and step (default 8M; K/M/G suffixes)\n"
		"  --grad-bytes B        gradient bytes all-reduced per step (default batch/4, >= 4K)\n"
		"  --checkpoint-every K  rank 0 writes a checkpoint (+ fsync) every K steps\n"
		"  --checkpoint-dir DIR  where (default: a fresh /tmp/aiprof-trainer-XXXXXX, removed at exit)\n"
		"  --rdma                RDMA write + send through a loopback queue pair every step\n"
		"  --pinned              pinned host buffers (default)\n"
		"  --pageable            pageable host buffers\n"
		"  --stress              allocator churn threads and a SIGALRM/SIGUSR1 storm\n"
		"  --cupti               load libcupti.so.13 at start, as a framework linking CUPTI does\n"
		"  --cupti-subscribe     --cupti, and hold the CUPTI subscription (like Kineto/Nsight)\n"
		"  --fault NAME          plant a fault (repeatable):\n",
		MAX_RANKS);
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		fprintf(f, "                          %-17s %s\n", faults[i].name, faults[i].help);
	fprintf(f,
		"  --fault-rank R        rank affected by straggler/nccl-hang (default: the last); restricts the\n"
		"                        other faults to that rank\n"
		"  --fault-step S        step at which nccl-hang strikes (default: half of --steps, or 10);\n"
		"                        usr2: the first step after the process gets SIGUSR2\n"
		"  --help                this text\n\n"
		"Prints \"ready pid=<pid>\" once initialised, then \"steps=<n>\" and \"checksum=<hex>\" at exit,\n"
		"and step_ms_mean=<ms> on stderr.\n");
}

static int parse_int(const char *s, int min, int max, int *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

static int parse_bytes(const char *s, size_t *ret)
{
	char *end;
	unsigned long long v;
	unsigned int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || v > (1ULL << 40) >> shift)
		return -EINVAL;
	*ret = (size_t)(v << shift);
	return 0;
}

/* Returns 0, or 1 when --help was printed, or -EINVAL after printing the problem. */
static int parse_args(int argc, char **argv, struct config *cfg)
{
	enum { O_RANKS = 256, O_STEPS, O_KERNELS, O_BATCH, O_GRAD, O_CKPT_EVERY, O_CKPT_DIR, O_RDMA, O_PINNED,
	       O_PAGEABLE, O_STRESS, O_FAULT, O_FAULT_RANK, O_FAULT_STEP, O_RUN_SECONDS, O_CUPTI,
	       O_CUPTI_SUBSCRIBE, O_RANK, O_WORLD, O_NCCL_ID_FILE, O_HELP };
	static const struct option opts[] = {
		{ "ranks", required_argument, NULL, O_RANKS },
		{ "steps", required_argument, NULL, O_STEPS },
		{ "kernels", required_argument, NULL, O_KERNELS },
		{ "batch-bytes", required_argument, NULL, O_BATCH },
		{ "grad-bytes", required_argument, NULL, O_GRAD },
		{ "checkpoint-every", required_argument, NULL, O_CKPT_EVERY },
		{ "checkpoint-dir", required_argument, NULL, O_CKPT_DIR },
		{ "rdma", no_argument, NULL, O_RDMA },
		{ "pinned", no_argument, NULL, O_PINNED },
		{ "pageable", no_argument, NULL, O_PAGEABLE },
		{ "stress", no_argument, NULL, O_STRESS },
		{ "fault", required_argument, NULL, O_FAULT },
		{ "fault-rank", required_argument, NULL, O_FAULT_RANK },
		{ "fault-step", required_argument, NULL, O_FAULT_STEP },
		{ "run-seconds", required_argument, NULL, O_RUN_SECONDS },
		{ "cupti", no_argument, NULL, O_CUPTI },
		{ "cupti-subscribe", no_argument, NULL, O_CUPTI_SUBSCRIBE },
		{ "rank", required_argument, NULL, O_RANK },
		{ "world", required_argument, NULL, O_WORLD },
		{ "nccl-id-file", required_argument, NULL, O_NCCL_ID_FILE },
		{ "help", no_argument, NULL, O_HELP },
		{ 0 },
	};
	int c, bad = 0, world = 0;
	bool ranks_given = false;

	*cfg = (struct config){ .ranks = 2, .steps = 50, .kernels = 4, .batch_bytes = 8U << 20,
				.fault_rank = -1, .fault_step = -1, .only_rank = -1 };
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case O_RANKS: bad = parse_int(optarg, 1, MAX_RANKS, &cfg->ranks); ranks_given = true; break;
		case O_RANK: bad = parse_int(optarg, 0, MAX_RANKS - 1, &cfg->only_rank); break;
		case O_WORLD: bad = parse_int(optarg, 1, MAX_RANKS, &world); break;
		case O_NCCL_ID_FILE: cfg->nccl_id_file = optarg; break;
		case O_STEPS: bad = parse_int(optarg, 1, 100000000, &cfg->steps); break;
		case O_KERNELS: bad = parse_int(optarg, 0, 10000, &cfg->kernels); break;
		case O_BATCH: bad = parse_bytes(optarg, &cfg->batch_bytes); break;
		case O_GRAD: bad = parse_bytes(optarg, &cfg->grad_bytes); break;
		case O_CKPT_EVERY: bad = parse_int(optarg, 1, 100000000, &cfg->checkpoint_every); break;
		case O_CKPT_DIR: cfg->checkpoint_dir = optarg; break;
		case O_RDMA: cfg->rdma = true; break;
		case O_PINNED: cfg->pageable = false; break;
		case O_PAGEABLE: cfg->pageable = true; break;
		case O_STRESS: cfg->stress = true; break;
		case O_CUPTI: cfg->cupti = true; break;
		case O_CUPTI_SUBSCRIBE: cfg->cupti = cfg->cupti_subscribe = true; break;
		case O_FAULT_RANK: bad = parse_int(optarg, 0, MAX_RANKS - 1, &cfg->fault_rank); break;
		case O_FAULT_STEP:
			if (strcmp(optarg, "usr2") == 0)
				cfg->fault_step = FAULT_STEP_USR2;
			else
				bad = parse_int(optarg, 0, 100000000, &cfg->fault_step);
			break;
		case O_RUN_SECONDS: {
			char *end;

			errno = 0;
			cfg->run_seconds = strtod(optarg, &end);
			bad = errno || end == optarg || *end || !(cfg->run_seconds > 0) ? -EINVAL : 0;
			break;
		}
		case O_FAULT:
			bad = -EINVAL;
			for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
				if (strcmp(optarg, faults[i].name) == 0) {
					cfg->faults |= faults[i].bit;
					bad = 0;
				}
			}
			break;
		case O_HELP:
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (bad) {
			fprintf(stderr, "trainer: invalid value for --%s: '%s' (see --help)\n", opts[c - O_RANKS].name,
				optarg);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "trainer: unexpected argument '%s' (see --help)\n", argv[optind]);
		return -EINVAL;
	}
	if (cfg->only_rank >= 0 || world > 0 || cfg->nccl_id_file) {
		if (cfg->only_rank < 0 || world == 0 || !cfg->nccl_id_file || ranks_given) {
			fprintf(stderr, "trainer: one rank per process needs --rank, --world and --nccl-id-file "
					"together, and not --ranks (see --help)\n");
			return -EINVAL;
		}
		if (cfg->only_rank >= world) {
			fprintf(stderr, "trainer: --rank must be below --world\n");
			return -EINVAL;
		}
		cfg->ranks = world;
	}
	cfg->batch_bytes &= ~(size_t)3;
	if (cfg->grad_bytes == 0)
		cfg->grad_bytes = cfg->batch_bytes / 4;
	cfg->grad_bytes &= ~(size_t)3;
	if (cfg->grad_bytes < LABEL_FLOATS * sizeof(float) || cfg->grad_bytes > cfg->batch_bytes) {
		fprintf(stderr, "trainer: need %zu <= --grad-bytes <= --batch-bytes\n", LABEL_FLOATS * sizeof(float));
		return -EINVAL;
	}
	if (cfg->fault_rank >= cfg->ranks) {
		fprintf(stderr, "trainer: --fault-rank must be below --ranks\n");
		return -EINVAL;
	}
	if (cfg->fault_step == -1)
		cfg->fault_step = cfg->run_seconds > 0 ? 10 : cfg->steps / 2;
	if ((cfg->faults & FAULT_SYNC_CHECKPOINT) && cfg->checkpoint_every == 0)
		cfg->checkpoint_every = 5;
	return 0;
}

/* Faults of `rank`: targeted faults hit the fault rank only, the others every rank unless
 * --fault-rank narrows them. */
static unsigned int rank_faults(const struct config *cfg, int rank)
{
	int target = cfg->fault_rank >= 0 ? cfg->fault_rank : cfg->ranks - 1;
	unsigned int targeted = FAULT_NCCL_HANG | FAULT_STRAGGLER;
	unsigned int f = cfg->faults & ~targeted;

	if (cfg->fault_rank >= 0 && rank != cfg->fault_rank)
		f = 0;
	if (rank == target)
		f |= cfg->faults & targeted;
	return f;
}

/* No-op callback of the --cupti-subscribe subscription: it enables no callbacks. */
static void CUPTIAPI cupti_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				    const void *data)
{
}

/*
 * --cupti: dlopen("libcupti.so.13") by soname, found through the RUNPATH, and keep it
 * loaded. --cupti-subscribe: take the (single) CUPTI subscription and hold it until exit.
 * Returns 0, or -1 after printing why.
 */
static int cupti_load(const struct config *cfg)
{
	__typeof__(cuptiSubscribe) *subscribe;
	__typeof__(cuptiGetResultString) *result_string;
	CUpti_SubscriberHandle sub;
	const char *why = NULL;
	CUptiResult cr;
	void *lib;

	lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "trainer: --cupti: %s\n", dlerror());
		return -1;
	}
	if (!cfg->cupti_subscribe)
		return 0;
	subscribe = (__typeof__(cuptiSubscribe) *)dlsym(lib, "cuptiSubscribe");
	result_string = (__typeof__(cuptiGetResultString) *)dlsym(lib, "cuptiGetResultString");
	if (!subscribe || !result_string) {
		fprintf(stderr, "trainer: --cupti-subscribe: libcupti.so.13 lacks cuptiSubscribe\n");
		return -1;
	}
	cr = subscribe(&sub, cupti_callback, NULL);
	if (cr != CUPTI_SUCCESS) {
		result_string(cr, &why);
		fprintf(stderr, "trainer: --cupti-subscribe: cuptiSubscribe: %s\n", why ? why : "error");
		return -1;
	}
	return 0;
}

static int remove_checkpoint_dir(const struct config *cfg)
{
	char path[4096];
	int r = 0;

	for (int i = 0; i < cfg->ranks; i++) {
		snprintf(path, sizeof(path), "%s/rank%d.ckpt", cfg->checkpoint_dir, i);
		if (unlink(path) < 0 && errno != ENOENT)
			r = -errno;
		snprintf(path, sizeof(path), "%s/rank%d.ckpt.tmp", cfg->checkpoint_dir, i);
		if (unlink(path) < 0 && errno != ENOENT)
			r = -errno;
	}
	if (rmdir(cfg->checkpoint_dir) < 0)
		r = -errno;
	return r;
}

/* --nccl-id-file, rank 0: publish the id atomically; an existing file is an error (stale). */
static int write_nccl_id(const char *path, const ncclUniqueId *id)
{
	char tmp[4200];
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, id, sizeof(*id)) < 0 || fsync(fd) < 0) {
		r = -errno;
		fprintf(stderr, "trainer: cannot write %s: %s\n", tmp, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	if (r == 0 && link(tmp, path) < 0) {
		r = -errno;
		fprintf(stderr, "trainer: --nccl-id-file %s: %s%s\n", path, strerror(errno),
			errno == EEXIST ? " (left from an earlier run? remove it, or give a fresh path)" : "");
	}
	unlink(tmp);
	return r;
}

/* --nccl-id-file, other ranks: wait up to 120 s for rank 0 to publish the id. */
static int read_nccl_id(const char *path, ncclUniqueId *id)
{
	for (int i = 0; i < 12000; i++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0 && errno != ENOENT) {
			fprintf(stderr, "trainer: cannot open %s: %s\n", path, strerror(errno));
			return -errno;
		}
		if (fd >= 0) {
			n = read(fd, id, sizeof(*id));
			close(fd);
			if (n == (ssize_t)sizeof(*id))
				return 0;
			fprintf(stderr, "trainer: %s is not an NCCL id (%zd bytes)\n", path, n);
			return -EINVAL;
		}
		sleep_ns(10000000);
	}
	fprintf(stderr, "trainer: rank 0 did not write %s within 120 s\n", path);
	return -ETIMEDOUT;
}

int main(int argc, char **argv)
{
	static char tmpdir[] = "/tmp/aiprof-trainer-XXXXXX";
	struct config cfg;
	struct rank *ranks = NULL;
	ncclUniqueId id;
	ncclResult_t nr;
	uint64_t checksum = 0xcbf29ce484222325ULL;
	double ms_total = 0;
	long steps_total = 0;
	int started = 0, failed = 0, nlocal, r;

	r = parse_args(argc, argv, &cfg);
	if (r != 0)
		return r > 0 ? 0 : 2;
	signal(SIGPIPE, SIG_IGN);
	if (cfg.fault_step == FAULT_STEP_USR2) {
		struct sigaction usr2 = { .sa_handler = on_sigusr2, .sa_flags = SA_RESTART };

		sigaction(SIGUSR2, &usr2, NULL);
	}
	if (cfg.cupti && cupti_load(&cfg) < 0)
		return 1;

	if (cfg.checkpoint_every > 0 && !cfg.checkpoint_dir) {
		if (!mkdtemp(tmpdir)) {
			fprintf(stderr, "trainer: mkdtemp %s: %s\n", tmpdir, strerror(errno));
			return 1;
		}
		cfg.checkpoint_dir = tmpdir;
		cfg.checkpoint_dir_is_temp = true;
	} else if (cfg.checkpoint_every > 0 && mkdir(cfg.checkpoint_dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "trainer: mkdir %s: %s\n", cfg.checkpoint_dir, strerror(errno));
		return 1;
	}
	nlocal = cfg.only_rank >= 0 ? 1 : cfg.ranks;
	if (cfg.only_rank > 0) {
		r = read_nccl_id(cfg.nccl_id_file, &id);
		if (r < 0) {
			failed = 1;
			goto out;
		}
	} else {
		nr = ncclGetUniqueId(&id);
		if (nr != ncclSuccess) {
			fprintf(stderr, "trainer: ncclGetUniqueId: %s\n", ncclGetErrorString(nr));
			failed = 1;
			goto out;
		}
		if (cfg.only_rank == 0 && write_nccl_id(cfg.nccl_id_file, &id) < 0) {
			failed = 1;
			goto out;
		}
	}
	ranks = calloc((size_t)nlocal, sizeof(*ranks));
	if (!ranks) {
		fprintf(stderr, "trainer: out of memory\n");
		failed = 1;
		goto out;
	}
	for (int i = 0; i < nlocal; i++) {
		int id_i = cfg.only_rank >= 0 ? cfg.only_rank : i;

		ranks[i] = (struct rank){ .id = id_i, .cfg = &cfg, .nccl_id = id, .faults = rank_faults(&cfg, id_i),
					  .loader_pipe = { -1, -1 }, .hash = 0xcbf29ce484222325ULL };
		ranks[i].pinned = !cfg.pageable && !(ranks[i].faults & FAULT_PAGEABLE_MEMCPY);
	}
	if (cfg.stress) {
		r = stress_start(ranks, nlocal);
		if (r < 0) {
			fprintf(stderr, "trainer: cannot start --stress: %s\n", strerror(-r));
			failed = 1;
			goto out;
		}
	}
	for (; started < nlocal; started++) {
		r = pthread_create(&ranks[started].thread, NULL, rank_main, &ranks[started]);
		if (r) {
			/* The ranks already started wait for this one in ncclCommInitRank forever. */
			fprintf(stderr, "trainer: cannot start rank %d: %s\n", started, strerror(r));
			_exit(1);
		}
	}

	pthread_mutex_lock(&init_lock);
	while (init_reported < nlocal)
		pthread_cond_wait(&init_cond, &init_lock);
	r = init_failed;
	pthread_mutex_unlock(&init_lock);
	/* Every rank has joined the communicator: nobody needs the id file any more. */
	if (cfg.only_rank == 0 && unlink(cfg.nccl_id_file) < 0 && errno != ENOENT)
		fprintf(stderr, "trainer: cannot remove %s: %s\n", cfg.nccl_id_file, strerror(errno));
	if (r == 0) {
		printf("ready pid=%d\n", (int)getpid());
		fflush(stdout);
	}

	for (int i = 0; i < started; i++) {
		pthread_join(ranks[i].thread, NULL);
		if (ranks[i].err < 0) {
			fprintf(stderr, "trainer: rank %d: %s\n", ranks[i].id,
				ranks[i].errmsg[0] ? ranks[i].errmsg : "failed");
			failed = 1;
		}
		checksum = hash_bytes(checksum, &ranks[i].hash, sizeof(ranks[i].hash));
		ms_total += ranks[i].step_ms_total;
		steps_total += ranks[i].steps_done;
	}
	if (cfg.stress) {
		stress_stop_all();
		fprintf(stderr, "stress: sigalrm=%lu sigusr1=%lu\n", atomic_load(&n_sigalrm), atomic_load(&n_sigusr1));
	}
	if (!failed) {
		printf("steps=%d\n", ranks[0].steps_done);
		printf("checksum=%016" PRIx64 "\n", checksum);
		fflush(stdout);
		fprintf(stderr, "step_ms_mean=%.3f\n", steps_total ? ms_total / (double)steps_total : 0.0);
	}
out:
	if (cfg.checkpoint_dir_is_temp) {
		r = remove_checkpoint_dir(&cfg);
		if (r < 0)
			fprintf(stderr, "trainer: cannot remove %s: %s\n", cfg.checkpoint_dir, strerror(-r));
	}
	free(ranks);
	return failed ? 1 : 0;
}
