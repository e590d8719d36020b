/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "kjson.h"
#include "ktime.h"
#include "policy_plan.h"
#include "timeutil.h"

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

/* The sessions a policy controls: running, and finished by outcome. */
struct owned {
	struct active_set as;           /* running */
	const struct session **ok, **bad;
	size_t n_ok, n_bad;
};

static void owned_release(struct owned *o)
{
	free(o->as.v);
	free(o->as.created);
	free(o->ok);
	free(o->bad);
}

/* The sessions of in that this policy controls, by state; the latest success goes into
 * status.lastSuccessfulTime. */
static int sort_owned(const struct policy_input *in, json_t *st, struct owned *o)
{
	const struct policy *p = in->p;
	int64_t last_ok = time_at(st, "lastSuccessfulTime");
	char ts[KTIME_LEN];

	if (in->n_sessions) {
		o->as.v = calloc(in->n_sessions, sizeof(*o->as.v));
		o->ok = calloc(in->n_sessions, sizeof(*o->ok));
		o->bad = calloc(in->n_sessions, sizeof(*o->bad));
		if (!o->as.v || !o->ok || !o->bad)
			return -ENOMEM;
	}
	for (size_t i = 0; i < in->n_sessions; i++) {
		const struct session *s = in->sessions[i];

		if (s->deleting || !s->policy_uid || strcmp(s->policy_uid, p->uid) != 0)
			continue;
		if (s->phase == PHASE_SUCCEEDED) {
			o->ok[o->n_ok++] = s;
			if (finished_at(s) > last_ok)
				last_ok = finished_at(s);
		} else if (s->phase == PHASE_FAILED) {
			o->bad[o->n_bad++] = s;
		} else {
			o->as.v[o->as.n++] = s;
		}
	}
	if (last_ok)
		json_object_set_new(st, "lastSuccessfulTime", json_string(fmt_time(last_ok, ts)));
	return 0;
}

/* Triggers, then the schedule, unless suspended; condition Scheduling says how it went. */
static int plan_sessions(const struct policy_input *in, struct policy_plan *pl, json_t *st,
			 struct active_set *as, bool *never)
{
	const struct policy *p = in->p;
	char ts[KTIME_LEN], msg[600], blocked[600] = "";
	int r;

	if (p->suspend) {
		set_condition(st, "Scheduling", true, "Suspended", "spec.suspend is true: no "
			      "sessions are made", p->generation, in->now);
		return 0;
	}
	if (p->trigger && (r = plan_triggers(in, pl, st, as, blocked, sizeof(blocked))) < 0)
		return r;
	if (p->schedule && in->zone_err >= 0 &&
	    (r = plan_schedule(in, pl, st, as, blocked, sizeof(blocked), never)) < 0)
		return r;
	if (blocked[0]) {
		if (set_condition(st, "Scheduling", false, "ConcurrencyForbid", blocked,
				  p->generation, in->now))
			add_event(pl, true, "ConcurrencyForbid", "%s", blocked);
	} else if (pl->requeue_at) {
		if (p->time_zone)
			snprintf(msg, sizeof(msg), "next scheduled session at %s (schedule "
				 "\"%.64s\" in %.64s)", fmt_time(pl->requeue_at, ts), p->schedule,
				 p->time_zone);
		else
			snprintf(msg, sizeof(msg), "next scheduled session at %s",
				 fmt_time(pl->requeue_at, ts));
		set_condition(st, "Scheduling", true, "Scheduled", msg, p->generation, in->now);
	} else {
		set_condition(st, "Scheduling", true, "Idle", p->trigger ? "waiting for a trigger "
			      "annotation on a selected pod" : "nothing scheduled", p->generation,
			      in->now);
	}
	return 0;
}

/* A valid spec: the history limits, then the sessions to make; conditions Ready (a time zone
 * that does not resolve, a schedule that never fires) and Scheduling. */
static int plan_valid(const struct policy_input *in, struct policy_plan *pl, json_t *st,
		      struct owned *o)
{
	const struct policy *p = in->p;
	bool zone_unknown = p->schedule && in->zone_err < 0, never = false;
	char msg[600];
	int r;

	if ((r = prune(p, pl, o->ok, o->n_ok, p->success_limit,
		       "successfulSessionsHistoryLimit")) < 0 ||
	    (r = prune(p, pl, o->bad, o->n_bad, p->failed_limit, "failedSessionsHistoryLimit")) < 0)
		return r;
	if (zone_unknown) {
		snprintf(msg, sizeof(msg), "%s", in->zone_msg ? in->zone_msg : "unknown time zone");
		if (set_condition(st, "Ready", false, "UnknownTimeZone", msg, p->generation, in->now))
			add_event(pl, true, "UnknownTimeZone", "%s: no scheduled sessions until "
				  "spec.timeZone names a zone", msg);
	}
	r = plan_sessions(in, pl, st, &o->as, &never);
	if (r < 0)
		return r;
	if (never) {
		snprintf(msg, sizeof(msg), "spec.schedule \"%.64s\" has no time in the next %d "
			 "years", p->schedule, CRON_MAX_YEARS);
		if (set_condition(st, "Ready", false, "NeverScheduled", msg, p->generation, in->now))
			add_event(pl, true, "NeverScheduled", "%s", msg);
	} else if (!zone_unknown) {
		set_condition(st, "Ready", true, "Valid", p->schedule ? "the schedule and the "
			      "template are valid" : "the trigger and the template are valid",
			      p->generation, in->now);
	}
	return 0;
}

int policy__plan(const struct policy_input *in, struct policy_plan *pl)
{
	const struct policy *p = in->p;
	struct owned own = { 0 };
	json_t *st;
	int r;

	memset(pl, 0, sizeof(*pl));
	if (p->deleting)
		return 0;       /* the garbage collector deletes its sessions (ownerReferences) */
	st = p->status ? json_deep_copy(p->status) : json_object();
	if (!st)
		return -ENOMEM;
	json_object_set_new(st, "observedGeneration", json_integer(p->generation));
	r = sort_owned(in, st, &own);
	if (r < 0)
		goto out;
	if (p->spec_err) {
		if (set_condition(st, "Ready", false, "InvalidSpec", p->spec_msg, p->generation,
				  in->now))
			add_event(pl, true, "InvalidSpec", "%s", p->spec_msg);
	} else if ((r = plan_valid(in, pl, st, &own)) < 0) {
		goto out;
	}
	r = active_refs(st, &own.as);
	if (r < 0)
		goto out;
	if (p->status && json_equal(st, p->status))
		json_decref(st);
	else
		pl->status = st;
	st = NULL;
out:
	if (r < 0) {
		json_decref(st);
		policy_plan__release(pl);
	}
	owned_release(&own);
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
