/* SPDX-License-Identifier: MIT */
/*
 * Bounded lock-free multi-producer / single-consumer ring over shared memory
 * (D. Vyukov's sequence-per-slot queue). Producers are the target's threads inside
 * hooks: they never block and never spin on the consumer — a full ring drops the event
 * and counts it. The consumer is the injector in another process. All atomics are
 * lock-free and address-free, so they work across the two mappings.
 */
#ifndef AIPROF_RING_H
#define AIPROF_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "event.h"

static inline struct aiprof_event *ring__slots(struct aiprof_ring_hdr *h)
{
	return (struct aiprof_event *)((char *)h + AIPROF_RING_HDR_SIZE);
}

/* Lays out a fresh ring in `mem` of AIPROF_RING_BYTES(nslots) bytes; nslots power of 2. */
static inline void ring__init(void *mem, uint32_t nslots, uint32_t pid, uint64_t build)
{
	struct aiprof_ring_hdr *h = mem;
	struct aiprof_event *s = ring__slots(h);

	memset(h, 0, AIPROF_RING_HDR_SIZE);
	for (uint32_t i = 0; i < nslots; i++)
		atomic_store_explicit(&s[i].seq, i, memory_order_relaxed);
	h->version = AIPROF_RING_VERSION;
	h->event_size = AIPROF_EVENT_SIZE;
	h->nslots = nslots;
	h->lib_pid = pid;
	h->lib_build = build;
	atomic_store_explicit((_Atomic uint64_t *)&h->magic, AIPROF_RING_MAGIC,
			      memory_order_release);
}

/*
 * Reserves a slot. Returns NULL (and counts a drop) when the ring is full. The caller
 * fills the slot's data fields and then calls ring__commit() with the same slot.
 */
static inline struct aiprof_event *ring__reserve(struct aiprof_ring_hdr *h)
{
	struct aiprof_event *slots = ring__slots(h);
	uint64_t mask = h->nslots - 1;
	uint64_t pos = atomic_load_explicit(&h->head, memory_order_relaxed);

	for (;;) {
		struct aiprof_event *e = &slots[pos & mask];
		uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
		int64_t diff = (int64_t)(seq - pos);

		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&h->head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				return e;
		} else if (diff < 0) {
			atomic_fetch_add_explicit(&h->drops, 1, memory_order_relaxed);
			return NULL;
		} else {
			pos = atomic_load_explicit(&h->head, memory_order_relaxed);
		}
	}
}

/* Publishes a reserved slot. `e` must come from ring__reserve() on the same ring. */
static inline void ring__commit(struct aiprof_ring_hdr *h, struct aiprof_event *e)
{
	/* The slot's seq still holds the position it was reserved at. */
	uint64_t seq = atomic_load_explicit(&e->seq, memory_order_relaxed);

	atomic_fetch_add_explicit(&h->recorded, 1, memory_order_relaxed);
	atomic_store_explicit(&e->seq, seq + 1, memory_order_release);
}

/*
 * Consumer with its own geometry and position: `nslots` as checked when the ring was
 * mapped and `*tail` kept by the consumer, never read back from the header, which the
 * producer's process can write. Copies the next committed event into `out` and frees its
 * slot; false when the next slot is not committed yet. Only the slot's bytes are read, and
 * only inside the ring's nslots slots. Single consumer only.
 */
static inline bool ring__pop_at(struct aiprof_ring_hdr *h, uint32_t nslots, uint64_t *tail,
				struct aiprof_event *out)
{
	struct aiprof_event *e = &ring__slots(h)[*tail & (nslots - 1)];
	uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);

	if (seq != *tail + 1)
		return false;
	memcpy((char *)out + sizeof(out->seq), (char *)e + sizeof(e->seq),
	       sizeof(*e) - sizeof(e->seq));
	atomic_store_explicit(&e->seq, *tail + nslots, memory_order_release);
	(*tail)++;
	atomic_store_explicit(&h->tail, *tail, memory_order_relaxed);
	return true;
}

/* The same over the header's own geometry, for a ring this process laid out itself. */
static inline bool ring__pop(struct aiprof_ring_hdr *h, struct aiprof_event *out)
{
	uint64_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);

	return ring__pop_at(h, h->nslots, &tail, out);
}

/* Events reserved but not yet consumed (committed or in flight). */
static inline uint64_t ring__pending(struct aiprof_ring_hdr *h)
{
	return atomic_load_explicit(&h->head, memory_order_relaxed) -
	       atomic_load_explicit(&h->tail, memory_order_relaxed);
}

#endif
