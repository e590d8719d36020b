/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include "backoff.h"
#include "informer.h"
#include "kjson.h"
#include "kubeclient.h"
#include "timeutil.h"

#define LIST_PAGE 500
#define TOMBSTONES 256          /* recent deletions remembered for informer__update() */

struct tombstone {
	char key[320];
	char rv[32];
};

struct informer {
	const struct kube_config *cfg;
	const struct informer_ops *ops;
	struct store *store;
	struct kube_client *client;
	pthread_t thread;
	bool running;
	atomic_bool stop;
	atomic_bool synced;
	atomic_uint_fast64_t restarts, relists;
	uint32_t epoch;
	char rv[64];                /* where the next watch starts */
	pthread_mutex_t tomb_lock;
	struct tombstone tombs[TOMBSTONES];
	unsigned tomb_next;
};

int rv_compare(const char *a, const char *b)
{
	size_t la, lb;

	if (!a || !b || !a[0] || !b[0] || a[strspn(a, "0123456789")] || b[strspn(b, "0123456789")])
		return 0;
	while (*a == '0' && a[1])
		a++;
	while (*b == '0' && b[1])
		b++;
	la = strlen(a);
	lb = strlen(b);
	if (la != lb)
		return la < lb ? -1 : 1;
	return strcmp(a, b);
}

int informer__new(const struct kube_config *cfg, const struct informer_ops *ops,
		  struct informer **ret)
{
	struct informer *inf = calloc(1, sizeof(*inf));
	int err;

	if (!inf)
		return -ENOMEM;
	inf->cfg = cfg;
	inf->ops = ops;
	pthread_mutex_init(&inf->tomb_lock, NULL);
	inf->store = store__new(ops->store_ops);
	if (!inf->store) {
		free(inf);
		return -ENOMEM;
	}
	err = kube_client__new(cfg, &inf->client);
	if (err < 0) {
		store__free(inf->store);
		free(inf);
		return err;
	}
	kube_client__set_stop(inf->client, &inf->stop);
	*ret = inf;
	return 0;
}

struct store *informer__store(struct informer *inf)
{
	return inf->store;
}

bool informer__synced(struct informer *inf)
{
	return atomic_load(&inf->synced);
}

uint64_t informer__watch_restarts(struct informer *inf)
{
	return atomic_load(&inf->restarts);
}

uint64_t informer__relists(struct informer *inf)
{
	return atomic_load(&inf->relists);
}

static void note(struct informer *inf, const char *what, int err)
{
	char buf[300];

	snprintf(buf, sizeof(buf), "%s: %s", inf->ops->resource, what);
	if (inf->ops->on_event)
		inf->ops->on_event(inf->ops->ctx, buf, err);
}

/* Puts obj into the cache unless the cache has a newer one; calls on_upsert. */
static int upsert(struct informer *inf, const json_t *j, bool notify, bool check_newer)
{
	void *obj = NULL, *old = NULL, *cur;
	int r = inf->ops->decode(j, &obj);

	if (r < 0)
		return r;
	if (check_newer) {
		cur = store__get(inf->store, inf->ops->store_ops->key(obj));
		if (cur && rv_compare(inf->ops->rv(cur), inf->ops->rv(obj)) > 0) {
			inf->ops->store_ops->unref(cur);
			inf->ops->store_ops->unref(obj);
			return 0;
		}
		if (cur)
			inf->ops->store_ops->unref(cur);
	}
	inf->ops->store_ops->ref(obj);  /* one for the handler */
	r = store__put(inf->store, obj, inf->epoch, &old);
	if (r == 0 && notify && inf->ops->on_upsert)
		inf->ops->on_upsert(inf->ops->ctx, old, obj);
	if (old)
		inf->ops->store_ops->unref(old);
	inf->ops->store_ops->unref(obj);
	return r;
}

static void bury(struct informer *inf, const char *key, const char *rv)
{
	struct tombstone *t;

	pthread_mutex_lock(&inf->tomb_lock);
	t = &inf->tombs[inf->tomb_next++ % TOMBSTONES];
	snprintf(t->key, sizeof(t->key), "%s", key);
	snprintf(t->rv, sizeof(t->rv), "%s", rv);
	pthread_mutex_unlock(&inf->tomb_lock);
}

