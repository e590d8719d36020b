/* SPDX-License-Identifier: MIT */
/* controller/artstore.c (the artifact store's path, ConfigMaps and the API server's answers)
 * and controller/artupload.c (an upload's checks and writes) against a fake API server: a
 * function that keeps ConfigMaps in a JSON object. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>
#include "controller/artstore.h"
#include "controller/artupload.h"
#include "controller/b64.h"
#include "controller/httpauth.h"

#define UID "0b7c6a43-1111-4e2e-9a55-5a1d2b3c4d5e"
#define POD_UID "9f1e2d3c-2222-4b5a-8c7d-6e5f4a3b2c1d"

/* ---- the path and names ------------------------------------------------------------------ */

static void test_parse_path(void **state)
{
	static const char *const bad[] = {
		"/v1/artifact/train/s1/x", "/v1/artifacts/train/s1", "/v1/artifacts/train/s1/",
		"/v1/artifacts/Train/s1/x", "/v1/artifacts/tr.ain/s1/x", "/v1/artifacts//s1/x",
		"/v1/artifacts/train//x", "/v1/artifacts/train/-s1/x", "/v1/artifacts/train/S1/x",
		"/v1/artifacts/train/s1//x", "/v1/artifacts/train/s1/a//b", "/v1/artifacts/train/s1/a/",
		"/v1/artifacts/train/s1/a/../b", "/v1/artifacts/train/s1/./b", "/v1/artifacts/train/s1/..",
		"/v1/artifacts/train/s1/a b", "/v1/artifacts/train/s1/a:b", "/v1/artifacts/train/s1/%41",
		"/v1/artifacts/-train/s1/x",
		"/v1/artifacts/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/s1/x",
	};
	struct artstore_path p;
	char why[256], uri[512];

	(void)state;
	assert_int_equal(artstore__parse_path("/v1/artifacts/train/llama.slow-1/trainer-0/summary.json",
					      &p, why, sizeof(why)), 0);
	assert_string_equal(p.ns, "train");
	assert_string_equal(p.session, "llama.slow-1");
	assert_string_equal(p.name, "trainer-0/summary.json");
	assert_int_equal(artstore__parse_path("/v1/artifacts/a/b/..x/...", &p, why, sizeof(why)), 0);
	assert_string_equal(p.name, "..x/...");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strcpy(p.name, "kept");
		assert_int_equal(artstore__parse_path(bad[i], &p, why, sizeof(why)), -EINVAL);
		assert_string_equal(p.name, "kept");
		assert_true(why[0]);
	}
	/* 200 characters of name, not 201 */
	snprintf(uri, sizeof(uri), "/v1/artifacts/a/b/%0200d", 0);
	assert_int_equal(artstore__parse_path(uri, &p, why, sizeof(why)), 0);
	snprintf(uri, sizeof(uri), "/v1/artifacts/a/b/%0201d", 0);
	assert_int_equal(artstore__parse_path(uri, &p, why, sizeof(why)), -EINVAL);
	assert_true(artstore__dns_name("a-1", false));
	assert_false(artstore__dns_name("a.b", false));
	assert_true(artstore__dns_name("a.b", true));
	assert_false(artstore__dns_name("a.", true));
}

static void test_sha256_and_names(void **state)
{
	char name[ARTSTORE_CM_NAME_MAX + 1], hex[SHA256_HEX_LEN + 1];
	uint8_t d[SHA256_LEN], h[SHA256_LEN];

	(void)state;
	sha256(UID "/trainer-0/summary.json", strlen(UID "/trainer-0/summary.json"), h);
	hex_encode(h, SHA256_LEN, hex);
	artstore__cm_name(UID, "trainer-0/summary.json", 3, name);
	assert_int_equal(strncmp(name, "aiprof-", 7), 0);
	assert_int_equal(strncmp(name + 7, hex, 12), 0);
	assert_string_equal(name + 19, "-3");
	assert_int_equal(artstore__parse_sha256(hex, d), 0);
	assert_memory_equal(d, h, SHA256_LEN);
	hex[0] = 'A';
	hex[1] = 'F';
	assert_int_equal(artstore__parse_sha256(hex, d), 0);
	assert_int_equal(d[0], 0xaf);
	hex[5] = 'g';
	assert_int_equal(artstore__parse_sha256(hex, d), -EINVAL);
	assert_int_equal(artstore__parse_sha256("abc", d), -EINVAL);
	assert_int_equal(artstore__chunks(0), 1);
	assert_int_equal(artstore__chunks(1), 1);
	assert_int_equal(artstore__chunks(ARTSTORE_CHUNK_MAX), 1);
	assert_int_equal(artstore__chunks(ARTSTORE_CHUNK_MAX + 1), 2);
	assert_int_equal(artstore__chunks(16ull << 20), 22);
}

