/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backoff.h"
#include "timeutil.h"
#include "workqueue.h"

struct kstate {
	struct kstate *next;     /* hash chain */
	uint64_t hash;
	bool queued;             /* in the ready FIFO */
	bool processing;         /* handed to a worker, done() not yet called */
	bool dirty;              /* added while processing */
	uint64_t due;            /* waiting in the delay heap until then; 0: not waiting */
	unsigned failures;
	unsigned heap_refs;      /* entries in the delay heap that point here (some stale) */
	char key[];
};

struct delayed {
	uint64_t due;
	struct kstate *k;
};

struct workqueue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wq_hooks hooks;
	struct wq_rate rate;
	bool shutdown;
	struct kstate **buckets;
	size_t nbuckets, nkeys;
	struct kstate **fifo;    /* ring */
	size_t head, len, cap;
	struct delayed *heap;
	size_t nheap, capheap;
};

static uint64_t qnow(struct workqueue *q)
{
	return q->hooks.now ? q->hooks.now(q->hooks.ctx) : now_monotonic_ns();
}

static uint64_t hash_key(const char *k)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *k; k++) {
		h ^= (unsigned char)*k;
		h *= 1099511628211ULL;
	}
	return h;
}

struct workqueue *workqueue__new(const struct wq_hooks *hooks, const struct wq_rate *rate)
{
	static const struct wq_rate def = WQ_RATE_DEFAULT;
	struct workqueue *q = calloc(1, sizeof(*q));
	pthread_condattr_t ca;

	if (!q)
		return NULL;
	if (hooks)
		q->hooks = *hooks;
	q->rate = rate ? *rate : def;
	q->nbuckets = 256;
	q->buckets = calloc(q->nbuckets, sizeof(*q->buckets));
	if (!q->buckets) {
		free(q);
		return NULL;
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
	return q;
}

void workqueue__free(struct workqueue *q)
{
	if (!q)
		return;
	for (size_t i = 0; i < q->nbuckets; i++) {
		struct kstate *k = q->buckets[i], *n;

		for (; k; k = n) {
			n = k->next;
			free(k);
		}
	}
	free(q->buckets);
	free(q->fifo);
	free(q->heap);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}

static struct kstate *lookup(struct workqueue *q, const char *key, bool create)
{
	uint64_t h = hash_key(key);
	struct kstate **pk = &q->buckets[h & (q->nbuckets - 1)], *k;
	size_t n;

