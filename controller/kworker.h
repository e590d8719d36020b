/* SPDX-License-Identifier: MIT */
/*
 * A worker over a work queue, as the session and policy controllers run theirs: keys are
 * taken one at a time and reconciled; a failure comes back rate-limited (the queue's
 * backoff), a success forgets the key's failures and comes back at the time it asked for.
 */
#ifndef AIPROF_KWORKER_H
#define AIPROF_KWORKER_H

#include <stdint.h>
#include "workqueue.h"

/* One reconcile of key: 0 and *requeue_at_ns (wall clock ns, 0 = not again), or -errno to
 * retry it with backoff. Counting and logging the result are the callback's. */
typedef int (*kworker_reconcile_fn)(void *ctx, const char *key, int64_t *requeue_at_ns);

/* Runs until q shuts down. A requested time comes back slack_ns after it (so that it has
 * passed on our clock too); a time already past, at once. */
void kworker__run(struct workqueue *q, kworker_reconcile_fn reconcile, void *ctx,
		  uint64_t slack_ns);

#endif
