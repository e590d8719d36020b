/* SPDX-License-Identifier: MIT */
/*
 * GPU-side timing through the CUPTI activity API, when the injector asks for it
 * (AIPROF_COLLECT_CUPTI) and the process can give it: libcuda loaded and initialised,
 * at least one device, libcupti found (never linked: dlopen + dlsym), and no other
 * CUPTI subscriber (Nsight Systems, Kineto). Otherwise hdr->cupti_state says
 * UNAVAILABLE (or UNKNOWN while CUDA is not initialised yet) and hdr->cupti_reason says
 * why; API-level timing from the hooks goes on regardless.
 *
 * Correlation: while active, each launch/copy hook pushes an external correlation id
 * (kind CUSTOM1) around the real call and stores it in its API event. CUPTI reports
 * EXTERNAL_CORRELATION records mapping its own correlation ids to ours; it writes them
 * only in front of the RUNTIME / DRIVER API records of the calls made while the id is
 * pushed, so those two kinds are enabled too (their records are not used). Kernel and
 * memcpy records are emitted as AIPROF_EV_GPU_KERNEL / GPU_MEMCPY with our id, GPU
 * start as ts and end - start as dur, shifted onto CLOCK_MONOTONIC by the offset
 * between cuptiGetTimestamp() and clock_gettime() measured when enabling. Records
 * without timing (start or end 0: work still running at the forced flush when
 * recording stops, or CUPTI could not time it) are dropped.
 *
 * All entry points except push/pop run on the control thread.
 */
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

#define CUPTI_BUF_BYTES   (4u << 20)
#define CORR_SLOTS        65536u          /* power of two */
#define EXT_KIND          CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1

_Atomic int g_cupti_active;

struct cupti_api {
	CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
	CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
					  CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*enable)(CUpti_ActivityKind);
	CUptiResult (*disable)(CUpti_ActivityKind);
	CUptiResult (*flush_all)(uint32_t);
	CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*push_ext)(CUpti_ExternalCorrelationKind, uint64_t);
	CUptiResult (*pop_ext)(CUpti_ExternalCorrelationKind, uint64_t *);
	CUptiResult (*timestamp)(uint64_t *);
	CUptiResult (*result_string)(CUptiResult, const char **);
	CUptiResult (*version)(uint32_t *);
};

typedef CUresult (*cuDeviceGetCount_fn)(int *);

static struct cupti_api g_api;
static bool g_loaded;
static CUpti_SubscriberHandle g_sub;
static int64_t g_ts_offset;                 /* CLOCK_MONOTONIC - CUPTI timestamp */
static _Atomic uint64_t g_next_corr;
static struct lazy_sym g_dev_count = LAZY_SYM("cuDeviceGetCount");
static struct lazy_sym g_export_table = LAZY_SYM("cuGetExportTable");

static pthread_mutex_t g_corr_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_forked_after_cuda;            /* a woken forked child of a process with CUDA */
static struct { uint32_t cupti; uint64_t ext; } g_corr[CORR_SLOTS];

