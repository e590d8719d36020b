/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "kjson.h"
#include "ktime.h"
#include "reconcile.h"
#include "common/termination.h"
#include "common/utf8.h"
#include "timeutil.h"

void free_strv(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

bool runtime_is_kata(const char *h)
{
	return h && strncmp(h, "kata", 4) == 0 && (h[4] == '\0' || h[4] == '-' || h[4] == '_');
}

int reconcile__target_names(const struct session *s, char ***ret, size_t *ret_n)
{
	const json_t *ts = json_object_get(s->status, "targets"), *e;
	char **v;
	size_t i, n = 0;

	*ret = NULL;
	*ret_n = 0;
	if (!kj_str(s->status, "startTime") || !json_is_array(ts) || json_array_size(ts) == 0)
		return 0;
	v = calloc(json_array_size(ts), sizeof(char *));
	if (!v)
		return -ENOMEM;
	json_array_foreach(ts, i, e) {
		const char *p = kj_str(e, "pod");

		if (!p)
			continue;
		v[n] = strdup(p);
		if (!v[n++]) {
			free_strv(v, n);
			return -ENOMEM;
		}
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

void reconcile_plan__release(struct reconcile_plan *p)
{
	for (size_t i = 0; i < p->n_actions; i++)
		json_decref(p->actions[i].body);
	free(p->actions);
	json_decref(p->status);
	memset(p, 0, sizeof(*p));
}

static int add_action(struct reconcile_plan *p, enum action_kind kind, size_t target,
		      const char *name, json_t *body)
{
	struct action *a = realloc(p->actions, (p->n_actions + 1) * sizeof(*a));

	if (!a) {
		json_decref(body);
		return -ENOMEM;
	}
	p->actions = a;
	a = &p->actions[p->n_actions++];
	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->target = target;
	snprintf(a->name, sizeof(a->name), "%s", name ? name : "");
	a->body = body;
	return 0;
}

/* Deletes pod (in the plan's input), with its UID as the delete's precondition. */
static int add_delete(struct reconcile_plan *p, size_t target, const struct kpod *pod)
{
	int r = add_action(p, ACT_DELETE_POD, target, kpod__name(pod), NULL);

	if (r == 0)
		snprintf(p->actions[p->n_actions - 1].uid, sizeof(p->actions[0].uid), "%s",
			 kpod__uid(pod));
	return r;
}

__attribute__((format(printf, 4, 5)))
static void add_event(struct reconcile_plan *p, bool warning, const char *reason,
		      const char *fmt, ...)
{
	struct plan_event *e;
	va_list ap;

	if (p->n_events >= RECONCILE_MAX_EVENTS)
		return;
	e = &p->events[p->n_events++];
	e->warning = warning;
	snprintf(e->reason, sizeof(e->reason), "%s", reason);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

static void requeue_at(struct reconcile_plan *p, int64_t t)
{
	if (t > 0 && (p->requeue_at_ns == 0 || t < p->requeue_at_ns))
		p->requeue_at_ns = t;
}

static const json_t *old_target(const struct session *s, const char *pod)
{
	const json_t *ts = json_object_get(s->status, "targets"), *e;
	size_t i;

	json_array_foreach(ts, i, e) {
		const char *p = kj_str(e, "pod");

		if (p && strcmp(p, pod) == 0)
			return e;
	}
	return NULL;
}

const char *reconcile__target_node(const struct session *s, const struct target_obs *o)
{
	const char *n = o->pod ? kpod__node(o->pod) : NULL;

	if (!n || !n[0])
		n = kj_str(old_target(s, o->name), "node");
	return n ? n : "";
}

static enum session_phase old_target_state(const struct session *s, const char *pod)
{
	return session_phase_parse(kj_str(old_target(s, pod), "state"));
}

/* ---- one target ---------------------------------------------------------------------- */

struct tres {
	enum session_phase state;
	char reason[48];
	char message[600];
	const char *container;
	const char *mode;          /* "NodeAgent" / "EphemeralContainer" */
	const char *runtime;
	const char *node;
	char injector[64];
	int64_t started_at, finished_at;
	struct termination *term;  /* a parsed termination message, or NULL */
	bool carried;              /* terminal before this pass: copied from the old status */
	bool created;              /* this plan creates its injector */
	bool delete_injector;      /* this plan deletes its injector pod */
};

/* reason[48] and message[600] of a target's or the merge's result */
__attribute__((format(printf, 4, 0)))
static void set_why(char reason_out[48], char message_out[600], const char *reason,
		    const char *fmt, va_list ap)
{
	snprintf(reason_out, 48, "%s", reason);
	vsnprintf(message_out, 600, fmt, ap);
	utf8_fix(message_out, 600);     /* it quotes the injector: whole characters only */
}

__attribute__((format(printf, 4, 5)))
static void tset(struct tres *t, enum session_phase st, const char *reason, const char *fmt, ...)
{
	va_list ap;

	t->state = st;
	va_start(ap, fmt);
	set_why(t->reason, t->message, reason, fmt, ap);
	va_end(ap);
}

/* A pod (what: "injector pod", "merge pod") the API server refused for good, or that went
 * away while it was running: the result says so (reasons <Reason>CreateFailed and
 * <Reason>Deleted). False when neither. */
static bool refused_or_gone(struct tres *t, const char *what, const char *reason, int create_err,
			    const char *create_msg, bool was_running)
{
	char r[48];

	if (create_err) {
		snprintf(r, sizeof(r), "%sCreateFailed", reason);
		tset(t, PHASE_FAILED, r, "cannot create %s %s: %s", what, t->injector, create_msg);
		return true;
	}
	if (was_running) {
		snprintf(r, sizeof(r), "%sDeleted", reason);
		tset(t, PHASE_FAILED, r, "%s %s was deleted before it reported a result", what,
		     t->injector);
		return true;
	}
	return false;
}

/* The injector container's state -> the target's. */
static int from_container(const struct reconcile_input *in, struct tres *t,
			  const struct kcontainer *c, const char *pod_phase)
{
	const struct session *s = in->s;
	char why[200];
	int r;

	if (!c || c->state == KC_UNKNOWN || c->state == KC_WAITING) {
		if (pod_phase && strcmp(pod_phase, "Failed") == 0) {
			tset(t, PHASE_FAILED, "InjectorFailed", "injector %s failed before it ran%s%s",
			     t->injector, c && c->reason[0] ? ": " : "", c ? c->reason : "");
			return 0;
		}
		tset(t, PHASE_INJECTING, "Injecting", "injector %s is starting%s%s", t->injector,
		     c && c->reason[0] ? ": " : "", c ? c->reason : "");
		return 0;
	}
	t->started_at = c->started_at;
	if (c->state == KC_RUNNING) {
		int64_t end = c->started_at + (int64_t)s->spec.duration_ns;

		if (c->started_at && in->now_ns >= end) {
			tset(t, PHASE_UPLOADING, "Uploading", "the window is over: injector %s is "
			     "building and uploading the artifacts", t->injector);
		} else {
			tset(t, PHASE_PROFILING, "Profiling", "injector %s is recording for %s",
			     t->injector, s->spec.duration);
		}
		return 0;
	}
	/* terminated */
	t->finished_at = c->finished_at;
	t->term = malloc(sizeof(*t->term));
	if (!t->term)
		return -ENOMEM;
	r = c->message[0] ? termination__parse(c->message, strlen(c->message), t->term, why,
					       sizeof(why)) : -ENODATA;
	if (r < 0) {
		free(t->term);
		t->term = NULL;
	}
	if (c->exit_code == 0 && r == 0 && !t->term->error[0]) {
		tset(t, PHASE_SUCCEEDED, "Succeeded", "%zu artifact%s", t->term->n_artifacts,
		     t->term->n_artifacts == 1 ? "" : "s");
	} else if (r == 0 && t->term->error[0]) {
		tset(t, PHASE_FAILED, "InjectorFailed", "injector exited with code %d: %s",
		     c->exit_code, t->term->error);
	} else if (r == -ENODATA) {
		tset(t, PHASE_FAILED, "InjectorFailed", "injector exited with code %d%s%s and left "
		     "no termination message", c->exit_code, c->reason[0] ? ", " : "", c->reason);
	} else {
		tset(t, PHASE_FAILED, "InjectorFailed", "injector exited with code %d; its termination "
		     "message is unusable: %s", c->exit_code, why);
	}
	return 0;
}

/* A count from the injector's termination message, or 0. */
static uint64_t term_count(const struct termination *t, const char *key)
{
	for (size_t i = 0; t && i < t->n_summary; i++)
		if (strcmp(t->summary[i].key, key) == 0)
			return t->summary[i].value;
	return 0;
}

/*
 * The target pod was deleted (or is being deleted) while its injector ran. A node-agent
 * injector (a pod of its own) outlives it: it notices its processes are gone, ends the window
 * there, uploads what it recorded and exits; until then the target stays in flight, then it
 * is Failed/TargetDeleted with the injector's artifacts kept. An ephemeral container dies
 * with its pod: unless its result was seen before the pod went, what it recorded is lost.
 */
static int target_gone(const struct reconcile_input *in, struct tres *t, const char *pod_name,
		       const struct kcontainer *c, const char *pod_phase, bool ephemeral,
		       bool pod_left)
{
	const struct session *s = in->s;
	char inner[600], when[KTIME_LEN], d[32];
	int64_t cut;
	size_t n;
	int r;

	if (!c && (ephemeral ? pod_left : !pod_phase)) {
		if (ephemeral)
			tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
			     "profiled; ephemeral container %s died with it and what it recorded was "
			     "lost with the pod", pod_name, t->injector);
		else
			tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
			     "profiled, and its injector pod %s is gone too: nothing was kept",
			     pod_name, t->injector);
		return 0;
	}
	r = from_container(in, t, c, pod_phase);
	if (r < 0)
		return r;
	if (!session_phase_terminal(t->state)) {
		if (ephemeral)
			tset(t, t->state, "TargetDeleted", "pod %s is being deleted while it is "
			     "profiled; ephemeral container %s has the pod's grace period to end the "
			     "window and upload", pod_name, t->injector);
		else
			tset(t, t->state, "TargetDeleted", "pod %s was deleted while it was being "
			     "profiled; injector %s is ending the window and uploading what it "
			     "recorded", pod_name, t->injector);
		return 0;
	}
	snprintf(inner, sizeof(inner), "%s", t->message);
	n = t->term ? t->term->n_artifacts : 0;
	cut = term_count(t->term, "window_end_unix_ms") ?
	      (int64_t)term_count(t->term, "window_end_unix_ms") * 1000000 : t->finished_at;
	format_duration(d, sizeof(d), term_count(t->term, "window_ms") * 1000000);
	if (t->state == PHASE_SUCCEEDED && cut)
		tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
		     "profiled: the window was cut at %s after %s of %s; kept the %zu artifact%s "
		     "recorded until then", pod_name, ktime_format(cut, when), d, s->spec.duration,
		     n, n == 1 ? "" : "s");
	else if (t->state == PHASE_SUCCEEDED)
		tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
		     "profiled; kept the %zu artifact%s its injector uploaded", pod_name, n,
		     n == 1 ? "" : "s");
	else
		tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
		     "profiled; %zu artifact%s kept; %s", pod_name, n, n == 1 ? "" : "s", inner);
	return 0;
}

