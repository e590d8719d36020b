/* SPDX-License-Identifier: MIT */
/*
 * The human side of the artifacts: flame graphs and report.html.
 *
 *   flamegraph.svg          on-CPU samples (from stacks.folded)
 *   flamegraph-offcpu.svg   time blocked off CPU (from offcpu.folded)
 *   flamegraph-gpu.svg      CPU call stacks at kernel launches (gpu.folded, written here,
 *                           see launch_stacks.h), weighted by GPU ns with CUPTI, else by
 *                           launch count
 *   report.html             one self-contained page: findings with evidence and remedy,
 *                           the flame graphs inline, top kernels, copies, NCCL, ranks, and
 *                           how to open the timeline in Perfetto
 *
 * Everything taken from the target (frame, kernel, thread and file names) is escaped.
 */
#ifndef AIPROF_REPORT_H
#define AIPROF_REPORT_H

#include <stddef.h>

struct profile;
struct membuf;

/*
 * Writes the flame graphs and report.html into dir, after the timeline, summary and
 * folded stacks exist there. ret_path receives the report's path. 0 or -errno.
 */
int report_write(const struct profile *p, const char *dir, char *ret_path, size_t len);

/* report.html alone, with the SVGs given (NULL for a missing one), into out. */
void report_html(const struct profile *p, const char *const svgs[3], struct membuf *out);

#endif
