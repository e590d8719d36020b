/* SPDX-License-Identifier: MIT */
/*
 * One informer per resource: a thread that lists (in pages of 500, each item decoded as it
 * streams in) and then watches from the list's resourceVersion with allowWatchBookmarks and
 * a server-side timeout, keeping a local cache (struct store) and calling handlers after each
 * change. A watch that ends is resumed from the last resourceVersion seen (bookmarks move
 * it); 410 Gone (or an ERROR event with code 410) relists, sweeping objects that are gone;
 * other failures back off with jitter (0.5 s doubling to 30 s).
 */
#ifndef AIPROF_INFORMER_H
#define AIPROF_INFORMER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "kubeconfig.h"
#include "store.h"

struct informer_ops {
	const char *resource;          /* "pods", "profilingsessions": messages and metrics */
	char path[512];                /* collection path, "/api/v1/pods" (no query) */
	int (*decode)(const json_t *obj, void **ret);  /* 0, or < 0 to skip the object */
	const char *(*rv)(const void *obj);
	const struct store_ops *store_ops;
	/* Called on the informer's thread after the cache changed; old is NULL for a new object.
	 * They must not block for long (they enqueue keys). */
	void (*on_upsert)(void *ctx, const void *old, const void *obj);
	void (*on_delete)(void *ctx, const void *obj);
	void (*on_event)(void *ctx, const char *what, int err);   /* relists, restarts: logs */
	void *ctx;
	long watch_timeout_s;          /* server-side timeoutSeconds; 0: 300..600 at random */
	const char *label_selector;    /* or NULL */
};

struct informer;

/* cfg and ops must outlive the informer. Returns 0, -ENOMEM. */
int informer__new(const struct kube_config *cfg, const struct informer_ops *ops,
		  struct informer **ret);
int informer__start(struct informer *inf);     /* starts the thread: 0 or -errno */
void informer__stop(struct informer *inf);     /* stops and joins; NULL-safe */
void informer__free(struct informer *inf);     /* stops; NULL-safe */

struct store *informer__store(struct informer *inf);
bool informer__synced(struct informer *inf);   /* the first list is complete */
uint64_t informer__watch_restarts(struct informer *inf);
uint64_t informer__relists(struct informer *inf);

/*
 * Writes an object the controller just got back from the API server into the cache (it
 * would come through the watch shortly), unless the cache holds a newer one (both
 * resourceVersions numeric and the cached one larger). Calls no handler. 0 or -errno.
 */
int informer__update(struct informer *inf, const json_t *obj);

/* Numeric comparison of resourceVersions when both are decimal: <0, 0, >0; 0 otherwise. */
int rv_compare(const char *a, const char *b);

#endif
