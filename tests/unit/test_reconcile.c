/* SPDX-License-Identifier: MIT */
/*
 * controller/reconcile.c (the planner, with a fixed clock), controller/injspec.c (the
 * injector's pod and ephemeral container), common/termination.c, controller/session.c.
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
#include "controller/api.h"
#include "controller/kjson.h"
#include "controller/ktime.h"
#include "controller/reconcile.h"
#include "common/termination.h"

#define SEC 1000000000LL
static int64_t T0;                      /* the session's creationTimestamp */

static const struct reconcile_config cfg = {
	.inj = { .image = "aiprof:test", .grace_ns = 60 * SEC },
	.target_wait_ns = 30 * SEC,
	.denied_ns = "kube-system,aiprof-system",
};

/* ---- fixtures -------------------------------------------------------------------------- */

static json_t *session_json(const char *spec_extra_json)
{
	char buf[4096];
	json_t *j, *extra;

	snprintf(buf, sizeof(buf),
		 "{\"apiVersion\":\"aiprof.io/v1alpha1\",\"kind\":\"ProfilingSession\","
		 "\"metadata\":{\"name\":\"slow-step\",\"namespace\":\"train\",\"uid\":\"u-1234\","
		 "\"resourceVersion\":\"10\",\"generation\":1,"
		 "\"creationTimestamp\":\"2024-05-01T12:00:00Z\",\"finalizers\":[\"%s\"]},"
		 "\"spec\":{\"targets\":{\"podName\":\"trainer-0\",\"container\":\"trainer\"},"
		 "\"duration\":\"30s\",\"output\":{\"s3\":{\"endpoint\":\"https://s3.example.com\","
		 "\"bucket\":\"profiles\",\"prefix\":\"team-a/\",\"region\":\"us-east-1\","
		 "\"secretRef\":{\"name\":\"s3-creds\"}}}}}", SESSION_FINALIZER);
	j = json_loads(buf, 0, NULL);
	assert_non_null(j);
	if (spec_extra_json) {
		extra = json_loads(spec_extra_json, 0, NULL);
		assert_non_null(extra);
		json_object_update_recursive(json_object_get(j, "spec"), extra);
		json_decref(extra);
	}
	return j;
}

static struct session *session_from(json_t *j)
{
	struct session *s = NULL;

	assert_int_equal(session__from_json(j, &s), 0);
	json_decref(j);
	return s;
}

/* A new session object from s with status replaced (what the next reconcile would read). */
static struct session *with_status(struct session *s, json_t *status)
{
	char buf[4096];
	json_t *j;

	snprintf(buf, sizeof(buf), "{}");
	j = session_json(NULL);
	if (!s->has_finalizer)
		json_object_set_new(json_object_get(j, "metadata"), "finalizers", json_array());
	json_object_set(j, "status", status);
	session__unref(s);
	return session_from(j);
}

/* A running pod, or one whose containers have the given state. */
static struct kpod *pod(const char *name, const char *node, const char *runtime_class,
			const char *state_json, const char *labels_json)
{
	char buf[4096];
	struct kpod *p = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf),
		 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"train\",\"uid\":\"p-%s\","
		 "\"resourceVersion\":\"5\",\"labels\":%s},"
		 "\"spec\":{\"nodeName\":\"%s\",%s%s%s\"containers\":[{\"name\":\"trainer\"},"
		 "{\"name\":\"sidecar\"}]},"
		 "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"trainer\","
		 "\"containerID\":\"containerd://abc123\",\"state\":%s}]}}",
		 name, name, labels_json ? labels_json : "{\"job\":\"llama\"}", node,
		 runtime_class ? "\"runtimeClassName\":\"" : "", runtime_class ? runtime_class : "",
		 runtime_class ? "\"," : "",
		 state_json ? state_json : "{\"running\":{\"startedAt\":\"2024-05-01T11:00:00Z\"}}");
	j = json_loads(buf, 0, NULL);
	assert_non_null(j);
	assert_int_equal(kpod__from_json(j, &p), 0);
	json_decref(j);
	return p;
}

/* A pod labelled as one of s's (an injector or the merge pod): one container in the given
 * state. */
static struct kpod *session_pod(const struct session *s, const char *name, const char *node,
				const char *container, const char *state_json, const char *phase)
{
	char buf[8192];
	struct kpod *p = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf),
		 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"train\",\"uid\":\"i-%s\","
		 "\"labels\":{\"" LABEL_SESSION_UID "\":\"%s\",\"" LABEL_SESSION "\":\"%s\"}},"
		 "\"spec\":{%s%s%s\"containers\":[{\"name\":\"%s\"}]},"
		 "\"status\":{\"phase\":\"%s\",\"containerStatuses\":[{\"name\":\"%s\","
		 "\"state\":%s}]}}", name, name, s->uid, s->name, node ? "\"nodeName\":\"" : "",
		 node ? node : "", node ? "\"," : "", container, phase, container, state_json);
	j = json_loads(buf, 0, NULL);
	assert_non_null(j);
	assert_int_equal(kpod__from_json(j, &p), 0);
	json_decref(j);
	return p;
}

/* The injector pod named for s and target, its container in the given state. */
static struct kpod *injector(const struct session *s, const char *target, const char *state_json,
			     const char *phase)
{
	char name[INJECTOR_POD_NAME_MAX + 1];

	injspec__pod_name(s, target, name);
	return session_pod(s, name, "node-1", INJECTOR_CONTAINER, state_json, phase);
}

struct world {
	struct session *s;
	struct target_obs t[4];
	size_t n;
	const struct kpod *inj[4];
	size_t n_inj;
	int64_t now;
};

/* Plans for w; mp: the merge pod, create_err: how its creation failed (0: it did not). */
static void plan_merge(struct world *w, const struct kpod *mp, int create_err,
		       struct reconcile_plan *p)
{
	struct reconcile_input in = {
		.s = w->s, .targets = w->t, .n_targets = w->n, .injectors = w->inj,
		.n_injectors = w->n_inj, .merge_pod = mp, .merge_create_err = create_err,
		.now_ns = w->now, .cfg = &cfg,
	};

	if (create_err)
		snprintf(in.merge_create_msg, sizeof(in.merge_create_msg), "pods is forbidden");
	assert_int_equal(reconcile__plan(&in, p), 0);
}

static void plan(struct world *w, struct reconcile_plan *p)
{
	plan_merge(w, NULL, 0, p);
}

static const json_t *condition(const json_t *status, const char *type)
{
	const json_t *c;
	size_t i;

	json_array_foreach(json_object_get(status, "conditions"), i, c)
		if (strcmp(kj_str(c, "type"), type) == 0)
			return c;
	return NULL;
}

static const char *cond_reason(const json_t *status, const char *type)
{
	return kj_str(condition(status, type), "reason");
}

static bool has_event(const struct reconcile_plan *p, const char *reason)
{
	for (size_t i = 0; i < p->n_events; i++)
		if (strcmp(p->events[i].reason, reason) == 0)
			return true;
	return false;
}

/* p fails the session with reason (its condition and event) and a message that says
 * needle, and creates nothing. */
static void assert_fails_with(const struct reconcile_plan *p, const char *reason,
			      const char *needle)
{
	assert_int_equal(p->n_actions, 0);
	assert_string_equal(kj_str(p->status, "phase"), "Failed");
	assert_string_equal(cond_reason(p->status, "Failed"), reason);
	assert_non_null(strstr(kj_str(p->status, "message"), needle));
	assert_true(has_event(p, reason));
}

static int setup(void **state)
{
	(void)state;
	return ktime_parse("2024-05-01T12:00:00Z", &T0);
}

/* ---- session parsing ---------------------------------------------------------------- */

static void check_spec_error(const char *extra, const char *needle)
{
	struct session *s = session_from(session_json(extra));

	if (s->spec_err != -EINVAL || !strstr(s->spec_msg, needle))
		fail_msg("%s: spec_err %d, '%s' (wanted '%s')", extra, s->spec_err, s->spec_msg, needle);
	session__unref(s);
}

static void test_session_spec(void **state)
{
	struct session *s = session_from(session_json(
		"{\"collectors\":{\"cpu\":{\"frequencyHz\":49},\"cuda\":{},\"nccl\":false},"
		"\"injection\":{\"mode\":\"NodeAgent\",\"method\":\"EBPFOnly\"},"
		"\"targets\":{\"process\":{\"match\":\"python.*train\"}},\"duration\":\"1500ms\","
		"\"ttlSecondsAfterFinished\":60}"));

	(void)state;
	assert_int_equal(s->spec_err, 0);
	assert_string_equal(s->key, "train/slow-step");
	assert_true(s->has_finalizer);
	assert_string_equal(s->spec.pod_name, "trainer-0");
	assert_string_equal(s->spec.container, "trainer");
	assert_string_equal(s->spec.process_match, "python.*train");
	assert_int_equal(s->spec.duration_ns, 1500000000ULL);
	assert_string_equal(s->spec.duration, "1500ms");
	assert_string_equal(s->spec.collectors, "cpu,cuda");
	assert_int_equal(s->spec.cpu_hz, 49);
	assert_int_equal(s->spec.mode, INJ_NODE_AGENT);
	assert_int_equal(s->spec.method, METHOD_EBPF_ONLY);
	assert_string_equal(s->spec.s3.bucket, "profiles");
	assert_string_equal(s->spec.s3.prefix, "team-a");
	assert_string_equal(s->spec.s3.key_id_key, "AWS_ACCESS_KEY_ID");
	assert_int_equal(s->spec.ttl_s, 60);
	assert_int_equal(s->created_ns, T0);
	session__unref(s);

	check_spec_error("{\"targets\":{\"podName\":null}}", "exactly one of podName");
	check_spec_error("{\"targets\":{\"selector\":{\"matchLabels\":{}}}}", "exactly one");
	check_spec_error("{\"targets\":{\"podName\":null,\"selector\":{}}}", "select every pod");
	check_spec_error("{\"targets\":{\"podName\":null,\"selector\":{\"matchExpressions\":"
			 "[{\"key\":\"a\",\"operator\":\"Near\"}]}}}", "unknown operator");
	check_spec_error("{\"targets\":{\"podName\":\"Bad_Name\"}}", "not a pod name");
	check_spec_error("{\"targets\":{\"process\":{\"match\":\"(unclosed\"}}}", "regular expression");
	/* the CRD's grammar: compound durations, and sub-millisecond ones passed on exact */
	s = session_from(session_json("{\"duration\":\"1h30m\"}"));
	assert_int_equal(s->spec_err, 0);
	assert_int_equal(s->spec.duration_ns, 5400000000000ULL);
	assert_string_equal(s->spec.duration, "5400s");
	session__unref(s);
	s = session_from(session_json("{\"duration\":\"1.5ms\"}"));
	assert_int_equal(s->spec_err, 0);
	assert_int_equal(s->spec.duration_ns, 1500000ULL);
	assert_string_equal(s->spec.duration, "1500000ns");
	session__unref(s);
	check_spec_error("{\"duration\":\"1h30\"}", "duration");
	check_spec_error("{\"duration\":\"soon\"}", "duration");
	check_spec_error("{\"duration\":\"48h\"}", "duration");
	check_spec_error("{\"collectors\":{\"gpu-magic\":{}}}", "unknown collector");
	check_spec_error("{\"injection\":{\"mode\":\"Sidecar\"}}", "injection.mode");
	check_spec_error("{\"output\":{\"s3\":{\"bucket\":null}}}", "bucket is required");
	check_spec_error("{\"output\":{\"s3\":{\"endpoint\":\"ftp://x\"}}}", "endpoint");
	check_spec_error("{\"output\":{\"s3\":{\"prefix\":\"a//b\"}}}", "prefix");
	check_spec_error("{\"output\":{\"s3\":{\"secretRef\":{\"name\":\"Bad Name\"}}}}", "secretRef");
	check_spec_error("{\"ttlSecondsAfterFinished\":-1}", "ttlSecondsAfterFinished");
	/* what the CRDs' CEL rules refuse, refused here too for servers that skip them */
	check_spec_error("{\"injection\":{\"mode\":\"EphemeralContainer\",\"method\":\"EBPFOnly\"}}",
			 "EBPFOnly needs mode NodeAgent or Auto");
	check_spec_error("{\"injection\":{\"method\":\"EBPFOnly\"},\"collectors\":{\"cupti\":{}}}",
			 "cupti needs injection.method Ptrace");
	check_spec_error("{\"output\":{\"s3\":{\"secretRef\":{\"name\":\"s\",\"accessKeyIDKey\":\"K\","
			 "\"secretAccessKeyKey\":\"K\"}}}}", "must name different keys");
	check_spec_error("{\"output\":{\"s3\":{\"secretRef\":{\"name\":\"s\",\"secretAccessKeyKey\":"
			 "\"AWS_ACCESS_KEY_ID\"}}}}", "must name different keys");
}