static void set_state(struct aiprof_ring_hdr *h, uint32_t state, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_state(struct aiprof_ring_hdr *h, uint32_t state, const char *fmt, ...)
{
	char buf[sizeof(h->cupti_reason)];
	uint32_t old = atomic_load(&h->cupti_state);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (old == state && strncmp(buf, h->cupti_reason, sizeof(buf)) == 0)
		return;
	memcpy(h->cupti_reason, buf, sizeof(buf));
	atomic_store_explicit(&h->cupti_state, state, memory_order_release);
	lib_status("CUPTI: %s", buf);
}

static const char *cupti_err(CUptiResult r)
{
	const char *s = NULL;

	if (g_api.result_string && g_api.result_string(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "CUPTI error";
}

/* ---- finding libcupti ---------------------------------------------------------------- */

struct find_dir {
	char dir[PATH_MAX];
	bool found;
};

static int find_cudart_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find_dir *fd = data;
	const char *name = info->dlpi_name, *base, *slash;

	if (!name || !(slash = strrchr(name, '/')))
		return 0;
	base = slash + 1;
	if (strncmp(base, "libcudart.so", 12) != 0)
		return 0;
	if ((size_t)(slash - name) >= sizeof(fd->dir))
		return 0;
	memcpy(fd->dir, name, (size_t)(slash - name));
	fd->dir[slash - name] = '\0';
	fd->found = true;
	return 1;
}

static void *open_libcupti(void)
{
	static const char *const names[] = { "libcupti.so.13", "libcupti.so" };
	static const char *const rel[] = { "/libcupti.so.13", "/../extras/CUPTI/lib64/libcupti.so.13" };
	static const char *const abs_paths[] = {
		"/usr/local/cuda/lib64/libcupti.so.13",
		"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
	};
	struct find_dir fd = { .found = false };
	char path[PATH_MAX + 64];
	void *h;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if ((h = dlopen(names[i], RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)))
			return h;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if ((h = dlopen(names[i], RTLD_LAZY | RTLD_LOCAL)))
			return h;
	dl_iterate_phdr(find_cudart_cb, &fd);
	for (size_t i = 0; fd.found && i < ARRAY_SIZE(rel); i++) {
		snprintf(path, sizeof(path), "%s%s", fd.dir, rel[i]);
		if ((h = dlopen(path, RTLD_LAZY | RTLD_LOCAL)))
			return h;
	}
	for (size_t i = 0; i < ARRAY_SIZE(abs_paths); i++)
		if ((h = dlopen(abs_paths[i], RTLD_LAZY | RTLD_LOCAL)))
			return h;
	(void)dlerror();
	return NULL;
}

static int load_api(struct aiprof_ring_hdr *h)
{
	void *lib = open_libcupti();
	struct { const char *name; void **slot; } syms[] = {
		{ "cuptiSubscribe", (void **)&g_api.subscribe },
		{ "cuptiUnsubscribe", (void **)&g_api.unsubscribe },
		{ "cuptiActivityRegisterCallbacks", (void **)&g_api.register_callbacks },
		{ "cuptiActivityEnable", (void **)&g_api.enable },
		{ "cuptiActivityDisable", (void **)&g_api.disable },
		{ "cuptiActivityFlushAll", (void **)&g_api.flush_all },
		{ "cuptiActivityGetNextRecord", (void **)&g_api.next_record },
		{ "cuptiActivityPushExternalCorrelationId", (void **)&g_api.push_ext },
		{ "cuptiActivityPopExternalCorrelationId", (void **)&g_api.pop_ext },
		{ "cuptiGetTimestamp", (void **)&g_api.timestamp },
		{ "cuptiGetResultString", (void **)&g_api.result_string },
		{ "cuptiGetVersion", (void **)&g_api.version },
	};
	uint32_t version = 0;

	if (!lib) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE, "libcupti not found");
		return -ENOENT;
	}
	for (size_t i = 0; i < ARRAY_SIZE(syms); i++) {
		*syms[i].slot = dlsym(lib, syms[i].name);
		if (!*syms[i].slot) {
			(void)dlerror();
			set_state(h, AIPROF_CUPTI_UNAVAILABLE, "libcupti lacks %s", syms[i].name);
			memset(&g_api, 0, sizeof(g_api));
			return -ENOENT;
		}
	}
	if (g_api.version(&version) != CUPTI_SUCCESS || version < CUPTI_API_VERSION) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE,
			  "libcupti API version %u is older than %u", version, CUPTI_API_VERSION);
		memset(&g_api, 0, sizeof(g_api));
		return -ENOTSUP;
	}
	g_loaded = true;        /* libcupti stays loaded: it cannot be unloaded safely */
	return 0;
}

/* ---- activity buffers --------------------------------------------------------------- */

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, CUPTI_BUF_BYTES);
	*size = *buffer ? CUPTI_BUF_BYTES : 0;
	*max_records = 0;
}

static const char *cupti_name(uintptr_t key)
{
	return (const char *)key;
}

static uint32_t copy_kind(uint8_t k)
{
	switch (k) {
	case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return AIPROF_MEMCPY_H2D;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return AIPROF_MEMCPY_D2H;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
	case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return AIPROF_MEMCPY_D2D;
	case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return AIPROF_MEMCPY_H2H;
	default:                              return AIPROF_MEMCPY_DEFAULT;
	}
}

/* Pinned or pageable, as CUPTI saw the host side of a copy: AIPROF_MEMCPY_F_HOST_*. */
static uint32_t host_memory(uint8_t copy, uint8_t src, uint8_t dst)
{
	uint8_t host;

	if (copy == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)
		host = src;
	else if (copy == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)
		host = dst;
	else
		return 0;
	if (host == CUPTI_ACTIVITY_MEMORY_KIND_PINNED)
		return AIPROF_MEMCPY_F_HOST_KNOWN | AIPROF_MEMCPY_F_HOST_PINNED;
	if (host == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE)
		return AIPROF_MEMCPY_F_HOST_KNOWN;
	return 0;
}

/* CUPTI_TIMESTAMP_UNKNOWN in either, or an end before the start: no usable timing. */
static bool timed(uint64_t start, uint64_t end)
{
	return start != CUPTI_TIMESTAMP_UNKNOWN && end != CUPTI_TIMESTAMP_UNKNOWN && end >= start;
}

