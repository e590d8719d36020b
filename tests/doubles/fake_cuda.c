/* SPDX-License-Identifier: MIT */
/*
 * Fake CUDA driver, built as libcuda.so.1 for tests on machines without a GPU. Compiled
 * against the real <cuda.h>: where the header renames an entry point (cuMemAlloc ->
 * cuMemAlloc_v2, cuCtxCreate -> cuCtxCreate_v4, cuMemcpyHtoD -> cuMemcpyHtoD_v2 ...) the
 * definitions below carry the versioned name a program built against the header links to,
 * and the compiler checks the signature. Like the real libcuda.so.1 the exports have no
 * version node.
 *
 * One simulated device (gpu_sim.h: timing model), independent of the fake runtime: this
 * library never calls libcudart. Modules loaded from PTX text know their `.entry` names,
 * and cuModuleGetFunction fails with CUDA_ERROR_NOT_FOUND for others; cubin/fatbin images
 * accept any name. Leniency: calls made before cuInit or without a current context work
 * (with the real stack the runtime would have initialised the driver).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cupti_driver_cbid.h>

#include "tests/doubles/cudart_abi.h"
#include "tests/doubles/fake_cuda.h"
#include "tests/doubles/gpu_sim.h"

#define FAKE_TOTAL_MEM   (80ULL << 30)
#define FAKE_DEVICE_NAME "aiprof fake GPU (simulated)"
#define CTX_MAGIC        0x5854434b41464bULL
#define MOD_MAGIC        0x444f4d4b41464bULL
#define FUNC_MAGIC       0x434e554b41464bULL
#define MALLOC_HOST_NS   20000ULL

/* Older entry point the header only declares with __CUDA_API_VERSION_INTERNAL. */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

struct CUctx_st {
	uint64_t magic;
	unsigned int flags;
	bool primary;
};

struct CUfunc_st {
	uint64_t magic;
	char *name;
	struct CUmod_st *mod;
	struct CUfunc_st *next;
};

struct CUmod_st {
	uint64_t magic;
	char **entries;            /* .entry names for PTX images; NULL: accept any name */
	size_t n_entries;
	struct CUfunc_st *funcs;   /* handles handed out, freed by cuModuleUnload */
	pthread_mutex_t lock;
};

static struct sim_device dev = SIM_DEVICE_INIT(dev);
static struct sim_ranges ranges = SIM_RANGES_INIT;
static struct CUctx_st primary_ctx = { .magic = CTX_MAGIC, .primary = true };
static __thread CUcontext current_ctx;

static struct CUstream_st *stream_get(CUstream s, bool ptds)
{
	if (s == NULL)
		return ptds ? sim_device__per_thread_stream(&dev) : &dev.legacy;
	if (s == CU_STREAM_LEGACY)
		return &dev.legacy;
	if (s == CU_STREAM_PER_THREAD)
		return sim_device__per_thread_stream(&dev);
	if (s->magic != SIM_STREAM_MAGIC)
		return NULL;
	return s;
}

static bool event_ok(CUevent e)
{
	return e && e->magic == SIM_EVENT_MAGIC;
}

static void *dptr(CUdeviceptr p)
{
	return (void *)(uintptr_t)p;
}

/* ---- errors, initialisation, devices --------------------------------------------------- */

static const struct {
	CUresult code;
	const char *name;
	const char *text;
} errors[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	  "part or all of the requested memory range is already mapped" },
	{ CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	  "pointer does not correspond to a registered memory region" },
	{ CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == error) {
			*pStr = errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == error) {
			*pStr = errors[i].name;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/*
 * Like the real driver, the first cuInit loads the tool CUDA_INJECTION64_PATH names (how
 * Nsight Systems and DCGM get in) and calls its InitializeInjection(); a tool that cannot
 * be loaded or lacks the entry point is skipped.
 */
static void load_injection(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;

	if (init)
		init();
}

CUresult cuInit(unsigned int Flags)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&once, load_injection);
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = 1;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev_ord)
{
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev_ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "%s", FAKE_DEVICE_NAME);
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev_ord)
{
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev_ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = FAKE_TOTAL_MEM;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev_ord)
{
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev_ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
	default: *pi = 0; break;
	}
	return CUDA_SUCCESS;
}

