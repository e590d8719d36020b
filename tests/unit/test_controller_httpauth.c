/* SPDX-License-Identifier: MIT */
/* controller/httpauth.c: the Authorization header, the review requests and answers, and the
 * cache and queue of reviews, against a fake API server (a function) and a fake clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>
#include <jansson.h>
#include "controller/httpauth.h"

#define SEC 1000000000ULL

static uint64_t clock_ns = 1000 * SEC;
static uint64_t fake_now(void) { return clock_ns; }

/* ---- the fake API server ------------------------------------------------------------------ */

struct fake_api {
	int posts;
	char path[128];
	json_t *last;           /* the last request */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wakes;
};

static char *token_answer(const char *token)
{
	if (strncmp(token, "good", 4) == 0 || strcmp(token, "al\"ice\\") == 0) {
		const char *name = strcmp(token, "good-bob") == 0 ? "bob" : "alice";
		json_t *j = json_pack("{s:s,s:{s:b,s:{s:s,s:s,s:[s,i,s],s:{s:[s,i]}}}}", "kind",
				      "TokenReview", "status", "authenticated", 1, "user", "username",
				      name, "uid", "u-1", "groups", "team", 7, "system:authenticated",
				      "extra", "scopes", "read", 3);
		char *s = json_dumps(j, JSON_COMPACT);

		json_decref(j);
		return s;
	}
	return strdup("{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false,"
		      "\"error\":\"invalid bearer token\\n\"}}");
}

static char *access_answer(const json_t *spec)
{
	const char *user = json_string_value(json_object_get(spec, "user"));
	const json_t *nr = json_object_get(spec, "nonResourceAttributes");
	const json_t *ra = json_object_get(spec, "resourceAttributes");
	const char *ns = json_string_value(json_object_get(ra, "namespace"));
	bool ok = strcmp(user, "alice") == 0 ? nr != NULL || (ns && strcmp(ns, "a") == 0) :
		  ra && ns && !*ns;

	return ok ? strdup("{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":true}}") :
		strdup("{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":false,"
		       "\"reason\":\"no RBAC rule\"}}");
}

static int fake_post(void *ctx, const char *path, const char *body, char **ret_body,
		     struct kube_status *st)
{
	struct fake_api *f = ctx;
	json_t *req = json_loads(body, 0, NULL), *spec = json_object_get(req, "spec");
	const char *token = json_string_value(json_object_get(spec, "token"));

	assert_non_null(req);
	f->posts++;
	snprintf(f->path, sizeof(f->path), "%s", path);
	json_decref(f->last);
	f->last = req;
	if (token && strcmp(token, "fail") == 0) {
		st->code = 0;
		snprintf(st->message, sizeof(st->message), "connection refused");
		return -ECONNREFUSED;
	}
	*ret_body = token ? token_answer(token) : access_answer(spec);
	return 0;
}