/* A session as session_json() makes it, without spec.output. */
static struct session *session_without_output(void)
{
	json_t *j = session_json(NULL);

	json_object_del(json_object_get(j, "spec"), "output");
	return session_from(j);
}

static void test_s3_defaults(void **state)
{
	static const struct session_s3_defaults d = {
		.endpoint = "https://minio.example.com:9000", .bucket = "team-profiles",
		.prefix = "aiprof", .region = "eu-west-1", .secret = "aiprof-s3",
	};
	struct world w = { .now = T0 + SEC };
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	struct reconcile_plan p;
	struct session *s;
	const json_t *cond;
	char why[300], *dump;

	(void)state;
	/* no defaults: a session without output.s3 is refused, and told about the flag */
	assert_int_equal(session__set_s3_defaults(NULL, why, sizeof(why)), 0);
	assert_null(session__s3_defaults_url());
	s = session_without_output();
	assert_int_equal(s->spec_err, -EINVAL);
	assert_non_null(strstr(s->spec_msg, "spec.output.storageRef is required"));
	assert_non_null(strstr(s->spec_msg, "--default-s3-bucket"));
	session__unref(s);

	/* bad defaults are refused, saying which flag */
	{
		static const struct { struct session_s3_defaults d; const char *needle; } bad[] = {
			{ { .bucket = "ok-bucket", .endpoint = "ftp://x" }, "--default-s3-endpoint 'ftp://x'" },
			{ { .bucket = "ok-bucket", .region = "a b" }, "--default-s3-region" },
			{ { .bucket = "ok-bucket", .secret = "Bad_Name" }, "--default-s3-secret 'Bad_Name'" },
			{ { .bucket = "ok-bucket", .prefix = "a//b" }, "--default-s3-prefix" },
			{ { .bucket = "x" }, "--default-s3-bucket" },
			{ { .secret = "s3" }, "need --default-s3-bucket" },
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			why[0] = '\0';
			assert_int_equal(session__set_s3_defaults(&bad[i].d, why, sizeof(why)), -EINVAL);
			if (!strstr(why, bad[i].needle))
				fail_msg("case %zu: '%s' (wanted '%s')", i, why, bad[i].needle);
			assert_null(session__s3_defaults_url());
		}
	}

	assert_int_equal(session__set_s3_defaults(&d, why, sizeof(why)), 0);
	assert_string_equal(session__s3_defaults_url(), "s3://team-profiles/aiprof");
	/* a session that names its own output takes none of them */
	s = session_from(session_json(NULL));
	assert_int_equal(s->spec_err, 0);
	assert_false(s->spec.s3_defaulted);
	assert_string_equal(s->spec.s3.bucket, "profiles");
	assert_string_equal(s->spec.s3.endpoint, "https://s3.example.com");
	assert_string_equal(s->spec.s3.secret_name, "s3-creds");
	session__unref(s);

	/* one without: every default, the secret by name in its own namespace */
	w.s = session_without_output();
	assert_int_equal(w.s->spec_err, 0);
	assert_true(w.s->spec.s3_defaulted);
	assert_string_equal(w.s->spec.s3.bucket, "team-profiles");
	assert_string_equal(w.s->spec.s3.prefix, "aiprof");
	assert_string_equal(w.s->spec.s3.region, "eu-west-1");
	assert_string_equal(w.s->spec.s3.secret_name, "aiprof-s3");
	assert_string_equal(w.s->spec.s3.key_id_key, "AWS_ACCESS_KEY_ID");
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;
	plan(&w, &p);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	dump = json_dumps(p.actions[0].body, JSON_COMPACT);
	assert_non_null(strstr(dump, "\"s3://team-profiles/aiprof/train/slow-step/u-1234/trainer-0\""));
	assert_non_null(strstr(dump, "\"secretName\":\"aiprof-s3\""));
	assert_non_null(strstr(dump, "https://minio.example.com:9000"));
	free(dump);
	/* the status and an Event say which defaults were used */
	cond = condition(p.status, "OutputDefaulted");
	assert_non_null(cond);
	assert_string_equal(kj_str(cond, "status"), "True");
	assert_string_equal(kj_str(cond, "reason"), "ControllerDefaults");
	assert_non_null(strstr(kj_str(cond, "message"), "bucket team-profiles, prefix 'aiprof', "
			       "endpoint https://minio.example.com:9000, region eu-west-1, "
			       "secretRef aiprof-s3"));
	assert_true(has_event(&p, "DefaultsApplied"));
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	/* once */
	w.s->spec.s3_defaulted = true;
	plan(&w, &p);
	assert_false(has_event(&p, "DefaultsApplied"));
	reconcile_plan__release(&p);
	session__unref(w.s);
	kpod__unref(target);
	assert_int_equal(session__set_s3_defaults(NULL, why, sizeof(why)), 0);

	/* the merge pod's scheduling knobs */
	{
		struct injector_config ic = { .image = "aiprof:test" };
		const char *src[] = { "s3://b/p/1", "s3://b/p/2" };
		json_t *mp;

		ic.merge_node_selector = json_object();
		ic.merge_tolerations = json_array();
		assert_int_equal(injspec__add_node_selector(ic.merge_node_selector,
							    "kubernetes.io/os=linux", why, sizeof(why)), 0);
		assert_int_equal(injspec__add_toleration(ic.merge_tolerations,
							 "nvidia.com/gpu:NoSchedule", why, sizeof(why)), 0);
		assert_int_equal(injspec__add_toleration(ic.merge_tolerations, "pool=batch",
							 why, sizeof(why)), 0);
		assert_int_equal(injspec__add_node_selector(ic.merge_node_selector, "novalue",
							    why, sizeof(why)), -EINVAL);
		assert_non_null(strstr(why, "KEY=VALUE"));
		assert_int_equal(injspec__add_toleration(ic.merge_tolerations, "a:Sometimes",
							 why, sizeof(why)), -EINVAL);
		assert_non_null(strstr(why, "NoExecute"));
		assert_int_equal(injspec__add_toleration(ic.merge_tolerations, "bad key",
							 why, sizeof(why)), -EINVAL);
		s = session_from(session_json(NULL));
		mp = injspec__merge_pod(&ic, s, src, 2);
		assert_non_null(mp);
		dump = json_dumps(kj_get(mp, "spec.nodeSelector"), JSON_COMPACT);
		assert_string_equal(dump, "{\"kubernetes.io/os\":\"linux\"}");
		free(dump);
		dump = json_dumps(kj_get(mp, "spec.tolerations"), JSON_COMPACT | JSON_SORT_KEYS);
		assert_string_equal(dump, "[{\"effect\":\"NoSchedule\",\"key\":\"nvidia.com/gpu\","
				    "\"operator\":\"Exists\"},{\"key\":\"pool\",\"operator\":\"Equal\","
				    "\"value\":\"batch\"}]");
		free(dump);
		json_decref(mp);
		/* none given: none set */
		json_object_clear(ic.merge_node_selector);
		json_array_clear(ic.merge_tolerations);
		mp = injspec__merge_pod(&ic, s, src, 2);
		assert_null(kj_get(mp, "spec.nodeSelector"));
		assert_null(kj_get(mp, "spec.tolerations"));
		json_decref(mp);
		session__unref(s);
		json_decref(ic.merge_node_selector);
		json_decref(ic.merge_tolerations);
	}
}

/* ---- the planner ---------------------------------------------------------------------- */

static void test_finalizer_first(void **state)
{
	json_t *j = session_json(NULL);
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;

	(void)state;
	json_object_set_new(json_object_get(j, "metadata"), "finalizers", json_array());
	w.s = session_from(j);
	plan(&w, &p);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_ADD_FINALIZER);
	assert_null(p.status);
	reconcile_plan__release(&p);
	session__unref(w.s);
}

static void test_invalid_and_foreign(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;

	(void)state;
	w.s = session_from(session_json("{\"duration\":\"forever\"}"));
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_string_equal(cond_reason(p.status, "Failed"), "InvalidSpec");
	assert_string_equal(cond_reason(p.status, "Failed"), "InvalidSpec");
	assert_true(has_event(&p, "InvalidSpec"));
	/* written once: the same status again is no change */
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	plan(&w, &p);
	assert_null(p.status);
	reconcile_plan__release(&p);
	session__unref(w.s);

	w.s = session_from(session_json("{\"targets\":{\"namespace\":\"other\"}}"));
	w.t[0] = (struct target_obs){ .name = "trainer-0" };
	w.n = 1;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);     /* nothing is created in any namespace */
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_string_equal(cond_reason(p.status, "Failed"), "TargetOutsideNamespace");
	assert_non_null(strstr(kj_str(p.status, "message"), "own namespace"));
	reconcile_plan__release(&p);
	session__unref(w.s);
}

/* A namespace the admin denies: the session fails TargetDenied before anything is made. */
static void test_denied_namespace(void **state)
{
	struct reconcile_config denying = cfg;
	struct target_obs t = { .name = "trainer-0" };
	struct reconcile_plan p;
	struct session *s;
	struct reconcile_input in = { .targets = &t, .n_targets = 1, .now_ns = T0 + SEC,
				      .cfg = &denying };

	(void)state;
	assert_true(reconcile__namespace_denied("kube-system,train", "train"));
	assert_true(reconcile__namespace_denied("train", "train"));
	assert_false(reconcile__namespace_denied("kube-system,trains", "train"));
	assert_false(reconcile__namespace_denied("kube-system,trai", "train"));
	assert_false(reconcile__namespace_denied("", "train"));
	assert_false(reconcile__namespace_denied(NULL, "train"));
	assert_true(reconcile__namespace_denied(",,train,", "train"));

	denying.denied_ns = "kube-system,train";
	in.s = s = session_from(session_json(NULL));
	assert_int_equal(reconcile__plan(&in, &p), 0);
	/* no pod, no ephemeral container */
	assert_fails_with(&p, "TargetDenied", "'train' may not be profiled");
	reconcile_plan__release(&p);
	session__unref(s);
}

/* A pod labelled for session label_uid (of namespace session_ns), in namespace ns,
 * controlled by owner_uid (none when NULL). */
static struct kpod *pod_in(const char *ns, const char *label_uid, const char *session_ns,
			   const char *owner_uid, const char *uid)
{
	char buf[1024];
	struct kpod *p = NULL;
	json_t *j;

	snprintf(buf, sizeof(buf), "{\"metadata\":{\"name\":\"aiprof-slow-step-x\","
		 "\"namespace\":\"%s\",\"uid\":\"%s\",\"labels\":{\"%s\":\"%s\",\"%s\":\"%s\"},"
		 "\"ownerReferences\":[{\"kind\":\"ConfigMap\",\"uid\":\"u-1234\"}%s%s%s]}}",
		 ns, uid, LABEL_SESSION_UID, label_uid, LABEL_SESSION_NS, session_ns,
		 owner_uid ? ",{\"kind\":\"ProfilingSession\",\"uid\":\"" : "",
		 owner_uid ? owner_uid : "", owner_uid ? "\",\"controller\":true}" : "");
	j = json_loads(buf, 0, NULL);
	assert_non_null(j);
	assert_int_equal(kpod__from_json(j, &p), 0);
	json_decref(j);
	return p;
}

static struct kpod *pod_owned(const char *label_uid, const char *owner_uid, const char *uid)
{
	return pod_in("train", label_uid, "train", owner_uid, uid);
}

/* A pod under the injector's name is the session's only with its label, its controlling
 * owner, and (once recorded) the UID the status recorded. */
static void test_injector_ours(void **state)
{
	struct session *s = session_from(session_json(NULL)), *rec;
	struct kpod *ok = pod_owned("u-1234", "u-1234", "pod-1");
	struct kpod *no_owner = pod_owned("u-1234", "u-9999", "pod-2");
	struct kpod *no_label = pod_owned("u-9999", "u-1234", "pod-3");
	json_t *st;

	(void)state;
	assert_string_equal(kpod__uid(ok), "pod-1");
	assert_string_equal(kpod__owner_uid(ok), "u-1234");   /* the controller: true one */
	assert_true(reconcile__injector_ours(&cfg.inj, s, "trainer-0", ok));
	assert_false(reconcile__injector_ours(&cfg.inj, s, "trainer-0", no_owner));
	assert_false(reconcile__injector_ours(&cfg.inj, s, "trainer-0", no_label));
	/* recorded: only that pod; another of the same name and owner is not it */
	st = json_pack("{s:[{s:s,s:s,s:s}]}", "targets", "pod", "trainer-0", "state", "Profiling",
		       "injectorUID", "pod-1");
	rec = with_status(s, st);
	json_decref(st);
	assert_true(reconcile__injector_ours(&cfg.inj, rec, "trainer-0", ok));
	kpod__unref(ok);
	ok = pod_owned("u-1234", "u-1234", "pod-1-replaced");
	assert_false(reconcile__injector_ours(&cfg.inj, rec, "trainer-0", ok));
	assert_true(reconcile__injector_ours(&cfg.inj, rec, "trainer-1", ok));  /* nothing recorded */
	/* gathered for stopping only if no pod of another UID was recorded under its name */
	assert_false(reconcile__pod_replaced(rec, ok));        /* the entry names no injector */
	st = json_pack("{s:[{s:s,s:s,s:s}]}", "targets", "pod", "trainer-0", "injector",
		       kpod__name(ok), "injectorUID", "pod-1");
	rec = with_status(rec, st);
	json_decref(st);
	assert_true(reconcile__pod_replaced(rec, ok));
	kpod__unref(ok);
	ok = pod_owned("u-1234", "u-1234", "pod-1");
	assert_false(reconcile__pod_replaced(rec, ok));
	kpod__unref(ok);
	kpod__unref(no_owner);
	kpod__unref(no_label);
	session__unref(rec);
}

