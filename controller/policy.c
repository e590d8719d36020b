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
#include "kjson.h"
#include "kobject.h"
#include "kworker.h"
#include "ktime.h"
#include "kubeclient.h"
#include "policy.h"
#include "timeutil.h"
#include "workqueue.h"

/* ---- the object --------------------------------------------------------------------------- */

struct policy *policy__ref(struct policy *p)
{
	atomic_fetch_add(&p->refs, 1);
	return p;
}

void policy__unref(struct policy *p)
{
	if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
		return;
	free(p->key);
	free(p->ns);
	free(p->name);
	free(p->uid);
	free(p->rv);
	label_selector__clear(&p->selector);
	json_decref(p->selector_json);
	free(p->schedule);
	free(p->time_zone);
	free(p->trigger);
	json_decref(p->template);
	json_decref(p->status);
	free(p);
}

#define BAD(...) do { \
	snprintf(p->spec_msg, sizeof(p->spec_msg), __VA_ARGS__); \
	p->spec_err = -EINVAL; \
	return 0; \
} while (0)

/* An annotation key: an optional DNS prefix and '/', then a name of [A-Za-z0-9._-]. */
static bool annotation_key_ok(const char *k)
{
	const char *slash = strrchr(k, '/');
	const char *name = slash ? slash + 1 : k;
	size_t n = strlen(name);

	if (n == 0 || n > 63 || strlen(k) > 317)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9') || strchr("._-", name[i])))
			return false;
	return true;
}

static int int_field(const json_t *spec, const char *key, int64_t dflt, int64_t max,
		     int64_t *ret)
{
	const json_t *v = json_object_get(spec, key);

	*ret = dflt;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
		return -EINVAL;
	*ret = json_integer_value(v);
	return 0;
}

static int parse_spec(struct policy *p, const json_t *spec)
{
	const json_t *sel = json_object_get(spec, "selector"), *v, *tpl;
	const char *conc = kj_str(spec, "concurrencyPolicy");
	char msg[200];
	int64_t n;

	p->starting_deadline_s = -1;
	p->success_limit = 3;
	p->failed_limit = 1;
	if (!json_is_object(spec))
		BAD("spec is missing");
	if (!json_is_object(sel))
		BAD("spec.selector is required: the pods this policy profiles");
	if (label_selector__parse(sel, &p->selector, msg, sizeof(msg)) < 0)
		BAD("spec.selector: %s", msg);
	if (label_selector__empty(&p->selector))
		BAD("spec.selector is empty and would select every pod in the namespace: give "
		    "matchLabels or matchExpressions");
	p->selector_json = json_deep_copy(sel);
	if (!p->selector_json)
		return -ENOMEM;
	v = json_object_get(spec, "schedule");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			BAD("spec.schedule must be a string such as \"0 * * * *\" or \"@hourly\"");
		if (cron__parse(json_string_value(v), &p->cron, msg, sizeof(msg)) < 0)
			BAD("spec.schedule \"%.64s\": %s", json_string_value(v), msg);
		p->schedule = strdup(json_string_value(v));
		if (!p->schedule)
			return -ENOMEM;
	}
	v = json_object_get(spec, "timeZone");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			BAD("spec.timeZone must be a string such as \"Europe/Berlin\"");
		p->time_zone = strdup(json_string_value(v));
		if (!p->time_zone)
			return -ENOMEM;
	}
	v = json_object_get(spec, "trigger");
	if (v && !json_is_null(v)) {
		const char *a = kj_str(v, "annotation");

		if (!json_is_object(v))
			BAD("spec.trigger must be an object such as {annotation: %s}",
			    POLICY_DEFAULT_TRIGGER);
		if (json_object_get(v, "annotation") && !a)
			BAD("spec.trigger.annotation must be a string");
		if (!a)
			a = POLICY_DEFAULT_TRIGGER;
		if (strncmp(a, KPOD_ANNOTATION_PREFIX, strlen(KPOD_ANNOTATION_PREFIX)) != 0 ||
		    !annotation_key_ok(a))
			BAD("spec.trigger.annotation \"%.80s\" must be an annotation key under %s "
			    "(such as %s): the controller keeps only those of each pod",
			    a, KPOD_ANNOTATION_PREFIX, POLICY_DEFAULT_TRIGGER);
		p->trigger = strdup(a);
		if (!p->trigger)
			return -ENOMEM;
	}
	if (!p->schedule && !p->trigger)
		BAD("give spec.schedule, spec.trigger, or both: this policy would never make a "
		    "session");
	if (!conc || strcmp(conc, "Forbid") == 0)
		p->concurrency = CONC_FORBID;
	else if (strcmp(conc, "Allow") == 0)
		p->concurrency = CONC_ALLOW;
	else if (strcmp(conc, "Replace") == 0)
		p->concurrency = CONC_REPLACE;
	else
		BAD("spec.concurrencyPolicy \"%.40s\": use Allow, Forbid or Replace", conc);
	if (int_field(spec, "startingDeadlineSeconds", -1, 100LL * 366 * 86400, &n) < 0)
		BAD("spec.startingDeadlineSeconds must be a number of seconds >= 0");
	p->starting_deadline_s = n;
	v = json_object_get(spec, "suspend");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		BAD("spec.suspend must be true or false");
	p->suspend = json_is_true(v);
	if (int_field(spec, "successfulSessionsHistoryLimit", 3, 1000, &n) < 0)
		BAD("spec.successfulSessionsHistoryLimit must be a number from 0 to 1000");
	p->success_limit = (int32_t)n;
	if (int_field(spec, "failedSessionsHistoryLimit", 1, 1000, &n) < 0)
		BAD("spec.failedSessionsHistoryLimit must be a number from 0 to 1000");
	p->failed_limit = (int32_t)n;
	tpl = json_object_get(spec, "sessionTemplate");
	if (!json_is_object(tpl) || !json_is_object(json_object_get(tpl, "spec")))
		BAD("spec.sessionTemplate.spec is required: the sessions' spec (duration, "
		    "collectors, output...)");
	p->template = json_deep_copy(tpl);
	return p->template ? 0 : -ENOMEM;
}