/* What the target's entry says whatever its injector does: runtime, node, container, mode
 * and the injector's name (what the status recorded, once the pod is gone). Returns whether
 * the injector is an ephemeral container. */
static bool describe_target(const struct reconcile_input *in, const struct target_obs *o,
			    struct tres *t)
{
	const struct session *s = in->s;
	const struct kpod *pod = o->pod;
	const json_t *old = old_target(s, o->name);
	struct kcontainer first;
	bool ephemeral;

	t->runtime = o->runtime_handler && o->runtime_handler[0] ? o->runtime_handler : "runc";
	ephemeral = s->spec.mode == INJ_EPHEMERAL ||
		    (s->spec.mode == INJ_AUTO && runtime_is_kata(o->runtime_handler));
	t->node = pod ? kpod__node(pod) : "";
	t->container = s->spec.container ? s->spec.container :
		       pod && kpod__container_at(pod, 0, &first) ? first.name : "";
	if (old && (!pod || old_target_state(s, o->name) != PHASE_PENDING)) {
		/* the pod is gone, or its injector chosen: what the status recorded holds (a
		 * failed RuntimeClass lookup must not turn a Kata target in flight to NodeAgent) */
		const char *m = kj_str(old, "mode");

		ephemeral = m ? strcmp(m, "EphemeralContainer") == 0 : ephemeral;
		t->runtime = kj_str(old, "runtime") ?: t->runtime;
		t->node = kj_str(old, "node") ?: t->node;
		if (!t->container[0])
			t->container = kj_str(old, "container") ?: "";
	}
	t->mode = ephemeral ? "EphemeralContainer" : "NodeAgent";
	if (ephemeral)
		injspec__ephemeral_name(s, t->injector);
	else
		injspec__pod_name(s, o->name, t->injector);
	return ephemeral;
}

/* The target pod does not exist, or is being deleted: a target in flight follows its
 * injector (target_gone()), one not started yet waits for the pod until target_wait. */
static int eval_pod_gone(const struct reconcile_input *in, const struct target_obs *o,
			 struct tres *t, bool ephemeral, bool inflight, bool started,
			 struct reconcile_plan *p)
{
	const struct session *s = in->s;
	const struct kpod *pod = o->pod, *inj = o->injector;
	int64_t wait_end = s->created_ns + (int64_t)in->cfg->target_wait_ns;
	struct kcontainer ics, ecs;
	bool has_c;

	if (inflight && ephemeral) {
		bool seen = pod && kpod__ephemeral(pod, t->injector, &ecs);

		return target_gone(in, t, o->name, seen ? &ecs : NULL, NULL, true, !pod);
	}
	if (inflight) {
		has_c = inj && kpod__container(inj, INJECTOR_CONTAINER, &ics);
		if (inj && inj->deleting && !(has_c && ics.state == KC_TERMINATED)) {
			tset(t, PHASE_FAILED, "TargetDeleted", "pod %s was deleted while it was being "
			     "profiled, and its injector pod %s is being deleted too: nothing was "
			     "kept", o->name, t->injector);
			return 0;
		}
		return target_gone(in, t, o->name, has_c ? &ics : NULL,
				   inj ? kpod__phase(inj) : NULL, false, !pod);
	}
	if (started || in->now_ns >= wait_end) {
		tset(t, PHASE_FAILED, "TargetNotFound", "pod %s/%s does not exist", s->ns, o->name);
	} else {
		tset(t, PHASE_PENDING, "TargetNotFound", "waiting for pod %s/%s to exist", s->ns,
		     o->name);
		requeue_at(p, wait_end);
	}
	return 0;
}