/* The merge pod likewise: label, owner, and the UID status.mergeUID recorded. */
static void test_merge_ours(void **state)
{
	struct session *s = session_from(session_json(NULL)), *rec;
	struct kpod *ok = pod_owned("u-1234", "u-1234", "merge-1");
	struct kpod *no_owner = pod_owned("u-1234", "u-9999", "merge-2");
	struct kpod *no_label = pod_owned("u-9999", "u-1234", "merge-3");
	json_t *st = json_pack("{s:s}", "mergeUID", "merge-1");

	(void)state;
	assert_true(reconcile__merge_ours(&cfg.inj, s, ok));
	assert_false(reconcile__merge_ours(&cfg.inj, s, no_owner));
	assert_false(reconcile__merge_ours(&cfg.inj, s, no_label));
	rec = with_status(s, st);
	json_decref(st);
	assert_true(reconcile__merge_ours(&cfg.inj, rec, ok));
	kpod__unref(ok);
	ok = pod_owned("u-1234", "u-1234", "merge-1-replaced");
	assert_false(reconcile__merge_ours(&cfg.inj, rec, ok));
	kpod__unref(ok);
	kpod__unref(no_owner);
	kpod__unref(no_label);
	session__unref(rec);
}

/* spec.output: inline s3 only where allowed; storageRef resolved against a
 * ClusterProfilingStorage, which decides the namespaces, the scheme and the Secret. */
/* A session whose storage is the admin's: its pods go to the injector namespace, labelled
 * with the session's namespace and without an ownerReference (none crosses namespaces);
 * there a pod is the session's by its labels, nowhere else without its ownerReference. One
 * that gives its own spec.output.s3 keeps its pods (and the Secret) in its namespace. */
static void test_pods_in_injector_namespace(void **state)
{
	struct reconcile_config ic = cfg;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL), *p;
	struct world w = { .now = T0 + SEC };
	struct session_s3 o = { 0 };
	struct reconcile_plan plan_;
	const json_t *body;
	const char *src[] = { "s3://prof/a", "s3://prof/b" };
	json_t *st, *merge;
	char why[400];

	(void)state;
	ic.inj.ns = "aiprof-system";
	w.s = session_from(session_json("{\"output\":{\"s3\":null,\"storageRef\":{\"name\":\"team\"}}}"));
	st = json_loads("{\"metadata\":{\"name\":\"team\"},\"spec\":{\"namespaces\":[\"train\"],"
			"\"s3\":{\"endpoint\":\"https://s3.corp\",\"bucket\":\"prof\","
			"\"secretRef\":{\"name\":\"corp-s3\"}}}}", 0, NULL);
	assert_int_equal(session__resolve_storage(w.s, st, &o, why, sizeof(why)), 0);
	json_decref(st);
	w.s->spec.s3 = o;               /* as the controller's pass does */
	assert_string_equal(injspec__pods_namespace(&ic.inj, w.s), "aiprof-system");
	assert_string_equal(injspec__pods_namespace(&cfg.inj, w.s), "train");  /* none set */
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;
	{
		struct reconcile_input in = { .s = w.s, .targets = w.t, .n_targets = 1,
					      .now_ns = w.now, .cfg = &ic };

		assert_int_equal(reconcile__plan(&in, &plan_), 0);
	}
	assert_int_equal(plan_.n_actions, 1);
	assert_int_equal(plan_.actions[0].kind, ACT_CREATE_POD);
	body = plan_.actions[0].body;
	assert_string_equal(kj_str(body, "metadata.namespace"), "aiprof-system");
	assert_null(kj_get(body, "metadata.ownerReferences"));
	assert_string_equal(json_string_value(json_object_get(kj_get(body, "metadata.labels"),
							       LABEL_SESSION_NS)), "train");
	assert_string_equal(json_string_value(json_object_get(kj_get(body, "metadata.labels"),
							       LABEL_SESSION_UID)), "u-1234");
	assert_string_equal(kj_str(json_array_get(kj_get(body, "spec.volumes"), 0),
				   "secret.secretName"), "corp-s3");
	reconcile_plan__release(&plan_);
	merge = injspec__merge_pod(&ic.inj, w.s, src, 2);
	assert_non_null(merge);
	assert_string_equal(kj_str(merge, "metadata.namespace"), "aiprof-system");
	assert_null(kj_get(merge, "metadata.ownerReferences"));
	json_decref(merge);

	/* recognised there by the labels; a pod labelled for another namespace's session of
	 * the same UID, or one in a third namespace, is not it */
	p = pod_in("aiprof-system", "u-1234", "train", NULL, "pod-1");
	assert_true(reconcile__pod_of(&ic.inj, w.s, p));
	assert_true(reconcile__injector_ours(&ic.inj, w.s, "trainer-0", p));
	assert_false(reconcile__pod_of(&cfg.inj, w.s, p));     /* not the injector namespace */
	kpod__unref(p);
	p = pod_in("aiprof-system", "u-1234", "other", NULL, "pod-2");
	assert_false(reconcile__pod_of(&ic.inj, w.s, p));
	kpod__unref(p);
	p = pod_in("elsewhere", "u-1234", "train", "u-1234", "pod-3");
	assert_false(reconcile__pod_of(&ic.inj, w.s, p));
	kpod__unref(p);
	p = pod_in("train", "u-1234", "train", NULL, "pod-4");  /* its own namespace: owner */
	assert_false(reconcile__pod_of(&ic.inj, w.s, p));
	kpod__unref(p);
	p = pod_in("train", "u-1234", "train", "u-1234", "pod-5");
	assert_true(reconcile__pod_of(&ic.inj, w.s, p));        /* made before the move */
	kpod__unref(p);
	session__unref(w.s);

	/* its own spec.output.s3: its namespace, its ownerReference */
	w.s = session_from(session_json(NULL));
	assert_string_equal(injspec__pods_namespace(&ic.inj, w.s), "train");
	{
		struct reconcile_input in = { .s = w.s, .targets = w.t, .n_targets = 1,
					      .now_ns = w.now, .cfg = &ic };

		assert_int_equal(reconcile__plan(&in, &plan_), 0);
	}
	body = plan_.actions[0].body;
	assert_string_equal(kj_str(body, "metadata.namespace"), "train");
	assert_string_equal(kj_str(json_array_get(kj_get(body, "metadata.ownerReferences"), 0),
				   "uid"), "u-1234");
	reconcile_plan__release(&plan_);
	session__unref(w.s);
	kpod__unref(target);
}