int policy__from_json(const json_t *j, struct policy **ret)
{
	const char *ns = kj_str(j, "metadata.namespace"), *name = kj_str(j, "metadata.name");
	const char *uid = kj_str(j, "metadata.uid"), *rv = kj_str(j, "metadata.resourceVersion");
	const char *created = kj_str(j, "metadata.creationTimestamp");
	const json_t *del, *status;
	struct policy *p;
	int64_t ns_time = 0;
	int err = -ENOMEM;

	if (!json_is_object(j) || !ns || !name || !uid || !ns[0] || !name[0] || !uid[0])
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	atomic_init(&p->refs, 1);
	if (asprintf(&p->key, "%s/%s", ns, name) < 0) {
		p->key = NULL;
		goto fail;
	}
	p->ns = strdup(ns);
	p->name = strdup(name);
	p->uid = strdup(uid);
	p->rv = strdup(rv ? rv : "");
	if (!p->ns || !p->name || !p->uid || !p->rv)
		goto fail;
	p->generation = json_integer_value(kj_get(j, "metadata.generation"));
	if (created && ktime_parse(created, &ns_time) == 0)
		p->created_s = ns_time / (int64_t)NSEC_PER_SEC;
	del = kj_get(j, "metadata.deletionTimestamp");
	p->deleting = del && !json_is_null(del);
	status = json_object_get(j, "status");
	if (json_is_object(status) && !(p->status = json_deep_copy(status)))
		goto fail;
	err = parse_spec(p, json_object_get(j, "spec"));
	if (err < 0)
		goto fail;
	*ret = p;
	return 0;
fail:
	policy__unref(p);
	return err;
}

/* ---- names ---------------------------------------------------------------------------- */

static int name_prefix(const struct policy *p)
{
	size_t n = strlen(p->name);

	if (n > POLICY_NAME_PREFIX_MAX)
		n = POLICY_NAME_PREFIX_MAX;
	while (n > 1 && (p->name[n - 1] == '-' || p->name[n - 1] == '.'))
		n--;
	return (int)n;
}

