/* SPDX-License-Identifier: MIT */
/*
 * The diagnosis of one window: the analysis, the waits of threads (from the eBPF
 * collectors) and the findings, computed once after recording and read by the summary,
 * the timeline and the report.
 */
#ifndef AIPROF_DIAGNOSIS_H
#define AIPROF_DIAGNOSIS_H

#include <stdbool.h>
#include <stdint.h>

#include "findings.h"

struct profile;
struct analysis;
struct ebpf;

struct diagnosis {
	struct analysis *analysis;
	struct findings *findings;
	struct wait_list waits;
	bool waits_known;             /* the eBPF off-CPU or syscall collector ran */
	uint64_t ebpf_counts[4];      /* events by category: syscall, cpu_sample, offcpu, python */
};

/* Computes the diagnosis of p; *ret is freed with diagnosis__free(). 0 or -ENOMEM. */
int diagnosis__new(const struct profile *p, struct diagnosis **ret);
void diagnosis__free(struct diagnosis *d);   /* NULL-safe */

/*
 * Adapts what the eBPF collectors recorded (slow syscalls, off-CPU intervals) into thread
 * waits, and counts their events (syscall, cpu_sample, offcpu, python). Returns 0, or
 * -ENODATA when neither the off-CPU nor the syscall collector ran, or -ENOMEM.
 */
int waits_from_ebpf(struct ebpf *e, struct wait_list *out, uint64_t counts[4]);

/* The summary's diagnosis members (summary_diag.c); each is a no-op without p->diag. */
struct jsonw;
void summary_write_counts_ebpf(struct jsonw *w, const struct profile *p);  /* in "counts" */
void summary_write_analysis(struct jsonw *w, const struct profile *p);     /* "analysis", "timeline" */
void summary_write_findings(struct jsonw *w, const struct profile *p);     /* "findings" */
void summary_write_not_collected(struct jsonw *w, const struct profile *p); /* items of it */

#endif
