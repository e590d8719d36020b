/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include "api.h"
#include "controller.h"
#include "informer.h"
#include "kevent.h"
#include "kjson.h"
#include "kobject.h"
#include "ktime.h"
#include "kubeclient.h"
#include "kworker.h"
#include "policy_ctl.h"
#include "timeutil.h"
#include "workqueue.h"

#define MAX_PASSES 6            /* re-plans within one reconcile (finalizer, conflicts) */
#define LOOKUP_TTL_NS (60 * NSEC_PER_SEC)

/* RuntimeClass -> handler and node -> kernel version, looked up on demand and kept a minute. */
struct lookup {
	struct lookup *next;
	char name[254];
	char value[128];
	bool found;
	uint64_t at;
};

/* The last status written per session: the server may prune fields its schema lacks, so an
 * equal recomputation over the same resourceVersion is not written again. */
struct memo {
	struct memo *next;
	uint64_t hash;
	char rv[64];
	char key[];
};

#define MEMO_BUCKETS 1024

/* Events are recorded by a thread of their own, as client-go's broadcaster does: a worker
 * queues them and goes on; a full queue drops (and counts) the newest. */
#define EVQ_MAX 1024
#define EVQ_DRAIN_NS (2 * NSEC_PER_SEC)     /* at stop: how long queued events may still take */

struct queued_event {
	char *body;
	char path[300];
	char key[300];
	char reason[48];
};

struct event_queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct queued_event items[EVQ_MAX];
	size_t head, n;
	bool closing, running;
	uint64_t closing_at;
	atomic_bool abort;
	atomic_uint_fast64_t dropped;
	pthread_t thread;
};

struct controller {
	struct controller_config cfg;
	pthread_mutex_t memo_lock;
	struct memo *memo[MEMO_BUCKETS];
	struct informer_ops session_ops, pod_ops, inj_pod_ops;
	struct informer *sessions, *pods;
	/* the injector namespace's aiprof pods, when pods watches another namespace only */
	struct informer *inj_pods;
	struct policy_ctl *policies;        /* ProfilingPolicies (policy_ctl.c) */
	struct workqueue *queue;
	pthread_t *workers;
	unsigned n_workers;
	pthread_mutex_t lookup_lock;
	struct lookup *runtime_classes;
	atomic_bool stopping;               /* aborts the workers' requests in flight */
	struct event_queue evq;
	atomic_uint_fast64_t reconciles, reconcile_errors, conflicts, injectors_created,
		status_writes, events_emitted;
	bool started;
};

__attribute__((format(printf, 3, 4)))
static void ctl_log(struct controller *c, int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (!c->cfg.hooks.log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->cfg.hooks.log(c->cfg.hooks.ctx, level, buf);
}

/* ---- status memo ------------------------------------------------------------------------ */

static uint64_t fnv(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static uint64_t status_hash(const json_t *st)
{
	char *d = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
	uint64_t h = d ? fnv(d, strlen(d)) : 0;

	free(d);
	return h;
}

static struct memo **memo_find(struct controller *c, const char *key)
{
	struct memo **pm = &c->memo[fnv(key, strlen(key)) % MEMO_BUCKETS];

	for (; *pm; pm = &(*pm)->next)
		if (strcmp((*pm)->key, key) == 0)
			break;
	return pm;
}

static bool memo_same(struct controller *c, const char *key, const char *rv, uint64_t hash)
{
	struct memo *m;
	bool same;

	pthread_mutex_lock(&c->memo_lock);
	m = *memo_find(c, key);
	same = m && m->hash == hash && strcmp(m->rv, rv) == 0;
	pthread_mutex_unlock(&c->memo_lock);
	return same;
}

static void memo_put(struct controller *c, const char *key, const char *rv, uint64_t hash)
{
	struct memo **pm, *m;

	pthread_mutex_lock(&c->memo_lock);
	pm = memo_find(c, key);
	m = *pm;
	if (!m && (m = calloc(1, sizeof(*m) + strlen(key) + 1))) {
		memcpy(m->key, key, strlen(key) + 1);
		*pm = m;
	}
	if (m) {
		m->hash = hash;
		snprintf(m->rv, sizeof(m->rv), "%s", rv);
	}
	pthread_mutex_unlock(&c->memo_lock);
}

static void memo_del(struct controller *c, const char *key)
{
	struct memo **pm, *m;

	pthread_mutex_lock(&c->memo_lock);
	pm = memo_find(c, key);
	m = *pm;
	if (m) {
		*pm = m->next;
		free(m);
	}
	pthread_mutex_unlock(&c->memo_lock);
}

/* ---- cache glue ------------------------------------------------------------------------ */

static const char *session_key(const void *o) { return ((const struct session *)o)->key; }
static void session_ref(void *o) { session__ref(o); }
static void session_unref(void *o) { session__unref(o); }
static const char *session_rv(const void *o) { return ((const struct session *)o)->rv; }
static int session_decode(const json_t *j, void **ret)
{
	return session__from_json(j, (struct session **)ret);
}

static const char *pod_key(const void *o) { return kpod__key(o); }
static void pod_ref(void *o) { kpod__ref(o); }
static void pod_unref(void *o) { kpod__unref(o); }
static const char *pod_rv(const void *o) { return kpod__rv(o); }
static int pod_decode(const json_t *j, void **ret)
{
	return kpod__from_json(j, (struct kpod **)ret);
}

static const struct store_ops session_store_ops = {
	offsetof(struct session, node), session_key, session_ref, session_unref,
};
static const struct store_ops pod_store_ops = {
	offsetof(struct kpod, node), pod_key, pod_ref, pod_unref,
};

static void enqueue(struct controller *c, const char *key)
{
	(void)workqueue__add(c->queue, key);
}

/* The feed message for a session: who, phase, targets' states, artifacts. */
static char *feed_message(const struct session *s, const char *type)
{
	json_t *targets = json_array(), *j;
	const json_t *ts = json_object_get(s->status, "targets"), *e;
	char *out = NULL;
	size_t i;

	if (!targets)
		return NULL;
	json_array_foreach(ts, i, e)
		json_array_append_new(targets, json_pack("{s:s?,s:s?,s:s?}", "pod", kj_str(e, "pod"),
							 "state", kj_str(e, "state"), "message",
							 kj_str(e, "message")));
	j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:o,s:I,s:s?}", "type", type, "namespace", s->ns,
		      "name", s->name, "uid", s->uid, "phase", session_phase_name(s->phase),
		      "observedGeneration",
		      json_integer_value(json_object_get(s->status, "observedGeneration")),
		      "targets", targets, "artifacts",
		      (json_int_t)json_array_size(json_object_get(s->status, "artifacts")),
		      "message", kj_str(s->status, "message"));
	if (j)
		out = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return out;
}

static void on_session_upsert(void *ctx, const void *old_, const void *obj_)
{
	struct controller *c = ctx;
	const struct session *old = old_, *s = obj_;

	enqueue(c, s->key);
	policy_ctl__session_changed(c->policies, s);
	if (c->cfg.hooks.feed && (!old || !json_equal(old->status, s->status) ||
				  (old->status == NULL) != (s->status == NULL))) {
		char *m = feed_message(s, "status");

		if (m)
			c->cfg.hooks.feed(c->cfg.hooks.ctx, m, strlen(m));
		free(m);
	}
}

static void on_session_delete(void *ctx, const void *obj)
{
	struct controller *c = ctx;
	const struct session *s = obj;

	memo_del(c, s->key);
	policy_ctl__session_changed(c->policies, s);
	if (c->cfg.hooks.feed) {
		char *m = feed_message(s, "deleted");

		if (m)
			c->cfg.hooks.feed(c->cfg.hooks.ctx, m, strlen(m));
		free(m);
	}
}

struct pod_match {
	struct controller *c;
	const struct kpod *pod;
	char **keys;
	size_t n, cap;
};