static void test_storage(void **state)
{
	struct session *s;
	struct session_s3 o = { 0 };
	char why[400];
	json_t *st;

	(void)state;
	session__set_inline_s3(false);
	s = session_from(session_json(NULL));
	assert_int_equal(s->spec_err, -EINVAL);
	assert_non_null(strstr(s->spec_msg, "spec.output.s3 is turned off"));
	assert_non_null(strstr(s->spec_msg, "storageRef"));
	/* one that started before (an upgrade) runs on */
	st = json_pack("{s:s,s:s}", "phase", "Profiling", "startTime", "2024-05-01T12:00:01Z");
	s = with_status(s, st);
	json_decref(st);
	assert_int_equal(s->spec_err, 0);
	assert_string_equal(s->spec.s3.bucket, "profiles");
	session__unref(s);
	s = session_from(session_json("{\"output\":{\"s3\":null,\"storageRef\":{\"name\":\"team\"}}}"));
	session__set_inline_s3(true);
	assert_int_equal(s->spec_err, 0);
	assert_string_equal(s->spec.storage_ref, "team");
	assert_null(s->spec.s3.bucket);

	st = json_loads("{\"metadata\":{\"name\":\"team\"},\"spec\":{\"namespaces\":[\"other\","
			"\"train\"],\"s3\":{\"endpoint\":\"https://s3.corp:9000\",\"bucket\":\"prof\","
			"\"prefix\":\"k8s\",\"secretRef\":{\"name\":\"corp-s3\"}}}}", 0, NULL);
	assert_int_equal(session__resolve_storage(s, st, &o, why, sizeof(why)), 0);
	assert_string_equal(o.endpoint, "https://s3.corp:9000");
	assert_string_equal(o.bucket, "prof");
	assert_string_equal(o.prefix, "k8s");
	assert_string_equal(o.secret_name, "corp-s3");
	assert_string_equal(o.key_id_key, "AWS_ACCESS_KEY_ID");
	session__s3_clear(&o);
	json_decref(st);

	st = json_loads("{\"metadata\":{\"name\":\"team\"},\"spec\":{\"namespaces\":[\"other\"],"
			"\"s3\":{\"bucket\":\"prof\"}}}", 0, NULL);
	assert_int_equal(session__resolve_storage(s, st, &o, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "is not for namespace 'train'"));
	assert_null(o.bucket);
	json_decref(st);

	st = json_loads("{\"metadata\":{\"name\":\"team\"},\"spec\":{\"namespaces\":[\"*\"],"
			"\"s3\":{\"endpoint\":\"http://10.0.0.9\",\"bucket\":\"prof\"}}}", 0, NULL);
	assert_int_equal(session__resolve_storage(s, st, &o, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "plain http"));
	json_object_set_new(json_object_get(st, "spec"), "allowInsecureEndpoint", json_true());
	assert_int_equal(session__resolve_storage(s, st, &o, why, sizeof(why)), 0);
	session__s3_clear(&o);
	json_object_set_new(json_object_get(json_object_get(st, "spec"), "s3"), "bucket",
			    json_string("x"));
	assert_int_equal(session__resolve_storage(s, st, &o, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ClusterProfilingStorage team: spec.s3"));
	json_decref(st);
	session__unref(s);
}

/* The plan of a session whose storage is not usable: waited for while missing, else failed. */
static void test_storage_errors(void **state)
{
	struct target_obs t = { .name = "trainer-0" };
	struct reconcile_plan p;
	struct session *s = session_from(session_json("{\"output\":{\"s3\":null,"
						       "\"storageRef\":{\"name\":\"team\"}}}"));
	struct reconcile_input in = { .s = s, .targets = &t, .n_targets = 1, .now_ns = T0 + SEC,
				      .cfg = &cfg, .storage_err = -ENOENT };

	(void)state;
	snprintf(in.storage_msg, sizeof(in.storage_msg), "ClusterProfilingStorage team not found");
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Pending");
	assert_true(p.requeue_at_ns > in.now_ns);
	reconcile_plan__release(&p);
	in.now_ns = T0 + (int64_t)cfg.target_wait_ns + SEC;
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_string_equal(cond_reason(p.status, "Failed"), "StorageNotFound");
	reconcile_plan__release(&p);
	in.now_ns = T0 + SEC;
	in.storage_err = -EPERM;
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(cond_reason(p.status, "Failed"), "StorageDenied");
	reconcile_plan__release(&p);
	session__unref(s);
}

/* The capabilities of the injector follow the collectors: library collectors only need
 * ptrace, not BPF or PERFMON (nor SYS_ADMIN on an old kernel). */
static char *caps_of(const char *spec_extra)
{
	struct session *s = session_from(session_json(spec_extra));
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	struct injector_target t = { .s = s, .pod = target, .container = "trainer",
				     .container_id = "containerd://abc" };
	json_t *pj = injspec__node_agent_pod(&cfg.inj, &t);
	char *dump;

	assert_non_null(pj);
	dump = json_dumps(kj_get(json_array_get(kj_get(pj, "spec.containers"), 0),
				 "securityContext.capabilities.add"), JSON_COMPACT);
	json_decref(pj);
	kpod__unref(target);
	session__unref(s);
	return dump;
}

static void test_capabilities_follow_collectors(void **state)
{
	/* with eBPF, SYS_ADMIN: the budget (spec.cost's, else the injector's 1%) and the
	 * window's cost are measured by the kernel's BPF statistics, which BPF_ENABLE_STATS
	 * turns on with it alone */
	static const struct { const char *spec; const char *want; } cases[] = {
		{ NULL, "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]" },
		{ "{\"collectors\":{\"cuda\":{},\"nccl\":{}}}", "[\"SYS_PTRACE\"]" },
		{ "{\"collectors\":{\"cuda\":{},\"python\":{}}}",
		  "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]" },
		{ "{\"collectors\":{\"cpu\":{}},\"injection\":{\"method\":\"EBPFOnly\"}}",
		  "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]" },
		{ "{\"cost\":{\"budgetPercent\":\"1%\"}}",
		  "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]" },
		{ "{\"cost\":{\"recordRate\":10}}", "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]" },
		/* library collectors only: nothing to budget, ptrace alone */
		{ "{\"cost\":{\"budgetPercent\":\"1%\"},\"collectors\":{\"cuda\":{}}}",
		  "[\"SYS_PTRACE\"]" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = caps_of(cases[i].spec);

		if (strcmp(got, cases[i].want) != 0)
			fail_msg("case %zu: %s (wanted %s)", i, got, cases[i].want);
		free(got);
	}
}

/* The injector's args of s for a runc target (node-agent pod) or a Kata one (ephemeral
 * container), as compact JSON; caller frees. */
static char *args_of(const struct session *s, bool ephemeral)
{
	struct kpod *target = pod("trainer-0", "node-1", ephemeral ? "kata" : NULL, NULL, NULL);
	struct injector_target t = { .s = s, .pod = target, .container = "trainer",
				     .container_id = "containerd://abc" };
	json_t *j = ephemeral ? injspec__ephemeral_container(&cfg.inj, &t) :
				injspec__node_agent_pod(&cfg.inj, &t);
	char *dump;

	assert_non_null(j);
	dump = json_dumps(ephemeral ? json_object_get(j, "args") :
			  kj_get(json_array_get(kj_get(j, "spec.containers"), 0), "args"),
			  JSON_COMPACT);
	json_decref(j);
	kpod__unref(target);
	return dump;
}

/* spec.cost: recordRate and budgetPercent reach `aiprof profile` as --record-rate and
 * --budget, in both the node-agent pod and the ephemeral container; what the CLI would refuse
 * (and what the CRD's pattern and rule refuse) is refused here with the field named, and such
 * a session fails InvalidSpec with nothing created. */
static void test_session_cost(void **state)
{
	static const char *const budgets_ok[] = { "1%", "0.5", "0.5%", "0.001", "0.001%", "100",
						  "100%", "100.000%", "007.5%", "0.0010",
						  "99.9999999999%" };
	static const char *const budgets_bad[] = { "0", "0%", "0.0", "0.000", "0.0009%",
						   "0.000999999", "100.01", "101%", "1000",
						   "1e-3", " 1", "1 ", "1%%", "%", "-1", "", "1.",
						   ".5", "+1", "abc", "1,5", "0x1", "inf", "nan",
						   "12345678901234567", "1%;touch x", "1\\n" };
	static const char *const rates_bad[] = { "-1", "1000001", "1.5", "\"100\"", "true",
						 "2147483648" };
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;
	struct kpod *target;
	struct session *s;
	char buf[256], *dump;

	(void)state;
	s = session_from(session_json("{\"cost\":{\"recordRate\":50,\"budgetPercent\":\"0.5%\"},"
				      "\"collectors\":{\"cpu\":{\"frequencyHz\":49},\"offcpu\":{}}}"));
	assert_int_equal(s->spec_err, 0);
	assert_int_equal(s->spec.record_rate, 50);
	assert_string_equal(s->spec.budget, "0.5%");
	for (int eph = 0; eph < 2; eph++) {
		dump = args_of(s, eph);
		assert_non_null(strstr(dump, "\"--collectors\",\"cpu,offcpu\",\"--frequency\",\"49\","
					    "\"--record-rate\",\"50\",\"--budget\",\"0.5%\""));
		free(dump);
	}
	session__unref(s);

	/* 0 is "every record", passed on; without cost neither flag (the injector's defaults) */
	s = session_from(session_json("{\"cost\":{\"recordRate\":0}}"));
	assert_int_equal(s->spec_err, 0);
	dump = args_of(s, false);
	assert_non_null(strstr(dump, "\"--record-rate\",\"0\""));
	assert_null(strstr(dump, "--budget"));
	free(dump);
	session__unref(s);
	s = session_from(session_json("{\"cost\":{\"recordRate\":1000000,\"budgetPercent\":null}}"));
	assert_int_equal(s->spec_err, 0);
	assert_int_equal(s->spec.record_rate, 1000000);
	assert_string_equal(s->spec.budget, "");
	session__unref(s);
	for (int cost = 0; cost < 2; cost++) {
		s = session_from(session_json(cost ? "{\"cost\":{}}" : NULL));
		assert_int_equal(s->spec_err, 0);
		assert_int_equal(s->spec.record_rate, -1);
		for (int eph = 0; eph < 2; eph++) {
			dump = args_of(s, eph);
			assert_null(strstr(dump, "--record-rate"));
			assert_null(strstr(dump, "--budget"));
			free(dump);
		}
		session__unref(s);
	}

	for (size_t i = 0; i < sizeof(budgets_ok) / sizeof(budgets_ok[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"cost\":{\"budgetPercent\":\"%s\"}}", budgets_ok[i]);
		s = session_from(session_json(buf));
		if (s->spec_err)
			fail_msg("budgetPercent '%s' refused: %s", budgets_ok[i], s->spec_msg);
		assert_string_equal(s->spec.budget, budgets_ok[i]);
		dump = args_of(s, false);
		snprintf(buf, sizeof(buf), "\"--budget\",\"%s\"", budgets_ok[i]);
		assert_non_null(strstr(dump, buf));
		free(dump);
		session__unref(s);
	}
	for (size_t i = 0; i < sizeof(budgets_bad) / sizeof(budgets_bad[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"cost\":{\"budgetPercent\":\"%s\"}}", budgets_bad[i]);
		check_spec_error(buf, "spec.cost.budgetPercent '");
	}
	check_spec_error("{\"cost\":{\"budgetPercent\":1}}", "budgetPercent must be a string");
	check_spec_error("{\"cost\":{\"budgetPercent\":0.5}}", "budgetPercent must be a string");
	check_spec_error("{\"cost\":{\"budgetPercent\":\"150%\"}}", "from 0.001% to 100%");
	for (size_t i = 0; i < sizeof(rates_bad) / sizeof(rates_bad[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"cost\":{\"recordRate\":%s}}", rates_bad[i]);
		check_spec_error(buf, "spec.cost.recordRate must be a whole number");
	}
	check_spec_error("{\"cost\":\"cheap\"}", "spec.cost must be an object");
	check_spec_error("{\"cost\":[1]}", "spec.cost must be an object");

	/* such a session fails with the message, and nothing is created for its target */
	w.s = session_from(session_json("{\"cost\":{\"budgetPercent\":\"150%\"}}"));
	target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;
	plan(&w, &p);
	assert_fails_with(&p, "InvalidSpec", "spec.cost.budgetPercent '150%'");
	reconcile_plan__release(&p);
	kpod__unref(target);
	session__unref(w.s);
}

/* No S3 anywhere, and the controller has a store: the injector pod sends its artifacts to it,
 * with a token bound to the pod for that audience alone; no merge pod; Kata targets (an
 * ephemeral container cannot mount the token) fail saying what to do. */
static void test_in_cluster_store(void **state)
{
	struct reconcile_config sc = cfg;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	struct target_obs t = { .name = "trainer-0", .pod = target, .runtime_handler = "" };
	struct reconcile_input in = { .targets = &t, .n_targets = 1, .now_ns = T0 + SEC, .cfg = &sc };
	struct reconcile_plan p;
	const json_t *c, *v, *e;
	struct session *s;
	char *dump;
	size_t i;
	bool mounted = false, projected = false;

	(void)state;
	sc.inj.store_url = "http://10.245.0.1:8080/";
	session__set_store(true);
	s = session_without_output();
	assert_int_equal(s->spec_err, 0);
	assert_true(s->spec.in_cluster);
	in.s = s;
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	assert_string_equal(kj_str(p.actions[0].body, "metadata.namespace"), "train");
	c = json_array_get(kj_get(p.actions[0].body, "spec.containers"), 0);
	dump = json_dumps(json_object_get(c, "args"), JSON_COMPACT);
	assert_non_null(strstr(dump, "\"-o\",\"http://10.245.0.1:8080/v1/artifacts/train/slow-step/"
				     "trainer-0\""));
	free(dump);
	json_array_foreach(json_object_get(c, "volumeMounts"), i, v)
		mounted |= strcmp(kj_str(v, "mountPath"), STORE_TOKEN_DIR) == 0 &&
			   strcmp(kj_str(v, "name"), STORE_TOKEN_VOLUME) == 0;
	json_array_foreach(kj_get(p.actions[0].body, "spec.volumes"), i, v) {
		e = json_array_get(kj_get(v, "projected.sources"), 0);
		if (strcmp(kj_str(v, "name"), STORE_TOKEN_VOLUME) == 0 && e) {
			assert_string_equal(kj_str(e, "serviceAccountToken.audience"), "aiprof.io/artifacts");
			assert_string_equal(kj_str(e, "serviceAccountToken.path"), "token");
			projected = true;
		}
		assert_null(json_object_get(v, "secret"));     /* no S3 credentials anywhere */
	}
	assert_true(mounted && projected);
	json_array_foreach(json_object_get(c, "env"), i, e)
		assert_null(strstr(kj_str(e, "name"), "AWS_"));
	reconcile_plan__release(&p);

	/* with an injector namespace, a store session's pod runs there like every session's
	 * whose storage the tenant did not give (issue 30): never beside the tenant's pods */
	sc.inj.ns = "aiprof-system";
	assert_string_equal(injspec__pods_namespace(&sc.inj, s), "aiprof-system");
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	assert_string_equal(kj_str(p.actions[0].body, "metadata.namespace"), "aiprof-system");
	assert_string_equal(json_string_value(json_object_get(kj_get(p.actions[0].body,
								     "metadata.labels"),
							      "aiprof.io/session-namespace")), "train");
	assert_null(kj_get(p.actions[0].body, "metadata.ownerReferences"));
	reconcile_plan__release(&p);
	sc.inj.ns = NULL;

	/* Kata: an ephemeral container could not mount the token */
	t.runtime_handler = "kata-qemu";
	assert_int_equal(reconcile__plan(&in, &p), 0);
	for (i = 0; i < p.n_actions; i++)
		assert_int_not_equal(p.actions[i].kind, ACT_ADD_EPHEMERAL);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_equal(kj_str(e, "reason"), "OutputNotSupported");
	assert_non_null(strstr(kj_str(e, "message"), "spec.output"));
	reconcile_plan__release(&p);
	session__unref(s);

	/* the controller's S3 defaults win over the store; an explicit S3 output too */
	s = session_from(session_json(NULL));
	assert_false(s->spec.in_cluster);
	session__unref(s);
	session__set_store(false);
	s = session_without_output();
	assert_int_equal(s->spec_err, -EINVAL);
	assert_non_null(strstr(s->spec_msg, "--store-url"));
	session__unref(s);
	kpod__unref(target);
}

/* The target's node is removed from the cluster while it is profiled: the injector went with
 * it, and the status says so (not "deleted before it reported"); an injector that finished
 * first is still read. */
static void test_node_gone(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL), *inj;
	struct reconcile_plan p;
	const json_t *e;

	(void)state;
	w.s = session_from(session_json(NULL));
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;
	plan(&w, &p);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	assert_true(reconcile__target_inflight(w.s, "trainer-0"));
	assert_string_equal(reconcile__target_node(w.s, &w.t[0]), "node-1");

	/* an injector just created, not in the cache yet, on a node that cannot be read: no
	 * conclusion (the API server of the test doubles has no nodes) */
	w.t[0].node_gone = true;
	plan(&w, &p);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_not_equal(kj_str(e, "reason"), "NodeGone");
	reconcile_plan__release(&p);
	w.t[0].node_gone = false;

	/* the injector seen running: its UID recorded */
	inj = injector(w.s, "trainer-0", "{\"running\":{}}", "Running");
	w.t[0].injector = inj;
	plan(&w, &p);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	assert_non_null(kj_str(json_array_get(json_object_get(w.s->status, "targets"), 0),
			       "injectorUID"));
	w.t[0].injector = NULL;

	/* the pods are gone with the node: the status's node is the one asked about */
	w.t[0].pod = NULL;
	assert_string_equal(reconcile__target_node(w.s, &w.t[0]), "node-1");
	w.t[0].node_gone = true;
	w.now = T0 + 5 * SEC;
	plan(&w, &p);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_equal(kj_str(e, "state"), "Failed");
	assert_string_equal(kj_str(e, "reason"), "NodeGone");
	assert_non_null(strstr(kj_str(e, "message"), "node node-1 is gone"));
	reconcile_plan__release(&p);

	/* the node is there: the same absence is the injector's deletion */
	w.t[0].node_gone = false;
	w.t[0].pod = target;
	plan(&w, &p);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_not_equal(kj_str(e, "reason"), "NodeGone");
	reconcile_plan__release(&p);
	kpod__unref(inj);
	kpod__unref(target);
	session__unref(w.s);
}

/* --max-sessions-per-namespace: a session not started waits while its namespace has that
 * many running; one already running goes on whatever the count. */
static void test_namespace_limit(void **state)
{
	struct reconcile_config limited = cfg;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	struct target_obs t = { .name = "trainer-0", .pod = target, .runtime_handler = "" };
	struct session *s = session_from(session_json(NULL)), *started;
	struct reconcile_input in = { .s = s, .targets = &t, .n_targets = 1, .now_ns = T0 + SEC,
				      .cfg = &limited, .ns_running = 2 };
	struct reconcile_plan p;
	json_t *st;

	(void)state;
	limited.max_running_per_ns = 2;
	assert_false(reconcile__session_running(s));
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Pending");
	assert_non_null(strstr(kj_str(p.status, "message"), "2 sessions of namespace train are "
			       "running"));
	assert_true(p.requeue_at_ns > in.now_ns);
	reconcile_plan__release(&p);

	in.ns_running = 1;                  /* a turn: the injector is made */
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	reconcile_plan__release(&p);

	st = json_pack("{s:s,s:s}", "phase", "Profiling", "startTime", "2024-05-01T12:00:01Z");
	started = with_status(s, st);
	json_decref(st);
	assert_true(reconcile__session_running(started));
	in.s = started;
	in.ns_running = 9;                  /* running already: never stopped by the limit */
	assert_int_equal(reconcile__plan(&in, &p), 0);
	assert_null(strstr(kj_str(p.status, "message") ?: "", "waiting:"));
	reconcile_plan__release(&p);
	session__unref(started);
	kpod__unref(target);
}

static void test_target_missing(void **state)
{
	struct world w = { .now = T0 + 5 * SEC };
	struct reconcile_plan p;

	(void)state;
	w.s = session_from(session_json(NULL));
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Pending");
	assert_string_equal(cond_reason(p.status, "TargetsResolved"), "TargetNotFound");
	assert_int_equal(p.requeue_at_ns, T0 + 30 * SEC);   /* when the wait ends */
	assert_true(has_event(&p, "TargetNotFound"));
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	w.now = T0 + 10 * SEC;                      /* still waiting: nothing new */
	plan(&w, &p);
	assert_null(p.status);
	assert_false(has_event(&p, "TargetNotFound"));
	reconcile_plan__release(&p);

	w.now = T0 + 31 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_string_equal(cond_reason(p.status, "Failed"), "TargetNotFound");
	assert_non_null(strstr(kj_str(p.status, "message"), "trainer-0"));
	reconcile_plan__release(&p);
	session__unref(w.s);
}

static void test_happy_path_node_agent(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL), *inj;
	const json_t *c, *e;
	char *dump;
	size_t i;

	(void)state;
	w.s = session_from(session_json(NULL));
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;

	/* 1. the target runs: one injector pod on its node */
	plan(&w, &p);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_POD);
	assert_string_equal(kj_str(p.status, "phase"), "Injecting");
	assert_non_null(kj_str(p.status, "startTime"));
	assert_true(has_event(&p, "InjectorCreated"));
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_equal(kj_str(e, "mode"), "NodeAgent");
	assert_string_equal(kj_str(e, "runtime"), "runc");
	assert_string_equal(kj_str(e, "node"), "node-1");
	{
		const json_t *pj = p.actions[0].body, *spec = json_object_get(pj, "spec");
		const json_t *args, *caps, *env, *vol;

		assert_string_equal(kj_str(spec, "nodeName"), "node-1");
		assert_true(json_is_true(json_object_get(spec, "hostPID")));
		assert_string_equal(kj_str(spec, "restartPolicy"), "Never");
		assert_true(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
		assert_int_equal(json_integer_value(json_object_get(spec, "activeDeadlineSeconds")), 90);
		assert_string_equal(json_string_value(json_object_get(kj_get(pj, "metadata.labels"),
								       LABEL_SESSION_UID)), "u-1234");
		assert_string_equal(kj_str(json_array_get(kj_get(pj, "metadata.ownerReferences"), 0),
					   "uid"), "u-1234");
		c = json_array_get(json_object_get(spec, "containers"), 0);
		caps = kj_get(c, "securityContext.capabilities");
		assert_string_equal(json_string_value(json_array_get(json_object_get(caps, "drop"), 0)),
				    "ALL");
		/* SYS_ADMIN for the kernel's BPF statistics: the window's cost, a budget */
		dump = json_dumps(json_object_get(caps, "add"), JSON_COMPACT);
		assert_string_equal(dump, "[\"SYS_PTRACE\",\"BPF\",\"PERFMON\",\"SYS_ADMIN\"]");
		free(dump);
		args = json_object_get(c, "args");
		dump = json_dumps(args, JSON_COMPACT);
		assert_non_null(strstr(dump, "\"--container-id\",\"containerd://abc123\""));
		assert_non_null(strstr(dump, "\"--duration\",\"30s\""));
		assert_non_null(strstr(dump, "\"s3://profiles/team-a/train/slow-step/u-1234/trainer-0\""));
		free(dump);
		/* credentials only by reference: a secret volume, and no literal credential */
		vol = json_array_get(json_object_get(spec, "volumes"), 0);
		assert_string_equal(kj_str(vol, "secret.secretName"), "s3-creds");
		/* the node's shared unwind rules, at the path the injector uses by default */
		vol = json_array_get(json_object_get(spec, "volumes"), 1);
		assert_string_equal(kj_str(vol, "name"), "unwind-cache");
		assert_string_equal(kj_str(vol, "hostPath.path"), "/var/cache/aiprof/unwind");
		assert_string_equal(kj_str(vol, "hostPath.type"), "DirectoryOrCreate");
		dump = json_dumps(json_object_get(c, "volumeMounts"), JSON_COMPACT);
		assert_non_null(strstr(dump, "{\"name\":\"unwind-cache\",\"mountPath\":"
				       "\"/var/cache/aiprof/unwind\"}"));
		free(dump);
		env = json_object_get(c, "env");
		json_array_foreach(env, i, e) {
			const char *n = kj_str(e, "name");

			assert_false(strstr(n, "SECRET_ACCESS_KEY") || strstr(n, "ACCESS_KEY_ID"));
		}
		dump = json_dumps(env, JSON_COMPACT);
		assert_non_null(strstr(dump, "AIPROF_S3_SECRET_DIR"));
		assert_non_null(strstr(dump, "\"AWS_ENDPOINT_URL_S3\",\"value\":\"https://s3.example.com\""));
		free(dump);
	}
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 2. the injector pod exists, not running yet: no second one */
	inj = injector(w.s, "trainer-0", "{\"waiting\":{\"reason\":\"ContainerCreating\"}}", "Pending");
	w.t[0].injector = inj;
	w.inj[0] = inj;
	w.n_inj = 1;
	w.now = T0 + 2 * SEC;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Injecting");
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* 3. running: Profiling, and a look again when the window ends */
	inj = injector(w.s, "trainer-0", "{\"running\":{\"startedAt\":\"2024-05-01T12:00:03Z\"}}",
		       "Running");
	w.t[0].injector = w.inj[0] = inj;
	w.now = T0 + 4 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Profiling");
	assert_int_equal(p.requeue_at_ns, T0 + 33 * SEC);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 4. past the window, still running: Uploading */
	w.now = T0 + 34 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Uploading");
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* 5. terminated with the message the kubelet keeps: Succeeded with the artifacts */
	inj = injector(w.s, "trainer-0",
		"{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\","
		"\"startedAt\":\"2024-05-01T12:00:03Z\",\"finishedAt\":\"2024-05-01T12:00:40Z\","
		"\"message\":\"{\\\"artifacts\\\":[{\\\"name\\\":\\\"timeline.json.gz\\\","
		"\\\"url\\\":\\\"s3://profiles/team-a/train/slow-step/u-1234/trainer-0/timeline.json.gz\\\","
		"\\\"size\\\":1234,\\\"sha256\\\":\\\"" "0123456789abcdef0123456789abcdef"
		"0123456789abcdef0123456789abcdef" "\\\"}],\\\"summary\\\":{\\\"events\\\":99},"
		"\\\"findings\\\":[{\\\"category\\\":\\\"SyncCheckpoint\\\",\\\"severity\\\":"
		"\\\"warning\\\"}]}\"}}", "Succeeded");
	w.t[0].injector = w.inj[0] = inj;
	w.now = T0 + 41 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
	assert_non_null(kj_str(p.status, "completionTime"));
	assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 1);
	e = json_array_get(json_object_get(p.status, "artifacts"), 0);
	assert_string_equal(kj_str(e, "name"), "timeline.json.gz");
	assert_int_equal(json_integer_value(json_object_get(e, "size")), 1234);
	assert_string_equal(kj_str(json_array_get(json_object_get(p.status, "findings"), 0),
				   "category"), "SyncCheckpoint");
	assert_int_equal(json_integer_value(kj_get(json_array_get(json_object_get(p.status, "targets"),
								 0), "summary.events")), 99);
	assert_string_equal(cond_reason(p.status, "Complete"), "Succeeded");
	assert_true(has_event(&p, "Succeeded"));
	assert_int_equal(p.n_actions, 0);           /* a terminated injector is kept (logs) */
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 6. finished: nothing more, not even when the injector pod goes away */
	w.t[0].injector = NULL;
	w.n_inj = 0;
	plan(&w, &p);
	assert_null(p.status);
	assert_int_equal(p.n_actions, 0);
	reconcile_plan__release(&p);
	kpod__unref(inj);
	kpod__unref(target);
	session__unref(w.s);
}

static void test_injector_fails(void **state)
{
	struct world w = { .now = T0 + 5 * SEC };
	struct reconcile_plan p;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL), *inj;
	json_t *st = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "phase", "Profiling", "startTime",
			       "2024-05-01T12:00:01Z", "targets", "pod", "trainer-0", "state",
			       "Profiling", "mode", "NodeAgent");

	(void)state;
	w.s = with_status(session_from(session_json(NULL)), st);
	json_decref(st);
	inj = injector(w.s, "trainer-0",
		       "{\"terminated\":{\"exitCode\":4,\"reason\":\"Error\",\"message\":"
		       "\"{\\\"error\\\":\\\"pid 7: permission denied: CAP_SYS_PTRACE missing\\\"}\"}}",
		       "Failed");
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .injector = inj };
	w.n = 1;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_string_equal(cond_reason(p.status, "Failed"), "InjectorFailed");
	if (!strstr(kj_str(p.status, "message"), "CAP_SYS_PTRACE missing"))
		fail_msg("message: %s", kj_str(p.status, "message"));
	assert_true(has_event(&p, "InjectorFailed"));
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* no message at all, and a message that is not ours */
	inj = injector(w.s, "trainer-0", "{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\"}}",
		       "Failed");
	w.t[0].injector = inj;
	plan(&w, &p);
	assert_non_null(strstr(kj_str(p.status, "message"), "137, OOMKilled"));
	reconcile_plan__release(&p);
	kpod__unref(inj);
	inj = injector(w.s, "trainer-0", "{\"terminated\":{\"exitCode\":0,\"message\":\"done!\"}}",
		       "Succeeded");
	w.t[0].injector = inj;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_non_null(strstr(kj_str(p.status, "message"), "unusable"));
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* the injector pod vanished while in flight */
	w.t[0].injector = NULL;
	plan(&w, &p);
	assert_string_equal(cond_reason(p.status, "Failed"), "InjectorDeleted");
	reconcile_plan__release(&p);

	/* creating it was refused for good */
	st = json_pack("{s:s}", "phase", "Pending");
	w.s = with_status(w.s, st);
	json_decref(st);
	w.t[0].create_err = -EACCES;
	snprintf(w.t[0].create_msg, sizeof(w.t[0].create_msg), "pods is forbidden");
	plan(&w, &p);
	assert_string_equal(cond_reason(p.status, "Failed"), "InjectorCreateFailed");
	assert_non_null(strstr(kj_str(p.status, "message"), "forbidden"));
	reconcile_plan__release(&p);
	kpod__unref(target);
	session__unref(w.s);
}

