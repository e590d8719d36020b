/* SPDX-License-Identifier: MIT */
/*
 * controller/policy.c and policy_plan.c: the ProfilingPolicy decoder and planner with a fixed
 * clock. Policies, sessions and pods are built from the JSON the API server would send.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "controller/kjson.h"
#include "controller/ktime.h"
#include "controller/policy_plan.h"

#define UID "0b5c2a4e-1111-4222-8333-944445555666"

static int64_t T(const char *s)
{
	int64_t ns = 0;

	if (ktime_parse(s, &ns) < 0)
		fail_msg("bad time %s", s);
	return ns / 1000000000;
}

static json_t *J(const char *text)
{
	json_error_t err;
	json_t *j = json_loads(text, 0, &err);

	if (!j)
		fail_msg("bad JSON in test (%s): %s", err.text, text);
	return j;
}

/* A policy: spec fields (JSON members without braces) and an optional status object. */
static struct policy *policy(const char *spec_members, const char *status)
{
	char buf[4096];
	struct policy *p = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf),
		 "{\"apiVersion\":\"aiprof.io/v1alpha1\",\"kind\":\"ProfilingPolicy\","
		 "\"metadata\":{\"name\":\"nightly\",\"namespace\":\"train\",\"uid\":\"" UID "\","
		 "\"resourceVersion\":\"7\",\"generation\":2,"
		 "\"creationTimestamp\":\"2024-05-01T10:00:00Z\"},"
		 "\"spec\":{\"selector\":{\"matchLabels\":{\"job\":\"llama\"}},"
		 "\"sessionTemplate\":{\"metadata\":{\"labels\":{\"team\":\"a\"}},"
		 "\"spec\":{\"duration\":\"20s\",\"targets\":{\"container\":\"trainer\","
		 "\"podName\":\"ignored\"}}}%s%s}%s%s}",
		 spec_members[0] ? "," : "", spec_members, status ? ",\"status\":" : "",
		 status ? status : "");
	j = J(buf);
	assert_int_equal(policy__from_json(j, &p), 0);
	json_decref(j);
	return p;
}

static struct session *session(const char *name, const char *phase, const char *completed,
			       bool owned)
{
	char buf[2048];
	struct session *s = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf),
		 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"train\",\"uid\":\"uid-%s\","
		 "\"resourceVersion\":\"3\",\"creationTimestamp\":\"2024-05-01T09:00:00Z\","
		 "\"ownerReferences\":[{\"apiVersion\":\"aiprof.io/v1alpha1\",\"kind\":\"%s\","
		 "\"name\":\"nightly\",\"uid\":\"" UID "\",\"controller\":true}]},"
		 "\"spec\":{\"targets\":{\"podName\":\"trainer-0\"}},"
		 "\"status\":{\"phase\":\"%s\"%s%s%s}}",
		 name, name, owned ? "ProfilingPolicy" : "Something", phase,
		 completed ? ",\"completionTime\":\"" : "", completed ? completed : "",
		 completed ? "\"" : "");
	j = J(buf);
	assert_int_equal(session__from_json(j, &s), 0);
	json_decref(j);
	return s;
}

static struct kpod *pod(const char *name, const char *labels, const char *annotations)
{
	char buf[2048];
	struct kpod *p = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf),
		 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"train\",\"labels\":%s,"
		 "\"annotations\":%s},\"spec\":{\"containers\":[{\"name\":\"trainer\"}]}}",
		 name, labels, annotations);
	j = J(buf);
	assert_int_equal(kpod__from_json(j, &p), 0);
	json_decref(j);
	return p;
}

struct world {
	struct policy *p;
	struct session *s[8];
	size_t n_s;
	struct kpod *pods[8];
	size_t n_pods;
	struct policy_plan plan;
};

