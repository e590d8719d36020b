/* SPDX-License-Identifier: MIT */
/* Simulated GPU timing and memory classification; see gpu_sim.h for the model. */
#include "tests/doubles/gpu_sim.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The fake CUPTI's sink (fakegpu_activity.h); NULL while none is installed. */
static _Atomic(fakegpu_activity_fn) activity_sink;

__attribute__((visibility("default"))) int __fakegpu_set_activity_sink(uint32_t version,
									 fakegpu_activity_fn fn)
{
	if (version != FAKEGPU_ACTIVITY_VERSION)
		return -EINVAL;
	atomic_store_explicit(&activity_sink, fn, memory_order_release);
	return 0;
}

bool sim__activity_on(void)
{
	return atomic_load_explicit(&activity_sink, memory_order_acquire) != NULL;
}

static fakegpu_activity_fn sink_get(void)
{
	return atomic_load_explicit(&activity_sink, memory_order_acquire);
}

static uint32_t stream_kind(const struct sim_device *d, const struct CUstream_st *s)
{
	if (s == &d->legacy)
		return FAKEGPU_STREAM_LEGACY;
	return s->per_thread ? FAKEGPU_STREAM_PER_THREAD : FAKEGPU_STREAM_CREATED;
}

static uint32_t mem_of(enum sim_mem k)
{
	if (k == SIM_MEM_DEVICE)
		return FAKEGPU_MEM_DEVICE;
	return sim_mem__is_host_pinned(k) ? FAKEGPU_MEM_PINNED : FAKEGPU_MEM_PAGEABLE;
}

/* The common part of a report: what, by which entry point, when, on which stream. */
static struct fakegpu_activity activity(const struct sim_device *d, const struct CUstream_st *s,
					uint32_t op, const struct sim_work *w, uint64_t api_start,
					uint64_t start, uint64_t end)
{
	return (struct fakegpu_activity){
		.op = op, .api = w->api, .cbid = w->cbid, .result = 0,
		.api_start_ns = api_start, .api_end_ns = sim__now_ns(),
		.start_ns = start, .end_ns = end,
		.device = SIM_DEVICE_ORDINAL, .stream_kind = stream_kind(d, s), .stream = s,
		.async = w->async,
	};
}

uint64_t sim__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void sim__sleep_until(uint64_t when_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(when_ns / 1000000000ULL),
		.tv_nsec = (long)(when_ns % 1000000000ULL),
	};

	/* clock_nanosleep returns the error (EINTR on a signal) instead of setting errno. */
	while (sim__now_ns() < when_ns && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void sim__spin(uint64_t ns)
{
	uint64_t end = sim__now_ns() + ns;

	while (sim__now_ns() < end)
		__asm__ __volatile__("pause");
}

uint64_t sim__kernel_ns(uint64_t threads)
{
	uint64_t ns = threads * KERNEL_NS_PER_THREAD;

	return ns < KERNEL_FLOOR_NS ? KERNEL_FLOOR_NS : ns;
}

uint64_t sim__threads(const uint32_t grid[3], const uint32_t block[3])
{
	return (uint64_t)grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2];
}

uint64_t sim__bytes_ns(size_t bytes, uint64_t bytes_per_s)
{
	/* 128-bit intermediate: bytes * 1e9 overflows 64 bits above 18 GB. */
	return (uint64_t)((unsigned __int128)bytes * 1000000000ULL / bytes_per_s);
}

void sim_device__add_stream(struct sim_device *d, struct CUstream_st *s)
{
	s->magic = SIM_STREAM_MAGIC;
	pthread_mutex_lock(&d->lock);
	s->next = d->streams;
	d->streams = s;
	pthread_mutex_unlock(&d->lock);
}