static bool session_targets_pod(const struct session *s, const struct kpod *p)
{
	const json_t *ts = json_object_get(s->status, "targets"), *e;
	size_t i;

	if (strcmp(s->ns, kpod__ns(p)) != 0)
		return false;
	if (s->spec.pod_name && strcmp(s->spec.pod_name, kpod__name(p)) == 0)
		return true;
	if (s->spec.has_selector && !kpod__session_uid(p)[0] && kpod__matches(p, &s->spec.selector))
		return true;
	json_array_foreach(ts, i, e) {
		const char *n = kj_str(e, "pod");

		if (n && strcmp(n, kpod__name(p)) == 0)
			return true;
	}
	return false;
}

static void match_session(void *ctx, void *obj)
{
	struct pod_match *m = ctx;
	const struct session *s = obj;
	char **k;

	if (session_phase_terminal(s->phase) && !s->deleting)
		return;
	if (!session_targets_pod(s, m->pod))
		return;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 8;

		k = realloc(m->keys, cap * sizeof(*k));
		if (!k)
			return;
		m->keys = k;
		m->cap = cap;
	}
	m->keys[m->n] = strdup(s->key);
	if (m->keys[m->n])
		m->n++;
}

/* Whether the injector pod p is of a session this controller watches: one scoped to a
 * namespace (--namespace) leaves the injector namespace's pods of other namespaces' sessions
 * to their own controller, which it would otherwise take for orphans and delete. */
static bool session_watched(const struct controller *c, const struct kpod *p)
{
	const char *sns = kpod__session_ns(p)[0] ? kpod__session_ns(p) : kpod__ns(p);

	return !c->cfg.namespace || strcmp(c->cfg.namespace, sns) == 0;
}

/* A pod changed: its session if it is an injector, else the sessions that target it. */
static void pod_changed(struct controller *c, const struct kpod *p)
{
	struct pod_match m = { .c = c, .pod = p };

	if (kpod__session_uid(p)[0]) {
		char key[600];

		if (kpod__session_name(p)[0] && session_watched(c, p)) {
			snprintf(key, sizeof(key), "%s/%s", kpod__session_ns(p)[0] ?
				 kpod__session_ns(p) : kpod__ns(p), kpod__session_name(p));
			enqueue(c, key);
		}
		return;
	}
	store__foreach(informer__store(c->sessions), match_session, &m);
	for (size_t i = 0; i < m.n; i++) {
		enqueue(c, m.keys[i]);
		free(m.keys[i]);
	}
	free(m.keys);
}

static void on_pod_upsert(void *ctx, const void *old, const void *obj)
{
	struct controller *c = ctx;

	if (!atomic_load(&c->started) || !informer__synced(c->sessions))
		return;                 /* the first list of sessions enqueues every session */
	if (kpod__differs(old, obj)) {
		pod_changed(c, obj);
		policy_ctl__pod_changed(c->policies, old, obj);
	}
}

/* The injector namespace's own informer: its pods are never targets or policy triggers. */
static void on_inj_pod_upsert(void *ctx, const void *old, const void *obj)
{
	struct controller *c = ctx;

	if (atomic_load(&c->started) && informer__synced(c->sessions) && kpod__differs(old, obj))
		pod_changed(c, obj);
}

static void on_pod_delete(void *ctx, const void *obj)
{
	struct controller *c = ctx;

	if (informer__synced(c->sessions))
		pod_changed(c, obj);
}

static void on_informer_event(void *ctx, const char *what, int err)
{
	struct controller *c = ctx;

	ctl_log(c, err < 0 ? 1 : 3, "informer %s%s%s", what, err < 0 ? ": " : "",
	     err < 0 ? strerror(-err) : "");
}

/* ---- lookups --------------------------------------------------------------------------- */

/* The value cached for name in *list, if fresh: 1 found, 0 known absent, -ENOENT unknown. */
static int lookup_get(struct controller *c, struct lookup *list, const char *name, char *out,
		      size_t outlen)
{
	uint64_t now = now_monotonic_ns();
	int r = -ENOENT;

	pthread_mutex_lock(&c->lookup_lock);
	for (struct lookup *l = list; l; l = l->next)
		if (strcmp(l->name, name) == 0 && now - l->at < LOOKUP_TTL_NS) {
			snprintf(out, outlen, "%s", l->value);
			r = l->found;
			break;
		}
	pthread_mutex_unlock(&c->lookup_lock);
	return r;
}

static void lookup_put(struct controller *c, struct lookup **list, const char *name,
		       const char *value, bool found)
{
	struct lookup *l;

	pthread_mutex_lock(&c->lookup_lock);
	for (l = *list; l; l = l->next)
		if (strcmp(l->name, name) == 0)
			break;
	if (!l && (l = calloc(1, sizeof(*l)))) {
		l->next = *list;
		*list = l;
		snprintf(l->name, sizeof(l->name), "%s", name);
	}
	if (l) {
		snprintf(l->value, sizeof(l->value), "%s", value ? value : "");
		l->found = found;
		l->at = now_monotonic_ns();
	}
	pthread_mutex_unlock(&c->lookup_lock);
}

/* GET path and the string at field; -ENOENT when the object or the field is absent. */
static int get_field(struct kube_client *kc, const char *path, const char *field, char *out,
		     size_t outlen)
{
	struct kube_status st;
	char *body = NULL;
	size_t len = 0;
	json_t *j;
	const char *v;
	int r = kube_client__request(kc, "GET", path, NULL, NULL, 0, &body, &len, &st);

	if (r < 0)
		return r;
	j = json_loadb(body, len, 0, NULL);
	free(body);
	v = kj_str(j, field);
	if (v)
		snprintf(out, outlen, "%s", v);
	json_decref(j);
	return v ? 0 : -ENOENT;
}

/* The RuntimeClass's handler; the class's name itself when it cannot be read. */
static void runtime_handler(struct controller *c, struct kube_client *kc, const char *rc,
			    char *out, size_t outlen)
{
	char path[400];
	int r;

	out[0] = '\0';
	if (!rc || !rc[0])
		return;
	if (lookup_get(c, c->runtime_classes, rc, out, outlen) >= 0)
		return;
	snprintf(path, sizeof(path), "/apis/node.k8s.io/v1/runtimeclasses/%s", rc);
	r = get_field(kc, path, "handler", out, outlen);
	if (r < 0)
		snprintf(out, outlen, "%s", rc);
	lookup_put(c, &c->runtime_classes, rc, out, r == 0);
}

/* Whether node is no longer in the cluster: the API server says 404 (any other failure:
 * not known to be gone). Not cached: asked only when an injector or a target pod is missing. */
static bool node_missing(struct kube_client *kc, const char *node)
{
	struct kube_status st;
	char path[400];

	if (!node[0])
		return false;
	snprintf(path, sizeof(path), "/api/v1/nodes/%s", node);
	return kube_client__request(kc, "GET", path, NULL, NULL, 0, NULL, NULL, &st) < 0 &&
	       st.code == 404;
}

/* ---- one reconcile ------------------------------------------------------------------- */

struct gather {
	char **names;
	size_t n_names;
	struct target_obs *targets;
	struct kpod **pods, **injs;     /* refs held for targets[i].pod / .injector */
	char (*handlers)[128];
	struct kpod **all_inj;          /* every injector of the session */
	size_t n_all_inj, cap_all_inj;
	const char *uid;
};

static void gather_release(struct gather *g)
{
	for (size_t i = 0; i < g->n_names; i++) {
		kpod__unref(g->pods ? g->pods[i] : NULL);
		kpod__unref(g->injs ? g->injs[i] : NULL);
	}
	for (size_t i = 0; i < g->n_all_inj; i++)
		kpod__unref(g->all_inj[i]);
	free_strv(g->names, g->n_names);
	free(g->targets);
	free(g->pods);
	free(g->injs);
	free(g->handlers);
	free(g->all_inj);
	memset(g, 0, sizeof(*g));
}