void policy__scheduled_name(const struct policy *p, int64_t t, char out[254])
{
	snprintf(out, 254, "%.*s-%lld", name_prefix(p), p->name, (long long)(t / 60));
}

void policy__trigger_name(const struct policy *p, const char *pod, const char *token,
			  char out[254])
{
	char salt[600], id[11];

	snprintf(salt, sizeof(salt), "trigger/%s/%s", pod, token);
	session__short_id(p->uid, salt, id);
	snprintf(out, 254, "%.*s-now-%s", name_prefix(p), p->name, id);
}

/* ---- planning ------------------------------------------------------------------------- */

static int64_t time_at(const json_t *j, const char *path)
{
	const char *s = kj_str(j, path);
	int64_t ns = 0;

	if (!s || ktime_parse(s, &ns) < 0)
		return 0;
	return ns / (int64_t)NSEC_PER_SEC;
}

static const char *fmt_time(int64_t t, char buf[KTIME_LEN])
{
	return ktime_format(t * (int64_t)NSEC_PER_SEC, buf);
}

__attribute__((format(printf, 4, 5)))
static void add_event(struct policy_plan *pl, bool warning, const char *reason,
		      const char *fmt, ...)
{
	struct plan_event *e;
	va_list ap;

	if (pl->n_events >= RECONCILE_MAX_EVENTS)
		return;
	e = &pl->events[pl->n_events++];
	e->warning = warning;
	snprintf(e->reason, sizeof(e->reason), "%s", reason);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

static struct policy_action *add_action(struct policy_plan *pl, enum policy_action_kind kind,
					const char *name)
{
	struct policy_action *a = realloc(pl->actions, (pl->n_actions + 1) * sizeof(*a));

	if (!a)
		return NULL;
	pl->actions = a;
	a = &pl->actions[pl->n_actions++];
	memset(a, 0, sizeof(*a));
	a->kind = kind;
	snprintf(a->name, sizeof(a->name), "%s", name);
	return a;
}

/*
 * Sets condition type in st's conditions (as meta.SetStatusCondition: the transition time
 * moves only when the status does). Returns true when status, reason or message changed
 * (the caller emits an Event then).
 */
static bool set_condition(json_t *st, const char *type, bool status, const char *reason,
			  const char *message, int64_t generation, int64_t now)
{
	json_t *conds = json_object_get(st, "conditions"), *c = NULL, *e;
	const char *sv = status ? "True" : "False";
	char ts[KTIME_LEN];
	bool changed;
	size_t i;

	if (!json_is_array(conds)) {
		conds = json_array();
		if (!conds || json_object_set_new(st, "conditions", conds))
			return false;
	}
	json_array_foreach(conds, i, e)
		if (kj_str(e, "type") && strcmp(kj_str(e, "type"), type) == 0)
			c = e;
	changed = !c || !kj_str(c, "status") || strcmp(kj_str(c, "status"), sv) != 0 ||
		  !kj_str(c, "reason") || strcmp(kj_str(c, "reason"), reason) != 0 ||
		  !kj_str(c, "message") || strcmp(kj_str(c, "message"), message) != 0;
	if (!c) {
		c = json_object();
		if (!c || json_array_append_new(conds, c))
			return false;
	}
	if (!kj_str(c, "status") || strcmp(kj_str(c, "status"), sv) != 0 ||
	    !kj_str(c, "lastTransitionTime"))
		json_object_set_new(c, "lastTransitionTime", json_string(fmt_time(now, ts)));
	json_object_set_new(c, "type", json_string(type));
	json_object_set_new(c, "status", json_string(sv));
	json_object_set_new(c, "reason", json_string(reason));
	json_object_set_new(c, "message", json_string(message));
	json_object_set_new(c, "observedGeneration", json_integer(generation));
	return changed;
}

static int64_t finished_at(const struct session *s)
{
	int64_t t = time_at(s->status, "completionTime");

	return t ? t : s->created_ns / (int64_t)NSEC_PER_SEC;
}

static int cmp_finished(const void *a, const void *b)
{
	const struct session *x = *(const struct session *const *)a;
	const struct session *y = *(const struct session *const *)b;
	int64_t fx = finished_at(x), fy = finished_at(y);

	return fx < fy ? -1 : fx > fy ? 1 : strcmp(x->name, y->name);
}

static int cmp_pod(const void *a, const void *b)
{
	return strcmp(kpod__name(*(const struct kpod *const *)a),
		      kpod__name(*(const struct kpod *const *)b));
}

/* The history limits: delete the oldest finished sessions beyond limit. */
static int prune(const struct policy *p, struct policy_plan *pl, const struct session **v,
		 size_t n, int32_t limit, const char *what)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_finished);
	for (size_t i = 0; i + (size_t)limit < n; i++) {
		struct policy_action *a = add_action(pl, PACT_DELETE_SESSION, v[i]->name);
		char ts[KTIME_LEN];

		if (!a)
			return -ENOMEM;
		snprintf(a->uid, sizeof(a->uid), "%s", v[i]->uid);
		add_event(pl, false, "SessionDeleted", "deleted session %s (finished %s): more "
			  "than %s=%d", v[i]->name, fmt_time(finished_at(v[i]), ts), what, limit);
	}
	(void)p;
	return 0;
}

