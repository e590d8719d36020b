/* SPDX-License-Identifier: MIT */
/*
 * The informers' local cache: a thread-safe map from "namespace/name" to a reference-counted
 * immutable object (struct kpod, struct session). Readers get their own reference and may
 * keep it while the informer replaces the entry. A relist stamps what it saw with a new
 * epoch and sweeps the rest. The map is intrusive: each object carries its struct
 * store_node (at store_ops.node_offset), so caching an object allocates nothing more; an
 * object is in at most one store.
 */
#ifndef AIPROF_STORE_H
#define AIPROF_STORE_H

#include <stddef.h>
#include <stdint.h>

struct store_node {
	struct store_node *next;
	uint32_t hash;
	uint32_t epoch;
};

struct store_ops {
	size_t node_offset;                    /* offsetof(type, its struct store_node) */
	const char *(*key)(const void *obj);   /* "namespace/name" */
	void (*ref)(void *obj);
	void (*unref)(void *obj);
};

struct store;

struct store *store__new(const struct store_ops *ops);   /* NULL when out of memory */
void store__free(struct store *s);                       /* NULL-safe; drops every ref */

/*
 * Inserts obj (the store takes over the caller's reference), replacing any entry with the
 * same key, and stamps it with epoch. *ret_old gets the replaced object (the caller's
 * reference now), or NULL. Returns 0 (growing the table can fail quietly: chains get longer).
 */
int store__put(struct store *s, void *obj, uint32_t epoch, void **ret_old);
/* A new reference to the object under key, or NULL. */
void *store__get(struct store *s, const char *key);
/* Removes key; *ret_old gets the removed object (caller's reference), or NULL. */
void store__delete(struct store *s, const char *key, void **ret_old);
size_t store__len(struct store *s);

/* Every object, each with a new reference, into a malloc'd array. 0 or -ENOMEM. */
int store__list(struct store *s, void ***ret, size_t *ret_n);
/* Calls fn on every object while holding the read lock: fn must not call into the store. */
void store__foreach(struct store *s, void (*fn)(void *ctx, void *obj), void *ctx);

/* Removes every entry whose epoch is not epoch, handing each to gone (which takes the
 * reference). Returns how many were removed. */
size_t store__sweep(struct store *s, uint32_t epoch, void (*gone)(void *ctx, void *obj),
		    void *ctx);

#endif