	for (k = *pk; k; k = k->next)
		if (k->hash == h && strcmp(k->key, key) == 0)
			return k;
	if (!create)
		return NULL;
	n = strlen(key);
	k = calloc(1, sizeof(*k) + n + 1);
	if (!k)
		return NULL;
	memcpy(k->key, key, n + 1);
	k->hash = h;
	k->next = *pk;
	*pk = k;
	if (++q->nkeys > q->nbuckets * 2) {
		size_t nb = q->nbuckets * 4;
		struct kstate **b = calloc(nb, sizeof(*b));

		if (b) {
			for (size_t i = 0; i < q->nbuckets; i++) {
				struct kstate *e = q->buckets[i], *nx;

				for (; e; e = nx) {
					nx = e->next;
					e->next = b[e->hash & (nb - 1)];
					b[e->hash & (nb - 1)] = e;
				}
			}
			free(q->buckets);
			q->buckets = b;
			q->nbuckets = nb;
		}
	}
	return k;
}

/* Frees k once nothing refers to it. */
static void maybe_drop(struct workqueue *q, struct kstate *k)
{
	struct kstate **pk;

	if (k->queued || k->processing || k->dirty || k->due || k->failures || k->heap_refs)
		return;
	for (pk = &q->buckets[k->hash & (q->nbuckets - 1)]; *pk; pk = &(*pk)->next)
		if (*pk == k) {
			*pk = k->next;
			q->nkeys--;
			free(k);
			return;
		}
}

static int fifo_push(struct workqueue *q, struct kstate *k)
{
	if (q->len == q->cap) {
		size_t ncap = q->cap ? q->cap * 2 : 64;
		struct kstate **f = malloc(ncap * sizeof(*f));

		if (!f)
			return -ENOMEM;
		for (size_t i = 0; i < q->len; i++)
			f[i] = q->fifo[(q->head + i) % q->cap];
		free(q->fifo);
		q->fifo = f;
		q->head = 0;
		q->cap = ncap;
	}
	q->fifo[(q->head + q->len) % q->cap] = k;
	q->len++;
	k->queued = true;
	pthread_cond_signal(&q->cond);
	return 0;
}

static int add_locked(struct workqueue *q, struct kstate *k)
{
	if (k->queued)
		return 0;
	if (k->processing) {
		k->dirty = true;
		return 0;
	}
	return fifo_push(q, k);
}

/* Takes the queue's lock and key's state, made if new: 0, -ESHUTDOWN or -ENOMEM. The lock
 * is held on return either way. */
static int lock_new_key(struct workqueue *q, const char *key, struct kstate **ret)
{
	pthread_mutex_lock(&q->lock);
	if (q->shutdown)
		return -ESHUTDOWN;
	*ret = lookup(q, key, true);
	return *ret ? 0 : -ENOMEM;
}

int workqueue__add(struct workqueue *q, const char *key)
{
	struct kstate *k;
	int r;

	r = lock_new_key(q, key, &k);
	if (r == 0)
		r = add_locked(q, k);
	pthread_mutex_unlock(&q->lock);
	return r;
}

static void heap_swap(struct delayed *a, struct delayed *b)
{
	struct delayed t = *a;

	*a = *b;
	*b = t;
}

static int heap_push(struct workqueue *q, uint64_t due, struct kstate *k)
{
	size_t i;

	if (q->nheap == q->capheap) {
		size_t ncap = q->capheap ? q->capheap * 2 : 64;
		struct delayed *h = realloc(q->heap, ncap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		q->heap = h;
		q->capheap = ncap;
	}
	i = q->nheap++;
	q->heap[i].due = due;
	q->heap[i].k = k;
	k->heap_refs++;
	while (i > 0 && q->heap[(i - 1) / 2].due > q->heap[i].due) {
		heap_swap(&q->heap[(i - 1) / 2], &q->heap[i]);
		i = (i - 1) / 2;
	}
	return 0;
}

static struct delayed heap_pop(struct workqueue *q)
{
	struct delayed top = q->heap[0];
	size_t i = 0;

	q->heap[0] = q->heap[--q->nheap];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < q->nheap && q->heap[l].due < q->heap[m].due)
			m = l;
		if (r < q->nheap && q->heap[r].due < q->heap[m].due)
			m = r;
		if (m == i)
			break;
		heap_swap(&q->heap[i], &q->heap[m]);
		i = m;
	}
	return top;
}

static int add_after_locked(struct workqueue *q, struct kstate *k, uint64_t delay_ns)
{
	uint64_t due;
	int r;

	if (delay_ns == 0)
		return add_locked(q, k);
	due = qnow(q) + delay_ns;
	if (k->due && k->due <= due)
		return 0;               /* already waiting, for less */
	r = heap_push(q, due, k);
	if (r < 0)
		return r;
	k->due = due;
	pthread_cond_signal(&q->cond);  /* a sleeping get() may need to wake sooner */
	return 0;
}

int workqueue__add_after(struct workqueue *q, const char *key, uint64_t delay_ns)
{
	struct kstate *k;
	int r;

	r = lock_new_key(q, key, &k);
	if (r == 0)
		r = add_after_locked(q, k, delay_ns);
	pthread_mutex_unlock(&q->lock);
	return r;
}

int workqueue__add_rate_limited(struct workqueue *q, const char *key)
{
	struct kstate *k;
	uint64_t rnd, d;
	int r;

	rnd = q->hooks.random ? q->hooks.random(q->hooks.ctx) : random_u64();
	pthread_mutex_lock(&q->lock);
	if (q->shutdown) {
		pthread_mutex_unlock(&q->lock);
		return -ESHUTDOWN;
	}
	k = lookup(q, key, true);
	if (!k) {
		pthread_mutex_unlock(&q->lock);
		return -ENOMEM;
	}
	if (k->failures < 64)
		k->failures++;
	d = backoff_ns(q->rate.base_ns, q->rate.cap_ns, k->failures, rnd);
	r = add_after_locked(q, k, d ? d : 1);
	pthread_mutex_unlock(&q->lock);
	return r;
}

