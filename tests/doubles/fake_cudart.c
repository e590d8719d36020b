/* SPDX-License-Identifier: MIT */
/*
 * Fake CUDA runtime, built as libcudart.so.13 for tests on machines without a GPU.
 * Compiled against the real <cuda_runtime_api.h>, so every exported signature is checked;
 * exported with the real version node (libcudart.so.13, see libcudart.map).
 *
 * One simulated device (gpu_sim.h: timing model). Device memory is host memory from
 * posix_memalign(256); device and pinned allocations are kept in thread-safe range tables
 * so cudaPointerGetAttributes and cudaMemcpyDefault can classify pointers.
 *
 * Deliberate leniencies: kernels launched with a host function that was never registered
 * with __cudaRegisterFunction are accepted (real CUDA: cudaErrorInvalidDeviceFunction);
 * kernels do not execute, they only take simulated time. No call goes to libcuda.so.1.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>

#include "tests/doubles/cudart_abi.h"
#include "tests/doubles/fake_cudart.h"
#include "tests/doubles/gpu_sim.h"

#define FAKE_TOTAL_MEM   (80ULL << 30)
#define FAKE_DEVICE_NAME "aiprof fake GPU (simulated)"
#define MALLOC_HOST_NS   20000ULL

static struct sim_device dev = SIM_DEVICE_INIT(dev);
static struct sim_ranges ranges = SIM_RANGES_INIT;
static __thread cudaError_t last_error;

/*
 * The real runtime is not linked against the driver: its first call dlopen()s libcuda.so.1
 * and initialises it, so a program that links only the runtime (nvcc's default) has
 * libcuda in its maps from then on. The double does the same when it is loaded, which every
 * program of the tests reaches before its first call.
 */
__attribute__((constructor)) static void load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*init)(unsigned int) = h ? (int (*)(unsigned int))dlsym(h, "cuInit") : NULL;

	if (init)
		init(0);
}

static cudaError_t ret(cudaError_t err)
{
	if (err != cudaSuccess)
		last_error = err;
	return err;
}

/* Stream handle -> simulated stream; NULL for an invalid handle. */
static struct CUstream_st *stream_get(cudaStream_t s, bool ptds)
{
	if (s == NULL)
		return ptds ? sim_device__per_thread_stream(&dev) : &dev.legacy;
	if (s == cudaStreamLegacy)
		return &dev.legacy;
	if (s == cudaStreamPerThread)
		return sim_device__per_thread_stream(&dev);
	if (s->magic != SIM_STREAM_MAGIC)
		return NULL;
	return s;
}

static bool event_ok(cudaEvent_t e)
{
	return e && e->magic == SIM_EVENT_MAGIC;
}

/* ---- errors ---------------------------------------------------------------------------- */