void sim_device__remove_stream(struct sim_device *d, struct CUstream_st *s)
{
	fakegpu_activity_fn sink = sink_get();

	if (sink) {
		struct fakegpu_activity a = { .op = FAKEGPU_OP_STREAM_DESTROYED,
					      .stream_kind = stream_kind(d, s), .stream = s };

		sink(&a);
	}
	pthread_mutex_lock(&d->lock);
	for (struct CUstream_st **pp = &d->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	s->magic = 0;
}

struct CUstream_st *sim_device__per_thread_stream(struct sim_device *d)
{
	static __thread struct CUstream_st *mine;

	if (!mine) {
		struct CUstream_st *s = calloc(1, sizeof(*s));

		if (!s)
			return NULL;
		s->blocking = true;
		s->per_thread = true;
		sim_device__add_stream(d, s);
		mine = s;
	}
	return mine;
}

/* Earliest start for new work on `s`; called with the device lock held. */
static uint64_t ready_locked(struct sim_device *d, struct CUstream_st *s, uint64_t now)
{
	uint64_t t = s->busy_until > now ? s->busy_until : now;

	if (s == &d->legacy) {
		for (struct CUstream_st *x = d->streams; x; x = x->next)
			if (x->blocking && x->busy_until > t)
				t = x->busy_until;
	} else if (s->blocking && d->legacy.busy_until > t) {
		t = d->legacy.busy_until;
	}
	return t;
}

uint64_t sim_device__enqueue(struct sim_device *d, struct CUstream_st *s, uint64_t dur_ns)
{
	uint64_t end;

	pthread_mutex_lock(&d->lock);
	end = ready_locked(d, s, sim__now_ns() + SUBMIT_LATENCY_NS) + dur_ns;
	s->busy_until = end;
	pthread_mutex_unlock(&d->lock);
	return end;
}

uint64_t sim_device__stream_done(struct sim_device *d, struct CUstream_st *s)
{
	uint64_t t;

	pthread_mutex_lock(&d->lock);
	/* Work already enqueued on s cannot depend on work enqueued later elsewhere. */
	t = s->busy_until;
	pthread_mutex_unlock(&d->lock);
	return t;
}

uint64_t sim_device__idle_at(struct sim_device *d)
{
	uint64_t t;

	pthread_mutex_lock(&d->lock);
	t = d->legacy.busy_until;
	for (struct CUstream_st *x = d->streams; x; x = x->next)
		if (x->busy_until > t)
			t = x->busy_until;
	pthread_mutex_unlock(&d->lock);
	return t;
}

void sim_device__stream_wait(struct sim_device *d, struct CUstream_st *s, uint64_t when_ns)
{
	pthread_mutex_lock(&d->lock);
	if (s->busy_until < when_ns)
		s->busy_until = when_ns;
	pthread_mutex_unlock(&d->lock);
}

/* Index of the first range whose start is > p. Called with the lock held. */
static size_t upper_bound(const struct sim_ranges *t, uintptr_t p)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int sim_ranges__add(struct sim_ranges *t, const void *start, size_t len, enum sim_mem kind)
{
	uintptr_t s = (uintptr_t)start;
	size_t i;
	int r = 0;

	if (len == 0)
		len = 1;
	pthread_rwlock_wrlock(&t->lock);
	i = upper_bound(t, s);
	if ((i > 0 && t->v[i - 1].start + t->v[i - 1].len > s) || (i < t->n && t->v[i].start < s + len)) {
		r = -EEXIST;
		goto out;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct sim_range *v = realloc(t->v, cap * sizeof(*v));

		if (!v) {
			r = -ENOMEM;
			goto out;
		}
		t->v = v;
		t->cap = cap;
	}
	memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(*t->v));
	t->v[i] = (struct sim_range){ .start = s, .len = len, .kind = kind };
	t->n++;
	if (kind == SIM_MEM_DEVICE)
		t->device_bytes += len;
out:
	pthread_rwlock_unlock(&t->lock);
	return r;
}

int sim_ranges__remove(struct sim_ranges *t, const void *start, enum sim_mem kind)
{
	uintptr_t s = (uintptr_t)start;
	size_t i;
	int r = -ENOENT;

	pthread_rwlock_wrlock(&t->lock);
	i = upper_bound(t, s);
	if (i > 0 && t->v[i - 1].start == s && t->v[i - 1].kind == kind) {
		if (kind == SIM_MEM_DEVICE)
			t->device_bytes -= t->v[i - 1].len;
		memmove(&t->v[i - 1], &t->v[i], (t->n - i) * sizeof(*t->v));
		t->n--;
		r = 0;
	}
	pthread_rwlock_unlock(&t->lock);
	return r;
}

enum sim_mem sim_ranges__lookup(struct sim_ranges *t, const void *p, struct sim_range *ret_range)
{
	uintptr_t a = (uintptr_t)p;
	enum sim_mem kind = SIM_MEM_PAGEABLE;
	size_t i;