struct ns_scan {
	const struct injector_config *inj;
	const struct session *s;
	struct gather *g;
	char **names;
	size_t n, cap;
	int err;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_pod(void *ctx, void *obj)
{
	struct ns_scan *sc = ctx;
	struct kpod *p = obj;

	if (sc->err)
		return;
	if (kpod__session_uid(p)[0]) {
		/* the session's own (in its namespace or the injector namespace): a look-alike
		 * is not stopped, nor one that took the name of a pod the status recorded */
		if (reconcile__pod_of(sc->inj, sc->s, p) && !reconcile__pod_replaced(sc->s, p)) {
			struct gather *g = sc->g;

			if (g->n_all_inj == g->cap_all_inj) {
				size_t cap = g->cap_all_inj ? g->cap_all_inj * 2 : 4;
				struct kpod **v = realloc(g->all_inj, cap * sizeof(*v));

				if (!v) {
					sc->err = -ENOMEM;
					return;
				}
				g->all_inj = v;
				g->cap_all_inj = cap;
			}
			g->all_inj[g->n_all_inj++] = kpod__ref(p);
		}
		return;                 /* an injector is never a target */
	}
	if (strcmp(kpod__ns(p), sc->s->ns) != 0)
		return;
	if (!sc->s->spec.has_selector || sc->s->spec_err ||
	    !kpod__matches(p, &sc->s->spec.selector))
		return;
	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? sc->cap * 2 : 8;
		char **v = realloc(sc->names, cap * sizeof(*v));

		if (!v) {
			sc->err = -ENOMEM;
			return;
		}
		sc->names = v;
		sc->cap = cap;
	}
	sc->names[sc->n] = strdup(kpod__name(p));
	if (!sc->names[sc->n])
		sc->err = -ENOMEM;
	else
		sc->n++;
}

/* The informer whose cache holds the pods of namespace ns. */
static struct informer *pod_informer(struct controller *c, const char *ns)
{
	return c->inj_pods && strcmp(ns, c->cfg.rc.inj.ns) == 0 ? c->inj_pods : c->pods;
}

static struct kpod *cached_pod(struct controller *c, const char *ns, const char *name)
{
	char key[600];

	snprintf(key, sizeof(key), "%s/%s", ns, name);
	return store__get(informer__store(pod_informer(c, ns)), key);
}

/* Live GET of a pod into the cache (the informer may not have delivered it yet). */
static struct kpod *fetch_pod(struct controller *c, struct kube_client *kc, const char *ns,
			      const char *name)
{
	struct kube_status st;
	char path[600];
	char *body = NULL;
	size_t len = 0;
	json_t *j;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	if (kube_client__request(kc, "GET", path, NULL, NULL, 0, &body, &len, &st) < 0)
		return NULL;
	j = json_loadb(body, len, 0, NULL);
	free(body);
	if (j)
		informer__update(pod_informer(c, ns), j);
	json_decref(j);
	return cached_pod(c, ns, name);
}

/* spec.targets.podName as the target, if the cache has that pod. */
static int pod_name_target(struct store *pods, const struct session *s, struct gather *g)
{
	char key[600];
	struct kpod *p;

	snprintf(key, sizeof(key), "%s/%s", s->ns, s->spec.pod_name);
	p = store__get(pods, key);
	if (!p)
		return 0;
	g->names = calloc(1, sizeof(char *));
	if (!g->names || !(g->names[0] = strdup(kpod__name(p)))) {
		kpod__unref(p);
		return -ENOMEM;
	}
	g->n_names = 1;
	kpod__unref(p);
	return 0;
}

/* Target i of g: its pod, injector pod and RuntimeClass handler from the cache; one that the
 * status says is in flight but that the cache lacks is read from the API server. */
static void observe_target(struct controller *c, struct kube_client *kc,
			   const struct session *s, struct gather *g, size_t i)
{
	const char *pns = injspec__pods_namespace(&c->cfg.rc.inj, s);
	struct target_obs *o = &g->targets[i];
	char inj[INJECTOR_POD_NAME_MAX + 1], ename[32];
	const json_t *old = NULL, *e;
	const char *state = NULL;
	struct kcontainer ec;
	size_t k;

	o->name = g->names[i];
	g->pods[i] = cached_pod(c, s->ns, o->name);
	json_array_foreach(json_object_get(s->status, "targets"), k, e)
		if (kj_str(e, "pod") && strcmp(kj_str(e, "pod"), o->name) == 0)
			old = e;
	state = kj_str(old, "state");
	injspec__pod_name(s, o->name, inj);
	g->injs[i] = cached_pod(c, pns, inj);
	if (!g->injs[i] && strcmp(pns, s->ns) != 0)
		g->injs[i] = cached_pod(c, s->ns, inj);   /* made before the injector namespace */
	if (g->pods[i])
		runtime_handler(c, kc, kpod__runtime_class(g->pods[i]), g->handlers[i],
				sizeof(g->handlers[i]));
	/* in flight per the status, but not in the cache: ask the API server */
	if (state && (!strcmp(state, "Injecting") || !strcmp(state, "Profiling") ||
		      !strcmp(state, "Uploading"))) {
		bool ephemeral = s->spec.mode == INJ_EPHEMERAL ||
				 (s->spec.mode == INJ_AUTO && runtime_is_kata(g->handlers[i]));

		if (!ephemeral && !g->injs[i])
			g->injs[i] = fetch_pod(c, kc, pns, inj);
		injspec__ephemeral_name(s, ename);
		if (ephemeral && (!g->pods[i] || !kpod__ephemeral(g->pods[i], ename, &ec))) {
			kpod__unref(g->pods[i]);
			g->pods[i] = fetch_pod(c, kc, s->ns, o->name);
		}
	}
	/* a pod under the injector's name that is not the session's is left alone */
	if (g->injs[i] && !reconcile__injector_ours(&c->cfg.rc.inj, s, o->name, g->injs[i])) {
		o->foreign_injector = true;
		kpod__unref(g->injs[i]);
		g->injs[i] = NULL;
	}
	o->pod = g->pods[i];
	o->injector = g->injs[i];
	if ((!o->pod || !o->injector) && reconcile__target_inflight(s, o->name))
		o->node_gone = node_missing(kc, reconcile__target_node(s, o));
	o->runtime_handler = g->handlers[i];
}

static int gather(struct controller *c, struct kube_client *kc, const struct session *s,
		  struct gather *g)
{
	struct store *pods = informer__store(c->pods);
	struct ns_scan sc = { .inj = &c->cfg.rc.inj, .s = s, .g = g };
	int r;

	memset(g, 0, sizeof(*g));
	r = reconcile__target_names(s, &g->names, &g->n_names);
	if (r < 0)
		return r;
	store__foreach(pods, scan_pod, &sc);
	if (c->inj_pods)
		store__foreach(informer__store(c->inj_pods), scan_pod, &sc);
	if (sc.err) {
		r = sc.err;
	} else if (!g->names && s->spec.pod_name) {
		r = pod_name_target(pods, s, g);
	} else if (!g->names) {
		qsort(sc.names, sc.n, sizeof(char *), cmp_str);
		g->names = sc.names;
		g->n_names = sc.n;
		sc.names = NULL;
		sc.n = 0;
	}
	free_strv(sc.names, sc.n);
	if (r < 0 || !g->n_names)
		return r;
	g->targets = calloc(g->n_names, sizeof(*g->targets));
	g->pods = calloc(g->n_names, sizeof(*g->pods));
	g->injs = calloc(g->n_names, sizeof(*g->injs));
	g->handlers = calloc(g->n_names, sizeof(*g->handlers));
	if (!g->targets || !g->pods || !g->injs || !g->handlers)
		return -ENOMEM;
	for (size_t i = 0; i < g->n_names; i++)
		observe_target(c, kc, s, g, i);
	return 0;
}

static void session_path(const struct session *s, char *buf, size_t len, const char *sub)
{
	snprintf(buf, len, SESSION_API_PREFIX "/namespaces/%s/" SESSION_RESOURCE "/%s%s", s->ns,
		 s->name, sub ? sub : "");
}