static void test_deadline(void **state)
{
	struct world w = { 0 };
	struct reconcile_plan p;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	struct kpod *inj;
	json_t *st = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "phase", "Profiling", "startTime",
			       "2024-05-01T12:00:00Z", "targets", "pod", "trainer-0", "state",
			       "Profiling", "mode", "NodeAgent");

	(void)state;
	w.s = with_status(session_from(session_json(NULL)), st);
	json_decref(st);
	inj = injector(w.s, "trainer-0", "{\"running\":{\"startedAt\":\"2024-05-01T12:00:01Z\"}}",
		       "Running");
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .injector = inj };
	w.n = 1;
	w.inj[0] = inj;
	w.n_inj = 1;
	w.now = T0 + 89 * SEC;                      /* 30 s + 60 s grace = 90 s */
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Uploading");
	assert_int_equal(p.requeue_at_ns, T0 + 90 * SEC);
	reconcile_plan__release(&p);

	w.now = T0 + 90 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_string_equal(cond_reason(p.status, "Failed"), "DeadlineExceeded");
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_DELETE_POD);
	assert_string_equal(p.actions[0].name, kpod__name(inj));
	/* deleted only if still that pod: its UID is the delete's precondition */
	assert_true(kpod__uid(inj)[0]);
	assert_string_equal(p.actions[0].uid, kpod__uid(inj));
	reconcile_plan__release(&p);
	kpod__unref(inj);
	kpod__unref(target);
	session__unref(w.s);
}