	pthread_rwlock_rdlock(&t->lock);
	i = upper_bound(t, a);
	if (i > 0 && a < t->v[i - 1].start + t->v[i - 1].len) {
		kind = t->v[i - 1].kind;
		if (ret_range)
			*ret_range = t->v[i - 1];
	}
	pthread_rwlock_unlock(&t->lock);
	return kind;
}

size_t sim_ranges__device_bytes(struct sim_ranges *t)
{
	size_t n;

	pthread_rwlock_rdlock(&t->lock);
	n = t->device_bytes;
	pthread_rwlock_unlock(&t->lock);
	return n;
}

void sim_device__copy(struct sim_device *d, struct CUstream_st *s, void *dst, enum sim_mem dst_kind,
		      const void *src, enum sim_mem src_kind, size_t bytes, const struct sim_work *w)
{
	bool dst_dev = dst_kind == SIM_MEM_DEVICE, src_dev = src_kind == SIM_MEM_DEVICE;
	fakegpu_activity_fn sink = sink_get();
	uint64_t t0 = sink ? sim__now_ns() : 0, bw, dur, end;
	bool host_waits = !w->async;

	if (bytes == 0)
		return;
	if (!dst_dev && !src_dev) {
		/* Host to host: a plain memcpy on the calling thread, no device time. */
		memmove(dst, src, bytes);
		return;
	}
	if (dst_dev && src_dev) {
		bw = BW_D2D_BYTES_PER_S;
	} else {
		enum sim_mem host = dst_dev ? src_kind : dst_kind;

		if (sim_mem__is_host_pinned(host)) {
			bw = BW_PINNED_BYTES_PER_S;
		} else {
			bw = BW_PAGEABLE_BYTES_PER_S;
			host_waits = true;  /* staged through a driver buffer by the CPU */
		}
	}
	dur = COPY_LATENCY_NS + sim__bytes_ns(bytes, bw);
	end = sim_device__enqueue(d, s, dur);
	memmove(dst, src, bytes);
	if (host_waits)
		sim__sleep_until(end);
	else
		sim__spin(COPY_HOST_NS);
	if (sink) {
		struct fakegpu_activity a = activity(d, s, FAKEGPU_OP_MEMCPY, w, t0, end - dur, end);

		a.src_mem = mem_of(src_kind);
		a.dst_mem = mem_of(dst_kind);
		a.bytes = bytes;
		sink(&a);
	}
}

void sim_device__memset(struct sim_device *d, struct CUstream_st *s, void *dst, enum sim_mem dst_kind,
			int value, size_t bytes, bool sync, const struct sim_work *w)
{
	fakegpu_activity_fn sink = sink_get();
	uint64_t t0 = sink ? sim__now_ns() : 0, dur, end;

	if (bytes == 0)
		return;
	dur = COPY_LATENCY_NS + sim__bytes_ns(bytes, BW_MEMSET_BYTES_PER_S);
	end = sim_device__enqueue(d, s, dur);
	memset(dst, value, bytes);
	if (sync)
		sim__sleep_until(end);
	else
		sim__spin(COPY_HOST_NS);
	if (sink) {
		struct fakegpu_activity a = activity(d, s, FAKEGPU_OP_MEMSET, w, t0, end - dur, end);

		a.dst_mem = mem_of(dst_kind);
		a.bytes = bytes;
		a.value = w->value;
		sink(&a);
	}
}

void sim_device__report_kernel(struct sim_device *d, struct CUstream_st *s, const struct sim_work *w,
			       uint64_t api_start_ns, uint64_t start_ns, uint64_t end_ns)
{
	fakegpu_activity_fn sink = sink_get();

	if (sink) {
		struct fakegpu_activity a = activity(d, s, FAKEGPU_OP_KERNEL, w, api_start_ns, start_ns, end_ns);

		a.name = w->name;
		memcpy(a.grid, w->grid, sizeof(a.grid));
		memcpy(a.block, w->block, sizeof(a.block));
		a.shmem = w->shmem;
		sink(&a);
	}
}

void sim_device__launch(struct sim_device *d, struct CUstream_st *s, const struct sim_work *w)
{
	fakegpu_activity_fn sink = sink_get();
	uint64_t t0 = sink ? sim__now_ns() : 0;
	uint64_t dur = sim__kernel_ns(sim__threads(w->grid, w->block));
	uint64_t end = sim_device__enqueue(d, s, dur);

	sim__spin(LAUNCH_HOST_NS);
	if (sink)
		sim_device__report_kernel(d, s, w, t0, end - dur, end);
}