static const char *ann(const json_t *cm, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(cm, "metadata"),
								 "annotations"), key));
}

static void test_configmaps(void **state)
{
	size_t size = ARTSTORE_CHUNK_MAX + 1000;
	uint8_t *data = malloc(size), *got;
	struct artstore_artifact a = {
		.ns = "train", .session = "s1", .session_uid = UID, .name = "trainer-0/t.json.gz",
		.data = data, .size = size, .sha256 = "ab",
	};
	char name[ARTSTORE_CM_NAME_MAX + 1], *text;
	json_t *cm, *ans;
	size_t len;

	(void)state;
	for (size_t i = 0; i < size; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	for (size_t c = 0; c < 2; c++) {
		const json_t *meta, *owner;
		const char *b64;

		cm = artstore__configmap(&a, c);
		assert_non_null(cm);
		meta = json_object_get(cm, "metadata");
		artstore__cm_name(UID, a.name, c, name);
		assert_string_equal(json_string_value(json_object_get(meta, "name")), name);
		assert_string_equal(json_string_value(json_object_get(meta, "namespace")), "train");
		assert_true(json_is_true(json_object_get(cm, "immutable")));
		assert_string_equal(json_string_value(json_object_get(json_object_get(meta, "labels"),
								      "aiprof.io/session-uid")), UID);
		assert_string_equal(json_string_value(json_object_get(json_object_get(meta, "labels"),
								      "aiprof.io/artifact")), "true");
		assert_string_equal(json_string_value(json_object_get(json_object_get(meta, "labels"),
								      "app.kubernetes.io/managed-by")),
				    "aiprof-controller");
		assert_string_equal(ann(cm, "aiprof.io/session"), "s1");
		assert_string_equal(ann(cm, "aiprof.io/artifact-name"), a.name);
		assert_string_equal(ann(cm, "aiprof.io/sha256"), "ab");
		assert_string_equal(ann(cm, "aiprof.io/chunk"), c ? "1/2" : "0/2");
		assert_int_equal(atoll(ann(cm, "aiprof.io/size")), size);
		owner = json_array_get(json_object_get(meta, "ownerReferences"), 0);
		assert_string_equal(json_string_value(json_object_get(owner, "apiVersion")),
				    "aiprof.io/v1alpha1");
		assert_string_equal(json_string_value(json_object_get(owner, "kind")), "ProfilingSession");
		assert_string_equal(json_string_value(json_object_get(owner, "uid")), UID);
		assert_string_equal(json_string_value(json_object_get(owner, "name")), "s1");
		b64 = json_string_value(json_object_get(json_object_get(cm, "binaryData"), "data"));
		assert_int_equal(b64_decode(b64, strlen(b64), &got, &len), 0);
		assert_int_equal(len, c ? 1000 : ARTSTORE_CHUNK_MAX);
		assert_memory_equal(got, data + c * ARTSTORE_CHUNK_MAX, len);
		free(got);
		json_decref(cm);
	}
	assert_null(artstore__configmap(&a, 2));
	text = artstore__answer(&a);
	ans = json_loads(text, 0, NULL);
	assert_non_null(ans);
	assert_int_equal(json_integer_value(json_object_get(ans, "size")), size);
	assert_int_equal(json_array_size(json_object_get(ans, "configMaps")), 2);
	json_decref(ans);
	free(text);
	/* an empty artifact is one ConfigMap with empty data */
	a.size = 0;
	cm = artstore__configmap(&a, 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(cm, "binaryData"), "data")), "");
	assert_string_equal(ann(cm, "aiprof.io/chunk"), "0/1");
	json_decref(cm);
	free(data);
}

/* ---- the API server's answers ------------------------------------------------------------ */

