/* SPDX-License-Identifier: MIT */
/*
 * Page-locked host ranges (cudaMallocHost / cudaHostAlloc / cudaHostRegister), so a
 * memcpy can be classified pinned vs pageable without a driver call. Tracked even while
 * idle: these calls are rare and a session can start long after the allocation.
 *
 * A sorted array under a sequence lock: writers (rare) serialise on a mutex and bump
 * `seq` around the change; readers binary-search with relaxed atomic loads and retry
 * when `seq` moved. A reader that keeps losing (a writer storm) reports "not found" and
 * the caller falls back to cudaPointerGetAttributes.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "preload.h"

#define HOSTMEM_CAP 8192

struct range {
	_Atomic uintptr_t start;
	_Atomic uint64_t len;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t g_seq;
static _Atomic uint32_t g_n;
static struct range g_ranges[HOSTMEM_CAP];
static _Atomic uint32_t g_overflow;             /* ranges we could not store */

/* First index whose start > p. Reader side: relaxed loads, validated by seq. */
static uint32_t upper_bound(uint32_t n, uintptr_t p)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (atomic_load_explicit(&g_ranges[mid].start, memory_order_relaxed) <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void write_begin(void)
{
	atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void write_end(void)
{
	atomic_fetch_add_explicit(&g_seq, 1, memory_order_release);
}

/* Range src into slot dst, under the lock (readers retry on the sequence count). */
static void copy_range(uint32_t dst, uint32_t src)
{
	atomic_store_explicit(&g_ranges[dst].start,
			      atomic_load_explicit(&g_ranges[src].start, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&g_ranges[dst].len,
			      atomic_load_explicit(&g_ranges[src].len, memory_order_relaxed),
			      memory_order_relaxed);
}

/* Takes the lock; *n ranges, *i the index after the last that starts at or below ptr; true
 * when the range before it starts at ptr exactly. */
static bool lock_find(uintptr_t ptr, uint32_t *n, uint32_t *i)
{
	pthread_mutex_lock(&g_lock);
	*n = atomic_load_explicit(&g_n, memory_order_relaxed);
	*i = upper_bound(*n, ptr);
	return *i > 0 && atomic_load_explicit(&g_ranges[*i - 1].start, memory_order_relaxed) == ptr;
}

void hostmem__add(uintptr_t ptr, uint64_t len)
{
	uint32_t n, i;

	if (!ptr || !len)
		return;
	if (lock_find(ptr, &n, &i)) {
		write_begin();
		atomic_store_explicit(&g_ranges[i - 1].len, len, memory_order_relaxed);
		write_end();
	} else if (n < HOSTMEM_CAP) {
		write_begin();
		for (uint32_t j = n; j > i; j--)
			copy_range(j, j - 1);
		atomic_store_explicit(&g_ranges[i].start, ptr, memory_order_relaxed);
		atomic_store_explicit(&g_ranges[i].len, len, memory_order_relaxed);
		atomic_store_explicit(&g_n, n + 1, memory_order_relaxed);
		write_end();
	} else {
		atomic_fetch_add_explicit(&g_overflow, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g_lock);
}

void hostmem__del(uintptr_t ptr)
{
	uint32_t n, i;

	if (!ptr)
		return;
	if (lock_find(ptr, &n, &i)) {
		write_begin();
		for (uint32_t j = i - 1; j + 1 < n; j++)
			copy_range(j, j + 1);
		atomic_store_explicit(&g_n, n - 1, memory_order_relaxed);
		write_end();
	}
	pthread_mutex_unlock(&g_lock);
}

int hostmem__lookup(uintptr_t ptr)
{
	for (int attempt = 0; attempt < 8; attempt++) {
		uint32_t s1 = atomic_load_explicit(&g_seq, memory_order_acquire);
		uint32_t n, i;
		int hit = 0;

		if (s1 & 1)
			continue;
		n = atomic_load_explicit(&g_n, memory_order_relaxed);
		if (n > HOSTMEM_CAP)
			n = HOSTMEM_CAP;
		i = upper_bound(n, ptr);
		if (i > 0) {
			uintptr_t st = atomic_load_explicit(&g_ranges[i - 1].start,
							    memory_order_relaxed);
			uint64_t len = atomic_load_explicit(&g_ranges[i - 1].len,
							    memory_order_relaxed);

			hit = ptr >= st && ptr - st < len;
		}
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&g_seq, memory_order_relaxed) == s1)
			return hit;
	}
	return 0;
}

typedef cudaError_t (*cudaPointerGetAttributes_fn)(struct cudaPointerAttributes *,
						   const void *);
static struct lazy_sym g_getattr = LAZY_SYM("cudaPointerGetAttributes");

enum mem_class hostmem__classify(uintptr_t ptr)
{
	struct cudaPointerAttributes a;
	cudaPointerGetAttributes_fn fn;

	if (!ptr)
		return MEM_UNKNOWN;
	if (hostmem__lookup(ptr))
		return MEM_PINNED;
	fn = (cudaPointerGetAttributes_fn)lazy_sym_get(&g_getattr);
	if (!fn)
		return MEM_UNKNOWN;
	memset(&a, 0, sizeof(a));
	if (fn(&a, (const void *)ptr) != cudaSuccess)
		return MEM_UNKNOWN;
	switch (a.type) {
	case cudaMemoryTypeUnregistered: return MEM_PAGEABLE;
	case cudaMemoryTypeHost:         return MEM_PINNED;
	case cudaMemoryTypeDevice:
	case cudaMemoryTypeManaged:      return MEM_DEVICE;
	default:                         return MEM_UNKNOWN;
	}
}

void hostmem__atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&g_lock, &fresh, sizeof(fresh));
	/* a writer may have been mid-shift in the parent: start empty and consistent */
	atomic_store(&g_n, 0);
	atomic_store(&g_seq, 0);
}

