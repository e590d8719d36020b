/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "store.h"

struct store {
	const struct store_ops *ops;
	pthread_rwlock_t lock;
	struct store_node **buckets;
	size_t nbuckets;        /* power of two */
	size_t len;
};

static uint32_t hash_key(const char *k)
{
	uint32_t h = 2166136261u;

	for (; *k; k++) {
		h ^= (unsigned char)*k;
		h *= 16777619u;
	}
	return h;
}

static struct store_node *node_of(const struct store *s, void *obj)
{
	return (struct store_node *)((char *)obj + s->ops->node_offset);
}

static void *obj_of(const struct store *s, struct store_node *n)
{
	return (char *)n - s->ops->node_offset;
}

struct store *store__new(const struct store_ops *ops)
{
	struct store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->ops = ops;
	s->nbuckets = 64;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	if (!s->buckets || pthread_rwlock_init(&s->lock, NULL) != 0) {
		free(s->buckets);
		free(s);
		return NULL;
	}
	return s;
}

void store__free(struct store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_node *e = s->buckets[i], *n;

		for (; e; e = n) {
			n = e->next;
			s->ops->unref(obj_of(s, e));
		}
	}
	free(s->buckets);
	pthread_rwlock_destroy(&s->lock);
	free(s);
}

static void grow(struct store *s)
{
	size_t nb = s->nbuckets * 2;
	struct store_node **b = calloc(nb, sizeof(*b));

	if (!b)
		return;                 /* keep the longer chains */
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_node *e = s->buckets[i], *n;

		for (; e; e = n) {
			n = e->next;
			e->next = b[e->hash & (nb - 1)];
			b[e->hash & (nb - 1)] = e;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = nb;
}

static struct store_node **find(struct store *s, const char *key, uint32_t h)
{
	struct store_node **pe = &s->buckets[h & (s->nbuckets - 1)];

	for (; *pe; pe = &(*pe)->next)
		if ((*pe)->hash == h && strcmp(s->ops->key(obj_of(s, *pe)), key) == 0)
			return pe;
	return pe;
}

int store__put(struct store *s, void *obj, uint32_t epoch, void **ret_old)
{
	struct store_node *n = node_of(s, obj), **pe;

	n->hash = hash_key(s->ops->key(obj));
	n->epoch = epoch;
	*ret_old = NULL;
	pthread_rwlock_wrlock(&s->lock);
	pe = find(s, s->ops->key(obj), n->hash);
	if (*pe) {
		*ret_old = obj_of(s, *pe);
		n->next = (*pe)->next;
		(*pe)->next = NULL;
		*pe = n;
	} else {
		n->next = NULL;
		*pe = n;
		if (++s->len > s->nbuckets)
			grow(s);
	}
	pthread_rwlock_unlock(&s->lock);
	return 0;
}

void *store__get(struct store *s, const char *key)
{
	struct store_node **pe;
	void *obj = NULL;

	pthread_rwlock_rdlock(&s->lock);
	pe = find(s, key, hash_key(key));
	if (*pe) {
		obj = obj_of(s, *pe);
		s->ops->ref(obj);
	}
	pthread_rwlock_unlock(&s->lock);
	return obj;
}

void store__delete(struct store *s, const char *key, void **ret_old)
{
	struct store_node **pe, *e;

	*ret_old = NULL;
	pthread_rwlock_wrlock(&s->lock);
	pe = find(s, key, hash_key(key));
	if (*pe) {
		e = *pe;
		*pe = e->next;
		e->next = NULL;
		*ret_old = obj_of(s, e);
		s->len--;
	}
	pthread_rwlock_unlock(&s->lock);
}

size_t store__len(struct store *s)
{
	size_t n;

	pthread_rwlock_rdlock(&s->lock);
	n = s->len;
	pthread_rwlock_unlock(&s->lock);
	return n;
}

int store__list(struct store *s, void ***ret, size_t *ret_n)
{
	void **v;
	size_t n = 0;

	pthread_rwlock_rdlock(&s->lock);
	v = malloc((s->len ? s->len : 1) * sizeof(*v));
	if (!v) {
		pthread_rwlock_unlock(&s->lock);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_node *e = s->buckets[i]; e; e = e->next) {
			s->ops->ref(obj_of(s, e));
			v[n++] = obj_of(s, e);
		}
	pthread_rwlock_unlock(&s->lock);
	*ret = v;
	*ret_n = n;
	return 0;
}

void store__foreach(struct store *s, void (*fn)(void *ctx, void *obj), void *ctx)
{
	pthread_rwlock_rdlock(&s->lock);
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_node *e = s->buckets[i]; e; e = e->next)
			fn(ctx, obj_of(s, e));
	pthread_rwlock_unlock(&s->lock);
}

size_t store__sweep(struct store *s, uint32_t epoch, void (*gone)(void *ctx, void *obj),
		    void *ctx)
{
	struct store_node *dead = NULL, *e;
	size_t n = 0;

	pthread_rwlock_wrlock(&s->lock);
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_node **pe = &s->buckets[i];

		while (*pe) {
			e = *pe;
			if (e->epoch == epoch) {
				pe = &e->next;
				continue;
			}
			*pe = e->next;
			e->next = dead;
			dead = e;
			s->len--;
			n++;
		}
	}
	pthread_rwlock_unlock(&s->lock);
	while (dead) {
		e = dead;
		dead = e->next;
		e->next = NULL;
		gone(ctx, obj_of(s, e));
	}
	return n;
}