static char *review_answer(bool authenticated, const char *user, const char *pod, const char *uid,
			   const char *audience)
{
	json_t *st = json_pack("{s:b}", "authenticated", authenticated), *u, *doc;
	char *s;

	if (audience)
		json_object_set_new(st, "audiences", json_pack("[s]", audience));
	if (!authenticated)
		json_object_set_new(st, "error", json_string("token expired\n"));
	if (user) {
		u = json_pack("{s:s,s:{}}", "username", user, "extra");
		if (pod)
			json_object_set_new(json_object_get(u, "extra"),
					    "authentication.kubernetes.io/pod-name", json_pack("[s]", pod));
		if (uid)
			json_object_set_new(json_object_get(u, "extra"),
					    "authentication.kubernetes.io/pod-uid", json_pack("[s]", uid));
		json_object_set_new(st, "user", u);
	}
	doc = json_pack("{s:s,s:o}", "kind", "TokenReview", "status", st);
	s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return s;
}

static int parse_review(char *body, struct artstore_pod *p, char *why, size_t whylen)
{
	int r = artstore__parse_review(body, strlen(body), p, why, whylen);

	free(body);
	return r;
}

static void test_review_answers(void **state)
{
	struct artstore_pod p;
	char why[256];

	(void)state;
	assert_int_equal(parse_review(review_answer(true, "system:serviceaccount:train:default",
						    "inj-1", POD_UID, ARTSTORE_AUDIENCE), &p, why,
				      sizeof(why)), 0);
	assert_string_equal(p.ns, "train");
	assert_string_equal(p.name, "inj-1");
	assert_string_equal(p.uid, POD_UID);
	assert_int_equal(parse_review(review_answer(false, NULL, NULL, NULL, NULL), &p, why,
				      sizeof(why)), -EKEYREJECTED);
	assert_non_null(strstr(why, "token expired?"));   /* the newline made printable */
	assert_int_equal(parse_review(review_answer(true, "system:serviceaccount:train:default",
						    "inj-1", POD_UID, "other"), &p, why,
				      sizeof(why)), -EKEYREJECTED);
	assert_int_equal(parse_review(review_answer(true, "alice", "inj-1", POD_UID,
						    ARTSTORE_AUDIENCE), &p, why, sizeof(why)), -EPERM);
	assert_int_equal(parse_review(review_answer(true, "system:serviceaccount:train:default",
						    NULL, NULL, ARTSTORE_AUDIENCE), &p, why,
				      sizeof(why)), -EPERM);
	assert_int_equal(parse_review(review_answer(true, "system:serviceaccount::default",
						    "inj-1", POD_UID, ARTSTORE_AUDIENCE), &p, why,
				      sizeof(why)), -EPERM);
	assert_int_equal(artstore__parse_review("[]", 2, &p, why, sizeof(why)), -EPROTO);
	assert_int_equal(artstore__parse_review("{\"kind\":\"Status\",\"status\":{}}", 29, &p, why,
						sizeof(why)), -EPROTO);
	assert_int_equal(artstore__parse_review("{", 1, &p, why, sizeof(why)), -EPROTO);
}

static char *pod_json(const char *uid, const char *ns, const char *component, const char *session,
		      const char *session_uid, const char *owner_uid)
{
	json_t *pod = json_pack("{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s,s:s}}}", "metadata", "name",
				"inj-1", "namespace", ns, "uid", uid, "labels", "aiprof.io/session",
				session, "aiprof.io/session-uid", session_uid,
				"aiprof.io/session-namespace", "train",
				"app.kubernetes.io/component", component,
				"app.kubernetes.io/managed-by", "aiprof-controller",
				"aiprof.io/target-pod", "trainer-0");
	char *s;

	if (owner_uid)
		json_object_set_new(json_object_get(pod, "metadata"), "ownerReferences",
				    json_pack("[{s:s,s:s,s:s,s:s}]", "apiVersion", "aiprof.io/v1alpha1",
					      "kind", "ProfilingSession", "name", session, "uid",
					      owner_uid));
	s = json_dumps(pod, JSON_COMPACT);
	json_decref(pod);
	return s;
}

static int check_name(char *pod, const char *name, char *why, size_t whylen)
{
	int r = artstore__check_injector(pod, strlen(pod), "train", "train", "s1", UID, POD_UID,
					 name, why, whylen);

	free(pod);
	return r;
}

static int check(char *pod, char *why, size_t whylen)
{
	int r = artstore__check_injector(pod, strlen(pod), "train", "train", "s1", UID, POD_UID,
					 "trainer-0/summary.json", why, whylen);

	free(pod);
	return r;
}

/* The same, for a pod in the injector namespace "aiprof-injectors". */
static int check_away(char *pod, char *why, size_t whylen)
{
	int r = artstore__check_injector(pod, strlen(pod), "aiprof-injectors", "train", "s1", UID,
					 POD_UID, "trainer-0/summary.json", why, whylen);

	free(pod);
	return r;
}

