/* SPDX-License-Identifier: MIT */
/*
 * The eBPF-only method (`aiprof profile --method ebpf`): uprobes on the exported functions
 * of libcudart / libcuda / libnccl / libibverbs as the target process has them mapped,
 * found through /proc/PID/maps and opened through /proc/PID/map_files (the target's own
 * mount namespace). Nothing is loaded into the target and it is never stopped; what this
 * method cannot see is listed by uprobe_session__limits().
 *
 * Records from the kernel (struct gp_rec, bpf/gpuprobes.h) become the same struct
 * aiprof_event the interception library writes, so the timeline and summary writers do
 * not know which method produced them.
 */
#ifndef AIPROF_UPROBES_H
#define AIPROF_UPROBES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/session.h"

struct gp_rec;
struct jsonw;
struct uprobe_session;

/*
 * Loads the BPF programs for pid (a host pid) and attaches them to every library of
 * `collectors` (AIPROF_COLLECT_CUDA: libcudart + libcuda, _NCCL: libnccl, _RDMA:
 * libibverbs; _CUPTI has no eBPF equivalent) that pid has mapped now; libraries mapped
 * later are picked up by uprobe_session__drain(). Recording starts at once.
 * Returns 0 and *ret (caller frees with uprobe_session__free()), or a negative errno with
 * msg set to what went wrong and what to do; *ret is untouched on failure:
 *   -ESRCH   no such process          -EPERM  not allowed to load eBPF programs
 *   -EOPNOTSUPP the kernel refused the programs (too old, no uprobes)
 *   -EIO     a library is mapped but no probe could be attached to any of them
 * A process with none of the libraries mapped (yet) is not an error; the session then
 * says so (uprobe_session__describe()).
 * Raises this process's RLIMIT_NOFILE soft limit to the hard limit (each probe is a file
 * descriptor).
 */
int uprobe_session__start(pid_t pid, uint32_t collectors, struct uprobe_session **ret,
			  char *msg, size_t len);

/* Moves completed calls into store (AIPROF_EV_* events, plus AIPROF_EV_STRING for
 * interned names); returns how many records were read. Call it every few milliseconds:
 * the ring holds about 7000 calls. Also attaches to libraries mapped since the last look
 * (at most once a second). Records lost in the kernel are added to store->drops. */
size_t uprobe_session__drain(struct uprobe_session *s, struct event_store *store);

/* Detaches every probe, then drains what is left. The session keeps its statistics for
 * uprobe_session__summary(). NULL-safe; a second call does nothing. */
void uprobe_session__stop(struct uprobe_session *s, struct event_store *store);

void uprobe_session__free(struct uprobe_session *s);   /* stops first if needed; NULL-safe */

/* One line for the log: "94 probes on libcudart.so.13, libnccl.so.2" or why none. */
void uprobe_session__describe(const struct uprobe_session *s, char *buf, size_t len);

/* What the eBPF-only method cannot see, as sentences joined by "; " (static storage). */
const char *uprobe_session__limits(void);
/* The same, one at a time: the i-th limit, NULL past the last. */
const char *uprobe_session__limit(size_t i);

/*
 * Writes the method's part of one target object of summary.json, as keys of the object
 * the caller has open: "uprobes" {libraries, probes, records, drops} and "limits"
 * [the static limits, then what this session could not do, e.g. communicators whose rank
 * was never seen]. NULL-safe (writes nothing).
 */
void uprobe_session__summary(const struct uprobe_session *s, struct jsonw *w);

/* ---- record -> event conversion: pure, for tests ------------------------------------- */

/* State a conversion needs across records: pinned host ranges and NCCL communicators seen
 * in the window, interned driver-kernel labels. */
struct uprobe_decoder;

int uprobe_decoder__new(struct uprobe_decoder **ret);   /* 0 or -ENOMEM */
void uprobe_decoder__free(struct uprobe_decoder *d);    /* NULL-safe */

/*
 * Converts one record and adds the result to store: 0 events (bookkeeping only, e.g.
 * ncclCommDestroy, or an unknown fn), 1, or 2 (an AIPROF_EV_STRING naming a driver
 * kernel's CUfunction the first time it is launched, then the launch). Returns the number
 * of events added, or -EINVAL for a record whose fn is out of range.
 */
int uprobe_decoder__convert(struct uprobe_decoder *d, const struct gp_rec *r,
			    struct event_store *store);

/* Collectives converted so far whose communicator's rank/nranks were unknown (-1). */
uint64_t uprobe_decoder__unknown_rank(const struct uprobe_decoder *d);

/* Raises the soft RLIMIT_NOFILE to the hard one: each uprobe, and each thread the CPU
 * sampler follows, holds a perf event and a link descriptor (hundreds per target). */
void perf_raise_nofile(void);

#endif