static const struct {
	cudaError_t code;
	const char *name;
	const char *text;
} errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error" },
	{ cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument" },
	{ cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy" },
	{ cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration", "__global__ function call is not configured" },
	{ cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered", "part or all of the requested memory range is already mapped" },
	{ cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region" },
	{ cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
	{ cudaErrorUnknown, "cudaErrorUnknown", "unknown error" },
};

const char *cudaGetErrorString(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].text;
	return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].name;
	return "unrecognized error code";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

/* ---- device ---------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
	if (!count)
		return ret(cudaErrorInvalidValue);
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return ret(cudaErrorInvalidValue);
	*device = 0;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	sim__sleep_until(sim_device__idle_at(&dev));
	return cudaSuccess;
}

cudaError_t cudaDeviceReset(void)
{
	sim__sleep_until(sim_device__idle_at(&dev));
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (!prop)
		return ret(cudaErrorInvalidValue);
	if (device != 0)
		return ret(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "%s", FAKE_DEVICE_NAME);
	prop->totalGlobalMem = FAKE_TOTAL_MEM;
	prop->warpSize = 32;
	prop->maxThreadsPerBlock = 1024;
	prop->major = 9;
	prop->minor = 0;
	prop->multiProcessorCount = 132;
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	if (!value)
		return ret(cudaErrorInvalidValue);
	if (device != 0)
		return ret(cudaErrorInvalidDevice);
	switch (attr) {
	case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
	case cudaDevAttrWarpSize: *value = 32; break;
	case cudaDevAttrMultiProcessorCount: *value = 132; break;
	case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
	case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
	default: *value = 0; break;
	}
	return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	size_t used = sim_ranges__device_bytes(&ranges);

	if (!free_bytes || !total)
		return ret(cudaErrorInvalidValue);
	*total = FAKE_TOTAL_MEM;
	*free_bytes = used < FAKE_TOTAL_MEM ? FAKE_TOTAL_MEM - used : 0;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return ret(cudaErrorInvalidValue);
	*driverVersion = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	void *p = NULL;

	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	sim__sleep_until(sim__now_ns() + MALLOC_HOST_NS);
	if (sim_ranges__device_bytes(&ranges) + size > FAKE_TOTAL_MEM)
		return ret(cudaErrorMemoryAllocation);
	if (posix_memalign(&p, 256, size) != 0)
		return ret(cudaErrorMemoryAllocation);
	if (sim_ranges__add(&ranges, p, size, SIM_MEM_DEVICE) < 0) {
		free(p);
		return ret(cudaErrorMemoryAllocation);
	}
	*devPtr = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
	if (!devPtr)
		return cudaSuccess;
	if (sim_ranges__remove(&ranges, devPtr, SIM_MEM_DEVICE) < 0)
		return ret(cudaErrorInvalidValue);
	/* cudaFree synchronises the device before releasing the memory. */
	sim__sleep_until(sim_device__idle_at(&dev));
	free(devPtr);
	return cudaSuccess;
}

static cudaError_t host_alloc(void **p_host, size_t size)
{
	void *p = NULL;

	if (!p_host)
		return cudaErrorInvalidValue;
	if (size == 0) {
		*p_host = NULL;
		return cudaSuccess;
	}
	sim__sleep_until(sim__now_ns() + MALLOC_HOST_NS);
	if (posix_memalign(&p, 4096, size) != 0)
		return cudaErrorMemoryAllocation;
	if (sim_ranges__add(&ranges, p, size, SIM_MEM_PINNED) < 0) {
		free(p);
		return cudaErrorMemoryAllocation;
	}
	*p_host = p;
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return ret(host_alloc(ptr, size));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	if (flags & ~(unsigned int)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
		return ret(cudaErrorInvalidValue);
	return ret(host_alloc(pHost, size));
}

cudaError_t cudaFreeHost(void *ptr)
{
	if (!ptr)
		return cudaSuccess;
	if (sim_ranges__remove(&ranges, ptr, SIM_MEM_PINNED) < 0)
		return ret(cudaErrorInvalidValue);
	sim__sleep_until(sim_device__idle_at(&dev));
	free(ptr);
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	unsigned int known = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
			     cudaHostRegisterReadOnly;
	int r;

	if (!ptr || size == 0 || (flags & ~known))
		return ret(cudaErrorInvalidValue);
	r = sim_ranges__add(&ranges, ptr, size, SIM_MEM_REGISTERED);
	if (r == -EEXIST)
		return ret(cudaErrorHostMemoryAlreadyRegistered);
	if (r < 0)
		return ret(cudaErrorMemoryAllocation);
	return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr)
{
	if (sim_ranges__remove(&ranges, ptr, SIM_MEM_REGISTERED) < 0)
		return ret(cudaErrorHostMemoryNotRegistered);
	return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	if (!pDevice || flags != 0 || !sim_mem__is_host_pinned(sim_ranges__lookup(&ranges, pHost, NULL)))
		return ret(cudaErrorInvalidValue);
	*pDevice = pHost;
	return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	if (!attributes)
		return ret(cudaErrorInvalidValue);
	memset(attributes, 0, sizeof(*attributes));
	switch (sim_ranges__lookup(&ranges, ptr, NULL)) {
	case SIM_MEM_DEVICE:
		attributes->type = cudaMemoryTypeDevice;
		attributes->device = 0;
		attributes->devicePointer = (void *)ptr;
		break;
	case SIM_MEM_PINNED:
	case SIM_MEM_REGISTERED:
		attributes->type = cudaMemoryTypeHost;
		attributes->device = 0;
		attributes->devicePointer = (void *)ptr;
		attributes->hostPointer = (void *)ptr;
		break;
	case SIM_MEM_PAGEABLE:
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = -2;
		attributes->hostPointer = (void *)ptr;
		break;
	}
	return cudaSuccess;
}

cudaError_t cudart__memcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			   cudaStream_t stream, bool async, bool ptds)
{
	enum sim_mem dk = sim_ranges__lookup(&ranges, dst, NULL);
	enum sim_mem sk = sim_ranges__lookup(&ranges, src, NULL);
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	if (count == 0)
		return cudaSuccess;
	if (!dst || !src)
		return ret(cudaErrorInvalidValue);
	/* Explicit kinds say which side is device memory; pinned-ness comes from the tables. */
	switch (kind) {
	case cudaMemcpyHostToHost:
		dk = dk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : dk;
		sk = sk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : sk;
		break;
	case cudaMemcpyHostToDevice:
		dk = SIM_MEM_DEVICE;
		sk = sk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : sk;
		break;
	case cudaMemcpyDeviceToHost:
		sk = SIM_MEM_DEVICE;
		dk = dk == SIM_MEM_DEVICE ? SIM_MEM_PAGEABLE : dk;
		break;
	case cudaMemcpyDeviceToDevice:
		dk = sk = SIM_MEM_DEVICE;
		break;
	case cudaMemcpyDefault:
		break;
	default:
		return ret(cudaErrorInvalidMemcpyDirection);
	}
	sim_device__copy(&dev, s, dst, dk, src, sk, count, &(struct sim_work){
		.api = FAKEGPU_API_RUNTIME, .async = async,
		.cbid = async ? (ptds ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000 :
				 CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020) :
				(ptds ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000 :
				 CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020) });
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return cudart__memcpy(dst, src, count, kind, NULL, false, false);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	return cudart__memcpy(dst, src, count, kind, stream, true, false);
}

cudaError_t cudart__memset(void *dst, int value, size_t count, cudaStream_t stream, bool async,
			   bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);
	enum sim_mem k = sim_ranges__lookup(&ranges, dst, NULL);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	if (count == 0)
		return cudaSuccess;
	if (k == SIM_MEM_PAGEABLE)
		return ret(cudaErrorInvalidValue);
	/* Asynchronous w.r.t. the host unless the target is pinned host memory. */
	sim_device__memset(&dev, s, dst, k, value, count, !async && k != SIM_MEM_DEVICE, &(struct sim_work){
		.api = FAKEGPU_API_RUNTIME, .async = async, .value = (uint32_t)value & 0xff,
		.cbid = async ? (ptds ? CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000 :
				 CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020) :
				(ptds ? CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000 :
				 CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020) });
	return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return cudart__memset(devPtr, value, count, NULL, false, false);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return cudart__memset(devPtr, value, count, stream, true, false);
}

/* ---- streams and events ---------------------------------------------------------------- */

static cudaError_t stream_create(cudaStream_t *p, unsigned int flags, int priority)
{
	struct CUstream_st *s;

	if (!p || (flags & ~(unsigned int)cudaStreamNonBlocking))
		return ret(cudaErrorInvalidValue);
	s = calloc(1, sizeof(*s));
	if (!s)
		return ret(cudaErrorMemoryAllocation);
	s->flags = flags;
	s->blocking = !(flags & cudaStreamNonBlocking);
	s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	sim_device__add_stream(&dev, s);
	*p = s;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return stream_create(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return stream_create(pStream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	return stream_create(pStream, flags, priority);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = -5;
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	/* Pending work still completes on a real GPU; here its timestamps are simply dropped. */
	if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread ||
	    stream->magic != SIM_STREAM_MAGIC || stream->per_thread)
		return ret(cudaErrorInvalidResourceHandle);
	sim_device__remove_stream(&dev, stream);
	free(stream);
	return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
	struct CUstream_st *s = stream_get(hStream, false);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	if (!flags)
		return ret(cudaErrorInvalidValue);
	*flags = s->flags;
	return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
	struct CUstream_st *s = stream_get(hStream, false);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	if (!priority)
		return ret(cudaErrorInvalidValue);
	*priority = s->priority;
	return cudaSuccess;
}

cudaError_t cudart__stream_sync(cudaStream_t stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	sim__sleep_until(sim_device__stream_done(&dev, s));
	return cudaSuccess;
}

cudaError_t cudart__stream_query(cudaStream_t stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	/* cudaErrorNotReady is not an error and does not become the last error. */
	return sim__now_ns() >= sim_device__stream_done(&dev, s) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudart__stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
				      bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s || !event_ok(event))
		return ret(cudaErrorInvalidResourceHandle);
	if (event->recorded)
		sim_device__stream_wait(&dev, s, event->when);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return cudart__stream_sync(stream, false);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return cudart__stream_query(stream, false);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return cudart__stream_wait_event(stream, event, flags, false);
}

static cudaError_t event_create(cudaEvent_t *event, unsigned int flags)
{
	unsigned int known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
	struct CUevent_st *e;

	if (!event || (flags & ~known))
		return ret(cudaErrorInvalidValue);
	e = calloc(1, sizeof(*e));
	if (!e)
		return ret(cudaErrorMemoryAllocation);
	e->magic = SIM_EVENT_MAGIC;
	e->flags = flags;
	*event = e;
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	return event_create(event, flags);
}

/* Exported functions never call each other, so a hook sees each application call once. */
cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return event_create(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	if (!event_ok(event))
		return ret(cudaErrorInvalidResourceHandle);
	event->magic = 0;
	free(event);
	return cudaSuccess;
}

cudaError_t cudart__event_record(cudaEvent_t event, cudaStream_t stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!s || !event_ok(event))
		return ret(cudaErrorInvalidResourceHandle);
	event->when = sim_device__enqueue(&dev, s, 0);
	event->recorded = true;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return cudart__event_record(event, stream, false);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (!event_ok(event))
		return ret(cudaErrorInvalidResourceHandle);
	if (event->recorded)
		sim__sleep_until(event->when);
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	if (!event_ok(event))
		return ret(cudaErrorInvalidResourceHandle);
	return !event->recorded || sim__now_ns() >= event->when ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	uint64_t now = sim__now_ns();

	if (!ms)
		return ret(cudaErrorInvalidValue);
	if (!event_ok(start) || !event_ok(end) || !start->recorded || !end->recorded ||
	    ((start->flags | end->flags) & cudaEventDisableTiming))
		return ret(cudaErrorInvalidResourceHandle);
	if (now < start->when || now < end->when)
		return ret(cudaErrorNotReady);
	*ms = (float)(((double)end->when - (double)start->when) / 1e6);
	return cudaSuccess;
}

/* ---- kernels ------------------------------------------------------------------------------ */

struct registered_func {
	const void *host_fun;
	void **module;
	char *name;
	struct CUkern_st kernel;        /* what __cudaGetKernel hands out */
	struct registered_func *next;
};

static pthread_mutex_t funcs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registered_func *funcs;

void **__cudaRegisterFatBinary(void *fatCubin)
{
	void **handle = calloc(1, sizeof(void *));

	if (handle)
		*handle = fatCubin;
	return handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	pthread_mutex_lock(&funcs_lock);
	for (struct registered_func **pp = &funcs; *pp;) {
		struct registered_func *f = *pp;

		if (f->module == fatCubinHandle) {
			*pp = f->next;
			free(f->name);
			free(f);
		} else {
			pp = &f->next;
		}
	}
	pthread_mutex_unlock(&funcs_lock);
	free(fatCubinHandle);
}

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
			    const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct registered_func *f = calloc(1, sizeof(*f));

	if (!f || !deviceName || !(f->name = strdup(deviceName))) {
		free(f);
		return;
	}
	f->host_fun = hostFun;
	f->module = fatCubinHandle;
	f->kernel = (struct CUkern_st){ FAKE_KERNEL_MAGIC, f->name, hostFun };
	pthread_mutex_lock(&funcs_lock);
	f->next = funcs;
	funcs = f;
	pthread_mutex_unlock(&funcs_lock);
}