/* Sends a patch of the session (or its status) with resourceVersion as the precondition and
 * replaces *s with what the server returned. -ESTALE on a conflict. */
static int patch_session(struct controller *c, struct kube_client *kc, struct session **s,
			 const char *sub, json_t *patch, struct kube_status *st)
{
	char path[700];
	json_t *j = NULL;
	struct session *ns = NULL;
	int r;

	session_path(*s, path, sizeof(path), sub);
	r = kobject__patch(kc, path, (*s)->rv, patch, &j, st);
	if (r < 0)
		return r;
	if (!j || session__from_json(j, &ns) < 0) {
		json_decref(j);
		return -EBADMSG;
	}
	/* the last finalizer removed: the object is gone, its DELETED event may be too */
	if (!(ns->deleting && !ns->has_finalizer)) {
		struct session *cur = store__get(informer__store(c->sessions), ns->key);

		/* the cache learns it here, before the watch: the feed must hear of it here too
		 * (the watch's copy will find nothing changed) */
		if (cur && rv_compare(cur->rv, ns->rv) < 0 && c->cfg.hooks.feed &&
		    ((cur->status == NULL) != (ns->status == NULL) ||
		     !json_equal(cur->status, ns->status))) {
			char *m = feed_message(ns, "status");

			if (m)
				c->cfg.hooks.feed(c->cfg.hooks.ctx, m, strlen(m));
			free(m);
		}
		session__unref(cur);
		informer__update(c->sessions, j);
	}
	json_decref(j);
	session__unref(*s);
	*s = ns;
	return 0;
}

/* Re-reads the session from the API server. -ENOENT when it is gone. */
static int refresh_session(struct controller *c, struct kube_client *kc, struct session **s)
{
	char path[700];
	void *ns = NULL;
	int r;

	session_path(*s, path, sizeof(path), NULL);
	r = kobject__get(kc, path, c->sessions, session_decode, &ns);
	if (r < 0)
		return r;
	session__unref(*s);
	*s = ns;
	return 0;
}

static json_t *finalizers_with(const struct session *s, bool with)
{
	json_t *out = json_array(), *e;
	size_t i;

	if (!out)
		return NULL;
	json_array_foreach(s->finalizers, i, e)
		if (!json_is_string(e) || strcmp(json_string_value(e), SESSION_FINALIZER) != 0)
			json_array_append(out, e);
	if (with)
		json_array_append_new(out, json_string(SESSION_FINALIZER));
	return out;
}

static void emit_event(struct controller *c, const struct session *s, const struct plan_event *e)
{
	struct event_queue *q = &c->evq;
	struct queued_event *qe;
	char *body = kevent__body(SESSION_KIND, s->ns, s->name, s->uid, s->rv, e->warning,
				  e->reason, e->message, c->cfg.identity,
				  (int64_t)now_realtime_ns());

	if (!body)
		return;
	pthread_mutex_lock(&q->lock);
	if (q->n == EVQ_MAX || q->closing || !q->running) {
		pthread_mutex_unlock(&q->lock);
		atomic_fetch_add(&q->dropped, 1);
		ctl_log(c, 2, "session %s: event %s dropped (queue full)", s->key, e->reason);
		free(body);
		return;
	}
	qe = &q->items[(q->head + q->n++) % EVQ_MAX];
	qe->body = body;
	snprintf(qe->path, sizeof(qe->path), "/api/v1/namespaces/%s/events", s->ns);
	snprintf(qe->key, sizeof(qe->key), "%s", s->key);
	snprintf(qe->reason, sizeof(qe->reason), "%s", e->reason);
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

static void *event_thread(void *arg)
{
	struct controller *c = arg;
	struct event_queue *q = &c->evq;
	struct kube_client *kc = NULL;
	struct queued_event qe;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct kube_status st;
		int r;

		while (!q->n && !q->closing)
			pthread_cond_wait(&q->cond, &q->lock);
		if (!q->n)
			break;
		qe = q->items[q->head];
		q->head = (q->head + 1) % EVQ_MAX;
		q->n--;
		pthread_mutex_unlock(&q->lock);
		if (!kc && kube_client__new(c->cfg.kube, &kc) == 0)   /* at the first event */
			kube_client__set_stop(kc, &q->abort);
		r = kc ? kube_client__request(kc, "POST", qe.path, NULL, qe.body, strlen(qe.body),
					      NULL, NULL, &st) : -ENOMEM;
		if (r < 0)
			ctl_log(c, 4, "session %s: cannot record event %s: %s", qe.key, qe.reason,
				kc ? st.message : strerror(-r));
		else
			atomic_fetch_add(&c->events_emitted, 1);
		free(qe.body);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	kube_client__free(kc);
	return NULL;
}

/* Stops the event thread once it has sent what is queued (or EVQ_DRAIN_NS has passed). */
static void event_queue_stop(struct controller *c)
{
	struct event_queue *q = &c->evq;
	bool running;

	pthread_mutex_lock(&q->lock);
	running = q->running;
	q->closing = true;
	q->running = false;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	if (!running)
		return;
	for (uint64_t t0 = now_monotonic_ns();;) {
		size_t n;

		pthread_mutex_lock(&q->lock);
		n = q->n;
		pthread_mutex_unlock(&q->lock);
		if (!n || now_monotonic_ns() - t0 > EVQ_DRAIN_NS)
			break;
		sleep_ns(10 * NSEC_PER_MSEC);
	}
	pthread_mutex_lock(&q->lock);       /* what is left is dropped, the request in flight aborted */
	while (q->n) {
		free(q->items[q->head].body);
		q->head = (q->head + 1) % EVQ_MAX;
		q->n--;
		atomic_fetch_add(&q->dropped, 1);
	}
	pthread_mutex_unlock(&q->lock);
	atomic_store(&q->abort, true);
	pthread_join(q->thread, NULL);
}

/* A failure another try cannot fix (the request itself is wrong or not allowed). */
static bool permanent(int r)
{
	return r == -EINVAL || r == -EACCES || r == -ENOENT || r == -EOPNOTSUPP || r == -EPROTO;
}

/* The session's merge pod among its own pods (labelled and owned), or from the API server
 * when the status says a merge is running but the cache has not seen the pod (yet). A new
 * reference; NULL with *foreign when a pod has its name but is not the session's. */
static struct kpod *find_merge_pod(struct controller *c, struct kube_client *kc,
				   const struct session *s, const struct gather *g, bool *foreign)
{
	char name[INJECTOR_POD_NAME_MAX + 1];
	const json_t *cs = json_object_get(s->status, "conditions"), *e;
	struct kpod *p = NULL;
	size_t i;

	*foreign = false;
	injspec__merge_pod_name(s, name);
	for (i = 0; i < g->n_all_inj && !p; i++)
		if (strcmp(kpod__name(g->all_inj[i]), name) == 0)
			p = kpod__ref(g->all_inj[i]);
	json_array_foreach(cs, i, e)
		if (!p && !strcmp(kj_str(e, "type") ?: "", "Merged") &&
		    !strcmp(kj_str(e, "status") ?: "", "Unknown") &&
		    !strcmp(kj_str(s->status, "phase") ?: "", "Uploading"))
			p = fetch_pod(c, kc, injspec__pods_namespace(&c->cfg.rc.inj, s), name);
	/* a look-alike's termination message is not the merge's result */
	if (p && !reconcile__merge_ours(&c->cfg.rc.inj, s, p)) {
		kpod__unref(p);
		*foreign = true;
		return NULL;
	}
	return p;
}

/* Creates a pod (an injector or the merge pod). A permanent refusal goes to *err / msg and
 * returns 1 (plan again with it). */
static int do_create_pod(struct controller *c, struct kube_client *kc, const struct session *s,
			 const struct action *a, const char *what, int *err, char *msg, size_t msglen)
{
	const char *ns = kj_str(a->body, "metadata.namespace") ?: s->ns;
	struct kube_status st;
	char path[400];
	int r;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
	r = kobject__create(kc, path, a->body, pod_informer(c, ns), &st);
	if (r == 0) {
		if (a->kind == ACT_CREATE_POD)
			atomic_fetch_add(&c->injectors_created, 1);
		ctl_log(c, 3, "session %s: created %s %s", s->key, what, a->name);
	} else if (r == -EEXIST) {
		r = 0;                  /* made by an earlier pass or a previous controller */
	} else if (permanent(r)) {
		*err = r;
		snprintf(msg, msglen, "%s", st.message);
		r = 1;                  /* re-plan */
	} else {
		ctl_log(c, 1, "session %s: cannot create %s %s: %s", s->key, what, a->name,
		     st.message);
	}
	return r;
}

static int do_add_ephemeral(struct controller *c, struct kube_client *kc,
			    const struct session *s, const struct action *a, struct target_obs *o)
{
	struct kube_status st;
	char path[600], ename[32], *body = NULL, *out = NULL;
	struct kcontainer ec;
	struct kpod *fresh;
	json_t *patch;
	size_t len = 0;
	int r;

	/* never twice: look at the pod as the API server has it now */
	injspec__ephemeral_name(s, ename);
	fresh = fetch_pod(c, kc, s->ns, a->name);
	if (fresh && kpod__ephemeral(fresh, ename, &ec)) {
		kpod__unref(fresh);
		return 0;
	}
	kpod__unref(fresh);
	patch = json_pack("{s:{s:[O]}}", "spec", "ephemeralContainers", a->body);
	body = patch ? json_dumps(patch, JSON_COMPACT) : NULL;
	json_decref(patch);
	if (!body)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/ephemeralcontainers", s->ns,
		 a->name);
	r = kube_client__request(kc, "PATCH", path, "application/strategic-merge-patch+json", body,
				 strlen(body), &out, &len, &st);
	free(body);
	if (r == 0) {
		json_t *j = json_loadb(out, len, 0, NULL);

		if (j)
			informer__update(c->pods, j);
		json_decref(j);
		atomic_fetch_add(&c->injectors_created, 1);
		ctl_log(c, 3, "session %s: added ephemeral container %s to pod %s", s->key, ename,
		     a->name);
	} else if (permanent(r)) {
		o->create_err = r;
		snprintf(o->create_msg, sizeof(o->create_msg), "%s", st.message);
		r = 1;
	} else {
		ctl_log(c, 1, "session %s: cannot add ephemeral container to pod %s: %s", s->key,
		     a->name, st.message);
	}
	free(out);
	return r;
}