/* The target's injector, if there is one (or was: refused, gone, added but not yet seen).
 * Returns 1 when it decided the target's state, 0 when there is no injector yet, -ENOMEM. */
static int eval_injector(const struct reconcile_input *in, const struct target_obs *o,
			 struct tres *t, bool ephemeral, bool inflight)
{
	struct kcontainer ics, ecs;
	int r;

	if (!ephemeral && o->injector) {
		r = from_container(in, t, kpod__container(o->injector, INJECTOR_CONTAINER, &ics) ?
				   &ics : NULL, kpod__phase(o->injector));
		return r < 0 ? r : 1;
	}
	if (!ephemeral)
		return refused_or_gone(t, "injector pod", "Injector", o->create_err, o->create_msg,
				       inflight);
	if (kpod__ephemeral(o->pod, t->injector, &ecs)) {
		r = from_container(in, t, &ecs, NULL);
		return r < 0 ? r : 1;
	}
	if (o->create_err) {
		tset(t, PHASE_FAILED, "InjectorCreateFailed", "cannot add ephemeral container %s to "
		     "pod %s: %s", t->injector, o->name, o->create_msg);
		return 1;
	}
	if (inflight) {        /* added, not yet seen: ephemeral containers stay */
		tset(t, PHASE_INJECTING, "Injecting", "injector %s is starting", t->injector);
		return 1;
	}
	return 0;
}

/* The plan creates the target's injector (container tc is running). */
static int create_injector(const struct reconcile_input *in, size_t idx, struct tres *t,
			   const struct kcontainer *tc, bool ephemeral, struct reconcile_plan *p)
{
	const struct target_obs *o = &in->targets[idx];
	struct injector_target it = {
		.s = in->s, .pod = o->pod, .container = t->container,
		.container_id = tc->container_id,
	};
	json_t *body;
	int r;

	if (ephemeral && in->s->spec.in_cluster) {
		/* an ephemeral container cannot mount the token the store checks */
		tset(t, PHASE_FAILED, "OutputNotSupported", "pod %s runs in a sandbox (%s) that "
		     "needs an ephemeral-container injector, which cannot send artifacts to the "
		     "in-cluster store: give the session spec.output (S3)", o->name, t->runtime);
		return 0;
	}
	body = ephemeral ? injspec__ephemeral_container(&in->cfg->inj, &it) :
			   injspec__node_agent_pod(&in->cfg->inj, &it);
	if (!body)
		return -ENOMEM;
	r = add_action(p, ephemeral ? ACT_ADD_EPHEMERAL : ACT_CREATE_POD, idx,
		       ephemeral ? o->name : t->injector, body);
	if (r < 0)
		return r;
	t->created = true;
	/* what the next pass says of an injector that has not started: no second status write */
	tset(t, PHASE_INJECTING, "Injecting", "injector %s is starting", t->injector);
	return 0;
}

bool reconcile__target_inflight(const struct session *s, const char *pod)
{
	enum session_phase prev = old_target_state(s, pod);

	return prev == PHASE_INJECTING || prev == PHASE_PROFILING || prev == PHASE_UPLOADING;
}

static int eval_target(const struct reconcile_input *in, size_t idx, bool started,
		       int64_t deadline, struct tres *t, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	const struct target_obs *o = &in->targets[idx];
	bool inflight = reconcile__target_inflight(s, o->name);
	int64_t wait_end = s->created_ns + (int64_t)in->cfg->target_wait_ns;
	bool ephemeral = describe_target(in, o, t);
	const struct kcontainer *tc;
	struct kcontainer tcs;
	int r;

	if (o->foreign_injector) {
		tset(t, PHASE_FAILED, "InjectorNameTaken", "pod %s exists but is not this session's "
		     "injector (made by someone else, or replaced since): aiprof leaves it alone; "
		     "delete it and make the session again", t->injector);
		return 0;
	}
	/* the node was removed from the cluster: the injector went with it (one that finished
	 * first is still read, below, while its pod lasts). A node-agent injector must have
	 * been seen (its UID recorded): one just created may not be in the cache yet */
	if (o->node_gone && inflight &&
	    (ephemeral ? !o->pod :
	     !o->injector && kj_str(old_target(s, o->name), "injectorUID"))) {
		tset(t, PHASE_FAILED, "NodeGone", "node %s is gone (no longer in the cluster) while "
		     "pod %s was being profiled: its injector %s went with it; what it had uploaded "
		     "stays (listed here), the rest is lost", reconcile__target_node(s, o), o->name,
		     t->injector);
		return 0;
	}
	if (!o->pod || o->pod->deleting)
		return eval_pod_gone(in, o, t, ephemeral, inflight, started, p);
	tc = t->container[0] && kpod__container(o->pod, t->container, &tcs) ? &tcs : NULL;
	if (!tc) {
		tset(t, PHASE_FAILED, "ContainerNotFound", "pod %s has no container '%s'", o->name,
		     t->container);
		return 0;
	}
	r = eval_injector(in, o, t, ephemeral, inflight);
	if (r != 0)
		return r < 0 ? r : 0;
	/* no injector yet: is the target ready for one? */
	if (!kpod__node(o->pod)[0] || tc->state != KC_RUNNING || !tc->container_id[0]) {
		if (in->now_ns >= wait_end) {
			tset(t, PHASE_FAILED, "TargetNotRunning", "container %s of pod %s is not running",
			     t->container, o->name);
		} else {
			tset(t, PHASE_PENDING, "TargetNotRunning", "waiting for container %s of pod %s "
			     "to run", t->container, o->name);
			requeue_at(p, wait_end);
		}
		return 0;
	}
	if (started && in->now_ns >= deadline)
		return 0;              /* too late to start: the deadline fails it */
	return create_injector(in, idx, t, tc, ephemeral, p);
}

/* ---- status ---------------------------------------------------------------------------- */

static const json_t *old_condition(const struct session *s, const char *type)
{
	const json_t *cs = json_object_get(s->status, "conditions"), *c;
	size_t i;

	json_array_foreach(cs, i, c) {
		const char *ty = kj_str(c, "type");

		if (ty && strcmp(ty, type) == 0)
			return c;
	}
	return NULL;
}

/* A condition whose status is "True", "False" or "Unknown"; lastTransitionTime kept while
 * the status stays. */
static int add_condition_s(json_t *conds, const struct session *s, const char *type,
			   const char *st, const char *reason, const char *message, int64_t now)
{
	const json_t *old = old_condition(s, type);
	const char *ltt = kj_str(old, "lastTransitionTime");
	char buf[KTIME_LEN];
	json_t *c;

	if (!old || !ltt || !kj_str(old, "status") || strcmp(kj_str(old, "status"), st) != 0)
		ltt = ktime_format(now, buf);
	c = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "type", type, "status", st, "reason", reason,
		      "message", message, "lastTransitionTime", ltt, "observedGeneration",
		      (json_int_t)s->generation);
	return c && json_array_append_new(conds, c) == 0 ? 0 : -ENOMEM;
}