static void plan_at(struct world *w, const char *now)
{
	struct policy_input in = {
		.p = w->p, .sessions = (const struct session *const *)w->s, .n_sessions = w->n_s,
		.pods = (const struct kpod *const *)w->pods, .n_pods = w->n_pods, .now = T(now),
	};

	policy_plan__release(&w->plan);
	assert_int_equal(policy__plan(&in, &w->plan), 0);
}

static void world_free(struct world *w)
{
	policy_plan__release(&w->plan);
	policy__unref(w->p);
	for (size_t i = 0; i < w->n_s; i++)
		session__unref(w->s[i]);
	for (size_t i = 0; i < w->n_pods; i++)
		kpod__unref(w->pods[i]);
}

static const char *cond(const json_t *st, const char *type, const char *field)
{
	const json_t *e;
	size_t i;

	json_array_foreach(json_object_get(st, "conditions"), i, e)
		if (strcmp(kj_str(e, "type"), type) == 0)
			return kj_str(e, field);
	return NULL;
}

static const struct plan_event *event(const struct policy_plan *pl, const char *reason)
{
	for (size_t i = 0; i < pl->n_events; i++)
		if (strcmp(pl->events[i].reason, reason) == 0)
			return &pl->events[i];
	return NULL;
}

static void test_decode(void **state)
{
	struct policy *p;
	static const struct {
		const char *spec, *msg;
	} bad[] = {
		{ "\"concurrencyPolicy\":\"Sometimes\",\"schedule\":\"@daily\"",
		  "spec.concurrencyPolicy \"Sometimes\": use Allow, Forbid or Replace" },
		{ "\"suspend\":false", "give spec.schedule, spec.trigger, or both" },
		{ "\"schedule\":\"* * *\"", "spec.schedule \"* * *\": expected 5 fields" },
		{ "\"trigger\":{\"annotation\":\"example.com/now\"}", "must be an annotation key under aiprof.io/" },
		{ "\"trigger\":{\"annotation\":\"aiprof.io/bad key\"}", "must be an annotation key" },
		{ "\"schedule\":\"@daily\",\"startingDeadlineSeconds\":-5", "spec.startingDeadlineSeconds" },
		{ "\"schedule\":\"@daily\",\"successfulSessionsHistoryLimit\":\"3\"", "successfulSessionsHistoryLimit" },
		{ "\"schedule\":\"@daily\",\"timeZone\":7", "spec.timeZone must be a string" },
	};

	(void)state;
	p = policy("\"schedule\":\"@hourly\",\"trigger\":{}", NULL);
	assert_int_equal(p->spec_err, 0);
	assert_string_equal(p->trigger, POLICY_DEFAULT_TRIGGER);
	assert_int_equal(p->concurrency, CONC_FORBID);
	assert_int_equal(p->success_limit, 3);
	assert_int_equal(p->failed_limit, 1);
	assert_int_equal(p->starting_deadline_s, -1);
	assert_false(p->suspend);
	assert_int_equal(p->created_s, T("2024-05-01T10:00:00Z"));
	policy__unref(p);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = policy(bad[i].spec, NULL);
		assert_int_equal(p->spec_err, -EINVAL);
		if (!strstr(p->spec_msg, bad[i].msg))
			fail_msg("%s: '%s' does not say '%s'", bad[i].spec, p->spec_msg, bad[i].msg);
		policy__unref(p);
	}
	{
		json_t *j = J("{\"metadata\":{\"name\":\"x\",\"namespace\":\"n\",\"uid\":\"u\"},"
			      "\"spec\":{\"selector\":{},\"schedule\":\"@daily\","
			      "\"sessionTemplate\":{\"spec\":{}}}}");

		assert_int_equal(policy__from_json(j, &p), 0);
		assert_non_null(strstr(p->spec_msg, "would select every pod"));
		policy__unref(p);
		json_object_del(json_object_get(j, "spec"), "sessionTemplate");
		json_object_set_new(json_object_get(j, "spec"), "selector",
				    J("{\"matchLabels\":{\"a\":\"b\"}}"));
		assert_int_equal(policy__from_json(j, &p), 0);
		assert_non_null(strstr(p->spec_msg, "spec.sessionTemplate.spec is required"));
		policy__unref(p);
		json_object_del(json_object_get(j, "metadata"), "uid");
		assert_int_equal(policy__from_json(j, &p), -EINVAL);
		json_decref(j);
	}
}

