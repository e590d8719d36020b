/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kjson.h"
#include "kpod.h"
#include "ktime.h"
#include "policy.h"
#include "timeutil.h"

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

/* The spec is invalid: spec_msg says why. Returns -EINVAL. */
__attribute__((format(printf, 2, 3)))
static int invalid(struct policy *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->spec_msg, sizeof(p->spec_msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

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

/* spec.selector: required, and not empty. */
static int parse_selector(struct policy *p, const json_t *sel)
{
	char msg[200];

	if (!json_is_object(sel))
		return invalid(p, "spec.selector is required: the pods this policy profiles");
	if (label_selector__parse(sel, &p->selector, msg, sizeof(msg)) < 0)
		return invalid(p, "spec.selector: %s", msg);
	if (label_selector__empty(&p->selector))
		return invalid(p, "spec.selector is empty and would select every pod in the "
			       "namespace: give matchLabels or matchExpressions");
	p->selector_json = json_deep_copy(sel);
	return p->selector_json ? 0 : -ENOMEM;
}

/* spec.schedule (cron) and spec.timeZone (a name: resolved when the policy is planned). */
static int parse_schedule(struct policy *p, const json_t *spec)
{
	const json_t *v = json_object_get(spec, "schedule");
	char msg[200];

	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return invalid(p, "spec.schedule must be a string such as \"0 * * * *\" or "
				       "\"@hourly\"");
		if (cron__parse(json_string_value(v), &p->cron, msg, sizeof(msg)) < 0)
			return invalid(p, "spec.schedule \"%.64s\": %s", json_string_value(v), msg);
		p->schedule = strdup(json_string_value(v));
		if (!p->schedule)
			return -ENOMEM;
	}
	v = json_object_get(spec, "timeZone");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return invalid(p, "spec.timeZone must be a string such as \"Europe/Berlin\"");
		p->time_zone = strdup(json_string_value(v));
		if (!p->time_zone)
			return -ENOMEM;
	}
	return 0;
}

/* spec.trigger: the annotation, under the prefix of those the pod cache keeps. */
static int parse_trigger(struct policy *p, const json_t *v)
{
	const char *a = kj_str(v, "annotation");

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return invalid(p, "spec.trigger must be an object such as {annotation: %s}",
			       POLICY_DEFAULT_TRIGGER);
	if (json_object_get(v, "annotation") && !a)
		return invalid(p, "spec.trigger.annotation must be a string");
	if (!a)
		a = POLICY_DEFAULT_TRIGGER;
	if (strncmp(a, KPOD_ANNOTATION_PREFIX, strlen(KPOD_ANNOTATION_PREFIX)) != 0 ||
	    !annotation_key_ok(a))
		return invalid(p, "spec.trigger.annotation \"%.80s\" must be an annotation key "
			       "under %s (such as %s): the controller keeps only those of each pod",
			       a, KPOD_ANNOTATION_PREFIX, POLICY_DEFAULT_TRIGGER);
	p->trigger = strdup(a);
	return p->trigger ? 0 : -ENOMEM;
}

/* concurrencyPolicy, startingDeadlineSeconds, suspend and the history limits. */
static int parse_rules(struct policy *p, const json_t *spec)
{
	const char *conc = kj_str(spec, "concurrencyPolicy");
	const json_t *v;
	int64_t n;

	if (!conc || strcmp(conc, "Forbid") == 0)
		p->concurrency = CONC_FORBID;
	else if (strcmp(conc, "Allow") == 0)
		p->concurrency = CONC_ALLOW;
	else if (strcmp(conc, "Replace") == 0)
		p->concurrency = CONC_REPLACE;
	else
		return invalid(p, "spec.concurrencyPolicy \"%.40s\": use Allow, Forbid or Replace",
			       conc);
	if (int_field(spec, "startingDeadlineSeconds", -1, 100LL * 366 * 86400, &n) < 0)
		return invalid(p, "spec.startingDeadlineSeconds must be a number of seconds >= 0");
	p->starting_deadline_s = n;
	v = json_object_get(spec, "suspend");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return invalid(p, "spec.suspend must be true or false");
	p->suspend = json_is_true(v);
	if (int_field(spec, "successfulSessionsHistoryLimit", 3, 1000, &n) < 0)
		return invalid(p, "spec.successfulSessionsHistoryLimit must be a number from 0 to "
			       "1000");
	p->success_limit = (int32_t)n;
	if (int_field(spec, "failedSessionsHistoryLimit", 1, 1000, &n) < 0)
		return invalid(p, "spec.failedSessionsHistoryLimit must be a number from 0 to 1000");
	p->failed_limit = (int32_t)n;
	return 0;
}

/* The spec, validated. Returns 0, -EINVAL (spec_msg says what is wrong), -ENOMEM. */
static int parse_spec(struct policy *p, const json_t *spec)
{
	const json_t *tpl = json_object_get(spec, "sessionTemplate");
	int r;

	p->starting_deadline_s = -1;
	p->success_limit = 3;
	p->failed_limit = 1;
	if (!json_is_object(spec))
		return invalid(p, "spec is missing");
	if ((r = parse_selector(p, json_object_get(spec, "selector"))) < 0 ||
	    (r = parse_schedule(p, spec)) < 0 ||
	    (r = parse_trigger(p, json_object_get(spec, "trigger"))) < 0)
		return r;
	if (!p->schedule && !p->trigger)
		return invalid(p, "give spec.schedule, spec.trigger, or both: this policy would "
			       "never make a session");
	if ((r = parse_rules(p, spec)) < 0)
		return r;
	if (!json_is_object(tpl) || !json_is_object(json_object_get(tpl, "spec")))
		return invalid(p, "spec.sessionTemplate.spec is required: the sessions' spec "
			       "(duration, collectors, output...)");
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
	if (err == -EINVAL)
		p->spec_err = err;      /* kept: the planner reports it (Ready=False InvalidSpec) */
	else if (err < 0)
		goto fail;
	*ret = p;
	return 0;
fail:
	policy__unref(p);
	return err;
}