static void test_check_injector(void **state)
{
	char why[256];

	(void)state;
	assert_int_equal(check(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, UID), why,
			       sizeof(why)), 0);
	assert_int_equal(check(pod_json("other-uid", "train", "aiprof-injector", "s1", UID, UID), why,
			       sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "UID"));
	assert_int_equal(check(pod_json(POD_UID, "team", "aiprof-injector", "s1", UID, UID), why,
			       sizeof(why)), -EPERM);
	assert_int_equal(check(pod_json(POD_UID, "train", "trainer", "s1", UID, UID), why,
			       sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "not an aiprof injector"));
	assert_int_equal(check(pod_json(POD_UID, "train", "aiprof-injector", "s2", UID, UID), why,
			       sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "not an injector of session train/s1"));
	assert_int_equal(check(pod_json(POD_UID, "train", "aiprof-injector", "s1", "old", UID), why,
			       sizeof(why)), -EPERM);
	assert_int_equal(check(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, NULL), why,
			       sizeof(why)), -EPERM);
	assert_int_equal(check(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, "old"), why,
			       sizeof(why)), -EPERM);
	/* an injector writes under its own target's name only */
	assert_int_equal(check_name(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, UID),
				    "trainer-1/summary.json", why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "injector of target trainer-0"));
	assert_int_equal(check_name(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, UID),
				    "trainer-00/x", why, sizeof(why)), -EPERM);
	assert_int_equal(check_name(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, UID),
				    "summary.json", why, sizeof(why)), -EPERM);
	assert_int_equal(check(strdup("{\"metadata\":{}}"), why, sizeof(why)), -EPROTO);
	assert_int_equal(check(strdup("nope"), why, sizeof(why)), -EPROTO);
	/* in the injector namespace: no ownerReference can cross namespaces, the labels say */
	assert_int_equal(check_away(pod_json(POD_UID, "aiprof-injectors", "aiprof-injector", "s1",
					     UID, NULL), why, sizeof(why)), 0);
	/* the tenant's own namespace is not where this controller runs injectors */
	assert_int_equal(check_away(pod_json(POD_UID, "train", "aiprof-injector", "s1", UID, UID),
				    why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "where this controller runs injectors"));
}

static int check_session(const char *phase, const char *recorded, const char *name, char *uid,
			 char *why, size_t whylen)
{
	json_t *j = json_pack("{s:{s:s,s:s},s:{s:[{s:s}]}}", "metadata", "name", "s1", "uid", UID,
			      "status", "targets", "pod", "trainer-0");
	char *s;
	int r;

	if (phase)
		json_object_set_new(json_object_get(j, "status"), "phase", json_string(phase));
	if (recorded)
		json_object_set_new(json_array_get(json_object_get(json_object_get(j, "status"),
								   "targets"), 0),
				    "injectorUID", json_string(recorded));
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	r = artstore__check_session(s, strlen(s), POD_UID, name, uid, why, whylen);
	free(s);
	return r;
}

static void test_check_session(void **state)
{
	char uid[ARTSTORE_UID_MAX + 1] = "", why[256];

	(void)state;
	assert_int_equal(check_session("Uploading", POD_UID, "trainer-0/a.json", uid, why,
				       sizeof(why)), 0);
	assert_string_equal(uid, UID);
	assert_int_equal(check_session("Profiling", POD_UID, "trainer-0/a.json", uid, why,
				       sizeof(why)), 0);
	/* a pod the tenant made carries everything but the UID the status recorded */
	assert_int_equal(check_session("Profiling", "another-pod-uid", "trainer-0/a.json", uid, why,
				       sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "not the injector session s1 recorded for target trainer-0"));
	/* another target's name: no injector recorded for it */
	assert_int_equal(check_session("Profiling", POD_UID, "trainer-1/a.json", uid, why,
				       sizeof(why)), -EAGAIN);
	assert_non_null(strstr(why, "names no injector of target trainer-1 yet"));
	assert_int_equal(check_session("Injecting", NULL, "trainer-0/a.json", uid, why,
				       sizeof(why)), -EAGAIN);
	/* finished: nothing more is taken, even from the session's own injector */
	assert_int_equal(check_session("Succeeded", POD_UID, "trainer-0/a.json", uid, why,
				       sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "has finished (Succeeded)"));
	assert_int_equal(check_session("Failed", POD_UID, "trainer-0/a.json", uid, why,
				       sizeof(why)), -EPERM);
	assert_int_equal(artstore__check_session("{}", 2, POD_UID, "t/a", uid, why, sizeof(why)),
			 -EPROTO);
	assert_int_equal(artstore__check_session("[", 1, POD_UID, "t/a", uid, why, sizeof(why)),
			 -EPROTO);
}