static void test_names(void **state)
{
	struct policy *p = policy("\"schedule\":\"@hourly\"", NULL);
	char a[254], b[254], c[254];

	(void)state;
	policy__scheduled_name(p, T("2024-05-01T11:00:00Z"), a);
	assert_string_equal(a, "nightly-28576020");
	policy__trigger_name(p, "trainer-0", "run-1", a);
	policy__trigger_name(p, "trainer-0", "run-1", b);
	policy__trigger_name(p, "trainer-1", "run-1", c);
	assert_string_equal(a, b);
	assert_string_not_equal(a, c);
	assert_int_equal(strlen(a), strlen("nightly-now-") + 10);
	assert_memory_equal(a, "nightly-now-", 12);
	free(p->name);
	p->name = malloc(254);
	memset(p->name, 'x', 253);
	p->name[253] = '\0';
	p->name[199] = '-';     /* the cut falls on a dash: it goes too */
	policy__scheduled_name(p, T("2024-05-01T11:00:00Z"), a);
	assert_int_equal(strlen(a), 199 + strlen("-28576020"));
	policy__unref(p);
}

static void test_schedule_on_time(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"@hourly\"", NULL) };
	const json_t *body;
	json_t *st;

	(void)state;
	/* half an hour after creation: nothing yet, look again at 11:00 */
	plan_at(&w, "2024-05-01T10:30:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_int_equal(w.plan.requeue_at, T("2024-05-01T11:00:00Z"));
	assert_string_equal(cond(w.plan.status, "Scheduling", "message"),
			    "next scheduled session at 2024-05-01T11:00:00Z");
	assert_string_equal(cond(w.plan.status, "Ready", "status"), "True");
	assert_int_equal(json_integer_value(json_object_get(w.plan.status, "observedGeneration")), 2);

	/* at 11:00:30 the 11:00 session */
	plan_at(&w, "2024-05-01T11:00:30Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_int_equal(w.plan.actions[0].kind, PACT_CREATE_SESSION);
	assert_string_equal(w.plan.actions[0].name, "nightly-28576020");
	body = w.plan.actions[0].body;
	assert_string_equal(kj_str(body, "kind"), "ProfilingSession");
	assert_string_equal(kj_str(body, "metadata.namespace"), "train");
	assert_string_equal(kj_str(body, "metadata.labels.team"), "a");
	assert_string_equal(kj_str(json_array_get(kj_get(body, "metadata.ownerReferences"), 0), "uid"), UID);
	assert_true(json_is_true(json_object_get(json_array_get(kj_get(body, "metadata.ownerReferences"), 0),
						 "controller")));
	assert_string_equal(kj_str(body, "spec.targets.selector.matchLabels.job"), "llama");
	assert_null(kj_get(body, "spec.targets.podName"));      /* the template's is dropped */
	assert_string_equal(kj_str(body, "spec.targets.container"), "trainer");
	assert_string_equal(kj_str(body, "spec.duration"), "20s");
	assert_string_equal(json_string_value(json_object_get(kj_get(body, "metadata.annotations"),
							      ANNOTATION_SCHEDULED)), "2024-05-01T11:00:00Z");
	assert_string_equal(kj_str(w.plan.status, "lastScheduleTime"), "2024-05-01T11:00:00Z");
	assert_string_equal(kj_str(json_array_get(json_object_get(w.plan.status, "active"), 0), "name"),
			    "nightly-28576020");
	assert_string_equal(event(&w.plan, "SessionCreated")->message,
			    "created session nightly-28576020 for the scheduled time 2024-05-01T11:00:00Z");
	assert_null(event(&w.plan, "MissedSchedule"));
	assert_int_equal(w.plan.requeue_at, T("2024-05-01T12:00:00Z"));

	/* the status written, the session in the cache: nothing more to do, nothing to write */
	st = json_incref(w.plan.status);
	json_decref(w.p->status);
	w.p->status = st;
	w.s[w.n_s++] = session("nightly-28576020", "Pending", NULL, true);
	plan_at(&w, "2024-05-01T11:01:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_int_equal(w.plan.n_events, 0);
	assert_string_equal(kj_str(json_array_get(json_object_get(w.plan.status, "active"), 0), "uid"),
			    "uid-nightly-28576020");     /* the uid, now that it is known */
	st = json_incref(w.plan.status);
	json_decref(w.p->status);
	w.p->status = st;
	plan_at(&w, "2024-05-01T11:02:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_null(w.plan.status);
	world_free(&w);
}

static void test_missed_and_deadline(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"@hourly\"",
				       "{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\"}") };

	(void)state;
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_string_equal(w.plan.actions[0].name, "nightly-28576020");
	assert_string_equal(event(&w.plan, "MissedSchedule")->message,
			    "2 scheduled times were missed since 2024-05-01T08:00:00Z; started only "
			    "the most recent, 2024-05-01T11:00:00Z");
	assert_true(event(&w.plan, "MissedSchedule")->warning);
	world_free(&w);

	/* startingDeadlineSeconds 300: 11:00 can start until 11:05 */
	w = (struct world){ .p = policy("\"schedule\":\"@hourly\",\"startingDeadlineSeconds\":300",
					"{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\"}") };
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_int_equal(w.plan.requeue_at, T("2024-05-01T12:00:00Z"));
	plan_at(&w, "2024-05-01T11:04:59Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_null(event(&w.plan, "MissedSchedule"));   /* the earlier ones are past the deadline */
	world_free(&w);

	/* a session by that name exists already (its status write was lost): no second one */
	w = (struct world){ .p = policy("\"schedule\":\"@hourly\"",
					"{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\"}") };
	w.s[w.n_s++] = session("nightly-28576020", "Profiling", NULL, true);
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_string_equal(kj_str(w.plan.status, "lastScheduleTime"), "2024-05-01T11:00:00Z");
	world_free(&w);
}

static void test_concurrency(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"@hourly\"",
				       "{\"lastScheduleTime\":\"2024-05-01T10:00:00Z\"}") };
	json_t *st;

	(void)state;
	w.s[w.n_s++] = session("nightly-28575960", "Profiling", NULL, true);
	w.s[w.n_s++] = session("someone-elses", "Profiling", NULL, false);  /* not ours: ignored */
	/* Forbid: the 11:00 time waits */
	plan_at(&w, "2024-05-01T11:00:10Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_string_equal(cond(w.plan.status, "Scheduling", "reason"), "ConcurrencyForbid");
	assert_string_equal(cond(w.plan.status, "Scheduling", "message"),
			    "the scheduled time 2024-05-01T11:00:00Z waits: session nightly-28575960 is "
			    "still running (concurrencyPolicy Forbid)");
	assert_non_null(event(&w.plan, "ConcurrencyForbid"));
	/* ... and says so once */
	st = json_incref(w.plan.status);
	json_decref(w.p->status);
	w.p->status = st;
	plan_at(&w, "2024-05-01T11:00:20Z");
	assert_null(w.plan.status);
	assert_int_equal(w.plan.n_events, 0);
	/* the running session ends: the time starts */
	session__unref(w.s[0]);
	w.s[0] = session("nightly-28575960", "Succeeded", "2024-05-01T11:20:00Z", true);
	plan_at(&w, "2024-05-01T11:20:01Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_string_equal(w.plan.actions[0].name, "nightly-28576020");
	assert_string_equal(cond(w.plan.status, "Scheduling", "reason"), "Scheduled");
	assert_string_equal(kj_str(w.plan.status, "lastSuccessfulTime"), "2024-05-01T11:20:00Z");
	world_free(&w);

	/* Replace: delete the running one (by uid), then create */
	w = (struct world){ .p = policy("\"schedule\":\"@hourly\",\"concurrencyPolicy\":\"Replace\"",
					"{\"lastScheduleTime\":\"2024-05-01T10:00:00Z\"}") };
	w.s[w.n_s++] = session("nightly-28575960", "Profiling", NULL, true);
	plan_at(&w, "2024-05-01T11:00:10Z");
	assert_int_equal(w.plan.n_actions, 2);
	assert_int_equal(w.plan.actions[0].kind, PACT_DELETE_SESSION);
	assert_string_equal(w.plan.actions[0].name, "nightly-28575960");
	assert_string_equal(w.plan.actions[0].uid, "uid-nightly-28575960");
	assert_int_equal(w.plan.actions[1].kind, PACT_CREATE_SESSION);
	assert_int_equal(json_array_size(json_object_get(w.plan.status, "active")), 1);
	assert_non_null(event(&w.plan, "SessionReplaced"));
	world_free(&w);

	/* Allow: both */
	w = (struct world){ .p = policy("\"schedule\":\"@hourly\",\"concurrencyPolicy\":\"Allow\"",
					"{\"lastScheduleTime\":\"2024-05-01T10:00:00Z\"}") };
	w.s[w.n_s++] = session("nightly-28575960", "Profiling", NULL, true);
	plan_at(&w, "2024-05-01T11:00:10Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_int_equal(w.plan.actions[0].kind, PACT_CREATE_SESSION);
	assert_int_equal(json_array_size(json_object_get(w.plan.status, "active")), 2);
	assert_string_equal(kj_str(json_array_get(json_object_get(w.plan.status, "active"), 0), "uid"),
			    "uid-nightly-28575960");
	world_free(&w);
}

static void test_history(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"@hourly\",\"successfulSessionsHistoryLimit\":2",
				       "{\"lastScheduleTime\":\"2024-05-01T11:00:00Z\"}") };

	(void)state;
	w.s[w.n_s++] = session("ok-c", "Succeeded", "2024-05-01T10:30:00Z", true);
	w.s[w.n_s++] = session("ok-a", "Succeeded", "2024-05-01T08:30:00Z", true);
	w.s[w.n_s++] = session("ok-d", "Succeeded", "2024-05-01T11:30:00Z", true);
	w.s[w.n_s++] = session("ok-b", "Succeeded", "2024-05-01T09:30:00Z", true);
	w.s[w.n_s++] = session("bad-1", "Failed", "2024-05-01T09:00:00Z", true);
	w.s[w.n_s++] = session("bad-2", "Failed", "2024-05-01T10:00:00Z", true);
	w.s[w.n_s++] = session("running", "Injecting", NULL, true);
	plan_at(&w, "2024-05-01T11:40:00Z");
	assert_int_equal(w.plan.n_actions, 3);
	assert_string_equal(w.plan.actions[0].name, "ok-a");
	assert_string_equal(w.plan.actions[1].name, "ok-b");
	assert_string_equal(w.plan.actions[2].name, "bad-1");
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(w.plan.actions[i].kind, PACT_DELETE_SESSION);
	assert_string_equal(event(&w.plan, "SessionDeleted")->message,
			    "deleted session ok-a (finished 2024-05-01T08:30:00Z): more than "
			    "successfulSessionsHistoryLimit=2");
	assert_string_equal(kj_str(w.plan.status, "lastSuccessfulTime"), "2024-05-01T11:30:00Z");
	assert_int_equal(json_array_size(json_object_get(w.plan.status, "active")), 1);
	world_free(&w);
}

static void test_triggers(void **state)
{
	struct world w = { .p = policy("\"trigger\":{},\"concurrencyPolicy\":\"Allow\"", NULL) };
	const json_t *tr;
	json_t *st;

	(void)state;
	w.pods[w.n_pods++] = pod("trainer-1", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"t1\"}");
	w.pods[w.n_pods++] = pod("trainer-0", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"t1\"}");
	w.pods[w.n_pods++] = pod("other-0", "{\"job\":\"other\"}", "{\"aiprof.io/profile-now\":\"t1\"}");
	w.pods[w.n_pods++] = pod("trainer-2", "{\"job\":\"llama\"}", "{\"aiprof.io/other\":\"t1\"}");
	w.pods[w.n_pods++] = pod("trainer-3", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"\"}");
	w.pods[w.n_pods++] = pod("inj", "{\"job\":\"llama\",\"aiprof.io/session-uid\":\"x\"}",
				 "{\"aiprof.io/profile-now\":\"t1\"}");
	plan_at(&w, "2024-05-01T11:00:00Z");
	assert_int_equal(w.plan.n_actions, 2);
	assert_string_equal(kj_str(w.plan.actions[0].body, "spec.targets.podName"), "trainer-0");
	assert_string_equal(kj_str(w.plan.actions[1].body, "spec.targets.podName"), "trainer-1");
	assert_null(kj_get(w.plan.actions[0].body, "spec.targets.selector"));
	tr = json_object_get(w.plan.status, "triggers");
	assert_int_equal(json_array_size(tr), 2);
	assert_string_equal(kj_str(json_array_get(tr, 0), "token"), "t1");
	assert_string_equal(kj_str(json_array_get(tr, 0), "session"), w.plan.actions[0].name);
	assert_string_equal(kj_str(json_array_get(tr, 0), "time"), "2024-05-01T11:00:00Z");
	assert_int_equal(w.plan.requeue_at, 0);         /* no schedule */
	assert_string_equal(cond(w.plan.status, "Scheduling", "reason"), "Idle");

	/* handled: nothing again, even without the sessions (deleted by the history limit) */
	st = json_incref(w.plan.status);
	json_decref(w.p->status);
	w.p->status = st;
	plan_at(&w, "2024-05-01T11:05:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	/* a new value on trainer-0 */
	kpod__unref(w.pods[1]);
	w.pods[1] = pod("trainer-0", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"t2\"}");
	plan_at(&w, "2024-05-01T11:06:00Z");
	assert_int_equal(w.plan.n_actions, 1);
	assert_string_equal(event(&w.plan, "SessionCreated")->message + strlen("created session nightly-now-") + 10,
			    " for pod trainer-0's trigger aiprof.io/profile-now=t2");
	world_free(&w);

	/* at most POLICY_MAX_TRIGGERS remembered, the oldest dropped */
	{
		json_t *arr = json_array(), *stj;
		char *txt;

		for (int i = 0; i < POLICY_MAX_TRIGGERS; i++) {
			char tok[16];

			snprintf(tok, sizeof(tok), "old-%d", i);
			json_array_append_new(arr, json_pack("{s:s,s:s}", "pod", "trainer-9", "token", tok));
		}
		stj = json_pack("{s:o}", "triggers", arr);
		txt = json_dumps(stj, JSON_COMPACT);
		w = (struct world){ .p = policy("\"trigger\":{}", txt) };
		free(txt);
		json_decref(stj);
		w.pods[w.n_pods++] = pod("trainer-0", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"n\"}");
		plan_at(&w, "2024-05-01T11:00:00Z");
		tr = json_object_get(w.plan.status, "triggers");
		assert_int_equal(json_array_size(tr), POLICY_MAX_TRIGGERS);
		assert_string_equal(kj_str(json_array_get(tr, 0), "token"), "old-1");
		assert_string_equal(kj_str(json_array_get(tr, POLICY_MAX_TRIGGERS - 1), "token"), "n");
		world_free(&w);
	}
}

static void test_suspend_zone_invalid(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"@hourly\",\"trigger\":{},\"suspend\":true",
				       "{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\"}") };
	struct policy_input in;

	(void)state;
	w.pods[w.n_pods++] = pod("trainer-0", "{\"job\":\"llama\"}", "{\"aiprof.io/profile-now\":\"t\"}");
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_string_equal(cond(w.plan.status, "Scheduling", "reason"), "Suspended");
	assert_int_equal(w.plan.requeue_at, 0);
	world_free(&w);

	w = (struct world){ .p = policy("\"schedule\":\"@hourly\",\"timeZone\":\"Mars/Base\"",
					"{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\"}") };
	in = (struct policy_input){ .p = w.p, .zone_err = -ENOENT,
				    .zone_msg = "unknown time zone 'Mars/Base'", .now = T("2024-05-01T11:10:00Z") };
	assert_int_equal(policy__plan(&in, &w.plan), 0);
	assert_int_equal(w.plan.n_actions, 0);
	assert_string_equal(cond(w.plan.status, "Ready", "reason"), "UnknownTimeZone");
	assert_true(event(&w.plan, "UnknownTimeZone")->warning);
	world_free(&w);

	w = (struct world){ .p = policy("\"schedule\":\"0 0 31 2 *\"", NULL) };
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_string_equal(cond(w.plan.status, "Ready", "reason"), "NeverScheduled");
	assert_int_equal(w.plan.n_actions, 0);
	world_free(&w);

	w = (struct world){ .p = policy("\"schedule\":\"@hourly\",\"concurrencyPolicy\":\"x\"",
					"{\"lastScheduleTime\":\"2024-05-01T08:00:00Z\","
					"\"triggers\":[{\"pod\":\"trainer-0\",\"token\":\"t\"}]}") };
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_string_equal(cond(w.plan.status, "Ready", "reason"), "InvalidSpec");
	assert_non_null(event(&w.plan, "InvalidSpec"));
	/* handled triggers are kept: fixing the spec must not repeat them */
	assert_int_equal(json_array_size(json_object_get(w.plan.status, "triggers")), 1);
	world_free(&w);

	/* a policy being deleted plans nothing: the garbage collector has its sessions */
	w = (struct world){ .p = policy("\"schedule\":\"@hourly\"", NULL) };
	w.p->deleting = true;
	plan_at(&w, "2024-05-01T11:10:00Z");
	assert_int_equal(w.plan.n_actions, 0);
	assert_null(w.plan.status);
	world_free(&w);
}

static void test_schedule_in_zone(void **state)
{
	struct world w = { .p = policy("\"schedule\":\"0 9 * * *\",\"timeZone\":\"America/New_York\"",
				       NULL) };
	const struct tz *z = NULL;
	char msg[128];
	struct policy_input in;

	(void)state;
	assert_int_equal(tz__load(NULL, "America/New_York", &z, msg, sizeof(msg)), 0);
	in = (struct policy_input){ .p = w.p, .zone = z, .now = T("2024-05-01T12:00:00Z") };
	assert_int_equal(policy__plan(&in, &w.plan), 0);
	assert_int_equal(w.plan.requeue_at, T("2024-05-01T13:00:00Z"));
	assert_string_equal(cond(w.plan.status, "Scheduling", "message"),
			    "next scheduled session at 2024-05-01T13:00:00Z (schedule \"0 9 * * *\" in "
			    "America/New_York)");
	world_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_schedule_on_time),
		cmocka_unit_test(test_missed_and_deadline),
		cmocka_unit_test(test_concurrency),
		cmocka_unit_test(test_history),
		cmocka_unit_test(test_triggers),
		cmocka_unit_test(test_suspend_zone_invalid),
		cmocka_unit_test(test_schedule_in_zone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
