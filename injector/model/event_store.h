/* SPDX-License-Identifier: MIT */
/*
 * The events of one target, as the injector keeps them: in arrival order, each checked,
 * with the strings they refer to reassembled from their chunks. Filled from the target's
 * ring (attach/session.c) or from the uprobe method's records (collect/uprobe_decode.c),
 * which are both untrusted: every record is validated here before it is kept, and what one
 * target can make the injector allocate is bounded.
 */
#ifndef AIPROF_EVENT_STORE_H
#define AIPROF_EVENT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "blobtab.h"
#include "event.h"

/*
 * What a window could not keep whole once its budget was full: the events' sums, grouped as
 * the summary's tables group them. Bounded by the distinct keys (kernels, copy kinds, APIs),
 * not by the window's length.
 */
struct event_total {
	uint16_t type, api;
	uint32_t flags;             /* launches: AIPROF_EV_F_*; copies: AIPROF_MEMCPY_F_* */
	uint64_t key;               /* launches: EVENT_TOTAL_NAMED | name id, else the function;
				     * copies and memsets: the kind; otherwise 0 */
	uint64_t count, dur_ns, bytes;
};
#define EVENT_TOTAL_NAMED (1ULL << 63)

struct event_totals {
	struct blobtab keys;        /* (type, api, flags, key) -> index into v */
	struct event_total *v;
	size_t n, cap;
	uint64_t events;            /* events summed here instead of kept */
	uint64_t first_ts;          /* when the first of them happened (CLOCK_MONOTONIC ns) */
};

/* Every event of one target, in arrival order, plus the strings they refer to. */
struct event_store {
	struct aiprof_event *v;
	size_t n, cap;
	char **strings;             /* by string id; NULL where unknown */
	uint16_t *string_total;     /* the length the id's first chunk announced */
	size_t nstrings;
	size_t string_bytes;        /* allocated for strings, at most EVENT_STORE_STRING_BYTES */
	uint64_t drops;             /* ring drops during the window */
	uint64_t store_drops;       /* events we could not keep (out of memory) */
	uint64_t rejected;          /* records that failed validation: counted, never used */
	size_t max_events;          /* events kept whole at most (0: EVENT_STORE_MAX_EVENTS); the
				     * rest are summed into `over` */
	struct event_totals over;
};

/* What one target's events may take in memory: 4 Mi events of 128 bytes, 512 MiB. Beyond it
 * a window keeps its first events whole and sums the others (struct event_totals). */
#define EVENT_STORE_MAX_EVENTS ((size_t)4 << 20)

/* What one target can make the injector allocate for its strings. */
#define EVENT_STORE_STRING_BYTES (64u << 20)
#define EVENT_STORE_MAX_STRING_ID (1u << 20)

void event_store__clear(struct event_store *s);
/* Adds an event; strings are reassembled instead of stored. */
void event_store__add(struct event_store *s, const struct aiprof_event *e);
const char *event_store__string(const struct event_store *s, uint32_t id);
void event_store__demangle(struct event_store *s);   /* after the window: see event_store.c */

#endif