/* Device name registered for host stub `func`, or NULL. Valid until its fat binary goes. */
static const char *registered_name(const void *func)
{
	const char *found = NULL;

	pthread_mutex_lock(&funcs_lock);
	for (struct registered_func *f = funcs; f; f = f->next) {
		if (f->host_fun == func) {
			found = f->name;
			break;
		}
	}
	pthread_mutex_unlock(&funcs_lock);
	return found;
}

cudaError_t cudaFuncGetName(const char **name, const void *func)
{
	const char *found;

	if (!name || !func)
		return ret(cudaErrorInvalidValue);
	found = registered_name(func);
	if (!found)
		return ret(cudaErrorInvalidDeviceFunction);
	*name = found;
	return cudaSuccess;
}

#define CALL_CONFIG_DEPTH 16

static __thread struct call_config {
	dim3 grid, block;
	size_t shmem;
	struct CUstream_st *stream;
} call_configs[CALL_CONFIG_DEPTH];
static __thread unsigned int call_config_depth;

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
				     struct CUstream_st *stream)
{
	if (call_config_depth == CALL_CONFIG_DEPTH)
		return 1;
	call_configs[call_config_depth++] = (struct call_config){ gridDim, blockDim, sharedMem, stream };
	return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	struct call_config *c;

	if (call_config_depth == 0)
		return ret(cudaErrorMissingConfiguration);
	c = &call_configs[--call_config_depth];
	*gridDim = c->grid;
	*blockDim = c->block;
	*sharedMem = c->shmem;
	*(cudaStream_t *)stream = c->stream;
	return cudaSuccess;
}