static void test_stored(void **state)
{
	static const char list[] =
		"{\"kind\":\"PartialObjectMetadataList\",\"items\":["
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"a\",\"aiprof.io/size\":\"10\","
		"\"aiprof.io/sha256\":\"" "0123456789012345678901234567890123456789012345678901234567890123" "\"}}},"
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"a\",\"aiprof.io/size\":\"10\"}}},"
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"b\",\"aiprof.io/size\":\"5\"}}},"
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"b\",\"aiprof.io/size\":\"5\"}}},"
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"c\",\"aiprof.io/size\":\"-4\"}}},"
		"{\"metadata\":{\"annotations\":{\"aiprof.io/artifact-name\":\"d\",\"aiprof.io/size\":\"7\"}}},"
		"{\"metadata\":{}},7]}";
	char existing[SHA256_HEX_LEN + 1];
	uint64_t others = 99;

	(void)state;
	assert_int_equal(artstore__stored(list, strlen(list), "a", &others, existing), 0);
	assert_int_equal(others, 12);
	assert_string_equal(existing, "0123456789012345678901234567890123456789012345678901234567890123");
	assert_int_equal(artstore__stored(list, strlen(list), "z", &others, existing), 0);
	assert_int_equal(others, 22);
	assert_string_equal(existing, "");
	assert_int_equal(artstore__stored("{\"items\":null}", 14, "a", &others, existing), 0);
	assert_int_equal(others, 0);
	assert_int_equal(artstore__stored("{\"items\":{}}", 12, "a", &others, existing), -EPROTO);
	assert_int_equal(artstore__stored("[]", 2, "a", &others, existing), -EPROTO);
}

/* A namespace's artifacts: each session's bytes once per artifact name, this session's
 * left out, the sessions counted. */
static void test_ns_usage(void **state)
{
#define CM(uid, name, size) "{\"metadata\":{\"labels\":{\"aiprof.io/session-uid\":\"" uid "\"}," \
	"\"annotations\":{\"aiprof.io/artifact-name\":\"" name "\",\"aiprof.io/size\":\"" size "\"}}}"
	static const char list[] = "{\"items\":[" CM("s-1", "a", "10") "," CM("s-1", "a", "10") ","
		CM("s-1", "b", "5") "," CM("s-2", "a", "7") "," CM("me", "a", "1000") ","
		CM("s-3", "x", "-1") ",{\"metadata\":{}},7]}";
#undef CM
	uint64_t bytes = 99;
	size_t sessions = 99;

	(void)state;
	assert_int_equal(artstore__ns_usage(list, strlen(list), "me", &bytes, &sessions), 0);
	assert_int_equal(bytes, 22);
	assert_int_equal(sessions, 2);          /* s-3's size is not a number: not counted */
	assert_int_equal(artstore__ns_usage("{\"items\":null}", 14, "me", &bytes, &sessions), 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(sessions, 0);
	assert_int_equal(artstore__ns_usage("[]", 2, "me", &bytes, &sessions), -EPROTO);
}

static void test_token_review_has_the_audience(void **state)
{
	char *body = httpauth__token_review_for("t\"k\\n", ARTSTORE_AUDIENCE);
	json_t *j = json_loads(body, 0, NULL), *spec = json_object_get(j, "spec");

	(void)state;
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(spec, "token")), "t\"k\\n");
	assert_int_equal(json_array_size(json_object_get(spec, "audiences")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "audiences"), 0)),
			    ARTSTORE_AUDIENCE);
	json_decref(j);
	free(body);
	body = httpauth__token_review("tok");
	assert_string_equal(body, "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":"
			    "\"TokenReview\",\"spec\":{\"token\":\"tok\"}}");
	free(body);
}

/* ---- uploads against a fake API server ----------------------------------------------------- */

struct fake_api {
	json_t *cms;            /* name -> ConfigMap */
	bool down;              /* every request fails as if nobody answered */
	bool session_gone;
	const char *session_phase;      /* NULL: Profiling */
	const char *pod_component;
	int creates, reviews;
	char last_accept[128];
};