static void fake_wake(void *ctx)
{
	struct fake_api *f = ctx;

	pthread_mutex_lock(&f->lock);
	f->wakes++;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static struct httpauth *new_auth(struct fake_api *f)
{
	struct httpauth_config cfg = {
		.wake = fake_wake, .ctx = f, .now_ns = fake_now, .post = fake_post, .post_ctx = f,
	};
	struct httpauth *a = NULL;

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	assert_int_equal(httpauth__new(&cfg, &a), 0);
	return a;
}

static void free_auth(struct httpauth *a, struct fake_api *f)
{
	httpauth__free(a);
	json_decref(f->last);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
}

static const struct httpauth_attr metrics = { .verb = "get", .path = "/metrics" };

static struct httpauth_attr list_in(const char *ns)
{
	return (struct httpauth_attr){ .verb = "list", .group = "aiprof.io",
				       .resource = "profilingsessions", .ns = ns };
}

/* The token's verdict now; its key into key. */
static enum httpauth_verdict ask(struct httpauth *a, const char *token,
				 uint8_t key[HTTPAUTH_KEY_LEN], struct httpauth_user **u, char *why,
				 size_t len)
{
	httpauth__key(token, key);
	return httpauth__authenticate(a, key, token, u, why, len);
}

/* The token's verdict once reviewed (reviewing what is queued). */
static enum httpauth_verdict authn(struct httpauth *a, const char *token,
				   struct httpauth_user **u, char *why, size_t len)
{
	uint8_t key[HTTPAUTH_KEY_LEN];
	enum httpauth_verdict v = ask(a, token, key, u, why, len);

	if (v == HTTPAUTH_PENDING) {
		while (httpauth__review_one(a))
			;
		v = httpauth__authenticate(a, key, token, u, why, len);
	}
	return v;
}

static enum httpauth_verdict authz(struct httpauth *a, struct httpauth_user *u,
				   const struct httpauth_attr *at, char *why, size_t len)
{
	enum httpauth_verdict v = httpauth__authorize(a, u, at, why, len);

	if (v == HTTPAUTH_PENDING) {
		while (httpauth__review_one(a))
			;
		v = httpauth__authorize(a, u, at, why, len);
	}
	return v;
}

/* ---- the pure part ------------------------------------------------------------------------ */

static void test_bearer(void **state)
{
	char tok[64], big[HTTPAUTH_TOKEN_MAX + 16], header[64];

	(void)state;
	assert_int_equal(httpauth__bearer("Bearer abc.def-1", tok, sizeof(tok)), 0);
	assert_string_equal(tok, "abc.def-1");
	assert_int_equal(httpauth__bearer("  bEaReR \t xyz  ", tok, sizeof(tok)), 0);
	assert_string_equal(tok, "xyz");
	assert_int_equal(httpauth__bearer(NULL, tok, sizeof(tok)), -ENOENT);
	assert_int_equal(httpauth__bearer("  ", tok, sizeof(tok)), -ENOENT);
	assert_int_equal(httpauth__bearer("Basic YWxhZGRpbjpvcGVu", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer ", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearerabc", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer a b", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer a\x01", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer caf\xc3\xa9", tok, sizeof(tok)), -EINVAL);
	assert_int_equal(httpauth__bearer("Bearer 0123456789", tok, 10), -E2BIG);
	memcpy(big, "Bearer ", 7);
	memset(big + 7, 'x', HTTPAUTH_TOKEN_MAX + 1);
	big[7 + HTTPAUTH_TOKEN_MAX + 1] = '\0';
	assert_int_equal(httpauth__bearer(big, big, sizeof(big)), -E2BIG);
	big[7 + HTTPAUTH_TOKEN_MAX] = '\0';
	assert_int_equal(httpauth__bearer(big, big, sizeof(big)), 0);  /* in place */
	assert_int_equal(strlen(big), HTTPAUTH_TOKEN_MAX);
	snprintf(header, sizeof(header), "Bearer in-place");
	assert_int_equal(httpauth__bearer(header, header, sizeof(header)), 0);
	assert_string_equal(header, "in-place");
}

static void test_token_review_request(void **state)
{
	char *body = httpauth__token_review("a\"b\\c");
	json_t *j = json_loads(body, 0, NULL);

	(void)state;
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "kind")), "TokenReview");
	assert_string_equal(json_string_value(json_object_get(j, "apiVersion")),
			    "authentication.k8s.io/v1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "spec"),
							      "token")), "a\"b\\c");
	json_decref(j);
	free(body);
}

