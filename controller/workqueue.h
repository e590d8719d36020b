/* SPDX-License-Identifier: MIT */
/*
 * The controller's work queue, after client-go's: keys ("namespace/name") wait in FIFO
 * order; a key is in the queue at most once; a key being processed is not handed to a second
 * worker: added again meanwhile, it is queued once more when its worker calls done(). Keys
 * can be added after a delay (the earliest wins) or rate-limited: each failure of a key
 * doubles its delay (with jitter, capped) until forget() resets it.
 *
 * Time comes from an injected clock (CLOCK_MONOTONIC ns) so tests drive delays without
 * sleeping: workqueue__try_get() never blocks.
 */
#ifndef AIPROF_WORKQUEUE_H
#define AIPROF_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

struct wq_hooks {
	uint64_t (*now)(void *ctx);     /* NULL: now_monotonic_ns() */
	uint64_t (*random)(void *ctx);  /* NULL: random_u64() */
	void *ctx;
};

struct wq_rate {
	uint64_t base_ns;               /* delay after the first failure */
	uint64_t cap_ns;                /* largest delay */
};
#define WQ_RATE_DEFAULT { 100 * 1000000ULL, 60 * 1000000000ULL }

struct workqueue;

/* hooks and rate may be NULL (defaults); hooks must outlive the queue. */
struct workqueue *workqueue__new(const struct wq_hooks *hooks, const struct wq_rate *rate);
void workqueue__free(struct workqueue *q);   /* NULL-safe */

/* Each returns 0, -ENOMEM, or -ESHUTDOWN. */
int workqueue__add(struct workqueue *q, const char *key);
int workqueue__add_after(struct workqueue *q, const char *key, uint64_t delay_ns);
int workqueue__add_rate_limited(struct workqueue *q, const char *key);
void workqueue__forget(struct workqueue *q, const char *key);
unsigned workqueue__failures(struct workqueue *q, const char *key);

/*
 * The next ready key (malloc'd: the caller frees it after workqueue__done()). get() blocks
 * until one is ready; both return -ESHUTDOWN once the queue is shut down (keys still queued
 * are dropped: a stopping controller does not work them off); try_get() returns -EAGAIN
 * when none is ready now.
 */
int workqueue__get(struct workqueue *q, char **ret_key);
int workqueue__try_get(struct workqueue *q, char **ret_key);
void workqueue__done(struct workqueue *q, const char *key);

size_t workqueue__len(struct workqueue *q);      /* keys ready now */
size_t workqueue__waiting(struct workqueue *q);  /* keys waiting for a delay */
void workqueue__shutdown(struct workqueue *q);   /* wakes every get() */

#endif