/* ---- contexts ---------------------------------------------------------------------------- */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev_ord)
{
	struct CUctx_st *c;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev_ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->magic = CTX_MAGIC;
	c->flags = flags;
	current_ctx = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
			CUdevice dev_ord)
{
	return ctx_create(pctx, flags, dev_ord);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev_ord)
{
	return ctx_create(pctx, flags, dev_ord);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	if (!ctx || ctx->magic != CTX_MAGIC || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	sim__sleep_until(sim_device__idle_at(&dev));
	if (current_ctx == ctx)
		current_ctx = NULL;
	ctx->magic = 0;
	free(ctx);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev_ord)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev_ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*pctx = &primary_ctx;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev_ord)
{
	return dev_ord == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (ctx && ctx->magic != CTX_MAGIC)
		return CUDA_ERROR_INVALID_CONTEXT;
	current_ctx = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = 0;
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
	sim__sleep_until(sim_device__idle_at(&dev));
	return CUDA_SUCCESS;
}

/* ---- modules and functions --------------------------------------------------------------- */

static bool is_ident(int c)
{
	return isalnum(c) || c == '_' || c == '$' || c == '.';
}

/* Collects the `.entry NAME` directives of PTX text. Returns 0 or -ENOMEM. */
static int ptx_entries(const char *ptx, struct CUmod_st *m)
{
	for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p, ".entry")) {
		const char *q = p + strlen(".entry"), *start;
		char **v;

		if (!isspace((unsigned char)*q)) {
			p = q;
			continue;
		}
		while (isspace((unsigned char)*q))
			q++;
		start = q;
		while (*q && is_ident((unsigned char)*q))
			q++;
		p = q;
		if (q == start)
			continue;
		v = realloc(m->entries, (m->n_entries + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->entries = v;
		v[m->n_entries] = strndup(start, (size_t)(q - start));
		if (!v[m->n_entries])
			return -ENOMEM;
		m->n_entries++;
	}
	return 0;
}

static void module_free(struct CUmod_st *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_entries; i++)
		free(m->entries[i]);
	free(m->entries);
	while (m->funcs) {
		struct CUfunc_st *f = m->funcs;

		m->funcs = f->next;
		f->magic = 0;
		free(f->name);
		free(f);
	}
	pthread_mutex_destroy(&m->lock);
	m->magic = 0;
	free(m);
}

