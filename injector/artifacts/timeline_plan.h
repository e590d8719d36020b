/* SPDX-License-Identifier: MIT */
/*
 * What timeline.c writes for one target, and in which order: every library event and every
 * eBPF event line, grouped by track (thread or GPU stream) and sorted by time within it,
 * so timestamps are monotonic per track. When the target's events would exceed its size
 * budget, repeated identical events are folded into aggregate slices instead of being
 * dropped:
 *   level 1  a run of identical consecutive events on a track (same call, kernel, grid,
 *            size...), less than 1 ms apart, becomes one slice "name x N"
 *   level 2  if still too big, everything of a track within a time bucket becomes one
 *            slice (bucket width chosen to fit), naming the dominant event
 * eBPF events (few per second per thread) are never folded. Flow arrows are written only
 * for launch/kernel pairs that are both written as single events.
 */
#ifndef AIPROF_TIMELINE_PLAN_H
#define AIPROF_TIMELINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct target;
struct ebpf;
struct jsonw;

#define TL_GPU_TRACK_BASE 1000000u  /* tid of GPU stream tracks: base + device*1000 + stream */
#define TL_DEFAULT_BUDGET_PER_RANK (50ull << 20)
#define TL_RUN_GAP_NS 1000000ull    /* level 1 folds events closer than this */

enum tl_kind { TL_EVENT = 0, TL_LINE = 1, TL_AGG = 2 };

struct tl_item {
	uint64_t ts;
	uint32_t track;
	uint32_t ref;                   /* kind << 30 | index (store, line or aggregate) */
};

static inline enum tl_kind tl_item_kind(const struct tl_item *it)
{
	return (enum tl_kind)(it->ref >> 30);
}

static inline uint32_t tl_item_index(const struct tl_item *it)
{
	return it->ref & ((1u << 30) - 1);
}

struct tl_agg {
	uint32_t first;                 /* store index of the first (and dominant) event */
	uint32_t count;                 /* events folded */
	uint32_t distinct;              /* different kinds of events folded (level 2) */
	uint64_t start, end, busy_ns, min_ns, max_ns;
};

struct tl_line {
	size_t off, len;
};

struct tl_track_name {
	uint32_t track;
	char name[96];
};

struct tl_plan {
	struct tl_item *items;
	size_t n, cap;
	struct tl_agg *aggs;
	size_t nagg, capagg;
	char *ext;                      /* the eBPF writer's output for this target */
	size_t ext_len, ext_cap;
	struct tl_line *lines;
	size_t nlines, caplines;
	uint64_t *flow_ok;              /* sorted correlation ids with both ends written */
	size_t nflow;
	struct tl_track_name *names;    /* thread and GPU track names with ranks */
	size_t nnames, capnames;
	char process_label[160];
	int32_t first_rank;             /* lowest rank in the target, -1 none */
	/* stats */
	uint64_t estimate_bytes, budget_bytes;
	uint64_t events_in, events_aggregated, bucket_ns;
};

/*
 * Plans the target's part of the timeline. budget_bytes is the target's uncompressed
 * budget (0: none); e may be NULL. Returns 0 or -ENOMEM.
 */
int tl_plan__build(struct tl_plan *pl, const struct target *t, struct ebpf *e,
		   uint64_t budget_per_rank, uint64_t window_ns);
void tl_plan__clear(struct tl_plan *pl);

/* The name of a track with its rank ("trainer [rank 1]", "GPU 0 stream 7 [rank 1]"), or
 * NULL when the plan has none for it. */
const char *tl_plan__track_name(const struct tl_plan *pl, uint32_t track);
/* Whether the launch/kernel pair with this correlation id gets a flow arrow. */
bool tl_plan__flow_ok(const struct tl_plan *pl, uint64_t correlation);
/* A flow id unique across processes: "0x" pid, correlation. */
void tl_flow_id(char *buf, size_t len, int pid, uint64_t correlation);

/* Writers for items that are not plain library events. */
void tl_plan__write_line(struct jsonw *w, const struct tl_plan *pl, const struct tl_item *it);
void tl_plan__write_agg(struct jsonw *w, const struct target *t, const struct tl_plan *pl,
			const struct tl_item *it, const char *name, const char *cat);

/* Budget per rank: $AIPROF_TIMELINE_BUDGET_MB if set (0 = unlimited), else 50 MiB. */
uint64_t tl_budget_per_rank(void);

/* Memory sink for jsonw: ctx is a struct tl_plan (appends to ext). */
int tl_sink_plan(void *ctx, const char *buf, size_t len);

#endif