/* DELETE path; with uid, only the object that has it (a precondition: an object made under
 * the name since is not deleted, and that counts as done). */
static int do_delete(struct kube_client *kc, const char *path, const char *uid,
		     struct kube_status *st)
{
	char body[200];
	int r;

	if (uid && uid[0]) {
		snprintf(body, sizeof(body), "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\","
			 "\"preconditions\":{\"uid\":\"%.64s\"}}", uid);
		r = kube_client__request(kc, "DELETE", path, "application/json", body,
					 strlen(body), NULL, NULL, st);
	} else {
		r = kube_client__request(kc, "DELETE", path, NULL, NULL, 0, NULL, NULL, st);
	}
	return r == -ENOENT || (uid && uid[0] && st->code == 409) ? 0 : r;
}

/* Adds or removes SESSION_FINALIZER; a conflict re-reads the session. Returns 1 after an
 * add (plan again with the fresh object), 0, -errno. */
static int do_finalizer(struct controller *c, struct kube_client *kc, struct session **s,
			bool add)
{
	struct kube_status st;
	json_t *patch = json_pack("{s:{s:o}}", "metadata", "finalizers", finalizers_with(*s, add));
	int r;

	if (!patch)
		return -ENOMEM;
	r = patch_session(c, kc, s, NULL, patch, &st);
	json_decref(patch);
	if (r == -ENOENT && !add)
		r = 0;
	if (r == -ESTALE)
		r = refresh_session(c, kc, s);
	if (r < 0) {
		ctl_log(c, 1, "session %s: cannot update finalizers: %s", (*s)->key, st.message);
		return r;
	}
	return add;
}

/* One pass of a reconcile: the input gathered from the caches, and its plan. */
struct pass {
	struct gather g;
	struct kpod *merge_pod;         /* a reference, or NULL */
	struct reconcile_input in;
	struct reconcile_plan plan;
	/* a session naming a ClusterProfilingStorage is planned as view: a copy of its fields
	 * (borrowed from the cached session, which stays as read) with spec.s3 = storage */
	struct session view;
	struct session_s3 storage;      /* owned */
};

static void pass_release(struct pass *ps)
{
	gather_release(&ps->g);
	kpod__unref(ps->merge_pod);
	ps->merge_pod = NULL;
	reconcile_plan__release(&ps->plan);
	session__s3_clear(&ps->storage);
}

struct ns_count {
	const struct session *s;
	size_t n;
};

static void count_running(void *ctx, void *obj)
{
	struct ns_count *nc = ctx;
	const struct session *o = obj;

	nc->n += o != nc->s && strcmp(o->ns, nc->s->ns) == 0 && strcmp(o->uid, nc->s->uid) != 0 &&
		 reconcile__session_running(o);
}

/* The other sessions of s's namespace running now (from the cache). */
static size_t running_in_namespace(struct controller *c, const struct session *s)
{
	struct ns_count nc = { .s = s };

	store__foreach(informer__store(c->sessions), count_running, &nc);
	return nc.n;
}

/* Reads the ClusterProfilingStorage s names into ps->storage; the error and why into
 * ps->in (the plan turns them into the session's status). Returns the session to plan. */
static const struct session *resolve_storage(struct kube_client *kc, const struct session *s,
					     struct pass *ps)
{
	struct reconcile_input *in = &ps->in;
	struct kube_status st;
	char path[400], *body = NULL;
	size_t len = 0;
	json_t *j;
	int r;

	snprintf(path, sizeof(path), "/apis/%s/clusterprofilingstorages/%s", AIPROF_API_VERSION,
		 s->spec.storage_ref);
	r = kube_client__request(kc, "GET", path, NULL, NULL, 0, &body, &len, &st);
	if (r == 0) {
		j = json_loadb(body, len, 0, NULL);
		r = j ? session__resolve_storage(s, j, &ps->storage, in->storage_msg,
						 sizeof(in->storage_msg)) : -EBADMSG;
		json_decref(j);
	}
	free(body);
	if (r == -ENOENT)
		snprintf(in->storage_msg, sizeof(in->storage_msg), "ClusterProfilingStorage %.100s "
			 "not found (kubectl get clusterprofilingstorages lists those there are)",
			 s->spec.storage_ref);
	else if (r < 0 && r != -EPERM && r != -EINVAL)
		snprintf(in->storage_msg, sizeof(in->storage_msg), "cannot read "
			 "ClusterProfilingStorage %.100s: %.200s", s->spec.storage_ref,
			 r == -EBADMSG ? "the answer is not JSON" : st.message);
	in->storage_err = r == -EPERM || r == -EINVAL || r == -ENOENT || r == 0 ? r : -EAGAIN;
	ps->view = *s;
	ps->view.spec.s3 = ps->storage;
	return &ps->view;
}

/* Gathers the session's input (from the caches, and the API server where they lag) and
 * plans. */
static int plan_pass(struct controller *c, struct kube_client *kc, const struct session *s,
		     struct pass *ps)
{
	bool merge_foreign;
	int r;