static void test_kata_ephemeral(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;
	struct kpod *target = pod("trainer-0", "node-1", "kata", NULL, NULL), *t2;
	const json_t *c, *e;
	char *dump;
	size_t i;

	(void)state;
	w.s = session_from(session_json(NULL));
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target,
				      .runtime_handler = "kata-qemu" };
	w.n = 1;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_ADD_EPHEMERAL);
	assert_string_equal(p.actions[0].name, "trainer-0");
	c = p.actions[0].body;
	assert_string_equal(kj_str(c, "targetContainerName"), "trainer");
	assert_int_equal(strncmp(kj_str(c, "name"), "aiprof-", 7), 0);
	json_array_foreach(json_object_get(c, "env"), i, e)
		if (strstr(kj_str(e, "name"), "AWS_ACCESS_KEY_ID") ||
		    strstr(kj_str(e, "name"), "AWS_SECRET_ACCESS_KEY")) {
			assert_null(json_object_get(e, "value"));   /* never a literal */
			assert_string_equal(kj_str(e, "valueFrom.secretKeyRef.name"), "s3-creds");
		}
	dump = json_dumps(json_object_get(c, "args"), JSON_COMPACT);
	assert_non_null(strstr(dump, "\"--container-name\",\"trainer\""));
	free(dump);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	assert_string_equal(kj_str(e, "mode"), "EphemeralContainer");
	assert_string_equal(kj_str(e, "runtime"), "kata-qemu");
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* in flight, the RuntimeClass lookup fails: the target keeps its mode, no node agent */
	w.t[0].runtime_handler = "";
	plan(&w, &p);
	for (i = 0; i < p.n_actions; i++)
		assert_int_not_equal(p.actions[i].kind, ACT_CREATE_POD);
	e = json_array_get(json_object_get(p.status, "targets"), 0);
	if (e) {
		assert_string_equal(kj_str(e, "mode"), "EphemeralContainer");
		assert_string_equal(kj_str(e, "runtime"), "kata-qemu");
	}
	reconcile_plan__release(&p);
	w.t[0].runtime_handler = "kata-qemu";

	/* once the pod shows it, its state drives the target, and it is never added again */
	{
		char buf[2048], ename[32];
		json_t *j;

		injspec__ephemeral_name(w.s, ename);
		snprintf(buf, sizeof(buf),
			 "{\"metadata\":{\"name\":\"trainer-0\",\"namespace\":\"train\"},"
			 "\"spec\":{\"nodeName\":\"node-1\",\"containers\":[{\"name\":\"trainer\"}],"
			 "\"ephemeralContainers\":[{\"name\":\"%s\"}]},\"status\":{"
			 "\"containerStatuses\":[{\"name\":\"trainer\",\"containerID\":\"c://1\","
			 "\"state\":{\"running\":{}}}],\"ephemeralContainerStatuses\":[{\"name\":\"%s\","
			 "\"state\":{\"terminated\":{\"exitCode\":0,\"message\":\"{\\\"artifacts\\\":[]}\"}}}]}}",
			 ename, ename);
		j = json_loads(buf, 0, NULL);
		assert_int_equal(kpod__from_json(j, &t2), 0);
		json_decref(j);
	}
	w.t[0].pod = t2;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
	reconcile_plan__release(&p);
	kpod__unref(t2);
	kpod__unref(target);
	session__unref(w.s);

	/* runc pods go ephemeral only when asked */
	w.s = session_from(session_json("{\"injection\":{\"mode\":\"EphemeralContainer\"}}"));
	target = pod("trainer-0", "node-1", NULL, NULL, NULL);
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	plan(&w, &p);
	assert_int_equal(p.actions[0].kind, ACT_ADD_EPHEMERAL);
	reconcile_plan__release(&p);
	kpod__unref(target);
	session__unref(w.s);
	assert_true(runtime_is_kata("kata"));
	assert_true(runtime_is_kata("kata-clh"));
	assert_false(runtime_is_kata("katana"));
	assert_false(runtime_is_kata("runc"));
}

/* The target's first status entry of a plan. */
static const json_t *target0(const struct reconcile_plan *p)
{
	return json_array_get(json_object_get(p->status, "targets"), 0);
}

static bool has_action(const struct reconcile_plan *p, enum action_kind kind)
{
	for (size_t i = 0; i < p->n_actions; i++)
		if (p->actions[i].kind == kind)
			return true;
	return false;
}

static void test_target_deleted_mid_session(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;
	struct kpod *target = pod("trainer-0", "node-1", NULL, NULL, NULL), *inj;
	const json_t *e;
	struct session *profiling;

	(void)state;
	w.s = session_from(session_json(NULL));
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target, .runtime_handler = "" };
	w.n = 1;
	plan(&w, &p);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	inj = injector(w.s, "trainer-0", "{\"running\":{\"startedAt\":\"2024-05-01T12:00:02Z\"}}",
		       "Running");
	w.t[0].injector = w.inj[0] = inj;
	w.n_inj = 1;
	w.now = T0 + 5 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Profiling");
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 1. the target pod is gone, its injector runs on: it is not deleted, the target stays
	 * in flight, says why, and keeps its container and node */
	w.t[0].pod = NULL;
	w.now = T0 + 9 * SEC;
	plan(&w, &p);
	assert_false(has_action(&p, ACT_DELETE_POD));
	assert_string_equal(kj_str(p.status, "phase"), "Profiling");
	e = target0(&p);
	assert_string_equal(kj_str(e, "state"), "Profiling");
	assert_string_equal(kj_str(e, "reason"), "TargetDeleted");
	assert_non_null(strstr(kj_str(e, "message"), "is ending the window and uploading"));
	assert_string_equal(kj_str(e, "container"), "trainer");
	assert_string_equal(kj_str(e, "node"), "node-1");
	assert_string_equal(kj_str(e, "mode"), "NodeAgent");
	assert_true(has_event(&p, "TargetDeleted"));
	assert_int_equal(p.requeue_at_ns, T0 + 32 * SEC);     /* end of window */
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	profiling = w.s;
	session__ref(profiling);

	/* the next pass: no second event */
	plan(&w, &p);
	assert_false(has_event(&p, "TargetDeleted"));
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* 2. the injector ends the cut window and uploads: Failed/TargetDeleted, its artifacts
	 * and findings kept and listed, the time of the cut in the message */
	inj = injector(w.s, "trainer-0",
		"{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\","
		"\"startedAt\":\"2024-05-01T12:00:02Z\",\"finishedAt\":\"2024-05-01T12:00:12Z\","
		"\"message\":\"{\\\"artifacts\\\":[{\\\"name\\\":\\\"timeline.json.gz\\\","
		"\\\"url\\\":\\\"s3://profiles/team-a/train/slow-step/u-1234/trainer-0/timeline.json.gz\\\","
		"\\\"size\\\":1234,\\\"sha256\\\":\\\"" "0123456789abcdef0123456789abcdef"
		"0123456789abcdef0123456789abcdef" "\\\"},{\\\"name\\\":\\\"summary.json\\\","
		"\\\"url\\\":\\\"s3://profiles/team-a/train/slow-step/u-1234/trainer-0/summary.json\\\","
		"\\\"size\\\":10}],\\\"summary\\\":{\\\"window_ms\\\":7000,\\\"window_cut\\\":1,"
		"\\\"processes_exited\\\":1,\\\"window_end_unix_ms\\\":1714564810000},"
		"\\\"findings\\\":[{\\\"category\\\":\\\"SyncCheckpoint\\\",\\\"severity\\\":"
		"\\\"warning\\\"}]}\"}}", "Succeeded");
	w.t[0].injector = w.inj[0] = inj;
	w.now = T0 + 13 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	e = target0(&p);
	assert_string_equal(kj_str(e, "state"), "Failed");
	assert_string_equal(kj_str(e, "reason"), "TargetDeleted");
	assert_non_null(strstr(kj_str(e, "message"), "window was cut at 2024-05-01T12:00:10Z "
				  "after 7s of 30s; kept the 2 artifacts"));
	assert_string_equal(kj_str(e, "node"), "node-1");
	assert_string_equal(kj_str(e, "container"), "trainer");
	assert_int_equal(json_integer_value(kj_get(e, "summary.window_cut")), 1);
	assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 2);
	assert_string_equal(kj_str(json_array_get(json_object_get(p.status, "artifacts"), 0),
				   "target"), "trainer-0");
	assert_int_equal(json_array_size(json_object_get(p.status, "findings")), 1);
	assert_string_equal(cond_reason(p.status, "Failed"), "TargetDeleted");
	assert_non_null(strstr(kj_str(p.status, "message"), "pod trainer-0 was deleted"));
	assert_false(has_action(&p, ACT_DELETE_POD));
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	/* and it stays so */
	w.t[0].injector = NULL;
	w.n_inj = 0;
	plan(&w, &p);
	assert_null(p.status);
	reconcile_plan__release(&p);
	kpod__unref(inj);
	session__unref(w.s);

	/* 3. an injector that fails after its target went: its error is in the message */
	w.s = profiling;
	session__ref(w.s);
	inj = injector(w.s, "trainer-0", "{\"terminated\":{\"exitCode\":5,\"message\":"
		       "\"{\\\"error\\\":\\\"upload failed: 503\\\"}\"}}", "Failed");
	w.t[0].injector = w.inj[0] = inj;
	w.n_inj = 1;
	plan(&w, &p);
	e = target0(&p);
	assert_string_equal(kj_str(e, "reason"), "TargetDeleted");
	assert_non_null(strstr(kj_str(e, "message"), "0 artifacts kept; injector exited with code "
				  "5: upload failed: 503"));
	assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 0);
	reconcile_plan__release(&p);
	kpod__unref(inj);
	session__unref(w.s);

	/* 4. the deadline still holds: an injector not done by then is deleted */
	w.s = profiling;
	inj = injector(w.s, "trainer-0", "{\"running\":{\"startedAt\":\"2024-05-01T12:00:02Z\"}}",
		       "Running");
	w.t[0].injector = w.inj[0] = inj;
	w.now = T0 + 92 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(target0(&p), "reason"), "DeadlineExceeded");
	assert_true(has_action(&p, ACT_DELETE_POD));
	reconcile_plan__release(&p);
	kpod__unref(inj);

	/* 5. the injector pod went with it (deleted by hand): nothing kept, said so */
	w.t[0].injector = NULL;
	w.n_inj = 0;
	w.now = T0 + 10 * SEC;
	plan(&w, &p);
	assert_string_equal(kj_str(target0(&p), "state"), "Failed");
	assert_non_null(strstr(kj_str(target0(&p), "message"), "is gone too: nothing was kept"));
	reconcile_plan__release(&p);
	session__unref(w.s);
	kpod__unref(target);

	/* 6. an ephemeral container dies with its pod: its recording is lost, and the status
	 * still says where it ran */
	target = pod("trainer-0", "node-1", "kata", NULL, NULL);
	w.s = session_from(session_json(NULL));
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = target,
				      .runtime_handler = "kata-qemu" };
	w.now = T0 + SEC;
	plan(&w, &p);
	assert_int_equal(p.actions[0].kind, ACT_ADD_EPHEMERAL);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	w.t[0] = (struct target_obs){ .name = "trainer-0", .pod = NULL, .runtime_handler = "" };
	w.now = T0 + 8 * SEC;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);
	e = target0(&p);
	assert_string_equal(kj_str(e, "state"), "Failed");
	assert_string_equal(kj_str(e, "reason"), "TargetDeleted");
	assert_string_equal(kj_str(e, "mode"), "EphemeralContainer");
	assert_string_equal(kj_str(e, "runtime"), "kata-qemu");
	assert_string_equal(kj_str(e, "node"), "node-1");
	assert_non_null(strstr(kj_str(e, "message"), "lost with the pod"));
	reconcile_plan__release(&p);
	kpod__unref(target);
	session__unref(w.s);
}