static bool launch_dims_ok(dim3 g, dim3 b)
{
	uint64_t threads = (uint64_t)b.x * b.y * b.z;

	return g.x >= 1 && g.y >= 1 && g.z >= 1 && g.x <= 0x7fffffffu && g.y <= 65535 && g.z <= 65535 &&
	       b.x >= 1 && b.y >= 1 && b.z >= 1 && b.x <= 1024 && b.y <= 1024 && b.z <= 64 && threads <= 1024;
}

cudaError_t cudart__launch(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
			   cudaStream_t stream, bool ptds)
{
	struct CUstream_st *s = stream_get(stream, ptds);

	if (!func)
		return ret(cudaErrorInvalidDeviceFunction);
	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	if (!launch_dims_ok(grid, block) || shmem > 227 * 1024)
		return ret(cudaErrorInvalidConfiguration);
	sim_device__launch(&dev, s, &(struct sim_work){
		.api = FAKEGPU_API_RUNTIME,
		.cbid = ptds ? CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 :
			       CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
		.name = sim__activity_on() ? registered_name(func) : NULL,
		.grid = { grid.x, grid.y, grid.z }, .block = { block.x, block.y, block.z },
		.shmem = (uint32_t)shmem });
	return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			     size_t sharedMem, cudaStream_t stream)
{
	return cudart__launch(func, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun)
{
	cudaKernel_t found = NULL;

	if (!kernel)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&funcs_lock);
	for (struct registered_func *f = funcs; f; f = f->next) {
		if (f->host_fun == fun) {
			found = &f->kernel;
			break;
		}
	}
	pthread_mutex_unlock(&funcs_lock);
	if (!found)
		return ret(cudaErrorInvalidDeviceFunction);
	*kernel = found;
	return cudaSuccess;
}