static int add_condition(json_t *conds, const struct session *s, const char *type, bool status,
			 const char *reason, const char *message, int64_t now)
{
	return add_condition_s(conds, s, type, status ? "True" : "False", reason, message, now);
}

static json_t *target_entry(const struct session *s, const struct target_obs *o,
			    const struct tres *t)
{
	json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "pod", o->name,
			      "container", t->container, "node", t->node, "runtime", t->runtime,
			      "mode", t->mode, "injector", t->injector,
			      "state", session_phase_name(t->state), "reason", t->reason,
			      "message", t->message);
	const char *uid = o->injector && kpod__uid(o->injector)[0] ? kpod__uid(o->injector) :
			  kj_str(old_target(s, o->name), "injectorUID");
	char buf[KTIME_LEN];

	if (!e)
		return NULL;
	/* the injector pod seen first is the one accepted after (reconcile__injector_ours()) */
	if (uid && json_object_set_new(e, "injectorUID", json_string(uid)))
		goto fail;
	if (t->started_at && json_object_set_new(e, "startedAt",
						 json_string(ktime_format(t->started_at, buf))))
		goto fail;
	if (t->finished_at && json_object_set_new(e, "finishedAt",
						  json_string(ktime_format(t->finished_at, buf))))
		goto fail;
	if (t->term && t->term->n_summary) {
		json_t *sum = json_object();

		if (!sum || json_object_set_new(e, "summary", sum))
			goto fail;
		for (size_t i = 0; i < t->term->n_summary; i++)
			if (json_object_set_new(sum, t->term->summary[i].key,
						json_integer((json_int_t)t->term->summary[i].value)))
				goto fail;
	}
	return e;
fail:
	json_decref(e);
	return NULL;
}

static int add_results(json_t *arts, json_t *finds, const char *pod, const struct termination *t)
{
	for (size_t i = 0; t && i < t->n_artifacts; i++) {
		const struct term_artifact *a = &t->artifacts[i];
		json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "target", pod, "name", a->name, "url", a->url,
				      "size", (json_int_t)a->size);

		if (!o || (a->sha256[0] && json_object_set_new(o, "sha256", json_string(a->sha256))) ||
		    json_array_append_new(arts, o))
			return -ENOMEM;
	}
	for (size_t i = 0; t && i < t->n_findings; i++) {
		json_t *o = json_pack("{s:s,s:s,s:s}", "target", pod, "category", t->findings[i].category,
				      "severity", t->findings[i].severity);

		if (!o || json_array_append_new(finds, o))
			return -ENOMEM;
	}
	return 0;
}

/* Copies the old status's artifacts and findings of pod into arts / finds. */
static int carry_results(const struct session *s, json_t *arts, json_t *finds, const char *pod)
{
	static const char *const keys[] = { "artifacts", "findings" };
	json_t *dst[] = { arts, finds };

	for (size_t k = 0; k < 2; k++) {
		const json_t *a = json_object_get(s->status, keys[k]), *e;
		size_t i;

		json_array_foreach(a, i, e) {
			const char *p = kj_str(e, "target");

			if (p && strcmp(p, pod) == 0 && json_array_append_new(dst[k], json_deep_copy(e)))
				return -ENOMEM;
		}
	}
	return 0;
}

/* A session without spec.output.s3 took the controller's defaults: condition
 * OutputDefaulted says which, and an Event the first time. */
static int add_defaults_condition(json_t *conds, struct reconcile_plan *p,
				  const struct session *s, int64_t now)
{
	const struct session_s3 *o = &s->spec.s3;
	char msg[600];

	if (!s->spec.s3_defaulted)
		return 0;
	snprintf(msg, sizeof(msg), "spec.output.s3 is not given: the controller's defaults are "
		 "used: bucket %.100s, prefix '%.200s', endpoint %.150s, region %.64s, secretRef %.100s",
		 o->bucket, o->prefix ? o->prefix : "", o->endpoint ? o->endpoint : "(AWS)",
		 o->region ? o->region : "(none)", o->secret_name ? o->secret_name :
		 "(none: no credentials)");
	if (!old_condition(s, "OutputDefaulted"))
		add_event(p, false, "DefaultsApplied", "%s", msg);
	return add_condition(conds, s, "OutputDefaulted", true, "ControllerDefaults", msg, now);
}

/* A status for a session that fails as a whole before any target ran. */
static int fail_session(const struct reconcile_input *in, struct reconcile_plan *p,
			const char *reason, const char *message, const char *resolved_reason)
{
	const struct session *s = in->s;
	json_t *st = json_object(), *conds = json_array();
	char buf[KTIME_LEN];
	int r = -ENOMEM;

	if (!st || !conds)
		goto out;
	if (add_condition(conds, s, "TargetsResolved", false, resolved_reason, message, in->now_ns) ||
	    add_condition(conds, s, "Failed", true, reason, message, in->now_ns))
		goto out;
	if (json_object_set_new(st, "phase", json_string("Failed")) ||
	    json_object_set_new(st, "observedGeneration", json_integer(s->generation)) ||
	    json_object_set_new(st, "message", json_string(message)) ||
	    json_object_set_new(st, "targetCount", json_integer(0)) ||
	    json_object_set_new(st, "findingCount", json_integer(0)) ||
	    json_object_set_new(st, "completionTime", json_string(ktime_format(in->now_ns, buf))) ||
	    json_object_set_new(st, "targets", json_array()) ||
	    json_object_set_new(st, "artifacts", json_array()) ||
	    json_object_set_new(st, "findings", json_array()) ||
	    json_object_set(st, "conditions", conds))
		goto out;
	add_event(p, true, reason, "%s", message);
	p->status = st;
	st = NULL;
	r = 0;
out:
	json_decref(st);
	json_decref(conds);
	return r;
}

/* An injector pod that is being deleted, or whose injector has exited. */
static bool injector_done(const struct kpod *inj)
{
	struct kcontainer c;

	return inj->deleting || (kpod__container(inj, INJECTOR_CONTAINER, &c) &&
				 c.state == KC_TERMINATED) ||
	       strcmp(kpod__phase(inj), "Succeeded") == 0 || strcmp(kpod__phase(inj), "Failed") == 0;
}

/* How long after it finished the session is deleted: its ttlSecondsAfterFinished, else for one
 * whose artifacts are in the in-cluster store the controller's --store-max-age (they go with
 * it); -1: kept. */
static int64_t ttl_ns(const struct reconcile_input *in)
{
	const struct session *s = in->s;

	if (s->spec.ttl_s >= 0)
		return s->spec.ttl_s * (int64_t)NSEC_PER_SEC;
	if (s->spec.in_cluster && in->cfg->store_max_age_ns)
		return (int64_t)in->cfg->store_max_age_ns;
	return -1;
}

/* Deletes the session's pods still running (but except, and those already planned). */
static int stop_running(const struct reconcile_input *in, struct reconcile_plan *p,
			const char *except)
{
	for (size_t i = 0; i < in->n_injectors; i++) {
		const struct kpod *inj = in->injectors[i];
		bool planned = false;

		for (size_t a = 0; a < p->n_actions; a++)
			planned |= p->actions[a].kind == ACT_DELETE_POD &&
				   strcmp(p->actions[a].name, kpod__name(inj)) == 0;
		if (planned || injector_done(inj) || (except && !strcmp(kpod__name(inj), except)))
			continue;
		if (add_delete(p, 0, inj))
			return -ENOMEM;
	}
	return 0;
}