struct active_set {
	const struct session **v;       /* running sessions (not replaced) */
	size_t n;
	char (*created)[254];           /* made by this plan */
	size_t n_created;
};

static bool has_session(const struct policy_input *in, const char *name)
{
	for (size_t i = 0; i < in->n_sessions; i++)
		if (strcmp(in->sessions[i]->name, name) == 0)
			return true;
	return false;
}

/* Replace: delete every running session; they leave the active set. */
static int replace_active(struct policy_plan *pl, struct active_set *as, const char *for_what)
{
	for (size_t i = 0; i < as->n; i++) {
		struct policy_action *a = add_action(pl, PACT_DELETE_SESSION, as->v[i]->name);

		if (!a)
			return -ENOMEM;
		snprintf(a->uid, sizeof(a->uid), "%s", as->v[i]->uid);
		add_event(pl, false, "SessionReplaced", "deleted running session %s to make room "
			  "for %s (concurrencyPolicy Replace)", as->v[i]->name, for_what);
	}
	as->n = 0;
	return 0;
}

static json_t *object_or_new(json_t *parent, const char *key)
{
	json_t *o = json_object_get(parent, key);

	if (json_is_object(o))
		return o;
	o = json_object();
	if (!o || json_object_set_new(parent, key, o))
		return NULL;
	return o;
}

/* The session to create: the template's spec with the targets filled in. */
static json_t *session_body(const struct policy *p, const char *name, const char *pod,
			    int64_t scheduled)
{
	json_t *tpl_meta = json_object_get(p->template, "metadata");
	json_t *spec = json_deep_copy(json_object_get(p->template, "spec"));
	json_t *labels = json_deep_copy(json_object_get(tpl_meta, "labels"));
	json_t *ann = json_deep_copy(json_object_get(tpl_meta, "annotations"));
	json_t *targets, *body = NULL;
	char ts[KTIME_LEN];

	if (!labels)
		labels = json_object();
	if (!ann)
		ann = json_object();
	if (!spec || !labels || !ann || !(targets = object_or_new(spec, "targets")))
		goto out;
	json_object_del(targets, "podName");
	json_object_del(targets, "selector");
	json_object_del(targets, "namespace");
	if (pod) {
		json_object_set_new(targets, "podName", json_string(pod));
		json_object_set_new(ann, ANNOTATION_TRIGGER_POD, json_string(pod));
	} else {
		json_object_set(targets, "selector", p->selector_json);
		json_object_set_new(ann, ANNOTATION_SCHEDULED, json_string(fmt_time(scheduled, ts)));
	}
	if (strlen(p->name) <= 63)
		json_object_set_new(labels, LABEL_POLICY, json_string(p->name));
	body = json_pack("{s:s,s:s,s:{s:s,s:s,s:O,s:O,s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:O}",
			 "apiVersion", AIPROF_API_VERSION, "kind", SESSION_KIND,
			 "metadata", "name", name, "namespace", p->ns, "labels", labels,
			 "annotations", ann, "ownerReferences", "apiVersion", AIPROF_API_VERSION,
			 "kind", POLICY_KIND, "name", p->name, "uid", p->uid, "controller", 1,
			 "blockOwnerDeletion", 1, "spec", spec);
out:
	json_decref(spec);
	json_decref(labels);
	json_decref(ann);
	return body;
}