static void test_answers(void **state)
{
	uint8_t key[HTTPAUTH_KEY_LEN] = { 1 };
	struct httpauth_user *u = NULL;
	struct httpauth_attr ns = list_in("team-a"), all = list_in("");
	char why[512], *ok = token_answer("good"), *no = token_answer("bad"), *req;
	json_t *j, *spec;

	(void)state;
	assert_int_equal(httpauth__parse_token_review(ok, strlen(ok), key, &u, why, sizeof(why)),
			 HTTPAUTH_ALLOW);
	assert_string_equal(httpauth_user__name(u), "alice");
	/* the access review carries who it is: name, uid, the string groups, string extras */
	req = httpauth__access_review(u, &metrics);
	j = json_loads(req, 0, NULL);
	spec = json_object_get(j, "spec");
	assert_string_equal(json_string_value(json_object_get(j, "kind")), "SubjectAccessReview");
	assert_string_equal(json_string_value(json_object_get(spec, "user")), "alice");
	assert_string_equal(json_string_value(json_object_get(spec, "uid")), "u-1");
	assert_int_equal(json_array_size(json_object_get(spec, "groups")), 2);
	assert_int_equal(json_array_size(json_object_get(json_object_get(spec, "extra"), "scopes")), 1);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		spec, "nonResourceAttributes"), "path")), "/metrics");
	assert_null(json_object_get(spec, "resourceAttributes"));
	json_decref(j);
	free(req);
	req = httpauth__access_review(u, &ns);
	j = json_loads(req, 0, NULL);
	spec = json_object_get(json_object_get(j, "spec"), "resourceAttributes");
	assert_string_equal(json_string_value(json_object_get(spec, "namespace")), "team-a");
	assert_string_equal(json_string_value(json_object_get(spec, "verb")), "list");
	assert_string_equal(json_string_value(json_object_get(spec, "group")), "aiprof.io");
	assert_string_equal(json_string_value(json_object_get(spec, "resource")), "profilingsessions");
	json_decref(j);
	free(req);
	httpauth__forbidden(u, &metrics, why, sizeof(why));
	assert_non_null(strstr(why, "user \"alice\" cannot get path \"/metrics\""));
	assert_non_null(strstr(why, "nonResourceURLs: [\"/metrics\"]"));
	httpauth__forbidden(u, &ns, why, sizeof(why));
	assert_string_equal(why, "user \"alice\" cannot list profilingsessions.aiprof.io in "
			    "namespace \"team-a\"");
	httpauth__forbidden(u, &all, why, sizeof(why));
	assert_string_equal(why, "user \"alice\" cannot list profilingsessions.aiprof.io at the "
			    "cluster scope");
	httpauth_user__unref(u);

	u = NULL;
	assert_int_equal(httpauth__parse_token_review(no, strlen(no), key, &u, why, sizeof(why)),
			 HTTPAUTH_UNAUTHENTICATED);
	assert_null(u);
	assert_string_equal(why, "the Kubernetes API server did not accept the token: invalid "
			    "bearer token?");
	free(ok);
	free(no);
	assert_int_equal(httpauth__parse_token_review("x", 1, key, &u, why, sizeof(why)), -EPROTO);
	ok = "{\"kind\":\"SubjectAccessReview\",\"status\":{\"authenticated\":true}}";
	assert_int_equal(httpauth__parse_token_review(ok, strlen(ok), key, &u, why, sizeof(why)),
			 -EPROTO);
	ok = "{\"status\":{\"authenticated\":true,\"user\":{\"groups\":[]}}}";
	assert_int_equal(httpauth__parse_token_review(ok, strlen(ok), key, &u, why, sizeof(why)),
			 -EPROTO);                              /* no user name */
	ok = "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":true}}";
	assert_int_equal(httpauth__parse_access_review(ok, strlen(ok), why, sizeof(why)),
			 HTTPAUTH_ALLOW);
	ok = "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":false,\"reason\":\"r\\u0007\"}}";
	assert_int_equal(httpauth__parse_access_review(ok, strlen(ok), why, sizeof(why)),
			 HTTPAUTH_DENY);
	assert_string_equal(why, "r?");
	ok = "{\"kind\":\"SubjectAccessReview\"}";
	assert_int_equal(httpauth__parse_access_review(ok, strlen(ok), why, sizeof(why)), -EPROTO);
	assert_int_equal(httpauth__parse_access_review("[", 1, why, sizeof(why)), -EPROTO);
}

/* ---- the cache and the queue -------------------------------------------------------------- */

