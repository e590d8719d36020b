/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "informer.h"
#include "kevent.h"
#include "kobject.h"
#include "kubeclient.h"
#include "kworker.h"
#include "policy_ctl.h"
#include "policy_plan.h"
#include "timeutil.h"
#include "workqueue.h"

/* ---- running it: informer, queue, worker ----------------------------------------------- */

struct policy_ctl {
	struct policy_ctl_config cfg;
	struct informer_ops ops;
	struct informer *policies;
	struct workqueue *queue;
	pthread_t worker;
	bool worker_started;
	atomic_bool stopping;
	atomic_uint_fast64_t reconciles, errors, created, deleted;
};

__attribute__((format(printf, 3, 4)))
static void pc_log(struct policy_ctl *pc, int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (!pc->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pc->cfg.log(pc->cfg.log_ctx, level, buf);
}

static const char *policy_key(const void *o) { return ((const struct policy *)o)->key; }
static void policy_ref(void *o) { policy__ref(o); }
static void policy_unref(void *o) { policy__unref(o); }
static const char *policy_rv(const void *o) { return ((const struct policy *)o)->rv; }
static int policy_decode(const json_t *j, void **ret)
{
	return policy__from_json(j, (struct policy **)ret);
}

static const struct store_ops policy_store_ops = {
	offsetof(struct policy, node), policy_key, policy_ref, policy_unref,
};

static void on_policy_upsert(void *ctx, const void *old, const void *obj)
{
	struct policy_ctl *pc = ctx;

	(void)old;
	(void)workqueue__add(pc->queue, ((const struct policy *)obj)->key);
}

static void on_policy_event(void *ctx, const char *what, int err)
{
	pc_log(ctx, err < 0 ? 1 : 3, "informer %s%s%s", what, err < 0 ? ": " : "",
	       err < 0 ? strerror(-err) : "");
}

struct owner_match {
	struct policy_ctl *pc;
	const struct session *s;
	const struct kpod *old, *pod;
};

static void match_owner(void *ctx, void *obj)
{
	struct owner_match *m = ctx;
	const struct policy *p = obj;

	if (strcmp(p->uid, m->s->policy_uid) == 0 && strcmp(p->ns, m->s->ns) == 0)
		(void)workqueue__add(m->pc->queue, p->key);
}

void policy_ctl__session_changed(struct policy_ctl *pc, const struct session *s)
{
	struct owner_match m = { .pc = pc, .s = s };

	if (pc && s->policy_uid)
		store__foreach(informer__store(pc->policies), match_owner, &m);
}

/* A selected pod whose trigger annotation is new or has a new value. */
static void match_trigger(void *ctx, void *obj)
{
	struct owner_match *m = ctx;
	const struct policy *p = obj;
	const char *v, *was;

	if (!p->trigger || p->spec_err || strcmp(p->ns, kpod__ns(m->pod)) != 0)
		return;
	v = kpod__annotation(m->pod, p->trigger);
	if (!v || !v[0] || !kpod__matches(m->pod, &p->selector))
		return;
	was = m->old ? kpod__annotation(m->old, p->trigger) : NULL;
	if (!was || strcmp(was, v) != 0 || !kpod__matches(m->old, &p->selector))
		(void)workqueue__add(m->pc->queue, p->key);
}

void policy_ctl__pod_changed(struct policy_ctl *pc, const struct kpod *old,
			     const struct kpod *pod)
{
	struct owner_match m = { .pc = pc, .old = old, .pod = pod };

	if (pc && !kpod__session_uid(pod)[0])
		store__foreach(informer__store(pc->policies), match_trigger, &m);
}

struct gathered {
	const struct policy *p;
	struct session **sessions;
	size_t n_sessions, cap_sessions;
	struct kpod **pods;
	size_t n_pods, cap_pods;
	int err;
};

static void gather_session(void *ctx, void *obj)
{
	struct gathered *g = ctx;
	struct session *s = obj;

	if (g->err || !s->policy_uid || strcmp(s->policy_uid, g->p->uid) != 0 ||
	    strcmp(s->ns, g->p->ns) != 0)
		return;
	if (g->n_sessions == g->cap_sessions) {
		size_t cap = g->cap_sessions ? 2 * g->cap_sessions : 16;
		struct session **v = realloc(g->sessions, cap * sizeof(*v));

		if (!v) {
			g->err = -ENOMEM;
			return;
		}
		g->sessions = v;
		g->cap_sessions = cap;
	}
	g->sessions[g->n_sessions++] = session__ref(s);
}

static void gather_pod(void *ctx, void *obj)
{
	struct gathered *g = ctx;
	struct kpod *pod = obj;

	if (g->err || strcmp(kpod__ns(pod), g->p->ns) != 0 ||
	    !kpod__annotation(pod, g->p->trigger))
		return;
	if (g->n_pods == g->cap_pods) {
		size_t cap = g->cap_pods ? 2 * g->cap_pods : 16;
		struct kpod **v = realloc(g->pods, cap * sizeof(*v));

		if (!v) {
			g->err = -ENOMEM;
			return;
		}
		g->pods = v;
		g->cap_pods = cap;
	}
	g->pods[g->n_pods++] = kpod__ref(pod);
}

static void gathered_release(struct gathered *g)
{
	for (size_t i = 0; i < g->n_sessions; i++)
		session__unref(g->sessions[i]);
	for (size_t i = 0; i < g->n_pods; i++)
		kpod__unref(g->pods[i]);
	free(g->sessions);
	free(g->pods);
	memset(g, 0, sizeof(*g));
}

static void policy_path(const struct policy *p, char *buf, size_t len, const char *sub)
{
	snprintf(buf, len, SESSION_API_PREFIX "/namespaces/%s/" POLICY_RESOURCE "/%s%s", p->ns,
		 p->name, sub ? sub : "");
}

static void emit_policy_event(struct policy_ctl *pc, struct kube_client *kc,
			      const struct policy *p, const struct plan_event *e)
{
	struct kube_status st;
	char path[400];
	char *body = kevent__body(POLICY_KIND, p->ns, p->name, p->uid, p->rv, e->warning,
				  e->reason, e->message, pc->cfg.identity,
				  (int64_t)now_realtime_ns());

	if (!body)
		return;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", p->ns);
	if (kube_client__request(kc, "POST", path, NULL, body, strlen(body), NULL, NULL, &st) < 0)
		pc_log(pc, 4, "policy %s: cannot record event %s: %s", p->key, e->reason,
		       st.message);
	free(body);
}

/* Creates the session; 0 when it exists now, 1 when the API refused it for good (the plan's
 * time or trigger is consumed and a Warning says why), else -errno (retry). */
static int do_create(struct policy_ctl *pc, struct kube_client *kc, const struct policy *p,
		     const struct policy_action *a, struct plan_event *warn)
{
	struct kube_status st;
	char path[400];
	int r;

	snprintf(path, sizeof(path), SESSION_API_PREFIX "/namespaces/%s/" SESSION_RESOURCE, p->ns);
	r = kobject__create(kc, path, a->body, pc->cfg.session_informer, &st);
	if (r == 0) {
		atomic_fetch_add(&pc->created, 1);
		pc_log(pc, 3, "policy %s: created session %s", p->key, a->name);
	} else if (r == -EEXIST) {
		pc_log(pc, 3, "policy %s: session %s exists already", p->key, a->name);
		r = 0;
	} else if (r == -EINVAL || r == -EACCES || r == -ENOENT || r == -EOPNOTSUPP) {
		*warn = (struct plan_event){ .warning = true, .reason = "CreateFailed" };
		snprintf(warn->message, sizeof(warn->message), "cannot create session %.100s: %.380s",
			 a->name, st.message);
		pc_log(pc, 1, "policy %s: %s", p->key, warn->message);
		r = 1;
	} else {
		pc_log(pc, 1, "policy %s: cannot create session %s: %s (retrying)", p->key, a->name,
		       st.message);
	}
	return r;
}

static int do_delete_session(struct policy_ctl *pc, struct kube_client *kc,
			     const struct policy *p, const struct policy_action *a)
{
	struct kube_status st;
	char path[600], body[200];
	int r;

	snprintf(path, sizeof(path), SESSION_API_PREFIX "/namespaces/%s/" SESSION_RESOURCE "/%s",
		 p->ns, a->name);
	snprintf(body, sizeof(body), "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\","
		 "\"propagationPolicy\":\"Background\",\"preconditions\":{\"uid\":\"%.60s\"}}",
		 a->uid);
	r = kube_client__request(kc, "DELETE", path, NULL, body, strlen(body), NULL, NULL, &st);
	if (r == -ENOENT || r == -ESTALE || r == -EEXIST)
		return 0;               /* gone, or another object by now */
	if (r < 0) {
		pc_log(pc, 1, "policy %s: cannot delete session %s: %s", p->key, a->name, st.message);
		return r;
	}
	atomic_fetch_add(&pc->deleted, 1);
	pc_log(pc, 3, "policy %s: deleted session %s", p->key, a->name);
	return 0;
}

/* PATCHes the status with the resourceVersion as precondition; -ESTALE on a conflict. */
static int write_status(struct policy_ctl *pc, struct kube_client *kc, struct policy **p,
			json_t *status)
{
	struct kube_status st;
	char path[700];
	struct policy *np = NULL;
	json_t *patch = json_pack("{s:O}", "status", status), *j = NULL;
	int r;

	if (!patch)
		return -ENOMEM;
	policy_path(*p, path, sizeof(path), "/status");
	r = kobject__patch(kc, path, (*p)->rv, patch, &j, &st);
	json_decref(patch);
	if (r < 0) {
		if (r != -ESTALE && r != -ENOENT)
			pc_log(pc, 1, "policy %s: cannot write status: %s", (*p)->key, st.message);
		return r;
	}
	if (j && policy__from_json(j, &np) == 0) {
		informer__update(pc->policies, j);
		policy__unref(*p);
		*p = np;
	}
	json_decref(j);
	return 0;
}

static int refresh_policy(struct policy_ctl *pc, struct kube_client *kc, struct policy **p)
{
	char path[700];
	void *np = NULL;
	int r;

	policy_path(*p, path, sizeof(path), NULL);
	r = kobject__get(kc, path, pc->policies, policy_decode, &np);
	if (r < 0)
		return r;
	policy__unref(*p);
	*p = np;
	return 0;
}

/* One pass of a policy's reconcile: its input gathered from the caches, and its plan. */
struct pass {
	struct gathered g;
	struct policy_plan plan;
	struct plan_event warns[RECONCILE_MAX_EVENTS];  /* CreateFailed: sessions refused */
	size_t n_warns;
};

static void pass_release(struct pass *ps)
{
	gathered_release(&ps->g);
	policy_plan__release(&ps->plan);
	ps->n_warns = 0;
}

/* Gathers the policy's sessions, its annotated pods and its time zone, and plans. */
static int plan_pass(struct policy_ctl *pc, const struct policy *p, struct pass *ps)
{
	const struct tz *zone = NULL;
	struct policy_input in;
	char zmsg[256] = "";
	int zerr = 0;

	pass_release(ps);
	ps->g.p = p;
	store__foreach(pc->cfg.sessions, gather_session, &ps->g);
	if (p->trigger && !p->spec_err)
		store__foreach(pc->cfg.pods, gather_pod, &ps->g);
	if (ps->g.err)
		return ps->g.err;
	if (p->schedule && !p->spec_err)
		zerr = tz__load(pc->cfg.zoneinfo_dir, p->time_zone, &zone, zmsg, sizeof(zmsg));
	if (zerr == -ENOMEM)
		return zerr;
	in = (struct policy_input){
		.p = p, .sessions = (const struct session *const *)ps->g.sessions,
		.n_sessions = ps->g.n_sessions, .pods = (const struct kpod *const *)ps->g.pods,
		.n_pods = ps->g.n_pods, .zone = zone, .zone_err = zerr, .zone_msg = zmsg,
		.now = (int64_t)(now_realtime_ns() / NSEC_PER_SEC),
	};
	return policy__plan(&in, &ps->plan);
}

/* The plan's actions in order. A session the API refused for good is a CreateFailed
 * Warning in ps->warns; any other failure stops here (retried: nothing written that claims
 * it happened). */
static int carry_out(struct policy_ctl *pc, struct kube_client *kc, const struct policy *p,
		     struct pass *ps)
{
	for (size_t i = 0; i < ps->plan.n_actions; i++) {
		struct policy_action *a = &ps->plan.actions[i];
		int r;

		if (a->kind == PACT_DELETE_SESSION) {
			r = do_delete_session(pc, kc, p, a);
		} else {
			r = do_create(pc, kc, p, a, &ps->warns[ps->n_warns < RECONCILE_MAX_EVENTS ?
								ps->n_warns : 0]);
			if (r > 0) {
				ps->n_warns += ps->n_warns < RECONCILE_MAX_EVENTS;
				r = 0;
			}
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* Writes the plan's status, then records its Events. Returns 0 when done (also when the
 * policy is gone), 1 after a conflict (the policy read again: plan again), -errno. */
static int write_and_report(struct policy_ctl *pc, struct kube_client *kc, struct policy **p,
			    struct pass *ps, int64_t *requeue_at)
{
	int r = ps->plan.status ? write_status(pc, kc, p, ps->plan.status) : 0;

	if (r == -ESTALE) {
		r = refresh_policy(pc, kc, p);
		return r < 0 ? r : 1;
	}
	if (r == -ENOENT)
		return 0;               /* deleted meanwhile */
	if (r < 0)
		return r;
	for (size_t i = 0; i < ps->plan.n_events; i++)
		emit_policy_event(pc, kc, *p, &ps->plan.events[i]);
	for (size_t i = 0; i < ps->n_warns; i++)
		emit_policy_event(pc, kc, *p, &ps->warns[i]);
	*requeue_at = ps->plan.requeue_at;
	return 0;
}

static int reconcile_policy(struct policy_ctl *pc, struct kube_client *kc, const char *key,
			    int64_t *requeue_at)
{
	struct policy *p = store__get(informer__store(pc->policies), key);
	struct pass ps = { 0 };
	int r;

	*requeue_at = 0;
	if (!p)
		return 0;               /* deleted: the garbage collector takes its sessions */
	for (int n = 0; n < 4; n++) {
		if ((r = plan_pass(pc, p, &ps)) < 0 || (r = carry_out(pc, kc, p, &ps)) < 0 ||
		    (r = write_and_report(pc, kc, &p, &ps, requeue_at)) <= 0)
			goto out;
	}
	r = -EAGAIN;                    /* a conflict every time: later */
out:
	pass_release(&ps);
	policy__unref(p);
	return r;
}

struct policy_worker_ctx {
	struct policy_ctl *pc;
	struct kube_client *kc;
};

static int policy_worker_reconcile(void *ctx, const char *key, int64_t *requeue_at_ns)
{
	struct policy_worker_ctx *w = ctx;
	struct policy_ctl *pc = w->pc;
	int64_t at = 0;
	int r;

	/* made at the first policy: a cluster without policies pays no client (memory) */
	if (!w->kc && (r = kube_client__new(pc->cfg.kube, &w->kc)) == 0)
		kube_client__set_stop(w->kc, &pc->stopping);
	r = w->kc ? reconcile_policy(pc, w->kc, key, &at) : -ENOMEM;

	atomic_fetch_add(&pc->reconciles, 1);
	if (r < 0) {
		atomic_fetch_add(&pc->errors, 1);
		pc_log(pc, r == -EAGAIN ? 3 : 1, "policy %s: reconcile failed: %s (retrying)",
		       key, strerror(-r));
	}
	*requeue_at_ns = at * (int64_t)NSEC_PER_SEC;
	return r;
}

static void *policy_worker(void *arg)
{
	struct policy_worker_ctx w = { .pc = arg };

	/* decisions need every session and pod: wait for the caches */
	while (!atomic_load(&w.pc->stopping) && !policy_ctl__synced(w.pc))
		sleep_ns(20 * NSEC_PER_MSEC);
	/* a little after a requested time, so that it has passed on our clock */
	kworker__run(w.pc->queue, policy_worker_reconcile, &w, 50 * NSEC_PER_MSEC);
	kube_client__free(w.kc);
	return NULL;
}

int policy_ctl__new(const struct policy_ctl_config *cfg, struct policy_ctl **ret)
{
	struct policy_ctl *pc = calloc(1, sizeof(*pc));
	int err = -ENOMEM;

	if (!pc)
		return -ENOMEM;
	pc->cfg = *cfg;
	pc->ops = (struct informer_ops){
		.resource = POLICY_RESOURCE, .decode = policy_decode, .rv = policy_rv,
		.store_ops = &policy_store_ops, .on_upsert = on_policy_upsert,
		.on_event = on_policy_event, .ctx = pc, .watch_timeout_s = cfg->watch_timeout_s,
	};
	if (cfg->namespace)
		snprintf(pc->ops.path, sizeof(pc->ops.path),
			 SESSION_API_PREFIX "/namespaces/%s/" POLICY_RESOURCE, cfg->namespace);
	else
		snprintf(pc->ops.path, sizeof(pc->ops.path), SESSION_API_PREFIX "/" POLICY_RESOURCE);
	pc->queue = workqueue__new(NULL, NULL);
	if (!pc->queue)
		goto fail;
	err = informer__new(cfg->kube, &pc->ops, &pc->policies);
	if (err < 0)
		goto fail;
	*ret = pc;
	return 0;
fail:
	policy_ctl__free(pc);
	return err;
}

int policy_ctl__start(struct policy_ctl *pc)
{
	int r = informer__start(pc->policies);

	if (r < 0)
		return r;
	r = pthread_create(&pc->worker, NULL, policy_worker, pc);
	if (r)
		return -r;
	pc->worker_started = true;
	return 0;
}

bool policy_ctl__synced(struct policy_ctl *pc)
{
	return informer__synced(pc->policies) &&
	       (!pc->cfg.session_informer || informer__synced(pc->cfg.session_informer)) &&
	       (!pc->cfg.pod_informer || informer__synced(pc->cfg.pod_informer));
}

void policy_ctl__stop(struct policy_ctl *pc)
{
	if (!pc)
		return;
	atomic_store(&pc->stopping, true);
	workqueue__shutdown(pc->queue);
	if (pc->worker_started)
		pthread_join(pc->worker, NULL);
	pc->worker_started = false;
	informer__stop(pc->policies);
}

void policy_ctl__free(struct policy_ctl *pc)
{
	if (!pc)
		return;
	policy_ctl__stop(pc);
	informer__free(pc->policies);
	workqueue__free(pc->queue);
	free(pc);
}

void policy_ctl__metrics(struct policy_ctl *pc, struct strbuf *b)
{
	if (!pc)
		return;
	strbuf_addf(b, "# HELP aiprof_policy_reconciles_total Reconciles of ProfilingPolicies.\n"
		    "# TYPE aiprof_policy_reconciles_total counter\naiprof_policy_reconciles_total %llu\n",
		    (unsigned long long)atomic_load(&pc->reconciles));
	strbuf_addf(b, "# HELP aiprof_policy_reconcile_errors_total Policy reconciles that failed "
		    "and were retried.\n# TYPE aiprof_policy_reconcile_errors_total counter\n"
		    "aiprof_policy_reconcile_errors_total %llu\n",
		    (unsigned long long)atomic_load(&pc->errors));
	strbuf_addf(b, "# HELP aiprof_policy_sessions_created_total Sessions made by policies.\n"
		    "# TYPE aiprof_policy_sessions_created_total counter\n"
		    "aiprof_policy_sessions_created_total %llu\n",
		    (unsigned long long)atomic_load(&pc->created));
	strbuf_addf(b, "# HELP aiprof_policy_sessions_deleted_total Sessions policies deleted "
		    "(history limits, Replace).\n# TYPE aiprof_policy_sessions_deleted_total counter\n"
		    "aiprof_policy_sessions_deleted_total %llu\n",
		    (unsigned long long)atomic_load(&pc->deleted));
	strbuf_addf(b, "# HELP aiprof_cached_policies ProfilingPolicies in the cache.\n"
		    "# TYPE aiprof_cached_policies gauge\naiprof_cached_policies %zu\n",
		    store__len(informer__store(pc->policies)));
}