static void test_selector_targets(void **state)
{
	struct world w = { .now = T0 + SEC };
	struct reconcile_plan p;
	struct kpod *a = pod("rank-0", "node-1", NULL, NULL, NULL);
	struct kpod *b = pod("rank-1", "node-2", NULL, "{\"waiting\":{\"reason\":\"ContainerCreating\"}}",
			     NULL);

	(void)state;
	w.s = session_from(session_json("{\"targets\":{\"podName\":null,"
					"\"selector\":{\"matchLabels\":{\"job\":\"llama\"}}}}"));
	w.t[0] = (struct target_obs){ .name = "rank-0", .pod = a, .runtime_handler = "" };
	w.t[1] = (struct target_obs){ .name = "rank-1", .pod = b, .runtime_handler = "" };
	w.n = 2;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 1);               /* rank-1 is not running yet */
	{
		char *dump = json_dumps(kj_get(json_array_get(kj_get(p.actions[0].body,
			"spec.containers"), 0), "securityContext.capabilities.add"), JSON_COMPACT);

		assert_non_null(strstr(dump, "SYS_ADMIN"));  /* eBPF: the budget's statistics */
		free(dump);
	}
	assert_string_equal(kj_str(p.status, "phase"), "Pending");   /* the least advanced */
	assert_int_equal(json_array_size(json_object_get(p.status, "targets")), 2);
	reconcile_plan__release(&p);

	/* the frozen set, once started, comes from status.targets */
	{
		json_t *st = json_pack("{s:s,s:[{s:s},{s:s}]}", "startTime", "2024-05-01T12:00:01Z",
				       "targets", "pod", "rank-0", "pod", "rank-1");
		char **names = NULL;
		size_t n = 0;

		w.s = with_status(w.s, st);
		json_decref(st);
		assert_int_equal(reconcile__target_names(w.s, &names, &n), 0);
		assert_int_equal(n, 2);
		assert_string_equal(names[1], "rank-1");
		free_strv(names, n);
	}
	kpod__unref(a);
	kpod__unref(b);
	session__unref(w.s);
}

/* ---- multi-rank merge ------------------------------------------------------------------- */

/* The session's merge pod, its container in the given state. */
static struct kpod *merge_pod(const struct session *s, const char *state_json, const char *phase)
{
	char name[INJECTOR_POD_NAME_MAX + 1];

	injspec__merge_pod_name(s, name);
	return session_pod(s, name, NULL, MERGE_CONTAINER, state_json, phase);
}

/* A selector session whose three ranks are done as states[] says, each succeeded one with
 * a timeline artifact. */
static struct session *ranks_done(const char *const states[3])
{
	struct session *s = session_from(session_json(
		"{\"targets\":{\"podName\":null,\"selector\":{\"matchLabels\":{\"job\":\"llama\"}}}}"));
	json_t *st = json_pack("{s:s,s:s,s:[],s:[]}", "phase", "Profiling", "startTime",
			       "2024-05-01T12:00:01Z", "targets", "artifacts");

	for (int i = 0; i < 3; i++) {
		char pod_name[16], url[128];

		snprintf(pod_name, sizeof(pod_name), "rank-%d", i);
		json_array_append_new(json_object_get(st, "targets"), json_pack(
			"{s:s,s:s,s:s,s:s}", "pod", pod_name, "state", states[i], "reason", states[i],
			"message", "done"));
		if (strcmp(states[i], "Succeeded"))
			continue;
		snprintf(url, sizeof(url), "s3://profiles/team-a/train/slow-step/%s/timeline.json.gz",
			 pod_name);
		json_array_append_new(json_object_get(st, "artifacts"), json_pack(
			"{s:s,s:s,s:s,s:i}", "target", pod_name, "name", "timeline.json.gz", "url", url,
			"size", 10));
	}
	s = with_status(s, st);
	json_decref(st);
	return s;
}

static struct world rank_world(struct session *s, struct kpod *pods[3])
{
	struct world w = { .s = s, .now = T0 + 50 * SEC, .n = 3 };
	static const char *const names[] = { "rank-0", "rank-1", "rank-2" };

	for (int i = 0; i < 3; i++) {
		pods[i] = pod(names[i], "node-1", NULL, NULL, NULL);
		w.t[i] = (struct target_obs){ .name = names[i], .pod = pods[i], .runtime_handler = "" };
	}
	return w;
}


static void test_merge_pod_and_merged_timeline(void **state)
{
	static const char *const states[] = { "Succeeded", "Succeeded", "Failed" };
	struct kpod *pods[3], *mp;
	struct world w = rank_world(ranks_done(states), pods);
	struct reconcile_plan p;
	char name[INJECTOR_POD_NAME_MAX + 1], inj_name[INJECTOR_POD_NAME_MAX + 1], *dump;
	const json_t *spec, *c, *e;
	size_t i;

	(void)state;
	/* 1. the ranks are done, two succeeded: one merge pod over those two, not yet the end */
	plan_merge(&w, NULL, 0, &p);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_CREATE_MERGE_POD);
	injspec__merge_pod_name(w.s, name);
	injspec__pod_name(w.s, "rank-0", inj_name);
	assert_string_equal(p.actions[0].name, name);
	assert_string_not_equal(name, inj_name);
	assert_true(strlen(name) <= 63);
	assert_string_equal(kj_str(p.actions[0].body, "metadata.name"), name);
	spec = json_object_get(p.actions[0].body, "spec");
	assert_null(json_object_get(spec, "hostPID"));
	assert_null(json_object_get(spec, "nodeName"));
	assert_string_equal(kj_str(spec, "restartPolicy"), "Never");
	assert_true(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
	assert_string_equal(json_string_value(json_object_get(kj_get(p.actions[0].body,
		"metadata.labels"), LABEL_SESSION_UID)), "u-1234");
	assert_string_equal(kj_str(json_array_get(kj_get(p.actions[0].body,
		"metadata.ownerReferences"), 0), "uid"), "u-1234");
	c = json_array_get(json_object_get(spec, "containers"), 0);
	assert_string_equal(kj_str(c, "image"), "aiprof:test");
	assert_null(kj_get(c, "securityContext.capabilities.add"));
	dump = json_dumps(kj_get(c, "securityContext.capabilities.drop"), JSON_COMPACT);
	assert_string_equal(dump, "[\"ALL\"]");
	free(dump);
	dump = json_dumps(json_object_get(c, "args"), JSON_COMPACT);
	assert_string_equal(dump, "[\"merge\",\"-o\",\"s3://profiles/team-a/train/slow-step/u-1234/merged\","
			    "\"--termination-log\",\"/dev/termination-log\","
			    "\"s3://profiles/team-a/train/slow-step/u-1234/rank-0\","
			    "\"s3://profiles/team-a/train/slow-step/u-1234/rank-1\"]");
	free(dump);
	assert_string_equal(kj_str(json_array_get(json_object_get(spec, "volumes"), 0),
				   "secret.secretName"), "s3-creds");
	json_array_foreach(json_object_get(c, "env"), i, e)
		assert_null(strstr(kj_str(e, "name"), "SECRET_ACCESS_KEY"));
	assert_string_equal(kj_str(p.status, "phase"), "Uploading");
	assert_null(kj_str(p.status, "completionTime"));
	assert_string_equal(kj_str(condition(p.status, "Merged"), "status"), "Unknown");
	assert_string_equal(cond_reason(p.status, "Merged"), "Merging");
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 2. the merge pod runs: nothing to do; its UID is recorded once, then nothing to write */
	mp = merge_pod(w.s, "{\"running\":{\"startedAt\":\"2024-05-01T12:00:52Z\"}}", "Running");
	w.inj[0] = mp;
	w.n_inj = 1;
	w.now += SEC;
	plan_merge(&w, mp, 0, &p);
	assert_int_equal(p.n_actions, 0);           /* the merge pod is not an injector to stop */
	assert_non_null(p.status);
	assert_string_equal(kj_str(p.status, "mergeUID"), kpod__uid(mp));
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	plan_merge(&w, mp, 0, &p);
	assert_int_equal(p.n_actions, 0);
	assert_null(p.status);
	reconcile_plan__release(&p);
	kpod__unref(mp);

	/* 3. it exits with its result: artifacts and findings of target "merged", Merged=True;
	 *    the session fails all the same (rank-2 did) */
	mp = merge_pod(w.s,
		"{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\",\"message\":"
		"\"{\\\"artifacts\\\":[{\\\"name\\\":\\\"timeline.json.gz\\\",\\\"url\\\":"
		"\\\"s3://profiles/team-a/train/slow-step/u-1234/merged/timeline.json.gz\\\",\\\"size\\\":77}],"
		"\\\"findings\\\":[{\\\"category\\\":\\\"Straggler\\\",\\\"severity\\\":\\\"warning\\\"}]}\"}}",
		"Succeeded");
	w.inj[0] = mp;
	w.now += SEC;
	plan_merge(&w, mp, 0, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_non_null(kj_str(p.status, "completionTime"));
	assert_string_equal(kj_str(condition(p.status, "Merged"), "status"), "True");
	assert_string_equal(cond_reason(p.status, "Merged"), "Merged");
	assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 3);
	e = json_array_get(json_object_get(p.status, "artifacts"), 2);
	assert_string_equal(kj_str(e, "target"), "merged");
	assert_string_equal(kj_str(e, "url"), "s3://profiles/team-a/train/slow-step/u-1234/merged/timeline.json.gz");
	e = json_array_get(json_object_get(p.status, "findings"), 0);
	assert_string_equal(kj_str(e, "target"), "merged");
	assert_string_equal(kj_str(e, "category"), "Straggler");
	assert_int_equal(json_integer_value(json_object_get(p.status, "findingCount")), 1);
	assert_true(has_event(&p, "Merged"));
	assert_int_equal(p.n_actions, 0);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);

	/* 4. over: no second merge pod, even when it is gone */
	w.n_inj = 0;
	plan_merge(&w, NULL, 0, &p);
	assert_int_equal(p.n_actions, 0);
	assert_null(p.status);
	reconcile_plan__release(&p);
	kpod__unref(mp);
	for (i = 0; i < 3; i++)
		kpod__unref(pods[i]);
	session__unref(w.s);
}

static void test_merge_failures(void **state)
{
	static const char *const ok3[] = { "Succeeded", "Succeeded", "Succeeded" };
	static const char *const one_ok[] = { "Succeeded", "Failed", "Failed" };
	struct kpod *pods[3], *mp;
	struct world w = rank_world(ranks_done(ok3), pods);
	struct reconcile_plan p;
	struct session *start;

	(void)state;
	plan_merge(&w, NULL, 0, &p);
	w.s = with_status(w.s, p.status);
	reconcile_plan__release(&p);
	start = session__ref(w.s);

	/* the merge fails: the session whose ranks succeeded still succeeds, Merged=False */
	mp = merge_pod(w.s, "{\"terminated\":{\"exitCode\":1,\"reason\":\"Error\",\"message\":"
		       "\"{\\\"error\\\":\\\"rank-1: no collectives in timeline.json.gz\\\"}\"}}", "Failed");
	w.inj[0] = mp;
	w.n_inj = 1;
	plan_merge(&w, mp, 0, &p);
	assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
	assert_string_equal(kj_str(p.status, "mergeUID"), kpod__uid(mp));   /* recorded */
	assert_string_equal(kj_str(condition(p.status, "Merged"), "status"), "False");
	assert_string_equal(cond_reason(p.status, "Merged"), "MergeFailed");
	assert_non_null(strstr(kj_str(condition(p.status, "Merged"), "message"),
			       "no collectives in timeline.json.gz"));
	assert_string_equal(cond_reason(p.status, "Complete"), "Succeeded");
	assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 3);
	assert_true(has_event(&p, "MergeFailed"));
	reconcile_plan__release(&p);
	kpod__unref(mp);

	/* the merge pod deleted before its result */
	w.n_inj = 0;
	plan_merge(&w, NULL, 0, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
	assert_string_equal(cond_reason(p.status, "Merged"), "MergeDeleted");
	reconcile_plan__release(&p);

	/* the merge pod still running long after the deadline: stopped, MergeDeadlineExceeded */
	mp = merge_pod(w.s, "{\"running\":{}}", "Running");
	w.inj[0] = mp;
	w.n_inj = 1;
	w.now = T0 + SEC + 90 * SEC + MERGE_DEADLINE_S * SEC;
	plan_merge(&w, mp, 0, &p);
	assert_string_equal(cond_reason(p.status, "Merged"), "MergeDeadlineExceeded");
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_DELETE_POD);
	assert_string_equal(p.actions[0].name, kpod__name(mp));
	reconcile_plan__release(&p);
	kpod__unref(mp);
	session__unref(w.s);
	session__unref(start);

	/* the API server refuses the merge pod for good */
	w.s = ranks_done(ok3);
	w.n_inj = 0;
	w.now = T0 + 50 * SEC;
	plan_merge(&w, NULL, -EACCES, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
	assert_string_equal(cond_reason(p.status, "Merged"), "MergeCreateFailed");
	assert_non_null(strstr(kj_str(condition(p.status, "Merged"), "message"), "forbidden"));
	reconcile_plan__release(&p);

	/* a pod under the merge pod's name that is not the session's: its termination message
	 * is never read, it is neither made again nor deleted, and the ranks' results stand */
	{
		struct reconcile_input in = {
			.s = w.s, .targets = w.t, .n_targets = w.n, .injectors = w.inj,
			.n_injectors = 0, .merge_foreign = true, .now_ns = w.now, .cfg = &cfg,
		};

		assert_int_equal(reconcile__plan(&in, &p), 0);
		assert_false(has_action(&p, ACT_CREATE_MERGE_POD));
		assert_false(has_action(&p, ACT_DELETE_POD));
		assert_string_equal(kj_str(p.status, "phase"), "Succeeded");
		assert_string_equal(kj_str(condition(p.status, "Merged"), "status"), "False");
		assert_string_equal(cond_reason(p.status, "Merged"), "MergeNameTaken");
		assert_int_equal(json_array_size(json_object_get(p.status, "artifacts")), 3);
		reconcile_plan__release(&p);
	}
	session__unref(w.s);

	/* one rank succeeded: nothing to merge, no Merged condition */
	w.s = ranks_done(one_ok);
	plan_merge(&w, NULL, 0, &p);
	assert_int_equal(p.n_actions, 0);
	assert_string_equal(kj_str(p.status, "phase"), "Failed");
	assert_null(condition(p.status, "Merged"));
	reconcile_plan__release(&p);
	session__unref(w.s);
	for (int i = 0; i < 3; i++)
		kpod__unref(pods[i]);
}