static uint64_t ext_of(uint32_t cupti_corr)
{
	uint32_t i = cupti_corr & (CORR_SLOTS - 1);

	return g_corr[i].cupti == cupti_corr ? g_corr[i].ext : 0;
}

static struct aiprof_event *gpu_event(struct aiprof_ring_hdr *h, uint16_t type, uint16_t api,
				      uint64_t start, uint64_t end)
{
	struct aiprof_event *e = ring__reserve(h);

	if (!e)
		return NULL;
	e->type = type;
	e->api = api;
	e->tid = 0;
	e->pid = g_pid;
	e->flags = 0;
	e->ts = (uint64_t)((int64_t)start + g_ts_offset);
	e->dur = end > start ? end - start : 0;
	memset(&e->u, 0, sizeof(e->u));
	return e;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				   size_t valid)
{
	struct aiprof_ring_hdr *h = g_ring;
	CUpti_Activity *rec;

	if (!buffer)
		return;
	if (!h || !g_api.next_record)
		goto out;
	pthread_mutex_lock(&g_corr_lock);
	/* pass 1: our ids for CUPTI's correlation ids, wherever they sit in the buffer */
	rec = NULL;
	while (g_api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
			const CUpti_ActivityExternalCorrelation *x = (const void *)rec;
			uint32_t i = x->correlationId & (CORR_SLOTS - 1);

			if (x->externalKind == EXT_KIND) {
				g_corr[i].cupti = x->correlationId;
				g_corr[i].ext = x->externalId;
			}
		}
	}
	rec = NULL;
	while (g_api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
		struct aiprof_event *e;

		if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
		    rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
			const CUpti_ActivityKernel10 *k = (const void *)rec;
			uint32_t name_id;

			if (!timed(k->start, k->end))
				continue;
			/* interned first: the name's strings go out before the record */
			name_id = k->name ? intern__id(h, INTERN_CUPTI_NAME, (uintptr_t)k->name,
						       cupti_name) : 0;
			e = gpu_event(h, AIPROF_EV_GPU_KERNEL, AIPROF_API_gpu_kernel, k->start,
				      k->end);
			if (!e)
				continue;
			e->u.gpu.correlation = ext_of(k->correlationId);
			e->u.gpu.device = k->deviceId;
			e->u.gpu.stream = k->streamId;
			e->u.gpu.name_id = name_id;
			e->u.gpu.grid[0] = (uint32_t)k->gridX;
			e->u.gpu.grid[1] = (uint32_t)k->gridY;
			e->u.gpu.grid[2] = (uint32_t)k->gridZ;
			e->u.gpu.block[0] = (uint32_t)k->blockX;
			e->u.gpu.block[1] = (uint32_t)k->blockY;
			e->u.gpu.block[2] = (uint32_t)k->blockZ;
			ring__commit(h, e);
		} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
			const CUpti_ActivityMemcpy6 *m = (const void *)rec;

			if (!timed(m->start, m->end))
				continue;
			e = gpu_event(h, AIPROF_EV_GPU_MEMCPY, AIPROF_API_gpu_memcpy, m->start,
				      m->end);
			if (!e)
				continue;
			e->u.gpu.correlation = ext_of(m->correlationId);
			e->u.gpu.bytes = m->bytes;
			e->u.gpu.device = m->deviceId;
			e->u.gpu.stream = m->streamId;
			e->u.gpu.kind = copy_kind(m->copyKind);
			e->u.gpu.flags = host_memory(m->copyKind, m->srcKind, m->dstKind);
			ring__commit(h, e);
		}
	}
	pthread_mutex_unlock(&g_corr_lock);
out:
	free(buffer);
}

/* ---- enable / disable ------------------------------------------------------------- */

static void CUPTIAPI subscriber_cb(void *userdata, CUpti_CallbackDomain domain,
				   CUpti_CallbackId cbid, const void *data)
{
	/* subscribed only to own CUPTI (and to learn about competing subscribers) */
}

static void measure_offset(void)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 5; i++) {
		uint64_t a = clk_mono_ns(), c = 0, b;

		if (g_api.timestamp(&c) != CUPTI_SUCCESS)
			return;
		b = clk_mono_ns();
		if (b - a < best) {
			best = b - a;
			g_ts_offset = (int64_t)(a + (b - a) / 2) - (int64_t)c;
		}
	}
}

static void stop_activity(void)
{
	g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	g_api.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
	g_api.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
	g_api.disable(CUPTI_ACTIVITY_KIND_RUNTIME);
	g_api.disable(CUPTI_ACTIVITY_KIND_DRIVER);
}