/* Flags for the host side of a copy of class `c`. */
static uint32_t host_flags(enum mem_class c)
{
	switch (c) {
	case MEM_PINNED:   return AIPROF_MEMCPY_F_HOST_PINNED | AIPROF_MEMCPY_F_HOST_KNOWN;
	case MEM_PAGEABLE: return AIPROF_MEMCPY_F_HOST_KNOWN;
	default:           return 0;
	}
}

static bool is_host(enum mem_class c)
{
	return c == MEM_PINNED || c == MEM_PAGEABLE;
}

void hostmem__memcpy_class(uint32_t kind, uintptr_t dst, uintptr_t src, uint32_t *kind_out,
			   uint32_t *flags)
{
	enum mem_class cs, cd;

	*kind_out = kind;
	switch (kind) {
	case AIPROF_MEMCPY_H2D:
	case AIPROF_MEMCPY_H2H:
		*flags |= host_flags(hostmem__classify(src));
		return;
	case AIPROF_MEMCPY_D2H:
		*flags |= host_flags(hostmem__classify(dst));
		return;
	case AIPROF_MEMCPY_D2D:
		return;
	default:
		break;
	}
	/* cudaMemcpyDefault / unified addressing: ask about both sides */
	cs = hostmem__classify(src);
	cd = hostmem__classify(dst);
	if (is_host(cs) && cd == MEM_DEVICE) {
		*kind_out = AIPROF_MEMCPY_H2D;
		*flags |= host_flags(cs);
	} else if (cs == MEM_DEVICE && is_host(cd)) {
		*kind_out = AIPROF_MEMCPY_D2H;
		*flags |= host_flags(cd);
	} else if (cs == MEM_DEVICE && cd == MEM_DEVICE) {
		*kind_out = AIPROF_MEMCPY_D2D;
	} else if (is_host(cs) && is_host(cd)) {
		*kind_out = AIPROF_MEMCPY_H2H;
		*flags |= host_flags(cs);
	} else {
		*kind_out = AIPROF_MEMCPY_DEFAULT;
	}
}