/* Was key deleted at or after resourceVersion rv? (An older copy must not come back.) */
static bool buried(struct informer *inf, const char *key, const char *rv)
{
	bool dead = false;

	pthread_mutex_lock(&inf->tomb_lock);
	for (unsigned i = 0; i < TOMBSTONES && !dead; i++)
		dead = inf->tombs[i].key[0] && strcmp(inf->tombs[i].key, key) == 0 &&
		       (rv_compare(inf->tombs[i].rv, rv) >= 0 || !rv[0]);
	pthread_mutex_unlock(&inf->tomb_lock);
	return dead;
}

int informer__update(struct informer *inf, const json_t *obj)
{
	const char *ns = kj_str(obj, "metadata.namespace"), *name = kj_str(obj, "metadata.name");
	const char *rv = kj_str(obj, "metadata.resourceVersion");
	char key[600];

	snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name ? name : "");
	if (buried(inf, key, rv ? rv : ""))
		return 0;
	return upsert(inf, obj, false, true);
}

static int on_list_item(void *ctx, const char *json, size_t len)
{
	struct informer *inf = ctx;
	json_t *j = json_loadb(json, len, 0, NULL);
	int r;

	if (!j)
		return -EBADMSG;
	r = upsert(inf, j, true, false);
	json_decref(j);
	return r == -ENOMEM ? r : 0;    /* an object we cannot read is skipped */
}

static void gone(void *ctx, void *obj)
{
	struct informer *inf = ctx;

	if (inf->ops->on_delete)
		inf->ops->on_delete(inf->ops->ctx, obj);
	inf->ops->store_ops->unref(obj);
}

static int chunk_to_split(void *ctx, const char *buf, size_t len)
{
	return kjson_split__feed(ctx, buf, len);
}

/* "&labelSelector=..." for the list and watch paths, or "" without a selector. */
static int selector_param(const struct informer *inf, char *buf, size_t len)
{
	char *e;

	buf[0] = 0;
	if (!inf->ops->label_selector)
		return 0;
	e = curl_easy_escape(NULL, inf->ops->label_selector, 0);
	if (!e)
		return -ENOMEM;
	snprintf(buf, len, "&labelSelector=%s", e);
	curl_free(e);
	return 0;
}

static int list(struct informer *inf)
{
	char *cont = NULL, *rv = NULL, path[2048], sel[600] = "";
	struct kube_status st;
	int r;

	inf->epoch++;
	if (selector_param(inf, sel, sizeof(sel)) < 0)
		return -ENOMEM;
	for (;;) {
		struct kjson_split sp;

		if (cont && cont[0]) {
			char *e = curl_easy_escape(NULL, cont, 0);

			if (!e) {
				r = -ENOMEM;
				goto out;
			}
			snprintf(path, sizeof(path), "%s?limit=%d&continue=%s%s", inf->ops->path,
				 LIST_PAGE, e, sel);
			curl_free(e);
		} else {
			snprintf(path, sizeof(path), "%s?limit=%d%s", inf->ops->path, LIST_PAGE, sel);
		}
		kjson_split__init(&sp, KJSON_LIST, on_list_item, inf);
		r = kube_client__stream(inf->client, path, chunk_to_split, &sp, 60, &st);
		if (r == 0)
			r = kjson_split__finish(&sp);
		free(cont);
		free(rv);
		cont = rv = NULL;
		if (r == 0)
			r = kjson_split__list_meta(&sp, &rv, &cont);
		kjson_split__release(&sp);
		if (r < 0)
			goto out;
		if (!cont[0])
			break;
	}
	snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
	store__sweep(inf->store, inf->epoch, gone, inf);
	atomic_store(&inf->synced, true);
	/* a large list leaves the parser's garbage between the cached objects: give it back */
	malloc_trim(0);
	r = 0;
out:
	free(cont);
	free(rv);
	return r;
}

struct watch_ctx {
	struct informer *inf;
	struct kjson_split split;
	int events;
};