	pass_release(ps);
	r = gather(c, kc, s, &ps->g);
	if (r < 0)
		return r;
	ps->merge_pod = find_merge_pod(c, kc, s, &ps->g, &merge_foreign);
	ps->in = (struct reconcile_input){
		.s = s, .targets = ps->g.targets, .n_targets = ps->g.n_names,
		.injectors = (const struct kpod *const *)ps->g.all_inj,
		.n_injectors = ps->g.n_all_inj, .merge_pod = ps->merge_pod,
		.merge_foreign = merge_foreign, .now_ns = (int64_t)now_realtime_ns(), .cfg = &c->cfg.rc,
	};
	if (s->spec.storage_ref && !s->deleting && !session_phase_terminal(s->phase))
		ps->in.s = resolve_storage(kc, s, ps);
	if (c->cfg.rc.max_running_per_ns)
		ps->in.ns_running = running_in_namespace(c, s);
	return reconcile__plan(&ps->in, &ps->plan);
}

/* The namespace of the session's pod name, one of those the pass found (in the session's
 * namespace or the injector namespace), else where its pods are made. */
static const char *own_pod_ns(struct controller *c, const struct session *s,
			      const struct pass *ps, const char *name)
{
	for (size_t i = 0; i < ps->g.n_all_inj; i++)
		if (strcmp(kpod__name(ps->g.all_inj[i]), name) == 0)
			return kpod__ns(ps->g.all_inj[i]);
	if (ps->merge_pod && strcmp(kpod__name(ps->merge_pod), name) == 0)
		return kpod__ns(ps->merge_pod);
	return injspec__pods_namespace(&c->cfg.rc.inj, s);
}

/* One action of the plan. Returns 0, 1 when the plan must be made again (the finalizer
 * added, or a create refused for good: its error is in ps->in now), -errno. */
static int do_action(struct controller *c, struct kube_client *kc, struct session **s,
		     struct pass *ps, const struct action *a)
{
	struct target_obs *o;
	struct kube_status st;
	char path[700];
	int r;

	switch (a->kind) {
	case ACT_ADD_FINALIZER:
	case ACT_REMOVE_FINALIZER:
		return do_finalizer(c, kc, s, a->kind == ACT_ADD_FINALIZER);
	case ACT_CREATE_POD:
		o = &ps->g.targets[a->target];
		return do_create_pod(c, kc, *s, a, "injector pod", &o->create_err, o->create_msg,
				     sizeof(o->create_msg));
	case ACT_CREATE_MERGE_POD:
		return do_create_pod(c, kc, *s, a, "merge pod", &ps->in.merge_create_err,
				     ps->in.merge_create_msg, sizeof(ps->in.merge_create_msg));
	case ACT_ADD_EPHEMERAL:
		return do_add_ephemeral(c, kc, *s, a, &ps->g.targets[a->target]);
	case ACT_DELETE_POD:
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s",
			 own_pod_ns(c, *s, ps, a->name), a->name);
		r = do_delete(kc, path, a->uid, &st);
		if (r < 0) {
			ctl_log(c, 1, "session %s: cannot delete injector pod %s: %s", (*s)->key,
				a->name, st.message);
			return r;
		}
		if (st.code == 409)
			ctl_log(c, 2, "session %s: pod %s is not the one planned for deletion any "
				"more (another UID): left alone", (*s)->key, a->name);
		else
			ctl_log(c, 3, "session %s: deleted injector pod %s", (*s)->key, a->name);
		return 0;
	case ACT_DELETE_SESSION:
		session_path(*s, path, sizeof(path), NULL);
		r = do_delete(kc, path, (*s)->uid, &st);
		if (r < 0)
			return r;
		ctl_log(c, 3, "session %s: deleted %lds after it finished "
			"(ttlSecondsAfterFinished)", (*s)->key, (long)(*s)->spec.ttl_s);
		return 0;
	}
	return 0;
}

/* The plan's actions in order, up to the first that asks for a new plan. Returns 0, 1 (plan
 * again), -errno. */
static int carry_out(struct controller *c, struct kube_client *kc, struct session **s,
		     struct pass *ps)
{
	for (size_t i = 0; i < ps->plan.n_actions; i++) {
		int r = do_action(c, kc, s, ps, &ps->plan.actions[i]);

		if (r != 0)
			return r;
	}
	return 0;
}

static bool create_refused(const struct pass *ps)
{
	bool errs = ps->in.merge_create_err != 0;

	for (size_t i = 0; i < ps->g.n_names; i++)
		errs |= ps->g.targets[i].create_err != 0;
	return errs;
}

/* A create failed for good: plan again with the error in the input, and keep only the
 * status and Events of that plan (no new actions). */
static int replan_refused(struct pass *ps)
{
	int r;

	reconcile_plan__release(&ps->plan);
	r = reconcile__plan(&ps->in, &ps->plan);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ps->plan.n_actions; i++)
		json_decref(ps->plan.actions[i].body);
	ps->plan.n_actions = 0;
	return 0;
}

/* Writes the plan's status, unless the memo says this one was written before (then its
 * Events go too). Returns 0, -ESTALE on a conflict, -ENOENT when the session is gone,
 * -errno. */
static int write_status(struct controller *c, struct kube_client *kc, struct session **s,
			struct reconcile_plan *p)
{
	struct kube_status st;
	json_t *patch;
	uint64_t h;
	int r;

	if (p->status && memo_same(c, (*s)->key, (*s)->rv, status_hash(p->status))) {
		json_decref(p->status);          /* written before; the server pruned some */
		p->status = NULL;
		p->n_events = 0;
	}
	if (!p->status)
		return 0;
	h = status_hash(p->status);
	patch = json_pack("{s:O}", "status", p->status);
	if (!patch)
		return -ENOMEM;
	r = patch_session(c, kc, s, "/status", patch, &st);
	json_decref(patch);
	if (r == -ESTALE || r == -ENOENT)
		return r;
	if (r < 0) {
		ctl_log(c, 1, "session %s: cannot write status: %s", (*s)->key, st.message);
		return r;
	}
	atomic_fetch_add(&c->status_writes, 1);
	memo_put(c, (*s)->key, (*s)->rv, h);
	ctl_log(c, 4, "session %s: %s", (*s)->key, session_phase_name((*s)->phase));
	return 0;
}

struct orphans {
	const char *inj_ns, *key;       /* key: "namespace/name" of a session that is gone */
	char (*names)[254];
	size_t n, cap;
};

static bool orphan_of(const struct kpod *p, const char *inj_ns, const char *key)
{
	size_t n = strlen(kpod__session_ns(p));

	return kpod__session_uid(p)[0] && n && strcmp(kpod__ns(p), inj_ns) == 0 &&
	       strncmp(key, kpod__session_ns(p), n) == 0 && key[n] == '/' &&
	       strcmp(key + n + 1, kpod__session_name(p)) == 0;
}

static void scan_orphan(void *ctx, void *obj)
{
	struct orphans *o = ctx;
	const struct kpod *p = obj;

	if (!orphan_of(p, o->inj_ns, o->key) || p->deleting)
		return;
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 4;
		char (*v)[254] = realloc(o->names, cap * sizeof(*v));

		if (!v)
			return;
		o->names = v;
		o->cap = cap;
	}
	snprintf(o->names[o->n++], sizeof(o->names[0]), "%s", kpod__name(p));
}

/* The session key names is gone: its pods in the injector namespace, which no
 * ownerReference ties to it (so the API server's garbage collector leaves them), are
 * deleted. Its finalizer did that unless someone took the finalizer off by hand. */
static int delete_orphans(struct controller *c, struct kube_client *kc, const char *key)
{
	const char *ns = c->cfg.rc.inj.ns;
	struct orphans o = { .inj_ns = ns, .key = key };
	struct kube_status st;
	char path[600];
	int r = 0;

	if (!ns)
		return 0;
	store__foreach(informer__store(pod_informer(c, ns)), scan_orphan, &o);
	for (size_t i = 0; i < o.n && r == 0; i++) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, o.names[i]);
		r = do_delete(kc, path, NULL, &st);
		if (r < 0)
			ctl_log(c, 1, "session %s is gone: cannot delete its pod %s/%s: %s", key, ns,
				o.names[i], st.message);
		else
			ctl_log(c, 2, "session %s is gone: deleted its pod %s/%s", key, ns,
				o.names[i]);
	}
	free(o.names);
	return r;
}