static CUresult module_load(CUmodule *module, const void *image)
{
	static const unsigned char elf_magic[4] = { 0x7f, 'E', 'L', 'F' };
	const uint32_t fatbin_magic = 0xba55ed50;
	struct CUmod_st *m;
	uint32_t word;

	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->magic = MOD_MAGIC;
	pthread_mutex_init(&m->lock, NULL);
	memcpy(&word, image, sizeof(word));
	if (memcmp(image, elf_magic, sizeof(elf_magic)) != 0 && word != fatbin_magic) {
		const char *ptx = image;

		if (!strstr(ptx, ".entry") && !strstr(ptx, ".version")) {
			module_free(m);
			return CUDA_ERROR_INVALID_IMAGE;
		}
		if (ptx_entries(ptx, m) < 0) {
			module_free(m);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	/* JIT compilation is not free. */
	sim__sleep_until(sim__now_ns() + 200000);
	*module = m;
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	return module_load(module, image);
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
			    CUjit_option *options, void **optionValues)
{
	return module_load(module, image);
}

CUresult cuModuleUnload(CUmodule hmod)
{
	if (!hmod || hmod->magic != MOD_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	module_free(hmod);
	return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct CUfunc_st *f;
	bool known = false;
	CUresult r = CUDA_SUCCESS;

	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!hmod || hmod->magic != MOD_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&hmod->lock);
	for (f = hmod->funcs; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			goto out;
	for (size_t i = 0; i < hmod->n_entries; i++)
		known = known || strcmp(hmod->entries[i], name) == 0;
	if (hmod->entries && !known) {
		r = CUDA_ERROR_NOT_FOUND;
		goto out;
	}
	f = calloc(1, sizeof(*f));
	if (!f || !(f->name = strdup(name))) {
		free(f);
		f = NULL;
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	f->magic = FUNC_MAGIC;
	f->mod = hmod;
	f->next = hmod->funcs;
	hmod->funcs = f;
out:
	pthread_mutex_unlock(&hmod->lock);
	if (r == CUDA_SUCCESS)
		*hfunc = f;
	return r;
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!hfunc || hfunc->magic != FUNC_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = hfunc->name;
	return CUDA_SUCCESS;
}

/* A kernel handle of the fake runtime's (__cudaGetKernel): see tests/doubles/cudart_abi.h. */
CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!hfunc || hfunc->magic != FAKE_KERNEL_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = hfunc->name;
	return CUDA_SUCCESS;
}

CUresult cu__launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
		    unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
		    void **extra, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);
	uint64_t block = (uint64_t)bx * by * bz;

	if (!f || f->magic != FUNC_MAGIC || !s)
		return CUDA_ERROR_INVALID_HANDLE;
	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gx || !gy || !gz || gx > 0x7fffffffu || gy > 65535 || gz > 65535 || !bx || !by || !bz ||
	    bx > 1024 || by > 1024 || bz > 64 || block > 1024 || shmem > 227 * 1024)
		return CUDA_ERROR_INVALID_VALUE;
	sim_device__launch(&dev, s, &(struct sim_work){
		.api = FAKEGPU_API_DRIVER,
		.cbid = ptds ? CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz : CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
		.name = f->name, .grid = { gx, gy, gz }, .block = { bx, by, bz }, .shmem = shmem });
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	return cu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			  sharedMemBytes, hStream, kernelParams, extra, false);
}