static int plan_terminal(const struct reconcile_input *in, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	int64_t done = 0;
	int r;

	/* injectors still running after the end (deadline, a failed sibling): stop them */
	for (size_t i = 0; i < in->n_injectors; i++) {
		const struct kpod *inj = in->injectors[i];

		if (injector_done(inj))
			continue;
		r = add_delete(p, 0, inj);
		if (r < 0)
			return r;
	}
	if (ttl_ns(in) >= 0) {
		const char *ct = kj_str(s->status, "completionTime");

		if (!ct || ktime_parse(ct, &done) < 0)
			done = in->now_ns;
		done += ttl_ns(in);
		if (in->now_ns >= done)
			return add_action(p, ACT_DELETE_SESSION, 0, s->name, NULL);
		requeue_at(p, done);
	}
	return 0;
}

/* ---- the merge of a multi-rank session ------------------------------------------------- */

/* The merge's state is a tres too: Uploading while it runs, Succeeded or Failed after;
 * .injector is the merge pod's name, .term its parsed termination message. */

/* The merge pod's container (terminated) -> the merge's result. */
static int merge_result(struct tres *m, const struct kcontainer *c)
{
	char why[200];
	int r;

	m->term = malloc(sizeof(*m->term));
	if (!m->term)
		return -ENOMEM;
	r = c->message[0] ? termination__parse(c->message, strlen(c->message), m->term, why,
					       sizeof(why)) : -ENODATA;
	if (r == 0 && c->exit_code == 0 && !m->term->error[0]) {
		tset(m, PHASE_SUCCEEDED, "Merged", "merged timeline in %zu artifact%s",
		     m->term->n_artifacts, m->term->n_artifacts == 1 ? "" : "s");
		return 0;
	}
	if (r == 0)
		tset(m, PHASE_FAILED, "MergeFailed", "merge exited with code %d: %s", c->exit_code,
		     m->term->error[0] ? m->term->error : "no error given");
	else if (r == -ENODATA)
		tset(m, PHASE_FAILED, "MergeFailed", "merge exited with code %d%s%s and left no "
		     "termination message", c->exit_code, c->reason[0] ? ", " : "", c->reason);
	else
		tset(m, PHASE_FAILED, "MergeFailed", "merge exited with code %d; its termination "
		     "message is unusable: %s", c->exit_code, why);
	free(m->term);
	m->term = NULL;
	return 0;
}

/* Every target is done and n_ok >= 2 succeeded: where is their merge? */
static int eval_merge(const struct reconcile_input *in, const struct tres *res, size_t n_ok,
		      int64_t deadline, struct tres *m, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	const json_t *old = old_condition(s, "Merged");
	bool was_running = old && !strcmp(kj_str(old, "status") ?: "", "Unknown");
	const struct kpod *mp = in->merge_pod;
	int64_t limit = deadline + (int64_t)MERGE_DEADLINE_S * NSEC_PER_SEC;
	struct kcontainer c;
	bool has_c;

	injspec__merge_pod_name(s, m->injector);
	if (in->merge_foreign) {
		tset(m, PHASE_FAILED, "MergeNameTaken", "pod %s exists but is not this session's "
		     "merge pod (made by someone else): aiprof leaves it alone; each rank's own "
		     "artifacts stand", m->injector);
		return 0;
	}
	if (!mp) {
		const char **src;
		size_t n = 0;
		json_t *body;
		int r = 0;

		if (refused_or_gone(m, "merge pod", "Merge", in->merge_create_err,
				    in->merge_create_msg, was_running))
			return 0;
		if (in->now_ns >= limit) {
			tset(m, PHASE_FAILED, "MergeDeadlineExceeded", "too late to merge: the "
			     "deadline passed %ds ago", MERGE_DEADLINE_S);
			return 0;
		}
		src = calloc(n_ok, sizeof(*src));
		if (!src)
			return -ENOMEM;
		for (size_t i = 0; i < in->n_targets && r == 0; i++) {
			char *u = NULL;

			if (res[i].state != PHASE_SUCCEEDED || n == n_ok)
				continue;
			r = injspec__output_url(&in->cfg->inj, s, in->targets[i].name, &u);
			src[n++] = u;
		}
		body = r == 0 ? injspec__merge_pod(&in->cfg->inj, s, src, n) : NULL;
		for (size_t i = 0; i < n; i++)
			free((char *)src[i]);
		free(src);
		if (!body || add_action(p, ACT_CREATE_MERGE_POD, 0, m->injector, body) < 0)
			return -ENOMEM;
		tset(m, PHASE_UPLOADING, "Merging", "merging %zu ranks in pod %s", n_ok, m->injector);
		requeue_at(p, limit);
		return 0;
	}
	has_c = kpod__container(mp, MERGE_CONTAINER, &c);
	if (has_c && c.state == KC_TERMINATED)
		return merge_result(m, &c);
	if (strcmp(kpod__phase(mp), "Failed") == 0) {
		tset(m, PHASE_FAILED, "MergeFailed", "merge pod %s failed before it ran%s%s", m->injector,
		     has_c && c.reason[0] ? ": " : "", has_c ? c.reason : "");
		return 0;
	}
	if (refused_or_gone(m, "merge pod", "Merge", 0, NULL, mp->deleting))
		return 0;
	if (in->now_ns >= limit) {
		tset(m, PHASE_FAILED, "MergeDeadlineExceeded", "no merge result within %ds of the "
		     "deadline", MERGE_DEADLINE_S);
		return add_delete(p, 0, mp);
	}
	tset(m, PHASE_UPLOADING, "Merging", "merging %zu ranks in pod %s", n_ok, m->injector);
	requeue_at(p, limit);
	return 0;
}

/* ---- the plan -------------------------------------------------------------------------- */

/* Deletion: the injector pods first, then the finalizer. */
static int plan_deletion(const struct reconcile_input *in, struct reconcile_plan *p)
{
	for (size_t i = 0; i < in->n_injectors; i++) {
		if (in->injectors[i]->deleting)
			continue;
		if (add_delete(p, 0, in->injectors[i]) < 0)
			return -ENOMEM;
	}
	if (in->s->has_finalizer)
		return add_action(p, ACT_REMOVE_FINALIZER, 0, NULL, NULL);
	return 0;
}

/* A session may only profile pods in its own namespace. */
static int fail_foreign_namespace(const struct reconcile_input *in, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	char msg[600];

	snprintf(msg, sizeof(msg), "spec.targets.namespace '%.100s' is not the session's own "
		 "namespace '%.100s': a session may only profile pods in its own namespace",
		 s->spec.target_namespace, s->ns);
	return fail_session(in, p, "TargetOutsideNamespace", msg, "TargetOutsideNamespace");
}

/* p carries s's label and controlling owner, and is the pod whose UID was recorded (seen),
 * if one was. */