/* One reconcile of key. Returns 0 and *requeue_at (wall clock ns, 0 = none), or -errno. */
static int reconcile_key(struct controller *c, struct kube_client *kc, const char *key,
			 int64_t *requeue_at)
{
	struct session *s = store__get(informer__store(c->sessions), key);
	struct pass ps = { 0 };
	int r = 0;

	*requeue_at = 0;
	if (!s)                         /* deleted; its finalizer ran before */
		return delete_orphans(c, kc, key);
	for (int n = 0; n < MAX_PASSES; n++) {
		r = plan_pass(c, kc, s, &ps);
		if (r < 0)
			goto out;
		r = carry_out(c, kc, &s, &ps);
		if (r < 0)
			goto out;
		if (r > 0 && !create_refused(&ps))
			continue;       /* finalizer added: plan with the fresh object */
		if (r > 0 && (r = replan_refused(&ps)) < 0)
			goto out;
		r = write_status(c, kc, &s, &ps.plan);
		if (r == -ESTALE) {
			atomic_fetch_add(&c->conflicts, 1);
			r = refresh_session(c, kc, &s);
			if (r < 0)
				goto out;
			continue;       /* plan again on the fresh object */
		}
		if (r < 0) {
			if (r == -ENOENT)
				r = 0;  /* deleted meanwhile */
			goto out;
		}
		for (size_t i = 0; i < ps.plan.n_events; i++)
			emit_event(c, s, &ps.plan.events[i]);
		*requeue_at = ps.plan.requeue_at_ns;
		goto out;
	}
	r = -EAGAIN;                    /* too many conflicts: later */
out:
	pass_release(&ps);
	session__unref(s);
	return r;
}

struct worker_ctx {
	struct controller *c;
	struct kube_client *kc;         /* the worker's own */
};

static int worker_reconcile(void *ctx, const char *key, int64_t *requeue_at_ns)
{
	struct worker_ctx *w = ctx;
	struct controller *c = w->c;
	int r = reconcile_key(c, w->kc, key, requeue_at_ns);

	atomic_fetch_add(&c->reconciles, 1);
	if (r < 0) {
		atomic_fetch_add(&c->reconcile_errors, 1);
		ctl_log(c, r == -ESTALE || r == -EAGAIN ? 3 : 1, "session %s: reconcile failed: %s "
		     "(retrying)", key, strerror(-r));
	}
	return r;
}