static int create(struct policy_plan *pl, struct active_set *as, const struct policy *p,
		  const char *name, const char *pod, int64_t scheduled)
{
	struct policy_action *a = add_action(pl, PACT_CREATE_SESSION, name);
	char (*c)[254];

	if (!a || !(a->body = session_body(p, name, pod, scheduled)))
		return -ENOMEM;
	c = realloc(as->created, (as->n_created + 1) * sizeof(*c));
	if (!c)
		return -ENOMEM;
	as->created = c;
	snprintf(c[as->n_created++], 254, "%s", name);
	return 0;
}

static bool trigger_handled(const json_t *triggers, const char *pod, const char *token)
{
	const json_t *e;
	size_t i;

	json_array_foreach(triggers, i, e)
		if (kj_str(e, "pod") && kj_str(e, "token") && strcmp(kj_str(e, "pod"), pod) == 0 &&
		    strcmp(kj_str(e, "token"), token) == 0)
			return true;
	return false;
}

static int plan_triggers(const struct policy_input *in, struct policy_plan *pl, json_t *st,
			 struct active_set *as, char *blocked, size_t blocked_len)
{
	const struct policy *p = in->p;
	const struct kpod **pods = NULL;
	json_t *triggers = json_object_get(st, "triggers");
	size_t n = 0;
	int r = 0;

	if (!json_is_array(triggers)) {
		triggers = json_array();
		if (!triggers || json_object_set_new(st, "triggers", triggers))
			return -ENOMEM;
	}
	if (in->n_pods && !(pods = calloc(in->n_pods, sizeof(*pods))))
		return -ENOMEM;
	for (size_t i = 0; i < in->n_pods; i++) {
		const struct kpod *pod = in->pods[i];
		const char *tok = kpod__annotation(pod, p->trigger);

		if (tok && tok[0] && !pod->deleting && !kpod__session_uid(pod)[0] &&
		    strcmp(kpod__ns(pod), p->ns) == 0 && kpod__matches(pod, &p->selector))
			pods[n++] = pod;
	}
	if (n > 1)
		qsort(pods, n, sizeof(*pods), cmp_pod);
	for (size_t i = 0; i < n; i++) {
		const char *pod = kpod__name(pods[i]), *tok = kpod__annotation(pods[i], p->trigger);
		char name[254], ts[KTIME_LEN], what[400];

		if (trigger_handled(triggers, pod, tok))
			continue;
		policy__trigger_name(p, pod, tok, name);
		if (!has_session(in, name)) {
			snprintf(what, sizeof(what), "pod %s's trigger %s=%s", pod, p->trigger, tok);
			if (as->n + as->n_created > 0 && p->concurrency == CONC_FORBID) {
				snprintf(blocked, blocked_len, "%s waits: session %s is still running "
					 "(concurrencyPolicy Forbid)", what,
					 as->n ? as->v[0]->name : as->created[0]);
				continue;
			}
			if (p->concurrency == CONC_REPLACE && (r = replace_active(pl, as, what)) < 0)
				goto out;
			if ((r = create(pl, as, p, name, pod, 0)) < 0)
				goto out;
			add_event(pl, false, "SessionCreated", "created session %s for %s", name, what);
		}
		r = -ENOMEM;
		if (json_array_append_new(triggers, json_pack("{s:s,s:s,s:s,s:s}", "pod", pod,
							      "token", tok, "session", name, "time",
							      fmt_time(in->now, ts))))
			goto out;
		while (json_array_size(triggers) > POLICY_MAX_TRIGGERS)
			json_array_remove(triggers, 0);
		r = 0;
	}
out:
	free(pods);
	return r;
}