static int status(struct kube_status *st, int code, const char *reason)
{
	st->code = code;
	snprintf(st->reason, sizeof(st->reason), "%s", reason);
	snprintf(st->message, sizeof(st->message), "%s", reason);
	return kube_errno(code, reason);
}

static int answer_json(json_t *j, char **ret_body, size_t *ret_len)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (ret_body) {
		*ret_body = s;
		if (ret_len)
			*ret_len = strlen(s);
	} else {
		free(s);
	}
	return 0;
}

static int fake_request(void *ctx, const char *method, const char *path, const char *accept,
			const char *body, size_t len, char **ret_body, size_t *ret_len,
			struct kube_status *st)
{
	struct fake_api *f = ctx;
	const char *cms = "/api/v1/namespaces/train/configmaps";

	(void)len;
	snprintf(f->last_accept, sizeof(f->last_accept), "%s", accept ? accept : "");
	if (f->down) {
		snprintf(st->message, sizeof(st->message), "connection refused");
		return -ECONNREFUSED;
	}
	if (strcmp(path, "/apis/authentication.k8s.io/v1/tokenreviews") == 0) {
		json_t *req = json_loads(body, 0, NULL);
		const char *tok = json_string_value(json_object_get(json_object_get(req, "spec"), "token"));
		bool good = strcmp(tok, "good") == 0;
		char *s = review_answer(good, "system:serviceaccount:train:default", "inj-1", POD_UID,
					ARTSTORE_AUDIENCE);

		assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(req,
			"spec"), "audiences"), 0)), ARTSTORE_AUDIENCE);
		json_decref(req);
		f->reviews++;
		*ret_body = s;
		*ret_len = strlen(s);
		return 0;
	}
	if (strcmp(path, "/apis/aiprof.io/v1alpha1/namespaces/train/profilingsessions/s1") == 0) {
		if (f->session_gone)
			return status(st, 404, "NotFound");
		return answer_json(json_pack("{s:{s:s,s:s},s:{s:s,s:[{s:s,s:s}]}}", "metadata",
					     "name", "s1", "uid", UID, "status", "phase",
					     f->session_phase ? f->session_phase : "Profiling",
					     "targets", "pod", "trainer-0", "injectorUID", POD_UID),
				   ret_body, ret_len);
	}
	if (strncmp(path, "/apis/aiprof.io/v1alpha1/", 25) == 0)
		return status(st, 404, "NotFound");
	if (strcmp(path, "/api/v1/namespaces/train/pods/inj-1") == 0) {
		char *s = pod_json(POD_UID, "train", f->pod_component, "s1", UID, UID);

		*ret_body = s;
		*ret_len = strlen(s);
		return 0;
	}
	if (strncmp(path, cms, strlen(cms)) == 0 && strcmp(method, "GET") == 0 &&
	    path[strlen(cms)] == '?') {
		json_t *items = json_array(), *v;
		const char *k;

		assert_non_null(strstr(path, "labelSelector=aiprof.io%2Fsession-uid%3D" UID));
		assert_non_null(strstr(accept, "PartialObjectMetadataList"));
		json_object_foreach(f->cms, k, v)
			json_array_append_new(items, json_pack("{s:O}", "metadata",
							       json_object_get(v, "metadata")));
		return answer_json(json_pack("{s:s,s:o}", "kind", "PartialObjectMetadataList", "items",
					     items), ret_body, ret_len);
	}
	if (strcmp(path, cms) == 0 && strcmp(method, "POST") == 0) {
		json_t *cm = json_loads(body, 0, NULL);
		const char *name = json_string_value(json_object_get(json_object_get(cm, "metadata"),
								     "name"));

		assert_non_null(name);
		f->creates++;
		if (json_object_get(f->cms, name)) {
			json_decref(cm);
			return status(st, 409, "AlreadyExists");
		}
		json_object_set_new(f->cms, name, cm);
		return answer_json(json_incref(cm), ret_body, ret_len);
	}
	if (strncmp(path, cms, strlen(cms)) == 0 && path[strlen(cms)] == '/') {
		json_t *cm = json_object_get(f->cms, path + strlen(cms) + 1);

		if (!cm)
			return status(st, 404, "NotFound");
		return answer_json(json_incref(cm), ret_body, ret_len);
	}
	return status(st, 500, "InternalError");
}

static struct artupload *new_uploader(struct fake_api *f)
{
	struct artupload_config cfg = {
		.max_file = 3 * ARTSTORE_CHUNK_MAX, .max_session = 4 * ARTSTORE_CHUNK_MAX,
		.request = fake_request, .request_ctx = f,
	};
	struct artupload *u = NULL;