static void *worker(void *arg)
{
	struct worker_ctx w = { .c = arg };

	if (kube_client__new(w.c->cfg.kube, &w.kc) < 0)
		return NULL;
	kube_client__set_stop(w.kc, &w.c->stopping);
	kworker__run(w.c->queue, worker_reconcile, &w, NSEC_PER_MSEC);
	kube_client__free(w.kc);
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

int controller__new(const struct controller_config *cfg, struct controller **ret)
{
	struct controller *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	if (!c->cfg.workers)
		c->cfg.workers = 1;
	pthread_mutex_init(&c->lookup_lock, NULL);
	pthread_mutex_init(&c->memo_lock, NULL);
	pthread_mutex_init(&c->evq.lock, NULL);
	pthread_cond_init(&c->evq.cond, NULL);

	c->session_ops = (struct informer_ops){
		.resource = SESSION_RESOURCE, .decode = session_decode, .rv = session_rv,
		.store_ops = &session_store_ops, .on_upsert = on_session_upsert,
		.on_delete = on_session_delete, .on_event = on_informer_event, .ctx = c,
		.watch_timeout_s = cfg->watch_timeout_s,
	};
	c->pod_ops = (struct informer_ops){
		.resource = "pods", .decode = pod_decode, .rv = pod_rv, .store_ops = &pod_store_ops,
		.on_upsert = on_pod_upsert, .on_delete = on_pod_delete,
		.on_event = on_informer_event, .ctx = c, .watch_timeout_s = cfg->watch_timeout_s,
	};
	if (cfg->namespace) {
		snprintf(c->session_ops.path, sizeof(c->session_ops.path),
			 SESSION_API_PREFIX "/namespaces/%s/" SESSION_RESOURCE, cfg->namespace);
		snprintf(c->pod_ops.path, sizeof(c->pod_ops.path), "/api/v1/namespaces/%s/pods",
			 cfg->namespace);
	} else {
		snprintf(c->session_ops.path, sizeof(c->session_ops.path),
			 SESSION_API_PREFIX "/" SESSION_RESOURCE);
		snprintf(c->pod_ops.path, sizeof(c->pod_ops.path), "/api/v1/pods");
	}
	err = -ENOMEM;
	c->queue = workqueue__new(NULL, NULL);
	if (!c->queue)
		goto fail;
	err = informer__new(cfg->kube, &c->session_ops, &c->sessions);
	if (err < 0)
		goto fail;
	err = informer__new(cfg->kube, &c->pod_ops, &c->pods);
	if (err < 0)
		goto fail;
	/* watching one namespace, and the injector pods are made in another */
	if (cfg->namespace && cfg->rc.inj.ns && strcmp(cfg->namespace, cfg->rc.inj.ns) != 0) {
		c->inj_pod_ops = (struct informer_ops){
			.resource = "pods", .decode = pod_decode, .rv = pod_rv,
			.store_ops = &pod_store_ops, .on_upsert = on_inj_pod_upsert,
			.on_delete = on_pod_delete, .on_event = on_informer_event, .ctx = c,
			.watch_timeout_s = cfg->watch_timeout_s, .label_selector = LABEL_SESSION_UID,
		};
		snprintf(c->inj_pod_ops.path, sizeof(c->inj_pod_ops.path),
			 "/api/v1/namespaces/%s/pods", cfg->rc.inj.ns);
		err = informer__new(cfg->kube, &c->inj_pod_ops, &c->inj_pods);
		if (err < 0)
			goto fail;
	}
	{
		struct policy_ctl_config pcfg = {
			.kube = cfg->kube, .namespace = cfg->namespace,
			.sessions = informer__store(c->sessions), .pods = informer__store(c->pods),
			.session_informer = c->sessions, .pod_informer = c->pods,
			.watch_timeout_s = cfg->watch_timeout_s, .identity = cfg->identity,
			.log = cfg->hooks.log, .log_ctx = cfg->hooks.ctx,
		};

		err = policy_ctl__new(&pcfg, &c->policies);
		if (err < 0)
			goto fail;
	}
	*ret = c;
	return 0;
fail:
	controller__free(c);
	return err;
}

bool controller__synced(struct controller *c)
{
	return c->started && informer__synced(c->sessions) && informer__synced(c->pods) &&
	       (!c->inj_pods || informer__synced(c->inj_pods));
}

/* A pod of the injector namespace whose session the cache does not have: its key. */
static void enqueue_gone(void *ctx, void *obj)
{
	struct controller *c = ctx;
	const struct kpod *p = obj;
	struct session *s;
	char key[600];

	if (!kpod__session_uid(p)[0] || !kpod__session_ns(p)[0] ||
	    strcmp(kpod__ns(p), c->cfg.rc.inj.ns) != 0 || !session_watched(c, p))
		return;
	snprintf(key, sizeof(key), "%s/%s", kpod__session_ns(p), kpod__session_name(p));
	s = store__get(informer__store(c->sessions), key);
	if (!s)
		enqueue(c, key);
	session__unref(s);
}

int controller__start(struct controller *c)
{
	int r;

	/* pods first: when sessions arrive, their targets are known */
	r = informer__start(c->pods);
	if (r < 0)
		return r;
	if (c->inj_pods && (r = informer__start(c->inj_pods)) < 0)
		return r;
	for (int i = 0; i < 6000 && !(informer__synced(c->pods) &&
				      (!c->inj_pods || informer__synced(c->inj_pods))); i++)
		sleep_ns(10 * NSEC_PER_MSEC);
	r = informer__start(c->sessions);
	if (r < 0)
		return r;
	if (c->cfg.rc.inj.ns) {
		/* the pods of sessions that went while no controller ran (their finalizer taken
		 * off by hand) come to no worker through the sessions' first list */
		for (int i = 0; i < 6000 && !informer__synced(c->sessions); i++)
			sleep_ns(10 * NSEC_PER_MSEC);
		store__foreach(informer__store(pod_informer(c, c->cfg.rc.inj.ns)), enqueue_gone,
			       c);
	}
	if (!c->evq.running && !c->evq.closing) {
		r = pthread_create(&c->evq.thread, NULL, event_thread, c);
		if (r)
			return -r;
		c->evq.running = true;
	}
	c->workers = calloc(c->cfg.workers, sizeof(*c->workers));
	if (!c->workers)
		return -ENOMEM;
	for (unsigned i = 0; i < c->cfg.workers; i++) {
		r = pthread_create(&c->workers[i], NULL, worker, c);
		if (r)
			return -r;
		c->n_workers++;
	}
	r = policy_ctl__start(c->policies);
	if (r < 0)
		return r;
	c->started = true;
	return 0;
}

void controller__stop(struct controller *c)
{
	if (!c)
		return;
	atomic_store(&c->stopping, true);
	workqueue__shutdown(c->queue);
	for (unsigned i = 0; i < c->n_workers; i++)
		pthread_join(c->workers[i], NULL);
	c->n_workers = 0;
	policy_ctl__stop(c->policies);
	event_queue_stop(c);
	informer__stop(c->sessions);
	informer__stop(c->pods);
	informer__stop(c->inj_pods);
}

static void free_lookups(struct lookup *l)
{
	while (l) {
		struct lookup *n = l->next;

		free(l);
		l = n;
	}
}

void controller__free(struct controller *c)
{
	if (!c)
		return;
	controller__stop(c);
	policy_ctl__free(c->policies);
	informer__free(c->sessions);
	informer__free(c->pods);
	informer__free(c->inj_pods);
	workqueue__free(c->queue);
	free(c->workers);
	free_lookups(c->runtime_classes);
	pthread_mutex_destroy(&c->lookup_lock);
	for (size_t i = 0; i < MEMO_BUCKETS; i++)
		while (c->memo[i]) {
			struct memo *m = c->memo[i];

			c->memo[i] = m->next;
			free(m);
		}
	pthread_mutex_destroy(&c->memo_lock);
	pthread_mutex_destroy(&c->evq.lock);
	pthread_cond_destroy(&c->evq.cond);
	free(c);
}

/* ---- metrics and feed snapshot ----------------------------------------------------------- */

struct phase_count {
	size_t n[PHASE__MAX];
};

static void count_phase(void *ctx, void *obj)
{
	struct phase_count *pc = ctx;
	const struct session *s = obj;

	pc->n[s->phase < PHASE__MAX ? s->phase : PHASE_NONE]++;
}

void controller__metrics(struct controller *c, struct strbuf *b)
{
	struct phase_count pc = { { 0 } };

	strbuf_addf(b, "# HELP aiprof_reconciles_total Reconciles of ProfilingSessions.\n"
		    "# TYPE aiprof_reconciles_total counter\naiprof_reconciles_total %llu\n",
		    (unsigned long long)atomic_load(&c->reconciles));
	strbuf_addf(b, "# HELP aiprof_reconcile_errors_total Reconciles that failed and were "
		    "retried.\n# TYPE aiprof_reconcile_errors_total counter\n"
		    "aiprof_reconcile_errors_total %llu\n",
		    (unsigned long long)atomic_load(&c->reconcile_errors));
	strbuf_addf(b, "# HELP aiprof_conflicts_total Status writes refused with 409 Conflict.\n"
		    "# TYPE aiprof_conflicts_total counter\naiprof_conflicts_total %llu\n",
		    (unsigned long long)atomic_load(&c->conflicts));
	strbuf_addf(b, "# HELP aiprof_injectors_created_total Injector pods and ephemeral "
		    "containers created.\n# TYPE aiprof_injectors_created_total counter\n"
		    "aiprof_injectors_created_total %llu\n",
		    (unsigned long long)atomic_load(&c->injectors_created));
	strbuf_addf(b, "# HELP aiprof_status_writes_total Status subresource updates.\n"
		    "# TYPE aiprof_status_writes_total counter\naiprof_status_writes_total %llu\n",
		    (unsigned long long)atomic_load(&c->status_writes));
	strbuf_addf(b, "# HELP aiprof_events_total Events recorded.\n"
		    "# TYPE aiprof_events_total counter\naiprof_events_total %llu\n",
		    (unsigned long long)atomic_load(&c->events_emitted));
	strbuf_addf(b, "# HELP aiprof_events_dropped_total Events not recorded: the queue was "
		    "full, or the controller stopped.\n# TYPE aiprof_events_dropped_total counter\n"
		    "aiprof_events_dropped_total %llu\n",
		    (unsigned long long)atomic_load(&c->evq.dropped));
	strbuf_addf(b, "# HELP aiprof_workqueue_depth Session keys ready to reconcile.\n"
		    "# TYPE aiprof_workqueue_depth gauge\naiprof_workqueue_depth %zu\n",
		    workqueue__len(c->queue));
	strbuf_addf(b, "# HELP aiprof_workqueue_waiting Session keys waiting for a delay.\n"
		    "# TYPE aiprof_workqueue_waiting gauge\naiprof_workqueue_waiting %zu\n",
		    workqueue__waiting(c->queue));
	strbuf_addf(b, "# HELP aiprof_watch_restarts_total Watches that ended with an error "
		    "or 410 Gone.\n# TYPE aiprof_watch_restarts_total counter\n"
		    "aiprof_watch_restarts_total{resource=\"profilingsessions\"} %llu\n"
		    "aiprof_watch_restarts_total{resource=\"pods\"} %llu\n",
		    (unsigned long long)informer__watch_restarts(c->sessions),
		    (unsigned long long)informer__watch_restarts(c->pods));
	strbuf_addf(b, "# HELP aiprof_relists_total Full lists (the first, and after 410 Gone).\n"
		    "# TYPE aiprof_relists_total counter\n"
		    "aiprof_relists_total{resource=\"profilingsessions\"} %llu\n"
		    "aiprof_relists_total{resource=\"pods\"} %llu\n",
		    (unsigned long long)informer__relists(c->sessions),
		    (unsigned long long)informer__relists(c->pods));
	strbuf_addf(b, "# HELP aiprof_cached_objects Objects in the informers' caches.\n"
		    "# TYPE aiprof_cached_objects gauge\n"
		    "aiprof_cached_objects{resource=\"profilingsessions\"} %zu\n"
		    "aiprof_cached_objects{resource=\"pods\"} %zu\n",
		    store__len(informer__store(c->sessions)), store__len(informer__store(c->pods)));
	policy_ctl__metrics(c->policies, b);
	store__foreach(informer__store(c->sessions), count_phase, &pc);
	strbuf_adds(b, "# HELP aiprof_sessions ProfilingSessions by phase.\n"
		    "# TYPE aiprof_sessions gauge\n");
	for (int i = 0; i < PHASE__MAX; i++)
		strbuf_addf(b, "aiprof_sessions{phase=\"%s\"} %zu\n",
			    i == PHASE_NONE ? "New" : session_phase_name((enum session_phase)i),
			    pc.n[i]);
}

static void snapshot_one(void *ctx, void *obj)
{
	struct strbuf *b = ctx;
	char *m = feed_message(obj, "status");

	if (m) {
		strbuf_adds(b, m);
		strbuf_addc(b, '\n');
	}
	free(m);
}

void controller__snapshot(struct controller *c, struct strbuf *b)
{
	store__foreach(informer__store(c->sessions), snapshot_one, b);
}