/* Takes the queue's lock, and finds key's state under it (NULL if it has none). */
static struct kstate *lock_key(struct workqueue *q, const char *key)
{
	pthread_mutex_lock(&q->lock);
	return lookup(q, key, false);
}

void workqueue__forget(struct workqueue *q, const char *key)
{
	struct kstate *k;

	k = lock_key(q, key);
	if (k) {
		k->failures = 0;
		maybe_drop(q, k);
	}
	pthread_mutex_unlock(&q->lock);
}

unsigned workqueue__failures(struct workqueue *q, const char *key)
{
	struct kstate *k;
	unsigned n;

	k = lock_key(q, key);
	n = k ? k->failures : 0;
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* Moves every delayed key that is due into the FIFO; returns the next due time, or 0. */
static uint64_t promote_due(struct workqueue *q)
{
	uint64_t now = qnow(q);

	while (q->nheap && q->heap[0].due <= now) {
		struct delayed d = heap_pop(q);

		d.k->heap_refs--;
		if (d.k->due != d.due) {
			maybe_drop(q, d.k);   /* superseded by an earlier due time */
			continue;
		}
		d.k->due = 0;
		if (add_locked(q, d.k) < 0) {
			d.k->due = d.due;   /* out of memory: try again later */
			(void)heap_push(q, d.due + NSEC_PER_SEC, d.k);
			break;
		}
	}
	return q->nheap ? q->heap[0].due : 0;
}

static int take(struct workqueue *q, char **ret_key)
{
	struct kstate *k = q->fifo[q->head];
	char *key = strdup(k->key);

	if (!key)
		return -ENOMEM;
	q->head = (q->head + 1) % q->cap;
	q->len--;
	k->queued = false;
	k->processing = true;
	*ret_key = key;
	return 0;
}

int workqueue__try_get(struct workqueue *q, char **ret_key)
{
	int r;

	pthread_mutex_lock(&q->lock);
	promote_due(q);
	if (q->shutdown)
		r = -ESHUTDOWN;
	else if (q->len)
		r = take(q, ret_key);
	else
		r = -EAGAIN;
	pthread_mutex_unlock(&q->lock);
	return r;
}

int workqueue__get(struct workqueue *q, char **ret_key)
{
	int r;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		uint64_t next;

		if (q->shutdown) {      /* stopping: what is queued is not worked off */
			r = -ESHUTDOWN;
			break;
		}
		next = promote_due(q);
		if (q->len) {
			r = take(q, ret_key);
			break;
		}
		if (next) {
			/* the condvar runs on CLOCK_MONOTONIC; a fake clock only matters to try_get */
			uint64_t now = qnow(q), wait = next > now ? next - now : 0;
			uint64_t abs_ns = now_monotonic_ns() + (wait < NSEC_PER_SEC ? wait : NSEC_PER_SEC);
			struct timespec ts = { (time_t)(abs_ns / NSEC_PER_SEC),
					       (long)(abs_ns % NSEC_PER_SEC) };

			pthread_cond_timedwait(&q->cond, &q->lock, &ts);
		} else {
			pthread_cond_wait(&q->cond, &q->lock);
		}
	}
	pthread_mutex_unlock(&q->lock);
	return r;
}

void workqueue__done(struct workqueue *q, const char *key)
{
	struct kstate *k;

	k = lock_key(q, key);
	if (k) {
		k->processing = false;
		if (k->dirty) {
			k->dirty = false;
			if (!q->shutdown)
				(void)fifo_push(q, k);
		}
		maybe_drop(q, k);
	}
	pthread_mutex_unlock(&q->lock);
}

size_t workqueue__len(struct workqueue *q)
{
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->len;
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t workqueue__waiting(struct workqueue *q)
{
	size_t n = 0;

	pthread_mutex_lock(&q->lock);
	for (size_t i = 0; i < q->nheap; i++)
		n += q->heap[i].k->due == q->heap[i].due;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void workqueue__shutdown(struct workqueue *q)
{
	pthread_mutex_lock(&q->lock);
	q->shutdown = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}