static int on_watch_event(void *ctx, const char *json, size_t len)
{
	struct watch_ctx *w = ctx;
	struct informer *inf = w->inf;
	struct kwatch_event ev;
	void *old = NULL;
	int r = kwatch_event__parse(json, len, &ev);

	if (r < 0)
		return r;
	w->events++;
	switch (ev.type) {
	case KWATCH_ADDED:
	case KWATCH_MODIFIED:
		/* an older version than what the controller just wrote into the cache is skipped */
		r = upsert(inf, ev.object, true, true);
		if (r == -ENOMEM)
			break;
		r = 0;
		break;
	case KWATCH_DELETED: {
		char key[600];
		const char *ns = kj_str(ev.object, "metadata.namespace");
		const char *name = kj_str(ev.object, "metadata.name");

		snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name ? name : "");
		bury(inf, key, ev.rv);
		store__delete(inf->store, key, &old);
		if (old)
			gone(inf, old);
		break;
	}
	case KWATCH_BOOKMARK:
		break;
	case KWATCH_ERROR:
		r = ev.status.code == 410 ? -ETIME : kube_errno(ev.status.code, ev.status.reason);
		if (r == 0)
			r = -EPROTO;
		break;
	}
	if (r == 0 && ev.rv[0])
		snprintf(inf->rv, sizeof(inf->rv), "%s", ev.rv);
	kwatch_event__release(&ev);
	return r;
}

static int watch(struct informer *inf)
{
	struct watch_ctx w = { .inf = inf };
	struct kube_status st;
	char path[1024], sel[600] = "";
	long timeout = inf->ops->watch_timeout_s;
	int r;

	if (timeout <= 0)
		timeout = 300 + (long)(random_u64() % 300);
	if (selector_param(inf, sel, sizeof(sel)) < 0)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s?watch=1&resourceVersion=%s&allowWatchBookmarks=true"
		 "&timeoutSeconds=%ld%s", inf->ops->path, inf->rv, timeout, sel);
	kjson_split__init(&w.split, KJSON_STREAM, on_watch_event, &w);
	r = kube_client__stream(inf->client, path, chunk_to_split, &w.split, timeout + 30, &st);
	if (r == 0)
		r = kjson_split__finish(&w.split);
	kjson_split__release(&w.split);
	return r;
}

/* Sleeps ns unless stopped first. */
static void nap(struct informer *inf, uint64_t ns)
{
	uint64_t end = now_monotonic_ns() + ns;

	while (!atomic_load(&inf->stop) && now_monotonic_ns() < end)
		sleep_ns(ns < 50 * NSEC_PER_MSEC ? ns : 50 * NSEC_PER_MSEC);
}

static void *run(void *arg)
{
	struct informer *inf = arg;
	bool need_list = true;
	unsigned failures = 0;

	while (!atomic_load(&inf->stop)) {
		int r;

		if (need_list) {
			r = list(inf);
			if (r < 0) {
				if (atomic_load(&inf->stop))
					break;
				note(inf, r == -ENOENT ? "list failed: the API server does not serve this "
				     "resource (is the CRD installed?)" : "list failed", r);
				nap(inf, backoff_ns(500 * NSEC_PER_MSEC, 30 * NSEC_PER_SEC, ++failures,
						    random_u64()));
				continue;
			}
			if (atomic_load(&inf->relists) > 0 || failures)
				note(inf, "relisted", 0);
			atomic_fetch_add(&inf->relists, 1);
			need_list = false;
			failures = 0;
		}
		r = watch(inf);
		if (atomic_load(&inf->stop))
			break;
		if (r == 0) {
			failures = 0;           /* the server's timeout: resume */
			continue;
		}
		atomic_fetch_add(&inf->restarts, 1);
		if (r == -ETIME) {
			note(inf, "watch expired (410 Gone), relisting", r);
			need_list = true;
			failures = 0;
			continue;
		}
		note(inf, "watch failed", r);
		nap(inf, backoff_ns(500 * NSEC_PER_MSEC, 30 * NSEC_PER_SEC, ++failures, random_u64()));
	}
	return NULL;
}

int informer__start(struct informer *inf)
{
	int r = pthread_create(&inf->thread, NULL, run, inf);

	if (r)
		return -r;
	inf->running = true;
	return 0;
}

void informer__stop(struct informer *inf)
{
	if (!inf || !inf->running)
		return;
	atomic_store(&inf->stop, true);
	pthread_join(inf->thread, NULL);
	inf->running = false;
}

void informer__free(struct informer *inf)
{
	if (!inf)
		return;
	informer__stop(inf);
	kube_client__free(inf->client);
	store__free(inf->store);
	pthread_mutex_destroy(&inf->tomb_lock);
	free(inf);
}