bool reconcile__pod_of(const struct injector_config *cfg, const struct session *s,
		       const struct kpod *p)
{
	const char *ns = kpod__ns(p);

	if (strcmp(kpod__session_uid(p), s->uid) != 0)
		return false;
	if (strcmp(ns, s->ns) == 0)
		return strcmp(kpod__owner_uid(p), s->uid) == 0;
	/* no ownerReference crosses namespaces: there, only the controller (and the cluster's
	 * admin) makes pods, and the label names the session's namespace */
	return cfg->ns && strcmp(ns, cfg->ns) == 0 && strcmp(kpod__session_ns(p), s->ns) == 0;
}

bool reconcile__pod_replaced(const struct session *s, const struct kpod *p)
{
	const json_t *ts = json_object_get(s->status, "targets"), *e;
	char merge[INJECTOR_POD_NAME_MAX + 1];
	const char *uid = kpod__uid(p), *seen;
	size_t i;

	json_array_foreach(ts, i, e) {
		seen = kj_str(e, "injectorUID");
		if (seen && kj_str(e, "injector") && strcmp(kj_str(e, "injector"), kpod__name(p)) == 0 &&
		    strcmp(seen, uid) != 0)
			return true;
	}
	injspec__merge_pod_name(s, merge);
	seen = kj_str(s->status, "mergeUID");
	return seen && strcmp(merge, kpod__name(p)) == 0 && strcmp(seen, uid) != 0;
}

static bool pod_ours(const struct injector_config *cfg, const struct session *s,
		     const struct kpod *p, const char *seen)
{
	return reconcile__pod_of(cfg, s, p) && (!seen || strcmp(seen, kpod__uid(p)) == 0);
}

bool reconcile__injector_ours(const struct injector_config *cfg, const struct session *s,
			      const char *target, const struct kpod *inj)
{
	return pod_ours(cfg, s, inj, kj_str(old_target(s, target), "injectorUID"));
}

bool reconcile__merge_ours(const struct injector_config *cfg, const struct session *s,
			   const struct kpod *p)
{
	return pod_ours(cfg, s, p, kj_str(s->status, "mergeUID"));
}

bool reconcile__namespace_denied(const char *list, const char *ns)
{
	size_t n = strlen(ns);

	while (list && *list) {
		size_t len = strcspn(list, ",");

		if (len == n && strncmp(list, ns, n) == 0)
			return true;
		list += len + (list[len] == ',');
	}
	return false;
}

/* The ClusterProfilingStorage a session names is not usable: one that is not there (yet)
 * is waited for as long as targets are, one that refuses the session fails it. */
static int plan_storage_error(const struct reconcile_input *in, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	int64_t end = s->created_ns + (int64_t)in->cfg->target_wait_ns;

	if (in->storage_err == -EPERM)
		return fail_session(in, p, "StorageDenied", in->storage_msg, "StorageDenied");
	if (in->storage_err != -ENOENT && in->storage_err != -EAGAIN)
		return fail_session(in, p, "StorageInvalid", in->storage_msg, "StorageInvalid");
	if (in->now_ns >= end)
		return fail_session(in, p, "StorageNotFound", in->storage_msg, "StorageNotFound");
	p->status = json_pack("{s:s,s:I,s:s}", "phase", "Pending", "observedGeneration",
			      (json_int_t)s->generation, "message", in->storage_msg);
	if (!p->status)
		return -ENOMEM;
	requeue_at(p, in->now_ns + 2 * (int64_t)NSEC_PER_SEC < end ?
		   in->now_ns + 2 * (int64_t)NSEC_PER_SEC : end);
	return 0;
}

bool reconcile__session_running(const struct session *s)
{
	return kj_str(s->status, "startTime") && !session_phase_terminal(s->phase) && !s->deleting;
}

/* A session not started yet while its namespace has max_running_per_ns running waits its
 * turn (Pending, looked at again every 5 s), so that one tenant cannot fill the cluster. */
static bool over_namespace_limit(const struct reconcile_input *in)
{
	unsigned max = in->cfg->max_running_per_ns;

	return max && !reconcile__session_running(in->s) && in->ns_running >= max;
}

static int wait_for_turn(const struct reconcile_input *in, struct reconcile_plan *p)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "waiting: %zu sessions of namespace %.100s are running, the "
		 "most the cluster's admin allows at once (--max-sessions-per-namespace)",
		 in->ns_running, in->s->ns);
	p->status = json_pack("{s:s,s:I,s:s}", "phase", "Pending", "observedGeneration",
			      (json_int_t)in->s->generation, "message", msg);
	if (!p->status)
		return -ENOMEM;
	requeue_at(p, in->now_ns + 5 * (int64_t)NSEC_PER_SEC);
	return 0;
}

/* The cluster's admin keeps some namespaces out of reach (system pods, the operator). */
static int fail_denied_namespace(const struct reconcile_input *in, struct reconcile_plan *p)
{
	char msg[600];

	snprintf(msg, sizeof(msg), "namespace '%.100s' may not be profiled: the cluster's admin "
		 "denies it (the controller's --denied-namespaces, the chart's "
		 "controller.deniedNamespaces)", in->s->ns);
	return fail_session(in, p, "TargetDenied", msg, "TargetDenied");
}

/* What one plan of a running session builds: the new status's parts, each target's result
 * and the merge's, and the tallies that decide the session's phase. */
struct build {
	json_t *st, *targets, *arts, *finds, *conds;
	struct tres *res;               /* one per target */
	struct tres merge;              /* PHASE_NONE: no merge */
	bool started;                   /* an injector exists (startTime), or is created now */
	int64_t start_ns, deadline;
	enum session_phase phase;       /* the least advanced target's; PHASE__MAX: none */
	size_t n_done;
	bool all_done, all_ok;
	const struct tres *first_fail;
};

static int64_t deadline_after(const struct reconcile_input *in, int64_t start_ns)
{
	return start_ns + (int64_t)(in->s->spec.duration_ns + in->cfg->inj.grace_ns);
}

static int build_start(const struct reconcile_input *in, struct build *b)
{
	const char *start_s = kj_str(in->s->status, "startTime");

	*b = (struct build){
		.merge = { .state = PHASE_NONE }, .started = start_s != NULL,
		.phase = PHASE__MAX, .all_done = true, .all_ok = true,
	};
	if (b->started && ktime_parse(start_s, &b->start_ns) < 0)
		b->start_ns = in->now_ns;
	b->deadline = deadline_after(in, b->start_ns);
	b->st = json_object();
	b->targets = json_array();
	b->arts = json_array();
	b->finds = json_array();
	b->conds = json_array();
	b->res = calloc(in->n_targets ? in->n_targets : 1, sizeof(*b->res));
	return b->st && b->targets && b->arts && b->finds && b->conds && b->res ? 0 : -ENOMEM;
}

static void build_release(const struct reconcile_input *in, struct build *b)
{
	for (size_t i = 0; b->res && i < in->n_targets; i++)
		free(b->res[i].term);
	free(b->res);
	free(b->merge.term);
	json_decref(b->st);
	json_decref(b->targets);
	json_decref(b->arts);
	json_decref(b->finds);
	json_decref(b->conds);
}

/* The members every status has, from b; the plan's status unless it equals the session's. */
static int set_status(const struct reconcile_input *in, struct reconcile_plan *p,
		      struct build *b)
{
	const struct session *s = in->s;
	json_t *st = b->st;
	char buf[KTIME_LEN];
	/* the merge pod seen first is the one accepted after (reconcile__merge_ours()) */
	const char *merge_uid = in->merge_pod && kpod__uid(in->merge_pod)[0] ?
				kpod__uid(in->merge_pod) : kj_str(s->status, "mergeUID");