/* Returns 0, or -ENOMEM. Sets the Scheduling condition's pieces through *reason/msg. */
static int plan_schedule(const struct policy_input *in, struct policy_plan *pl, json_t *st,
			 struct active_set *as, char *blocked, size_t blocked_len,
			 bool *never)
{
	const struct policy *p = in->p;
	int64_t earliest = time_at(st, "lastScheduleTime"), last = 0, next = 0;
	char name[254], ts[KTIME_LEN], ts2[KTIME_LEN], what[320];
	unsigned count = 0;
	int r;

	if (!earliest)
		earliest = p->created_s;
	if (p->starting_deadline_s >= 0 && earliest < in->now - p->starting_deadline_s)
		earliest = in->now - p->starting_deadline_s;
	r = cron__missed(&p->cron, in->zone, earliest, in->now, &last, &count);
	if (r == -ENOENT || cron__next(&p->cron, in->zone, in->now, &next) < 0) {
		*never = true;
		return 0;
	}
	pl->requeue_at = next;
	if (!last)
		return 0;
	policy__scheduled_name(p, last, name);
	snprintf(what, sizeof(what), "the scheduled time %s", fmt_time(last, ts));
	if (has_session(in, name)) {
		/* made before; the status write that said so was lost */
		json_object_set_new(st, "lastScheduleTime", json_string(ts));
		return 0;
	}
	if (as->n + as->n_created > 0 && p->concurrency == CONC_FORBID) {
		snprintf(blocked, blocked_len, "%s waits: session %s is still running "
			 "(concurrencyPolicy Forbid)", what, as->n ? as->v[0]->name : as->created[0]);
		return 0;
	}
	if (p->concurrency == CONC_REPLACE && (r = replace_active(pl, as, what)) < 0)
		return r;
	if ((r = create(pl, as, p, name, NULL, last)) < 0)
		return r;
	json_object_set_new(st, "lastScheduleTime", json_string(ts));
	add_event(pl, false, "SessionCreated", "created session %s for %s", name, what);
	if (count > 1) {
		if (count > CRON_MISSED_CAP)
			add_event(pl, true, "MissedSchedule", "more than %u scheduled times were "
				  "missed since %s; started only the most recent, %s", CRON_MISSED_CAP,
				  fmt_time(earliest, ts2), ts);
		else
			add_event(pl, true, "MissedSchedule", "%u scheduled times were missed since "
				  "%s; started only the most recent, %s", count - 1,
				  fmt_time(earliest, ts2), ts);
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

/* status.active: the running sessions and those created now (their uid comes later). */
static int active_refs(json_t *st, const struct active_set *as)
{
	json_t *arr = json_array();
	size_t n = as->n + as->n_created, k = 0;
	struct { char name[254]; const char *uid; } *v = calloc(n ? n : 1, sizeof(*v));

	if (!arr || !v || json_object_set_new(st, "active", arr)) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < as->n; i++, k++) {
		snprintf(v[k].name, sizeof(v[k].name), "%s", as->v[i]->name);
		v[k].uid = as->v[i]->uid;
	}
	for (size_t i = 0; i < as->n_created; i++, k++)
		snprintf(v[k].name, sizeof(v[k].name), "%s", as->created[i]);
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_str);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, v[i].uid ? json_pack("{s:s,s:s}", "name", v[i].name,
								"uid", v[i].uid)
						     : json_pack("{s:s}", "name", v[i].name));
	free(v);
	return 0;
}

