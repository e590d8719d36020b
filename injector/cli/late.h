/* SPDX-License-Identifier: MIT */
/*
 * The processes the targets start during the window, attached the way the targets were
 * (libaiprof.so by ptrace injection, or uprobes): torchrun's ranks, a job's helpers. The
 * eBPF follower names them (ebpf__follow_news()); they are attached by LATE_WORKERS
 * threads of their own, so that the window goes on draining the rings while an injection
 * waits for a safe point, and so that a rank whose attach waits seconds for one (inside
 * `import torch`) does not hold back the ranks started after it. A child is attached LATE_SETTLE_NS after its fork or its exec, whichever came
 * last: a fork followed at once by an exec is attached once, in the new program, with its
 * loader done. One that execs after its attach began is attached again (the library went
 * with the old program): the same pid then has two entries, the newer one last.
 */
#ifndef AIPROF_LATE_H
#define AIPROF_LATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "model/profile.h"

#define LATE_MAX 16                              /* processes attached in one window */
#define LATE_WORKERS 4                           /* attaches at once */
#define LATE_SETTLE_NS (50ull * 1000 * 1000)

/* Attaches t (pid, parent, started_ns set): 0, or a negative errno with t->message set;
 * called on a late worker, LATE_WORKERS of them at once (for different processes). */
typedef int (*late_attach_fn)(struct target *t, void *ctx);
/* (t->start_ticks, when set before the call, is the start time the process must have) */
/* (struct late_stats: model/profile.h, for the summary) */

/* Lets go of what an attach that was never taken holds. */
typedef void (*late_discard_fn)(struct target *t);

struct late;

int late__new(late_attach_fn attach, late_discard_fn discard, void *ctx, struct late **ret);
/*
 * A note of the follower: a new child (execd false) or the exec of one. The exec of a
 * target chosen (parent 0) is attached anew like a child's: start_ticks is the identity
 * it must still have (its start time, which an exec keeps); 0 for children.
 */
void late__offer(struct late *l, pid_t pid, pid_t parent, uint64_t ns, bool execd,
		 unsigned long long start_ticks);
/* Moves a process attached since the last call into *t (recording not yet started). */
bool late__take(struct late *l, struct target *t);
/* No more attaches: waits for those in flight (they can still be taken). */
void late__stop(struct late *l);
/* Discards what was not taken; NULL-safe. */
void late__free(struct late *l);
void late__stats(const struct late *l, struct late_stats *ret);

#endif
