/* SPDX-License-Identifier: MIT */
/* timeline.json.gz (timeline.c): the window as Chrome Trace Event JSON, under a size budget. */
#ifndef AIPROF_TIMELINE_H
#define AIPROF_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

struct profile;

/* What timeline_write() wrote, for the summary (the size budget and what it aggregated). */
struct timeline_stats {
	uint64_t budget_bytes;          /* uncompressed budget for the whole file */
	uint64_t bytes;                 /* uncompressed bytes written */
	uint64_t events_in;             /* events considered (library + eBPF) */
	uint64_t events_written;        /* trace events written, metadata and flows excluded */
	uint64_t events_aggregated;     /* events folded into aggregate slices */
	uint64_t aggregate_slices;      /* slices that stand for several events */
	uint64_t flows;                 /* launch -> kernel arrows */
	uint64_t bucket_ns;             /* 0, or the time bucket of the second aggregation level */
	bool written;
};

/* Writes the timeline of p to path; fills *p->timeline when set. 0 or a negative errno. */
int timeline_write(const struct profile *p, const char *path);

#endif