int policy__plan(const struct policy_input *in, struct policy_plan *pl)
{
	const struct policy *p = in->p;
	const struct session **done_ok = NULL, **done_bad = NULL;
	struct active_set as = { 0 };
	size_t n_ok = 0, n_bad = 0;
	int64_t last_ok;
	json_t *st;
	char ts[KTIME_LEN], msg[600], blocked[600] = "";
	bool never = false;
	int r = -ENOMEM;

	memset(pl, 0, sizeof(*pl));
	if (p->deleting)
		return 0;       /* the garbage collector deletes its sessions (ownerReferences) */
	st = p->status ? json_deep_copy(p->status) : json_object();
	if (!st)
		return -ENOMEM;
	json_object_set_new(st, "observedGeneration", json_integer(p->generation));

	/* the sessions it controls: running, and finished by outcome */
	if (in->n_sessions) {
		as.v = calloc(in->n_sessions, sizeof(*as.v));
		done_ok = calloc(in->n_sessions, sizeof(*done_ok));
		done_bad = calloc(in->n_sessions, sizeof(*done_bad));
		if (!as.v || !done_ok || !done_bad)
			goto out;
	}
	last_ok = time_at(st, "lastSuccessfulTime");
	for (size_t i = 0; i < in->n_sessions; i++) {
		const struct session *s = in->sessions[i];

		if (s->deleting || !s->policy_uid || strcmp(s->policy_uid, p->uid) != 0)
			continue;
		if (s->phase == PHASE_SUCCEEDED) {
			done_ok[n_ok++] = s;
			if (finished_at(s) > last_ok)
				last_ok = finished_at(s);
		} else if (s->phase == PHASE_FAILED) {
			done_bad[n_bad++] = s;
		} else {
			as.v[as.n++] = s;
		}
	}
	if (last_ok)
		json_object_set_new(st, "lastSuccessfulTime", json_string(fmt_time(last_ok, ts)));

	if (p->spec_err) {
		if (set_condition(st, "Ready", false, "InvalidSpec", p->spec_msg, p->generation,
				  in->now))
			add_event(pl, true, "InvalidSpec", "%s", p->spec_msg);
		r = active_refs(st, &as);
		goto finish;
	}
	if ((r = prune(p, pl, done_ok, n_ok, p->success_limit, "successfulSessionsHistoryLimit")) < 0 ||
	    (r = prune(p, pl, done_bad, n_bad, p->failed_limit, "failedSessionsHistoryLimit")) < 0)
		goto out;

	if (p->schedule && in->zone_err < 0) {
		snprintf(msg, sizeof(msg), "%s", in->zone_msg ? in->zone_msg : "unknown time zone");
		if (set_condition(st, "Ready", false, "UnknownTimeZone", msg, p->generation, in->now))
			add_event(pl, true, "UnknownTimeZone", "%s: no scheduled sessions until "
				  "spec.timeZone names a zone", msg);
	}
	if (p->suspend) {
		set_condition(st, "Scheduling", true, "Suspended", "spec.suspend is true: no "
			      "sessions are made", p->generation, in->now);
	} else {
		if (p->trigger && (r = plan_triggers(in, pl, st, &as, blocked, sizeof(blocked))) < 0)
			goto out;
		if (p->schedule && in->zone_err >= 0 &&
		    (r = plan_schedule(in, pl, st, &as, blocked, sizeof(blocked), &never)) < 0)
			goto out;
		if (blocked[0]) {
			if (set_condition(st, "Scheduling", false, "ConcurrencyForbid", blocked,
					  p->generation, in->now))
				add_event(pl, true, "ConcurrencyForbid", "%s", blocked);
		} else if (pl->requeue_at) {
			if (p->time_zone)
				snprintf(msg, sizeof(msg), "next scheduled session at %s (schedule "
					 "\"%.64s\" in %.64s)", fmt_time(pl->requeue_at, ts),
					 p->schedule, p->time_zone);
			else
				snprintf(msg, sizeof(msg), "next scheduled session at %s",
					 fmt_time(pl->requeue_at, ts));
			set_condition(st, "Scheduling", true, "Scheduled", msg, p->generation,
				      in->now);
		} else {
			set_condition(st, "Scheduling", true, "Idle", p->trigger ? "waiting for a "
				      "trigger annotation on a selected pod" : "nothing scheduled",
				      p->generation, in->now);
		}
	}
	if (never) {
		snprintf(msg, sizeof(msg), "spec.schedule \"%.64s\" has no time in the next %d "
			 "years", p->schedule, CRON_MAX_YEARS);
		if (set_condition(st, "Ready", false, "NeverScheduled", msg, p->generation, in->now))
			add_event(pl, true, "NeverScheduled", "%s", msg);
	} else if (!(p->schedule && in->zone_err < 0)) {
		set_condition(st, "Ready", true, "Valid", p->schedule ? "the schedule and the "
			      "template are valid" : "the trigger and the template are valid",
			      p->generation, in->now);
	}
	if ((r = active_refs(st, &as)) < 0)
		goto out;
finish:
	if (p->status && json_equal(st, p->status)) {
		json_decref(st);
		st = NULL;
	} else {
		pl->status = st;
		st = NULL;
	}
	r = 0;
out:
	if (r < 0) {
		json_decref(st);
		policy_plan__release(pl);
	}
	free(as.v);
	free(as.created);
	free(done_ok);
	free(done_bad);
	return r;
}

