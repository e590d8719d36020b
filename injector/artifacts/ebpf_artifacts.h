/* SPDX-License-Identifier: MIT */
/*
 * What the eBPF collectors add to the artifacts: their timeline events and stack frames
 * (ebpf_timeline.c), the summary's "ebpf" member (ebpf_summary.c), the folded stacks. They
 * read the collectors' results (collect/ebpf_internal.h).
 */
#ifndef AIPROF_EBPF_ARTIFACTS_H
#define AIPROF_EBPF_ARTIFACTS_H

struct jsonw;
struct ebpf;
struct target;

/* The eBPF events of target t (its cpu_sample, offcpu and syscall events, and names of
 * threads the library did not see), inside the traceEvents array. */
void ebpf_timeline_write_target(struct jsonw *w, struct ebpf *e, const struct target *t);
/* The processes the targets started during the window and the collectors followed: a
 * process_name (with the parent) and their events each, inside the traceEvents array. */
void ebpf_timeline_write_followed(struct jsonw *w, struct ebpf *e);
/* The top-level "stackFrames" member the events' "sf" ids refer to. */
void ebpf_timeline_write_frames(struct jsonw *w, struct ebpf *e);

/* The summary's "ebpf" member. e may be NULL: then why_off says why eBPF did not run. */
void ebpf_summary_write(struct jsonw *w, const struct ebpf *e, const char *why_off);

/* stacks.folded (on-CPU samples) and offcpu.folded (microseconds blocked) into dir.
 * Returns 0 or a negative errno. */
int ebpf_folded_write(const struct ebpf *e, const char *dir);

#endif