/* ---- memory ------------------------------------------------------------------------------ */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr_out, size_t bytesize)
{
	void *p = NULL;

	if (!dptr_out || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim__sleep_until(sim__now_ns() + MALLOC_HOST_NS);
	if (sim_ranges__device_bytes(&ranges) + bytesize > FAKE_TOTAL_MEM)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (posix_memalign(&p, 256, bytesize) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (sim_ranges__add(&ranges, p, bytesize, SIM_MEM_DEVICE) < 0) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr_out = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	if (sim_ranges__remove(&ranges, dptr(p), SIM_MEM_DEVICE) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim__sleep_until(sim_device__idle_at(&dev));
	free(dptr(p));
	return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	size_t used = sim_ranges__device_bytes(&ranges);

	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	*total = FAKE_TOTAL_MEM;
	*free_bytes = used < FAKE_TOTAL_MEM ? FAKE_TOTAL_MEM - used : 0;
	return CUDA_SUCCESS;
}

static CUresult host_alloc(void **pp, size_t bytesize)
{
	void *p = NULL;

	if (!pp || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim__sleep_until(sim__now_ns() + MALLOC_HOST_NS);
	if (posix_memalign(&p, 4096, bytesize) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (sim_ranges__add(&ranges, p, bytesize, SIM_MEM_PINNED) < 0) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return host_alloc(pp, bytesize);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (Flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				    CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc(pp, bytesize);
}

CUresult cuMemFreeHost(void *p)
{
	if (sim_ranges__remove(&ranges, p, SIM_MEM_PINNED) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim__sleep_until(sim_device__idle_at(&dev));
	free(p);
	return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	int r;

	if (!p || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = sim_ranges__add(&ranges, p, bytesize, SIM_MEM_REGISTERED);
	if (r == -EEXIST)
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	return r < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p)
{
	if (sim_ranges__remove(&ranges, p, SIM_MEM_REGISTERED) < 0)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	return CUDA_SUCCESS;
}

/* The entry point behind cu__memcpy: [dir][async][ptds]. */
static const uint32_t memcpy_cbids[4][2][2] = {
	[CU_COPY_HTOD] = { { CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds },
			   { CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
			     CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz } },
	[CU_COPY_DTOH] = { { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds },
			   { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
			     CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz } },
	[CU_COPY_DTOD] = { { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds },
			   { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
			     CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz } },
	[CU_COPY_UNIFIED] = { { CUPTI_DRIVER_TRACE_CBID_cuMemcpy, CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds },
			      { CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz } },
};

/* The entry point behind cu__memset: [elem_size == 4][async][ptds]. */
static const uint32_t memset_cbids[2][2][2] = {
	{ { CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds },
	  { CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz } },
	{ { CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds },
	  { CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz } },
};

CUresult cu__memcpy(void *dst, const void *src, size_t bytes, enum cu_copy_dir dir, CUstream stream,
		    bool async, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);
	enum sim_mem dk = sim_ranges__lookup(&ranges, dst, NULL);
	enum sim_mem sk = sim_ranges__lookup(&ranges, src, NULL);

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	if (bytes == 0)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	switch (dir) {
	case CU_COPY_HTOD:
		dk = SIM_MEM_DEVICE;
		sk = sk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : sk;
		break;
	case CU_COPY_DTOH:
		sk = SIM_MEM_DEVICE;
		dk = dk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : dk;
		break;
	case CU_COPY_DTOD:
		dk = sk = SIM_MEM_DEVICE;
		break;
	case CU_COPY_UNIFIED:
		break;
	}
	sim_device__copy(&dev, s, dst, dk, src, sk, bytes, &(struct sim_work){
		.api = FAKEGPU_API_DRIVER, .cbid = memcpy_cbids[dir][async][ptds], .async = async });
	return CUDA_SUCCESS;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return cu__memcpy(dptr(dst), dptr(src), ByteCount, CU_COPY_UNIFIED, NULL, false, false);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dptr(dst), dptr(src), ByteCount, CU_COPY_UNIFIED, hStream, true, false);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return cu__memcpy(dptr(dstDevice), srcHost, ByteCount, CU_COPY_HTOD, NULL, false, false);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return cu__memcpy(dstHost, dptr(srcDevice), ByteCount, CU_COPY_DTOH, NULL, false, false);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return cu__memcpy(dptr(dstDevice), dptr(srcDevice), ByteCount, CU_COPY_DTOD, NULL, false, false);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
			      CUstream hStream)
{
	return cu__memcpy(dptr(dstDevice), srcHost, ByteCount, CU_COPY_HTOD, hStream, true, false);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	return cu__memcpy(dstHost, dptr(srcDevice), ByteCount, CU_COPY_DTOH, hStream, true, false);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
			      CUstream hStream)
{
	return cu__memcpy(dptr(dstDevice), dptr(srcDevice), ByteCount, CU_COPY_DTOD, hStream, true, false);
}

CUresult cu__memset(CUdeviceptr dst, unsigned int value, size_t elem_size, size_t n, CUstream stream,
		    bool async, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);
	void *p = dptr(dst);
	enum sim_mem k = sim_ranges__lookup(&ranges, p, NULL);
	struct sim_work work = { .api = FAKEGPU_API_DRIVER, .cbid = memset_cbids[elem_size == 4][async][ptds],
				 .value = value, .async = async };

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	if (n == 0)
		return CUDA_SUCCESS;
	if (k == SIM_MEM_PAGEABLE || (uintptr_t)p % elem_size)
		return CUDA_ERROR_INVALID_VALUE;
	if (elem_size == 1) {
		sim_device__memset(&dev, s, p, k, (int)(value & 0xff), n, false, &work);
	} else {
		uint32_t *w = p;

		/* Time it like a byte memset of the same size, then fill the 32-bit pattern. */
		sim_device__memset(&dev, s, p, k, 0, n * 4, false, &work);
		for (size_t i = 0; i < n; i++)
			w[i] = value;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return cu__memset(dstDevice, uc, 1, N, NULL, false, false);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return cu__memset(dstDevice, ui, 4, N, NULL, false, false);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return cu__memset(dstDevice, uc, 1, N, hStream, true, false);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return cu__memset(dstDevice, ui, 4, N, hStream, true, false);
}

/* ---- streams and events ------------------------------------------------------------------ */

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
	struct CUstream_st *s;

	if (!ph || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->flags = flags;
	s->blocking = !(flags & CU_STREAM_NON_BLOCKING);
	s->priority = priority;
	sim_device__add_stream(&dev, s);
	*ph = s;
	return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return stream_create(phStream, Flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	return stream_create(phStream, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
	if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
	    hStream->magic != SIM_STREAM_MAGIC || hStream->per_thread)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_device__remove_stream(&dev, hStream);
	free(hStream);
	return CUDA_SUCCESS;
}

CUresult cu__stream_sync(CUstream stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	sim__sleep_until(sim_device__stream_done(&dev, s));
	return CUDA_SUCCESS;
}

CUresult cu__stream_query(CUstream stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	return sim__now_ns() >= sim_device__stream_done(&dev, s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cu__stream_wait_event(CUstream stream, CUevent event, unsigned int flags, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s || !event_ok(event))
		return CUDA_ERROR_INVALID_HANDLE;
	if (event->recorded)
		sim_device__stream_wait(&dev, s, event->when);
	return CUDA_SUCCESS;
}

CUresult cu__event_record(CUevent event, CUstream stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s || !event_ok(event))
		return CUDA_ERROR_INVALID_HANDLE;
	event->when = sim_device__enqueue(&dev, s, 0);
	event->recorded = true;
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	return cu__stream_sync(hStream, false);
}

CUresult cuStreamQuery(CUstream hStream)
{
	return cu__stream_query(hStream, false);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	return cu__stream_wait_event(hStream, hEvent, Flags, false);
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	struct CUevent_st *e;

	if (!phEvent || (Flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = SIM_EVENT_MAGIC;
	e->flags = Flags;
	*phEvent = e;
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return cu__event_record(hEvent, hStream, false);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
	if (!event_ok(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (hEvent->recorded)
		sim__sleep_until(hEvent->when);
	return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent hEvent)
{
	if (!event_ok(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	return !hEvent->recorded || sim__now_ns() >= hEvent->when ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	uint64_t now = sim__now_ns();

	if (!pMilliseconds)
		return CUDA_ERROR_INVALID_VALUE;
	if (!event_ok(hStart) || !event_ok(hEnd) || !hStart->recorded || !hEnd->recorded ||
	    ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_HANDLE;
	if (now < hStart->when || now < hEnd->when)
		return CUDA_ERROR_NOT_READY;
	*pMilliseconds = (float)(((double)hEnd->when - (double)hStart->when) / 1e6);
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
	if (!event_ok(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	hEvent->magic = 0;
	free(hEvent);
	return CUDA_SUCCESS;
}

/* ---- export tables -------------------------------------------------------------------------- */

/*
 * The real driver hands out its private interfaces here (libcudart and CUPTI run on them).
 * This double has none: every table id is answered CUDA_ERROR_NOT_SUPPORTED, so a real
 * libcupti loaded next to it fails cleanly instead of calling into nothing. (The fake
 * CUPTI uses __fakegpu_set_activity_sink instead, see fakegpu_activity.h.)
 */
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	*ppExportTable = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- cuGetProcAddress -------------------------------------------------------------------- */

/* Per-thread default stream variants, defined in fake_cuda_ptds.c. */
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
				   CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
				   CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
				   CUstream hStream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra);

#define PROC(name, legacy, ptds) { name, (void *)(legacy), (void *)(ptds) }

/* Base name (as cuGetProcAddress takes it) -> newest entry point, legacy and per-thread. */
static const struct proc {
	const char *name;
	void *legacy, *ptds;
} procs[] = {
	PROC("cuGetErrorString", cuGetErrorString, NULL),
	PROC("cuGetErrorName", cuGetErrorName, NULL),
	PROC("cuInit", cuInit, NULL),
	PROC("cuDriverGetVersion", cuDriverGetVersion, NULL),
	PROC("cuDeviceGet", cuDeviceGet, NULL),
	PROC("cuDeviceGetCount", cuDeviceGetCount, NULL),
	PROC("cuDeviceGetName", cuDeviceGetName, NULL),
	PROC("cuDeviceTotalMem", cuDeviceTotalMem_v2, NULL),
	PROC("cuDeviceGetAttribute", cuDeviceGetAttribute, NULL),
	PROC("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, NULL),
	PROC("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, NULL),
	PROC("cuCtxCreate", cuCtxCreate_v4, NULL),
	PROC("cuCtxDestroy", cuCtxDestroy_v2, NULL),
	PROC("cuCtxSetCurrent", cuCtxSetCurrent, NULL),
	PROC("cuCtxGetCurrent", cuCtxGetCurrent, NULL),
	PROC("cuCtxGetDevice", cuCtxGetDevice, NULL),
	PROC("cuCtxSynchronize", cuCtxSynchronize, NULL),
	PROC("cuModuleLoadData", cuModuleLoadData, NULL),
	PROC("cuModuleLoadDataEx", cuModuleLoadDataEx, NULL),
	PROC("cuModuleUnload", cuModuleUnload, NULL),
	PROC("cuModuleGetFunction", cuModuleGetFunction, NULL),
	PROC("cuFuncGetName", cuFuncGetName, NULL),
	PROC("cuKernelGetName", cuKernelGetName, NULL),
	PROC("cuLaunchKernel", cuLaunchKernel, cuLaunchKernel_ptsz),
	PROC("cuMemAlloc", cuMemAlloc_v2, NULL),
	PROC("cuMemFree", cuMemFree_v2, NULL),
	PROC("cuMemGetInfo", cuMemGetInfo_v2, NULL),
	PROC("cuMemAllocHost", cuMemAllocHost_v2, NULL),
	PROC("cuMemHostAlloc", cuMemHostAlloc, NULL),
	PROC("cuMemFreeHost", cuMemFreeHost, NULL),
	PROC("cuMemHostRegister", cuMemHostRegister_v2, NULL),
	PROC("cuMemHostUnregister", cuMemHostUnregister, NULL),
	PROC("cuMemcpy", cuMemcpy, cuMemcpy_ptds),
	PROC("cuMemcpyAsync", cuMemcpyAsync, cuMemcpyAsync_ptsz),
	PROC("cuMemcpyHtoD", cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
	PROC("cuMemcpyDtoH", cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
	PROC("cuMemcpyDtoD", cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
	PROC("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
	PROC("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
	PROC("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
	PROC("cuMemsetD8", cuMemsetD8_v2, cuMemsetD8_v2_ptds),
	PROC("cuMemsetD32", cuMemsetD32_v2, cuMemsetD32_v2_ptds),
	PROC("cuMemsetD8Async", cuMemsetD8Async, cuMemsetD8Async_ptsz),
	PROC("cuMemsetD32Async", cuMemsetD32Async, cuMemsetD32Async_ptsz),
	PROC("cuStreamCreate", cuStreamCreate, NULL),
	PROC("cuStreamCreateWithPriority", cuStreamCreateWithPriority, NULL),
	PROC("cuStreamDestroy", cuStreamDestroy_v2, NULL),
	PROC("cuStreamSynchronize", cuStreamSynchronize, cuStreamSynchronize_ptsz),
	PROC("cuStreamQuery", cuStreamQuery, cuStreamQuery_ptsz),
	PROC("cuStreamWaitEvent", cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
	PROC("cuEventCreate", cuEventCreate, NULL),
	PROC("cuEventRecord", cuEventRecord, cuEventRecord_ptsz),
	PROC("cuEventSynchronize", cuEventSynchronize, NULL),
	PROC("cuEventQuery", cuEventQuery, NULL),
	PROC("cuEventElapsedTime", cuEventElapsedTime_v2, NULL),
	PROC("cuEventDestroy", cuEventDestroy_v2, NULL),
	PROC("cuGetProcAddress", cuGetProcAddress_v2, NULL),
	PROC("cuGetExportTable", cuGetExportTable, NULL),
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].name, symbol) != 0)
			continue;
		*pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && procs[i].ptds ?
			       procs[i].ptds : procs[i].legacy;
		if (symbolStatus)
			*symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
		return CUDA_SUCCESS;
	}
	*pfn = NULL;
	if (symbolStatus)
		*symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}