/* A launch by handle is a launch of the handle's host stub, on the simulated device. */
cudaError_t cudart__launch_kernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
				  size_t shmem, cudaStream_t stream, bool ptds)
{
	if (!kernel || kernel->magic != FAKE_KERNEL_MAGIC)
		return ret(cudaErrorInvalidResourceHandle);
	return cudart__launch(kernel->host_fun, grid, block, args, shmem, stream, ptds);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
			       size_t sharedMem, cudaStream_t stream)
{
	return cudart__launch_kernel(kernel, gridDim, blockDim, args, sharedMem, stream, false);
}

/* ---- private hook for the fake NCCL ------------------------------------------------------- */

int __fakecudart_stream_ready_ns(cudaStream_t stream, uint64_t *ret_ns)
{
	struct CUstream_st *s = stream_get(stream, false);

	if (!s || !ret_ns)
		return -EINVAL;
	/* Like recording an event: nothing is added, implicit dependencies are taken. */
	*ret_ns = sim_device__enqueue(&dev, s, 0);
	return 0;
}

int __fakecudart_collective_kernel(cudaStream_t stream, const char *name, uint64_t api_start_ns,
				   uint64_t start_ns, uint64_t end_ns)
{
	struct CUstream_st *s = stream_get(stream, false);

	if (!s || !name || end_ns < start_ns)
		return -EINVAL;
	/* NCCL's ring kernels: one block of 640 threads per channel, 2 channels here */
	sim_device__report_kernel(&dev, s, &(struct sim_work){
		.api = FAKEGPU_API_RUNTIME, .cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
		.name = name, .grid = { 2, 1, 1 }, .block = { 640, 1, 1 } }, api_start_ns, start_ns, end_ns);
	return 0;
}

int __fakecudart_stream_busy_until(cudaStream_t stream, uint64_t end_ns)
{
	struct CUstream_st *s = stream_get(stream, false);

	if (!s)
		return -EINVAL;
	sim_device__stream_wait(&dev, s, end_ns);
	return 0;
}