/* Targets and their artifacts stay in target order whichever finished first. */
static void test_status_order_is_target_order(void **state)
{
	static const char *const states[] = { "Profiling", "Succeeded", "Profiling" };
	struct kpod *pods[3], *inj;
	struct world w = rank_world(ranks_done(states), pods);
	struct reconcile_plan p;
	const json_t *ts, *as;

	(void)state;
	inj = injector(w.s, "rank-0", "{\"terminated\":{\"exitCode\":0,\"message\":\"{\\\"artifacts\\\":"
		       "[{\\\"name\\\":\\\"summary.json\\\",\\\"url\\\":\\\"s3://b/rank-0/summary.json\\\","
		       "\\\"size\\\":1}]}\"}}", "Succeeded");
	w.t[0].injector = inj;
	w.inj[0] = inj;
	w.n_inj = 1;
	plan(&w, &p);
	ts = json_object_get(p.status, "targets");
	as = json_object_get(p.status, "artifacts");
	assert_string_equal(kj_str(json_array_get(ts, 0), "pod"), "rank-0");
	assert_string_equal(kj_str(json_array_get(ts, 0), "state"), "Succeeded");
	assert_string_equal(kj_str(json_array_get(ts, 1), "pod"), "rank-1");
	assert_string_equal(kj_str(json_array_get(ts, 2), "pod"), "rank-2");
	assert_string_equal(kj_str(json_array_get(as, 0), "target"), "rank-0");
	assert_string_equal(kj_str(json_array_get(as, 1), "target"), "rank-1");
	reconcile_plan__release(&p);
	kpod__unref(inj);
	for (int i = 0; i < 3; i++)
		kpod__unref(pods[i]);
	session__unref(w.s);
}

static void test_deletion_and_ttl(void **state)
{
	struct world w = { .now = T0 + 100 * SEC };
	struct reconcile_plan p;
	struct session *s;
	struct kpod *inj;
	json_t *j = session_json("{\"ttlSecondsAfterFinished\":60}");

	(void)state;
	json_object_set_new(json_object_get(j, "metadata"), "deletionTimestamp",
			    json_string("2024-05-01T12:01:00Z"));
	s = session_from(j);
	w.s = s;
	inj = injector(s, "trainer-0", "{\"running\":{}}", "Running");
	w.inj[0] = inj;
	w.n_inj = 1;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 2);
	assert_int_equal(p.actions[0].kind, ACT_DELETE_POD);
	assert_int_equal(p.actions[1].kind, ACT_REMOVE_FINALIZER);
	assert_null(p.status);
	reconcile_plan__release(&p);
	kpod__unref(inj);
	session__unref(s);

	/* finished at T0+50: deleted at T0+110 */
	j = session_json("{\"ttlSecondsAfterFinished\":60}");
	json_object_set_new(j, "status", json_pack("{s:s,s:s}", "phase", "Succeeded",
						   "completionTime", "2024-05-01T12:00:50Z"));
	w.s = session_from(j);
	w.n_inj = 0;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 0);
	assert_int_equal(p.requeue_at_ns, T0 + 110 * SEC);
	reconcile_plan__release(&p);
	w.now = T0 + 110 * SEC;
	plan(&w, &p);
	assert_int_equal(p.n_actions, 1);
	assert_int_equal(p.actions[0].kind, ACT_DELETE_SESSION);
	reconcile_plan__release(&p);
	session__unref(w.s);

	/* in the in-cluster store without a TTL of its own: --store-max-age (its artifacts go
	 * with it); with one, its own; elsewhere, kept */
	{
		struct reconcile_config sc = cfg;
		struct reconcile_input in = { .now_ns = T0 + 100 * SEC, .cfg = &sc };
		static const char *const status = "{\"phase\":\"Succeeded\","
						   "\"completionTime\":\"2024-05-01T12:00:50Z\"}";

		sc.store_max_age_ns = 3600 * SEC;
		session__set_store(true);
		j = session_json(NULL);
		json_object_del(json_object_get(j, "spec"), "output");
		json_object_set_new(j, "status", json_loads(status, 0, NULL));
		in.s = s = session_from(j);
		assert_true(s->spec.in_cluster);
		assert_int_equal(reconcile__plan(&in, &p), 0);
		assert_int_equal(p.n_actions, 0);
		assert_int_equal(p.requeue_at_ns, T0 + 3650 * SEC);
		reconcile_plan__release(&p);
		in.now_ns = T0 + 3650 * SEC;
		assert_int_equal(reconcile__plan(&in, &p), 0);
		assert_int_equal(p.n_actions, 1);
		assert_int_equal(p.actions[0].kind, ACT_DELETE_SESSION);
		reconcile_plan__release(&p);
		session__unref(s);

		j = session_json("{\"ttlSecondsAfterFinished\":60}");
		json_object_del(json_object_get(j, "spec"), "output");
		json_object_set_new(j, "status", json_loads(status, 0, NULL));
		in.s = s = session_from(j);
		in.now_ns = T0 + 100 * SEC;
		assert_int_equal(reconcile__plan(&in, &p), 0);
		assert_int_equal(p.requeue_at_ns, T0 + 110 * SEC);
		reconcile_plan__release(&p);
		session__unref(s);
		session__set_store(false);

		j = session_json(NULL);
		json_object_set_new(j, "status", json_loads(status, 0, NULL));
		in.s = s = session_from(j);
		in.now_ns = T0 + 100 * 3600 * SEC;
		assert_int_equal(reconcile__plan(&in, &p), 0);
		assert_int_equal(p.n_actions, 0);
		reconcile_plan__release(&p);
		session__unref(s);
	}
}

/* ---- injspec ------------------------------------------------------------------------------ */

static void test_injspec_names(void **state)
{
	struct session *s = session_from(session_json(NULL));
	char a[64], b[64], e[32];
	char *url = NULL;

	(void)state;
	injspec__pod_name(s, "trainer-0", a);
	injspec__pod_name(s, "trainer-0", b);
	assert_string_equal(a, b);                      /* the same on every controller */
	assert_int_equal(strncmp(a, "aiprof-slow-step-", 17), 0);
	injspec__pod_name(s, "trainer-1", b);
	assert_string_not_equal(a, b);
	assert_true(strlen(a) <= 63);
	injspec__ephemeral_name(s, e);
	assert_int_equal(strlen(e), 17);
	assert_int_equal(injspec__output_url(&cfg.inj, s, "trainer-0", &url), 0);
	assert_string_equal(url, "s3://profiles/team-a/train/slow-step/u-1234/trainer-0");
	free(url);
	session__unref(s);
}

/* ---- termination messages --------------------------------------------------------------- */

static void test_termination(void **state)
{
	struct termination *t = calloc(1, sizeof(*t)), *t2 = calloc(1, sizeof(*t2));
	char why[200], buf[TERMINATION_MAX];
	static const char ok[] =
		"{\"artifacts\":[{\"name\":\"summary.json\",\"url\":\"s3://b/p/summary.json\","
		"\"size\":10},{\"name\":\"flame/graph.svg\",\"url\":\"https://s3.x/b/graph.svg\","
		"\"size\":0,\"sha256\":null}],\"summary\":{\"events\":5,\"dropped\":0,\"note\":\"x\"},"
		"\"findings\":[{\"category\":\"PageableMemcpy\"}],\"future\":{\"ignored\":true}}";
	int n;

	(void)state;
	assert_int_equal(termination__parse(ok, sizeof(ok) - 1, t, why, sizeof(why)), 0);
	assert_int_equal(t->n_artifacts, 2);
	assert_string_equal(t->artifacts[1].name, "flame/graph.svg");
	assert_int_equal(t->n_summary, 2);              /* "note" is not a count */
	assert_string_equal(t->findings[0].severity, "Info");
	assert_string_equal(t->error, "");
	n = termination__format(t, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(termination__parse(buf, (size_t)n, t2, why, sizeof(why)), 0);
	assert_int_equal(t2->n_artifacts, 2);
	assert_int_equal(t2->summary[0].value, 5);

	{
		static const char e[] = "{\"error\":\"a\\nb\\u0000c\"}";

		assert_int_equal(termination__parse(e, sizeof(e) - 1, t, why, sizeof(why)), 0);
	}
	assert_string_equal(t->error, "a b c");
	assert_int_equal(termination__parse("[1]", 3, t, why, sizeof(why)), -EBADMSG);
	assert_int_equal(termination__parse("", 0, t, why, sizeof(why)), -EBADMSG);
#define BAD(s) assert_int_equal(termination__parse(s, strlen(s), t, why, sizeof(why)), -EINVAL)
	BAD("{\"artifacts\":[{\"name\":\"../etc\",\"url\":\"s3://b/x\"}]}");
	BAD("{\"artifacts\":[{\"name\":\"a\",\"url\":\"file:///etc/passwd\"}]}");
	BAD("{\"artifacts\":[{\"name\":\"a\",\"url\":\"s3://b/x y\"}]}");
	BAD("{\"artifacts\":[{\"name\":\"a\",\"url\":\"s3://b/x\",\"size\":-1}]}");
	BAD("{\"artifacts\":[{\"name\":\"a\",\"url\":\"s3://b/x\",\"sha256\":\"XYZ\"}]}");
	BAD("{\"findings\":[{\"category\":\"<script>\"}]}");
	BAD("{\"summary\":{\"bad key\":1}}");
	BAD("{\"error\":5}");
	memset(buf, 'a', sizeof(buf));
	assert_int_equal(termination__parse(buf, sizeof(buf) + 0 + 1, t, why, sizeof(why)), -E2BIG);
	/* an error longer than kept is cut, not inside a UTF-8 sequence */
	{
		char msg[1200];
		size_t o = 0;

		o += (size_t)snprintf(msg, sizeof(msg), "{\"error\":\"");
		while (o < 1100)
			msg[o++] = (char)0xc3, msg[o++] = (char)0xa9;   /* é */
		o += (size_t)snprintf(msg + o, sizeof(msg) - o, "\"}");
		assert_int_equal(termination__parse(msg, o, t, why, sizeof(why)), 0);
		assert_true(strlen(t->error) < TERM_ERROR_MAX);
		assert_int_equal(strlen(t->error) % 2, 0);
	}
	free(t);
	free(t2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_session_spec),
		cmocka_unit_test(test_session_cost),
		cmocka_unit_test(test_denied_namespace),
		cmocka_unit_test(test_injector_ours),
		cmocka_unit_test(test_merge_ours),
		cmocka_unit_test(test_pods_in_injector_namespace),
		cmocka_unit_test(test_storage),
		cmocka_unit_test(test_storage_errors),
		cmocka_unit_test(test_capabilities_follow_collectors),
		cmocka_unit_test(test_in_cluster_store),
		cmocka_unit_test(test_node_gone),
		cmocka_unit_test(test_namespace_limit),
		cmocka_unit_test(test_s3_defaults),
		cmocka_unit_test(test_finalizer_first),
		cmocka_unit_test(test_invalid_and_foreign),
		cmocka_unit_test(test_target_missing),
		cmocka_unit_test(test_happy_path_node_agent),
		cmocka_unit_test(test_injector_fails),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_kata_ephemeral),
		cmocka_unit_test(test_target_deleted_mid_session),
		cmocka_unit_test(test_selector_targets),
		cmocka_unit_test(test_merge_pod_and_merged_timeline),
		cmocka_unit_test(test_merge_failures),
		cmocka_unit_test(test_status_order_is_target_order),
		cmocka_unit_test(test_deletion_and_ttl),
		cmocka_unit_test(test_injspec_names),
		cmocka_unit_test(test_termination),
	};

	session__set_inline_s3(true);      /* the fixtures give spec.output.s3 */
	return cmocka_run_group_tests(tests, setup, NULL);
}