	f->cms = json_object();
	f->pod_component = "aiprof-injector";
	assert_int_equal(artupload__new(&cfg, &u), 0);
	return u;
}

/* One upload of size bytes (filled with fill) under name, the header's checksum the body's
 * unless sha is given. Returns the answer's status; *ret_answer (may be NULL) its text. */
static unsigned upload(struct artupload *u, const char *session, const char *name, size_t size,
		       uint8_t fill, const char *token, const char *sha, char **ret_answer)
{
	struct artstore_path path = { .ns = "train" };
	struct artupload_req *r;
	uint8_t h[SHA256_LEN];
	unsigned code;

	snprintf(path.session, sizeof(path.session), "%s", session);
	snprintf(path.name, sizeof(path.name), "%s", name);
	r = artupload_req__new(&path, token, size);
	assert_non_null(r);
	r->phase = ARTUPLOAD_CHECK;
	artupload__submit(u, r);
	assert_false(artupload_req__done(r));
	assert_true(artupload__run_one(u));
	assert_true(artupload_req__done(r));
	assert_null(r->token);          /* wiped once reviewed */
	code = r->code;
	if (code == 0) {                /* who uploads is fine: now the body */
		assert_string_equal(r->session_uid, UID);
		memset(r->body, fill, size);
		r->len = size;
		sha256(r->body, size, h);
		hex_encode(h, SHA256_LEN, r->sha256);
		if (sha)
			snprintf(r->sha256, sizeof(r->sha256), "%s", sha);
		r->phase = ARTUPLOAD_STORE;
		artupload__submit(u, r);
		assert_false(artupload_req__done(r));
		assert_true(artupload__run_one(u));
		assert_true(artupload_req__done(r));
		code = r->code;
	} else {
		assert_string_equal(r->session_uid, "");
	}
	if (ret_answer)
		*ret_answer = strdup(r->answer);
	artupload_req__unref(r);
	return code;
}

static void test_upload(void **state)
{
	struct fake_api f = { 0 };
	struct artupload *u = new_uploader(&f);
	char *ans = NULL;
	json_t *j;

	(void)state;
	assert_int_equal(upload(u, "s1", "trainer-0/t.gz", ARTSTORE_CHUNK_MAX + 5, 'a', "good", NULL,
				&ans), 201);
	j = json_loads(ans, 0, NULL);
	assert_int_equal(json_array_size(json_object_get(j, "configMaps")), 2);
	json_decref(j);
	free(ans);
	assert_int_equal(json_object_size(f.cms), 2);
	assert_int_equal(f.creates, 2);
	/* a retry finds both there with the same checksum */
	assert_int_equal(upload(u, "s1", "trainer-0/t.gz", ARTSTORE_CHUNK_MAX + 5, 'a', "good", NULL,
				NULL), 201);
	assert_int_equal(f.creates, 4);
	assert_int_equal(json_object_size(f.cms), 2);
	/* the same name with other bytes: refused before anything is written */
	assert_int_equal(upload(u, "s1", "trainer-0/t.gz", 10, 'b', "good", NULL, &ans), 409);
	assert_non_null(strstr(ans, "conflict"));
	free(ans);
	assert_int_equal(f.creates, 4);
	/* a checksum that is not the body's */
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "good",
				"00000000000000000000000000000000000000000000000000000000000000ff",
				&ans), 400);
	assert_non_null(strstr(ans, "X-Aiprof-Sha256"));
	free(ans);
	/* who */
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "bad", NULL, &ans), 401);
	assert_non_null(strstr(ans, "token expired"));
	free(ans);
	assert_int_equal(upload(u, "nosuch", "trainer-0/x", 10, 'b', "good", NULL, NULL), 404);
	f.pod_component = "trainer";
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "good", NULL, &ans), 403);
	assert_non_null(strstr(ans, "not an aiprof injector"));
	free(ans);
	f.pod_component = "aiprof-injector";
	/* the session's bound: 768 KiB + 5 stored; 3 * 768 KiB more is over 4 * 768 KiB */
	assert_int_equal(upload(u, "s1", "trainer-0/big", 3 * ARTSTORE_CHUNK_MAX, 'c', "good", NULL,
				&ans), 413);
	assert_non_null(strstr(ans, "--store-max-session-bytes"));
	free(ans);
	assert_int_equal(upload(u, "s1", "trainer-0/big", 3 * ARTSTORE_CHUNK_MAX + 1, 'c', "good",
				NULL, &ans), 413);
	assert_non_null(strstr(ans, "--store-max-file-bytes"));
	free(ans);
	assert_int_equal(upload(u, "s1", "trainer-0/empty", 0, 0, "good", NULL, NULL), 201);
	/* nobody answers: try again */
	f.down = true;
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "good", NULL, &ans), 503);
	assert_non_null(strstr(ans, "try again"));
	free(ans);
	f.down = false;
	/* a finished session takes nothing more */
	f.session_phase = "Succeeded";
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "good", NULL, &ans), 403);
	assert_non_null(strstr(ans, "has finished"));
	free(ans);
	f.session_phase = NULL;
	f.session_gone = true;
	assert_int_equal(upload(u, "s1", "trainer-0/x", 10, 'b', "good", NULL, NULL), 404);
	assert_false(artupload__run_one(u));
	artupload__free(u);
	json_decref(f.cms);
}