	if (b->phase == PHASE__MAX)
		b->phase = PHASE_PENDING;
	if (json_object_set_new(st, "phase", json_string(session_phase_name(b->phase))) ||
	    json_object_set_new(st, "observedGeneration", json_integer(s->generation)) ||
	    json_object_set_new(st, "targetCount", json_integer((json_int_t)in->n_targets)) ||
	    json_object_set_new(st, "findingCount",
				json_integer((json_int_t)json_array_size(b->finds))) ||
	    (b->started && json_object_set_new(st, "startTime",
					       json_string(ktime_format(b->start_ns, buf)))) ||
	    json_object_set(st, "targets", b->targets) || json_object_set(st, "artifacts", b->arts) ||
	    json_object_set(st, "findings", b->finds) || json_object_set(st, "conditions", b->conds) ||
	    (merge_uid && json_object_set_new(st, "mergeUID", json_string(merge_uid))))
		return -ENOMEM;
	if (!json_object_get(st, "message") &&
	    json_object_set_new(st, "message", json_string(kj_str(json_array_get(b->conds, 0),
								   "message") ?: "")))
		return -ENOMEM;
	b->st = NULL;
	if (s->status && json_equal(st, s->status))
		json_decref(st);
	else
		p->status = st;
	return 0;
}

/* No target pod (yet): Pending until target_wait after the session's creation, then Failed. */
static int plan_no_targets(const struct reconcile_input *in, struct reconcile_plan *p,
			   struct build *b)
{
	const struct session *s = in->s;
	int64_t wait_end = s->created_ns + (int64_t)in->cfg->target_wait_ns;
	const json_t *old = old_condition(s, "TargetsResolved");
	char msg[600];

	if (s->spec.pod_name)
		snprintf(msg, sizeof(msg), "pod %.100s/%.100s does not exist", s->ns,
			 s->spec.pod_name);
	else
		snprintf(msg, sizeof(msg), "no pod in namespace %.100s matches the selector", s->ns);
	if (in->now_ns >= wait_end)
		return fail_session(in, p, "TargetNotFound", msg, "TargetNotFound");
	if (add_condition(b->conds, s, "TargetsResolved", false, "TargetNotFound", msg,
			  in->now_ns) ||
	    add_defaults_condition(b->conds, p, s, in->now_ns))
		return -ENOMEM;
	if (!old || strcmp(kj_str(old, "reason") ?: "", "TargetNotFound"))
		add_event(p, true, "TargetNotFound", "%s (waiting)", msg);
	requeue_at(p, wait_end);
	b->phase = PHASE_PENDING;
	return set_status(in, p, b);
}

/* Each target's result: kept as recorded when it was done before, else evaluated now. */
static int eval_targets(const struct reconcile_input *in, struct reconcile_plan *p,
			struct build *b)
{
	bool any_created = false;

	for (size_t i = 0; i < in->n_targets; i++) {
		const json_t *old = old_target(in->s, in->targets[i].name);
		enum session_phase prev = session_phase_parse(kj_str(old, "state"));
		struct tres *t = &b->res[i];
		int r;

		if (session_phase_terminal(prev)) {
			/* done before: kept as recorded, in its place (record_target()) */
			t->state = prev;
			t->carried = true;
			snprintf(t->reason, sizeof(t->reason), "%s", kj_str(old, "reason") ?:
				 prev == PHASE_SUCCEEDED ? "Succeeded" : "TargetFailed");
			snprintf(t->message, sizeof(t->message), "%s", kj_str(old, "message") ?: "");
			continue;
		}
		r = eval_target(in, i, b->started, b->deadline, t, p);
		if (r < 0)
			return r;
		any_created |= t->created;
	}
	if (!b->started && any_created) {
		b->started = true;
		b->start_ns = in->now_ns;
		b->deadline = deadline_after(in, b->start_ns);
	}
	return 0;
}

/* The Event of a target whose state changed in this pass, or whose pod went away. */
static void target_event(const struct reconcile_input *in, struct reconcile_plan *p,
			 const struct target_obs *o, const struct tres *t)
{
	const struct session *s = in->s;

	if (t->state != old_target_state(s, o->name)) {
		if (t->state == PHASE_INJECTING && t->created && !strcmp(t->mode, "NodeAgent"))
			add_event(p, false, "InjectorCreated", "pod %s: injector pod %s created on "
				  "node %s", o->name, t->injector, t->node);
		else if (t->state == PHASE_INJECTING && t->created)
			add_event(p, false, "InjectorCreated", "pod %s: ephemeral container %s added",
				  o->name, t->injector);
		else if (t->state == PHASE_SUCCEEDED)
			add_event(p, false, "TargetSucceeded", "pod %s: %s", o->name, t->message);
		else if (t->state == PHASE_FAILED)
			add_event(p, true, t->reason, "pod %s: %s", o->name, t->message);
	} else if (!session_phase_terminal(t->state) && !strcmp(t->reason, "TargetDeleted") &&
		   strcmp(kj_str(old_target(s, o->name), "reason") ?: "", t->reason)) {
		add_event(p, true, t->reason, "pod %s: %s", o->name, t->message);
	}
}

/* Target i into the status: its entry, artifacts and findings; past the deadline it fails
 * and its injector pod is deleted. */
static int record_target(const struct reconcile_input *in, struct reconcile_plan *p,
			 struct build *b, size_t i)
{
	const struct session *s = in->s;
	const struct target_obs *o = &in->targets[i];
	struct tres *t = &b->res[i];
	json_t *e;

	if (t->carried)
		return json_array_append_new(b->targets, json_deep_copy(old_target(s, o->name))) ||
		       carry_results(s, b->arts, b->finds, o->name) ? -ENOMEM : 0;
	if (b->started && !session_phase_terminal(t->state) && in->now_ns >= b->deadline) {
		char d[32];

		format_duration(d, sizeof(d), s->spec.duration_ns + in->cfg->inj.grace_ns);
		tset(t, PHASE_FAILED, "DeadlineExceeded", "no result within the duration plus "
		     "grace (%s)", d);
		t->delete_injector = o->injector && !o->injector->deleting;
	}
	if (t->delete_injector && o->injector &&
	    add_delete(p, i, o->injector))
		return -ENOMEM;
	e = target_entry(s, o, t);
	if (!e || json_array_append_new(b->targets, e) ||
	    add_results(b->arts, b->finds, o->name, t->term))
		return -ENOMEM;
	target_event(in, p, o, t);
	return 0;
}

static void tally_target(struct build *b, const struct tres *t)
{
	if (session_phase_terminal(t->state)) {
		b->n_done++;
		if (t->state != PHASE_SUCCEEDED) {
			b->all_ok = false;
			if (!b->first_fail)
				b->first_fail = t;
		}
	} else {
		b->all_done = false;
		if (t->state < b->phase)
			b->phase = t->state;
	}
}