void policy_plan__release(struct policy_plan *pl)
{
	for (size_t i = 0; i < pl->n_actions; i++)
		json_decref(pl->actions[i].body);
	free(pl->actions);
	json_decref(pl->status);
	memset(pl, 0, sizeof(*pl));
}

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

static int reconcile_policy(struct policy_ctl *pc, struct kube_client *kc, const char *key,
			    int64_t *requeue_at)
{
	struct policy *p = store__get(informer__store(pc->policies), key);
	struct gathered g = { 0 };
	struct policy_plan pl = { 0 };
	int r = 0;

	*requeue_at = 0;
	if (!p)
		return 0;               /* deleted: the garbage collector takes its sessions */
	for (int pass = 0; pass < 4; pass++) {
		struct plan_event warns[RECONCILE_MAX_EVENTS];
		size_t n_warns = 0;
		const struct tz *zone = NULL;
		char zmsg[256] = "";
		struct policy_input in;
		int zerr = 0;

		gathered_release(&g);
		policy_plan__release(&pl);
		g.p = p;
		store__foreach(pc->cfg.sessions, gather_session, &g);
		if (p->trigger && !p->spec_err)
			store__foreach(pc->cfg.pods, gather_pod, &g);
		if (g.err) {
			r = g.err;
			goto out;
		}
		if (p->schedule && !p->spec_err)
			zerr = tz__load(pc->cfg.zoneinfo_dir, p->time_zone, &zone, zmsg, sizeof(zmsg));
		if (zerr == -ENOMEM) {
			r = zerr;
			goto out;
		}
		in = (struct policy_input){
			.p = p, .sessions = (const struct session *const *)g.sessions,
			.n_sessions = g.n_sessions, .pods = (const struct kpod *const *)g.pods,
			.n_pods = g.n_pods, .zone = zone, .zone_err = zerr, .zone_msg = zmsg,
			.now = (int64_t)(now_realtime_ns() / NSEC_PER_SEC),
		};
		r = policy__plan(&in, &pl);
		if (r < 0)
			goto out;
		for (size_t i = 0; i < pl.n_actions; i++) {
			struct policy_action *a = &pl.actions[i];

			if (a->kind == PACT_DELETE_SESSION) {
				r = do_delete_session(pc, kc, p, a);
			} else {
				r = do_create(pc, kc, p, a, &warns[n_warns < RECONCILE_MAX_EVENTS ?
								   n_warns : 0]);
				if (r > 0) {
					n_warns += n_warns < RECONCILE_MAX_EVENTS;
					r = 0;
				}
			}
			if (r < 0)
				goto out;       /* retried: nothing written that claims it happened */
		}
		if (pl.status) {
			r = write_status(pc, kc, &p, pl.status);
			if (r == -ESTALE) {
				r = refresh_policy(pc, kc, &p);
				if (r < 0)
					goto out;
				continue;       /* plan again on the fresh object */
			}
			if (r == -ENOENT) {
				r = 0;
				goto out;
			}
			if (r < 0)
				goto out;
		}
		for (size_t i = 0; i < pl.n_events; i++)
			emit_policy_event(pc, kc, p, &pl.events[i]);
		for (size_t i = 0; i < n_warns; i++)
			emit_policy_event(pc, kc, p, &warns[i]);
		*requeue_at = pl.requeue_at;
		r = 0;
		goto out;
	}
	r = -EAGAIN;
out:
	gathered_release(&g);
	policy_plan__release(&pl);
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
