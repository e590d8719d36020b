/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timeutil.h"
#include "late.h"

enum late_state { LATE_QUEUED, LATE_BUSY, LATE_DONE, LATE_TAKEN, LATE_FAILED };

struct late_item {
	enum late_state state;
	uint64_t ready_ns;              /* attached from then on */
	uint64_t attach_ns;             /* when its attach began */
	struct target t;
};

struct late {
	late_attach_fn attach;
	late_discard_fn discard;
	void *ctx;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t threads[LATE_WORKERS];
	size_t nthreads;
	bool stopping;
	struct late_item items[LATE_MAX];
	size_t n;
	struct late_stats stats;
};

/* The newest item of pid (an exec after an attach gives the pid a second one), or NULL. */
static struct late_item *item_of(struct late *l, pid_t pid)
{
	for (size_t i = l->n; i-- > 0;)
		if (l->items[i].t.pid == pid)
			return &l->items[i];
	return NULL;
}

static struct late_item *queue(struct late *l, pid_t pid, pid_t parent, uint64_t ns,
			       uint64_t started_ns, unsigned long long start_ticks)
{
	struct late_item *it;

	if (l->n == LATE_MAX)
		return NULL;
	it = &l->items[l->n++];
	memset(it, 0, sizeof(*it));
	it->state = LATE_QUEUED;
	it->ready_ns = ns + LATE_SETTLE_NS;
	it->t.pid = pid;
	it->t.parent = parent;
	it->t.started_ns = started_ns;
	it->t.start_ticks = start_ticks;
	it->t.pidfd = -1;
	pthread_cond_signal(&l->wake);
	return it;
}

/* Whether another worker is attaching pid now. */
static bool pid_busy(const struct late *l, pid_t pid)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->items[i].state == LATE_BUSY && l->items[i].t.pid == pid)
			return true;
	return false;
}

/* The queued item due first, or NULL. A pid that exec'd while its attach was in flight
 * waits for that attach to end: one tracer at a time. */
static struct late_item *next_due(struct late *l)
{
	struct late_item *best = NULL;

	for (size_t i = 0; i < l->n; i++)
		if (l->items[i].state == LATE_QUEUED &&
		    (!best || l->items[i].ready_ns < best->ready_ns) &&
		    !pid_busy(l, l->items[i].t.pid))
			best = &l->items[i];
	return best;
}

static void wait_until(struct late *l, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / NSEC_PER_SEC),
			       .tv_nsec = (long)(ns % NSEC_PER_SEC) };

	(void)pthread_cond_timedwait(&l->wake, &l->lock, &ts);
}

static void *late_main(void *arg)
{
	struct late *l = arg;

	pthread_mutex_lock(&l->lock);
	while (!l->stopping) {
		struct late_item *it = next_due(l);
		uint64_t now = now_monotonic_ns();
		int r;

		if (!it || it->ready_ns > now) {
			wait_until(l, it ? it->ready_ns : now + 100 * NSEC_PER_MSEC);
			continue;
		}
		it->state = LATE_BUSY;
		it->attach_ns = now;
		pthread_cond_signal(&l->wake);  /* the next one due: another worker's */
		pthread_mutex_unlock(&l->lock);
		r = l->attach(&it->t, l->ctx);
		pthread_mutex_lock(&l->lock);
		if (r == -ESRCH && it->t.died) {
			/* it died while aiprof was in it: kept, to be named wherever users look */
			it->t.error = r;
			it->state = LATE_DONE;
			l->stats.died++;
		} else if (r == -ESRCH) {
			it->state = LATE_FAILED;
			l->stats.gone++;        /* exited first: nothing failed */
		} else if (r < 0) {
			it->state = LATE_FAILED;
			l->stats.failed++;
			snprintf(l->stats.last_failure, sizeof(l->stats.last_failure), "pid %d: %s",
				 it->t.pid, it->t.message);
		} else {
			it->state = LATE_DONE;
			l->stats.attached++;
		}
		pthread_cond_broadcast(&l->wake);   /* an entry of the same pid may be due now */
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int late__new(late_attach_fn attach, late_discard_fn discard, void *ctx, struct late **ret)
{
	pthread_condattr_t ca;
	sigset_t all, old;
	struct late *l;
	int r;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->attach = attach;
	l->discard = discard;
	l->ctx = ctx;
	pthread_mutex_init(&l->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);    /* now_monotonic_ns()'s clock */
	pthread_cond_init(&l->wake, &ca);
	pthread_condattr_destroy(&ca);
	/* signals (^C, the tracees' SIGCHLD) stay the main thread's: the workers poll */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (r = 0; l->nthreads < LATE_WORKERS; l->nthreads++) {
		r = -pthread_create(&l->threads[l->nthreads], NULL, late_main, l);
		if (r < 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!l->nthreads) {     /* one worker is enough to go on with; none is not */
		late__free(l);
		return r;
	}
	*ret = l;
	return 0;
}

void late__offer(struct late *l, pid_t pid, pid_t parent, uint64_t ns, bool execd,
		 unsigned long long start_ticks)
{
	struct late_item *it;

	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	it = item_of(l, pid);
	if (l->stopping) {
		;
	} else if (!it) {
		if (!execd)
			l->stats.offered++;
		if (!queue(l, pid, parent, ns, ns, start_ticks))
			l->stats.over += !execd;
	} else if (execd && it->state == LATE_QUEUED) {
		it->ready_ns = ns + LATE_SETTLE_NS;     /* the new program, once loaded */
	} else if (execd && ns > it->attach_ns) {
		/* it exec'd since its attach began: what was loaded is gone with the old
		 * program, so the new one is attached anew */
		l->stats.execd_after++;
		if (!queue(l, pid, parent, ns, it->t.started_ns, it->t.start_ticks))
			l->stats.over++;
	}
	pthread_mutex_unlock(&l->lock);
}

bool late__take(struct late *l, struct target *t)
{
	bool found = false;

	if (!l)
		return false;
	pthread_mutex_lock(&l->lock);
	for (size_t i = 0; i < l->n && !found; i++)
		if (l->items[i].state == LATE_DONE) {
			*t = l->items[i].t;
			l->items[i].state = LATE_TAKEN;
			found = true;
		}
	pthread_mutex_unlock(&l->lock);
	return found;
}

void late__stop(struct late *l)
{
	if (!l || !l->nthreads)
		return;
	pthread_mutex_lock(&l->lock);
	l->stopping = true;
	pthread_cond_broadcast(&l->wake);
	pthread_mutex_unlock(&l->lock);
	for (size_t i = 0; i < l->nthreads; i++)
		pthread_join(l->threads[i], NULL);
	l->nthreads = 0;
	/* what was still waiting its turn is not attached now: said, not lost in the count */
	for (size_t i = 0; i < l->n; i++)
		l->stats.window_ended += l->items[i].state == LATE_QUEUED;
}

void late__stats(const struct late *l, struct late_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (l)
		*ret = l->stats;   /* after late__stop(): nothing writes them any more */
}

void late__free(struct late *l)
{
	if (!l)
		return;
	late__stop(l);
	for (size_t i = 0; i < l->n; i++)
		if (l->items[i].state == LATE_DONE || l->items[i].state == LATE_FAILED)
			l->discard(&l->items[i].t);
	pthread_cond_destroy(&l->wake);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
