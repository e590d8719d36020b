/* SPDX-License-Identifier: MIT */
/*
 * A session is the injector's side of one target process's ring: found through
 * /proc/PID/fd, mapped from outside, driven by the control words in its header.
 */
#ifndef AIPROF_SESSION_H
#define AIPROF_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "event.h"

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
	size_t max_events;          /* events kept at most (0: EVENT_STORE_MAX_EVENTS); the rest
				     * are counted in store_drops */
};

/* What one target's events may take in memory: 4 Mi events of 128 bytes, 512 MiB. Beyond it
 * a window keeps its first events and counts the others as dropped. */
#define EVENT_STORE_MAX_EVENTS ((size_t)4 << 20)

/* What one target can make the injector allocate for its strings. */
#define EVENT_STORE_STRING_BYTES (64u << 20)
#define EVENT_STORE_MAX_STRING_ID (1u << 20)

void event_store__clear(struct event_store *s);
/* Adds an event; strings are reassembled instead of stored. */
void event_store__add(struct event_store *s, const struct aiprof_event *e);
const char *event_store__string(const struct event_store *s, uint32_t id);
void event_store__demangle(struct event_store *s);   /* after the window: see session.c */

struct session;

/*
 * Finds and maps the ring of the library loaded in pid, waiting up to wait_ns for the
 * library's constructor to create it. -ENOENT if there is none, -EPROTO if its
 * version does not match this injector.
 */
int session__open(pid_t pid, uint64_t wait_ns, struct session **ret);
void session__free(struct session *s);   /* stops recording if still on; NULL-safe */

/* Discards stale events, then turns recording on for `collectors` (AIPROF_COLLECT_*). */
int session__start(struct session *s, uint32_t collectors);
/* Keeps the library recording (it idles itself when heartbeats stop for 5 s). */
void session__heartbeat(struct session *s);
/* Moves committed events into the store; returns how many. */
size_t session__drain(struct session *s, struct event_store *store);
/* Turns recording off and drains what producers were still writing. */
void session__stop(struct session *s, struct event_store *store);

const struct aiprof_ring_hdr *session__hdr(const struct session *s);

#endif