static void test_review_then_cache(void **state)
{
	struct fake_api f;
	struct httpauth *a = new_auth(&f);
	struct httpauth_user *u = NULL;
	uint8_t key[HTTPAUTH_KEY_LEN];
	char why[512];

	(void)state;
	assert_int_equal(ask(a, "good", key, &u, why, sizeof(why)), HTTPAUTH_PENDING);
	assert_int_equal(ask(a, "good", key, &u, why, sizeof(why)), HTTPAUTH_PENDING);
	/* one review, not two */
	assert_true(httpauth__review_one(a));
	assert_false(httpauth__review_one(a));
	assert_int_equal(f.posts, 1);
	assert_int_equal(f.wakes, 1);
	assert_string_equal(f.path, "/apis/authentication.k8s.io/v1/tokenreviews");
	/* known by its key alone now, as a websocket client asks after its handshake */
	assert_int_equal(httpauth__authenticate(a, key, NULL, &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_string_equal(httpauth_user__name(u), "alice");

	assert_int_equal(authz(a, u, &metrics, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_string_equal(f.path, "/apis/authorization.k8s.io/v1/subjectaccessreviews");
	assert_int_equal(f.posts, 2);
	for (int i = 0; i < 10; i++) {                          /* scrapes within the TTL */
		struct httpauth_user *again = NULL;

		clock_ns += SEC;
		assert_int_equal(authn(a, "good", &again, why, sizeof(why)), HTTPAUTH_ALLOW);
		assert_int_equal(authz(a, again, &metrics, why, sizeof(why)), HTTPAUTH_ALLOW);
		httpauth_user__unref(again);
	}
	assert_int_equal(f.posts, 2);
	clock_ns += HTTPAUTH_TTL_YES_S * SEC;                   /* expired: reviewed again */
	assert_int_equal(httpauth__authorize(a, u, &metrics, why, sizeof(why)), HTTPAUTH_PENDING);
	httpauth_user__unref(u);                                /* the job needs no user */
	assert_true(httpauth__review_one(a));
	assert_int_equal(f.posts, 3);
	free_auth(a, &f);
}

static void test_denials(void **state)
{
	struct fake_api f;
	struct httpauth *a = new_auth(&f);
	struct httpauth_user *u = NULL;
	struct httpauth_attr ns_a = list_in("a"), ns_b = list_in("b"), all = list_in("");
	uint8_t key[HTTPAUTH_KEY_LEN];
	char why[512];

	(void)state;
	assert_int_equal(authn(a, "bad", &u, why, sizeof(why)), HTTPAUTH_UNAUTHENTICATED);
	assert_null(u);
	assert_non_null(strstr(why, "did not accept the token"));
	assert_int_equal(authn(a, "bad", &u, why, sizeof(why)), HTTPAUTH_UNAUTHENTICATED);
	assert_int_equal(f.posts, 1);                           /* a no is cached too... */
	clock_ns += HTTPAUTH_TTL_NO_S * SEC;
	assert_int_equal(authn(a, "bad", &u, why, sizeof(why)), HTTPAUTH_UNAUTHENTICATED);
	assert_int_equal(f.posts, 2);                           /* ...for less long */
	httpauth__key("never-seen", key);
	assert_int_equal(httpauth__authenticate(a, key, NULL, &u, why, sizeof(why)),
			 HTTPAUTH_UNAUTHENTICATED);
	assert_int_equal(f.posts, 2);

	assert_int_equal(authn(a, "good", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_int_equal(authz(a, u, &ns_a, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_int_equal(authz(a, u, &all, why, sizeof(why)), HTTPAUTH_DENY);
	assert_int_equal(authz(a, u, &ns_b, why, sizeof(why)), HTTPAUTH_DENY);
	assert_string_equal(why, "user \"alice\" cannot list profilingsessions.aiprof.io in "
			    "namespace \"b\"; the API server says: no RBAC rule");
	httpauth_user__unref(u);
	assert_int_equal(authn(a, "good-bob", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_int_equal(authz(a, u, &metrics, why, sizeof(why)), HTTPAUTH_DENY);
	assert_non_null(strstr(why, "user \"bob\" cannot get path \"/metrics\""));
	assert_int_equal(authz(a, u, &all, why, sizeof(why)), HTTPAUTH_ALLOW);
	httpauth_user__unref(u);

	/* the API server cannot be reached: an error, retried soon */
	assert_int_equal(authn(a, "fail", &u, why, sizeof(why)), HTTPAUTH_ERROR);
	assert_string_equal(why, "the TokenReview failed: connection refused");
	f.posts = 0;
	assert_int_equal(authn(a, "fail", &u, why, sizeof(why)), HTTPAUTH_ERROR);
	assert_int_equal(f.posts, 0);
	clock_ns += HTTPAUTH_TTL_ERROR_S * SEC;
	assert_int_equal(authn(a, "fail", &u, why, sizeof(why)), HTTPAUTH_ERROR);
	assert_int_equal(f.posts, 1);
	free_auth(a, &f);
}

static void test_queue_bound(void **state)
{
	struct fake_api f;
	struct httpauth *a = new_auth(&f);
	struct httpauth_user *u = NULL;
	uint8_t key[HTTPAUTH_KEY_LEN];
	char tok[32], why[512];

	(void)state;
	for (int i = 0; i <= HTTPAUTH_QUEUE; i++) {
		snprintf(tok, sizeof(tok), "good-%d", i);
		assert_int_equal(ask(a, tok, key, &u, why, sizeof(why)),
				 i < HTTPAUTH_QUEUE ? HTTPAUTH_PENDING : HTTPAUTH_BUSY);
	}
	assert_non_null(strstr(why, "try again"));
	assert_true(httpauth__review_one(a));                   /* room for one more */
	assert_int_equal(httpauth__authenticate(a, key, tok, &u, why, sizeof(why)),
			 HTTPAUTH_PENDING);
	free_auth(a, &f);                                       /* the queued ones freed */
}

static void test_least_recently_used_goes(void **state)
{
	struct fake_api f;
	struct httpauth *a = new_auth(&f);
	struct httpauth_user *u = NULL;
	char tok[32], why[512];
	int posts;

	(void)state;
	assert_int_equal(authn(a, "good-kept", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	httpauth_user__unref(u);
	assert_int_equal(authn(a, "good-dropped", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	httpauth_user__unref(u);
	for (int i = 0; i < HTTPAUTH_CACHE + 100; i++) {
		clock_ns += 1000;                               /* all within the TTL */
		snprintf(tok, sizeof(tok), "good-%d", i);
		assert_int_equal(authn(a, tok, &u, why, sizeof(why)), HTTPAUTH_ALLOW);
		httpauth_user__unref(u);
		if (i % 1000 == 0) {
			assert_int_equal(authn(a, "good-kept", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
			httpauth_user__unref(u);
		}
	}
	posts = f.posts;
	assert_int_equal(authn(a, "good-kept", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	httpauth_user__unref(u);
	assert_int_equal(f.posts, posts);                       /* still cached */
	assert_int_equal(authn(a, "good-dropped", &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	httpauth_user__unref(u);
	assert_int_equal(f.posts, posts + 1);                   /* given up, reviewed again */
	free_auth(a, &f);
}

static void test_reviewer_thread(void **state)
{
	struct fake_api f;
	struct httpauth *a = new_auth(&f);
	struct httpauth_user *u = NULL;
	uint8_t key[HTTPAUTH_KEY_LEN];
	char why[512];

	(void)state;
	assert_int_equal(httpauth__start(a), 0);
	assert_int_equal(ask(a, "al\"ice\\", key, &u, why, sizeof(why)), HTTPAUTH_PENDING);
	pthread_mutex_lock(&f.lock);
	while (!f.wakes)
		pthread_cond_wait(&f.cond, &f.lock);
	pthread_mutex_unlock(&f.lock);
	assert_int_equal(httpauth__authenticate(a, key, NULL, &u, why, sizeof(why)), HTTPAUTH_ALLOW);
	assert_int_equal(httpauth__authorize(a, u, &metrics, why, sizeof(why)), HTTPAUTH_PENDING);
	free_auth(a, &f);                                       /* stops with a review queued */
	assert_string_equal(httpauth_user__name(u), "alice");   /* handed out: still valid */
	httpauth_user__unref(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bearer),
		cmocka_unit_test(test_token_review_request),
		cmocka_unit_test(test_answers),
		cmocka_unit_test(test_review_then_cache),
		cmocka_unit_test(test_denials),
		cmocka_unit_test(test_queue_bound),
		cmocka_unit_test(test_least_recently_used_goes),
		cmocka_unit_test(test_reviewer_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
