/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the consumer side of the event ring: the slots as the target's
 * process left them (any bytes at all — it can write its ring) are popped with the geometry
 * and position the consumer keeps itself (ring__pop_at) into an event store
 * (event_store__add: string reassembly, type and API checks, sums past a small budget).
 * The first input bytes choose the ring's size and the consumer's starting position (and
 * from it the budget); the rest fills the slots, with the sequence words bent toward
 * "committed" so that most slots are taken.
 * FUZZ_SOURCES: injector/model/event_store.c common/blobtab.c common/u64map.c common/timeutil.c common/elfsym.c common/procmaps.c common/readfile.c
 * FUZZ_LIBS: -lelf -lz
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "ring.h"
#include "injector/model/event_store.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct event_store store;
	struct aiprof_ring_hdr *h;
	struct aiprof_event out;
	uint32_t nslots;
	uint64_t tail, start;
	size_t bytes, taken = 0;

	if (size < 9)
		return 0;
	nslots = 1u << (data[0] % 8);                 /* 1 .. 128 slots */
	memcpy(&start, data + 1, sizeof(start));
	data += 9;
	size -= 9;
	bytes = AIPROF_RING_BYTES(nslots);
	h = aligned_alloc(64, bytes);
	if (!h)
		return 0;
	memset(h, 0, bytes);
	/* the header says anything; the consumer must not read its geometry from there */
	h->nslots = (uint32_t)start | 0x80000000u;
	memcpy(ring__slots(h), data, size < nslots * sizeof(out) ? size : nslots * sizeof(out));
	for (uint32_t i = 0; i < nslots; i++) {
		struct aiprof_event *e = &ring__slots(h)[i];
		uint64_t pos = start + i;

		if ((e->flags & 3) != 0 && (pos & (nslots - 1)) == i)
			atomic_store(&e->seq, pos + 1);   /* a committed slot at its position */
	}
	memset(&store, 0, sizeof(store));
	/* a budget of 1 .. 8 events: most runs also sum events past it (event_totals) */
	store.max_events = 1 + (start >> 8) % 8;
	tail = start;
	while (taken < 2u * nslots && ring__pop_at(h, nslots, &tail, &out)) {
		event_store__add(&store, &out);
		taken++;
	}
	CHECK(tail == start + taken);
	CHECK(store.n + store.rejected <= taken);
	CHECK(store.n <= store.max_events);
	{
		uint64_t summed = 0;

		for (size_t i = 0; i < store.over.n; i++)
			summed += store.over.v[i].count;
		CHECK(summed == store.over.events);
		CHECK(store.n + store.over.events + store.rejected + store.store_drops <= taken);
	}
	for (size_t i = 0; i < store.nstrings; i++) {
		const char *s = event_store__string(&store, (uint32_t)i);

		if (s)
			CHECK(strlen(s) <= store.string_total[i]);
	}
	CHECK(store.string_bytes <= EVENT_STORE_STRING_BYTES);
	event_store__clear(&store);
	free(h);
	return 0;
}