static void test_conflicting_chunk(void **state)
{
	struct fake_api f = { 0 };
	struct artupload *u = new_uploader(&f);
	char name[ARTSTORE_CM_NAME_MAX + 1], *ans = NULL;

	(void)state;
	/* chunk 0 exists, made by another upload of other bytes, without an annotation the list
	 * matches (it lacks aiprof.io/artifact-name) */
	artstore__cm_name(UID, "trainer-0/y", 0, name);
	json_object_set_new(f.cms, name, json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
						   "aiprof.io/sha256", "00"));
	assert_int_equal(upload(u, "s1", "trainer-0/y", 10, 'y', "good", NULL, &ans), 409);
	assert_non_null(strstr(ans, name));
	free(ans);
	assert_string_equal(f.last_accept, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1");
	artupload__free(u);
	json_decref(f.cms);
}

static int wakes;
static void count_wake(void *ctx)
{
	(void)ctx;
	__atomic_add_fetch(&wakes, 1, __ATOMIC_SEQ_CST);
}

static void test_worker_thread(void **state)
{
	struct fake_api f = { 0 };
	struct artupload_config cfg = {
		.max_file = 1 << 20, .max_session = 1 << 20, .wake = count_wake,
		.request = fake_request, .request_ctx = &f,
	};
	struct artstore_path path = { .ns = "train", .session = "s1", .name = "trainer-0/n" };
	struct artupload *u = NULL;
	struct artupload_req *r, *queued;

	(void)state;
	f.cms = json_object();
	f.pod_component = "aiprof-injector";
	assert_int_equal(artupload__new(&cfg, &u), 0);
	assert_int_equal(artupload__start(u), 0);
	r = artupload_req__new(&path, "good", 3);
	r->phase = ARTUPLOAD_CHECK;
	artupload__submit(u, r);
	memcpy(r->body, "abc", 3);      /* the body comes meanwhile */
	r->len = 3;
	strcpy(r->sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	for (int i = 0; i < 5000 && !artupload_req__done(r); i++)
		usleep(1000);
	assert_true(artupload_req__done(r));
	assert_int_equal(r->code, 0);
	r->phase = ARTUPLOAD_STORE;
	artupload__submit(u, r);
	for (int i = 0; i < 5000 && !artupload_req__done(r); i++)
		usleep(1000);
	assert_true(artupload_req__done(r));
	assert_int_equal(r->code, 201);
	assert_true(__atomic_load_n(&wakes, __ATOMIC_SEQ_CST) >= 1);
	/* the connection went away meanwhile: the worker's reference keeps it alive */
	queued = artupload_req__new(&path, "good", 0);
	queued->phase = ARTUPLOAD_STORE;       /* never checked: refused */
	artupload__submit(u, queued);
	artupload_req__unref(queued);
	artupload_req__unref(r);
	artupload__free(u);             /* drops what is still queued */
	json_decref(f.cms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_path),
		cmocka_unit_test(test_sha256_and_names),
		cmocka_unit_test(test_configmaps),
		cmocka_unit_test(test_review_answers),
		cmocka_unit_test(test_check_injector),
		cmocka_unit_test(test_check_session),
		cmocka_unit_test(test_stored),
		cmocka_unit_test(test_ns_usage),
		cmocka_unit_test(test_token_review_has_the_audience),
		cmocka_unit_test(test_upload),
		cmocka_unit_test(test_conflicting_chunk),
		cmocka_unit_test(test_worker_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