void cupti__enable(struct aiprof_ring_hdr *h)
{
	cuDeviceGetCount_fn dev_count;
	CUptiResult cr;
	CUresult r;
	int n = 0;

	if (atomic_load(&g_cupti_active))
		return;
	if (g_forked_after_cuda) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE, "a child forked by a process that had "
			  "libcuda loaded: its CUDA state does not survive fork(), CUPTI is not "
			  "started (the calls are still recorded by the hooks)");
		return;
	}
	dev_count = (cuDeviceGetCount_fn)lazy_sym_get(&g_dev_count);
	if (!dev_count) {
		set_state(h, AIPROF_CUPTI_UNKNOWN, "libcuda is not loaded (no CUDA in the process yet)");
		return;
	}
	r = dev_count(&n);
	if (r == CUDA_ERROR_NOT_INITIALIZED) {
		set_state(h, AIPROF_CUPTI_UNKNOWN, "CUDA driver not initialised yet; will retry");
		return;
	}
	if (r != CUDA_SUCCESS || n <= 0) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE, "no CUDA device (cuDeviceGetCount: %d, %d devices)",
			  (int)r, n);
		return;
	}
	/* CUPTI talks to the driver through its export tables: with a stand-in libcuda that
	 * lacks even the entry point, CUPTI could only fail in obscure ways */
	if (!lazy_sym_get(&g_export_table)) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE,
			  "libcuda has no cuGetExportTable: not an NVIDIA driver");
		return;
	}
	if (!g_loaded && load_api(h) < 0)
		return;
	cr = g_api.subscribe(&g_sub, subscriber_cb, NULL);
	if (cr == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE,
			  "another CUPTI subscriber is active (Nsight/Kineto)");
		return;
	}
	if (cr != CUPTI_SUCCESS) {
		set_state(h, AIPROF_CUPTI_UNAVAILABLE, "cuptiSubscribe: %s", cupti_err(cr));
		return;
	}
	cr = g_api.register_callbacks(buf_requested, buf_completed);
	if (cr == CUPTI_SUCCESS)
		cr = g_api.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
	/* no external correlation records without the API records they precede */
	if (cr == CUPTI_SUCCESS)
		cr = g_api.enable(CUPTI_ACTIVITY_KIND_RUNTIME);
	if (cr == CUPTI_SUCCESS)
		cr = g_api.enable(CUPTI_ACTIVITY_KIND_DRIVER);
	if (cr == CUPTI_SUCCESS)
		cr = g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (cr == CUPTI_SUCCESS)
		cr = g_api.enable(CUPTI_ACTIVITY_KIND_MEMCPY);
	if (cr != CUPTI_SUCCESS) {
		stop_activity();
		g_api.unsubscribe(g_sub);
		set_state(h, AIPROF_CUPTI_UNAVAILABLE, "enabling CUPTI activity: %s",
			  cupti_err(cr));
		return;
	}
	measure_offset();
	atomic_store(&g_cupti_active, 1);
	set_state(h, AIPROF_CUPTI_ACTIVE, "activity records: kernels, memcpy (%d devices)", n);
}

void cupti__disable(struct aiprof_ring_hdr *h)
{
	if (!atomic_exchange(&g_cupti_active, 0))
		return;
	g_api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	stop_activity();
	g_api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	g_api.unsubscribe(g_sub);   /* let Kineto / Nsight subscribe after us */
	lib_status("CUPTI: flushed and stopped");
}

uint64_t cupti__push(void)
{
	uint64_t id = atomic_fetch_add_explicit(&g_next_corr, 1, memory_order_relaxed) + 1;

	if (!g_api.push_ext || g_api.push_ext(EXT_KIND, id) != CUPTI_SUCCESS)
		return 0;
	return id;
}

void cupti__pop(void)
{
	uint64_t last;

	if (g_api.pop_ext)
		g_api.pop_ext(EXT_KIND, &last);
}

/* In a forked child, only the forking thread exists: the lock may be held by one that is
 * gone (lib.c atfork_child). */
void cupti__atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&g_corr_lock, &fresh, sizeof(fresh));
}

static int find_libcuda_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	const char *base = slash ? slash + 1 : info->dlpi_name;

	(void)size;
	if (base && strncmp(base, "libcuda.so", 10) == 0) {
		*(bool *)data = true;
		return 1;
	}
	return 0;
}

/*
 * A forked child is being woken (lib.c aiprof_rearm). Where its parent had the driver
 * loaded, the child's CUDA state is the parent's, which CUDA does not support after fork():
 * CUPTI started there crashed the child (NVIDIA's libcupti beside a driver that a fork
 * left behind). Its calls are still recorded by the hooks; a child that loads the driver
 * itself after the fork gets CUPTI as any process does.
 */
void cupti__rearm_child(void)
{
	bool cuda = false;

	dl_iterate_phdr(find_libcuda_cb, &cuda);
	g_forked_after_cuda = cuda;
}