static int record_targets(const struct reconcile_input *in, struct reconcile_plan *p,
			  struct build *b)
{
	for (size_t i = 0; i < in->n_targets; i++) {
		int r = record_target(in, p, b, i);

		if (r < 0)
			return r;
		tally_target(b, &b->res[i]);
	}
	if (b->started && !b->all_done)
		requeue_at(p, b->deadline);
	for (size_t i = 0; i < in->n_targets; i++)
		if (b->res[i].state == PHASE_PROFILING && b->res[i].started_at)
			requeue_at(p, b->res[i].started_at + (int64_t)in->s->spec.duration_ns);
	return 0;
}

/* All targets done, two or more of them and at least two succeeded: their merge. */
static int plan_merge(const struct reconcile_input *in, struct reconcile_plan *p,
		      struct build *b)
{
	size_t n_ok = 0;
	int r;

	if (!b->all_done)
		return 0;
	for (size_t i = 0; i < in->n_targets; i++)
		n_ok += b->res[i].state == PHASE_SUCCEEDED;
	/* the merge pod reads the ranks from S3; in the in-cluster store each rank's artifacts
	 * stand on their own */
	if (in->n_targets < 2 || n_ok < 2 || in->s->spec.in_cluster)
		return 0;
	r = eval_merge(in, b->res, n_ok, b->deadline, &b->merge, p);
	if (r < 0)
		return r;
	if (b->merge.state == PHASE_SUCCEEDED &&
	    add_results(b->arts, b->finds, MERGE_TARGET, b->merge.term))
		return -ENOMEM;
	return 0;
}

/* The ranks are done, their merge is not: Uploading; stop what still runs, but not the
 * merge. */
static int conclude_merging(const struct reconcile_input *in, struct reconcile_plan *p,
			    struct build *b, char *msg, size_t msglen)
{
	const struct tres *m = &b->merge;

	b->phase = PHASE_UPLOADING;
	if (add_condition_s(b->conds, in->s, "Merged", "Unknown", m->reason, m->message,
			    in->now_ns) ||
	    stop_running(in, p, m->injector))
		return -ENOMEM;
	snprintf(msg, msglen, "%zu of %zu targets done; %s", b->n_done, in->n_targets,
		 m->message);
	return 0;
}

/* Every target is done (and merged): Succeeded or Failed; stop what still runs, then count
 * the TTL from now. */
static int conclude_ended(const struct reconcile_input *in, struct reconcile_plan *p,
			  struct build *b, char *msg, size_t msglen)
{
	const struct session *s = in->s;
	const struct tres *m = &b->merge;
	size_t n_arts = json_array_size(b->arts);
	char buf[KTIME_LEN];

	b->phase = b->all_ok ? PHASE_SUCCEEDED : PHASE_FAILED;
	if (b->all_ok)
		snprintf(msg, msglen, "%zu of %zu target%s profiled, %zu artifact%s", b->n_done,
			 in->n_targets, in->n_targets == 1 ? "" : "s", n_arts, n_arts == 1 ? "" : "s");
	else
		snprintf(msg, msglen, "%s", b->first_fail->message);
	if (add_condition(b->conds, s, b->all_ok ? "Complete" : "Failed", true,
			  b->all_ok ? "Succeeded" : b->first_fail->reason, msg, in->now_ns))
		return -ENOMEM;
	if (m->state == PHASE_SUCCEEDED || m->state == PHASE_FAILED) {
		/* a failed merge leaves the ranks' own results as they are */
		if (add_condition(b->conds, s, "Merged", m->state == PHASE_SUCCEEDED, m->reason,
				  m->message, in->now_ns))
			return -ENOMEM;
		if (m->state == PHASE_SUCCEEDED)
			add_event(p, false, "Merged", "%s", m->message);
		else
			add_event(p, true, m->reason, "%s", m->message);
		snprintf(msg + strlen(msg), msglen - strlen(msg), "; %s%s",
			 m->state == PHASE_SUCCEEDED ? "" : "merge failed: ", m->message);
	}
	if (json_object_set_new(b->st, "completionTime", json_string(ktime_format(in->now_ns, buf))))
		return -ENOMEM;
	if (b->all_ok)
		add_event(p, false, "Succeeded", "%s", msg);
	else
		add_event(p, true, "Failed", "%s", msg);
	if (stop_running(in, p, NULL))
		return -ENOMEM;
	if (ttl_ns(in) >= 0)
		requeue_at(p, in->now_ns + ttl_ns(in));
	return 0;
}

/* The session's conditions, phase and message from its targets' results (and the merge's). */
static int conclude(const struct reconcile_input *in, struct reconcile_plan *p, struct build *b)
{
	char msg[600];
	int r = 0;

	snprintf(msg, sizeof(msg), "%zu target%s", in->n_targets, in->n_targets == 1 ? "" : "s");
	if (add_condition(b->conds, in->s, "TargetsResolved", true, "Resolved", msg, in->now_ns) ||
	    add_defaults_condition(b->conds, p, in->s, in->now_ns))
		return -ENOMEM;
	if (b->all_done && b->merge.state == PHASE_UPLOADING)
		r = conclude_merging(in, p, b, msg, sizeof(msg));
	else if (b->all_done)
		r = conclude_ended(in, p, b, msg, sizeof(msg));
	else
		snprintf(msg, sizeof(msg), "%zu of %zu target%s done", b->n_done, in->n_targets,
			 in->n_targets == 1 ? "" : "s");
	if (r < 0)
		return r;
	return json_object_set_new(b->st, "message", json_string(msg)) ? -ENOMEM : 0;
}

/* A session past its finalizer and its checks: targets resolved, injected, followed. */
static int plan_targets(const struct reconcile_input *in, struct reconcile_plan *p)
{
	struct build b;
	int r = build_start(in, &b);

	if (r < 0)
		goto out;
	if (in->n_targets == 0) {
		r = plan_no_targets(in, p, &b);
		goto out;
	}
	if ((r = eval_targets(in, p, &b)) < 0 || (r = record_targets(in, p, &b)) < 0 ||
	    (r = plan_merge(in, p, &b)) < 0 || (r = conclude(in, p, &b)) < 0)
		goto out;
	r = set_status(in, p, &b);
out:
	build_release(in, &b);
	return r;
}

int reconcile__plan(const struct reconcile_input *in, struct reconcile_plan *p)
{
	const struct session *s = in->s;
	int r;

	memset(p, 0, sizeof(*p));
	if (s->deleting)
		r = plan_deletion(in, p);
	else if (reconcile__namespace_denied(in->cfg->denied_ns, s->ns) &&
		 !session_phase_terminal(s->phase))
		r = fail_denied_namespace(in, p);       /* before the finalizer: nothing else */
	else if (!s->has_finalizer && !session_phase_terminal(s->phase))
		r = add_action(p, ACT_ADD_FINALIZER, 0, NULL, NULL);
	else if (session_phase_terminal(s->phase))
		r = plan_terminal(in, p);
	else if (s->spec_err)
		r = fail_session(in, p, "InvalidSpec", s->spec_msg, "InvalidSpec");
	else if (s->spec.storage_ref && in->storage_err)
		r = plan_storage_error(in, p);
	else if (over_namespace_limit(in))
		r = wait_for_turn(in, p);
	else if (s->spec.target_namespace && strcmp(s->spec.target_namespace, s->ns) != 0)
		r = fail_foreign_namespace(in, p);
	else
		r = plan_targets(in, p);
	if (r < 0)
		reconcile_plan__release(p);
	return r;
}
