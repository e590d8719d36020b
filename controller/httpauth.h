/* SPDX-License-Identifier: MIT */
/*
 * Who may read the controller's HTTP endpoint, decided by the Kubernetes API server as
 * kube-rbac-proxy does it: the client's bearer token is authenticated with a TokenReview
 * (POST /apis/authentication.k8s.io/v1/tokenreviews: the token -> a user and groups) and
 * each permission is a SubjectAccessReview for that user
 * (POST /apis/authorization.k8s.io/v1/subjectaccessreviews: may it get /metrics, may it list
 * profilingsessions in namespace N?).
 *
 * Answers are cached, keyed by SHA-256 (of the token, or of the token's key and the
 * permission): the cache never holds a token. A yes is kept HTTPAUTH_TTL_YES_S, a no
 * HTTPAUTH_TTL_NO_S, a failed review HTTPAUTH_TTL_ERROR_S; at most HTTPAUTH_CACHE answers,
 * the least recently used one out first. A scrape every 15-30 s thus costs the API server
 * two reviews a TTL, not two a scrape; a revoked token or binding is noticed within the TTL.
 *
 * Threads: the reviews are made by a thread of their own (one kube client, HTTPAUTH_TIMEOUT_MS
 * a review), never by the caller. httpauth__authenticate() and httpauth__authorize() answer
 * from the cache at once, or queue a review (at most HTTPAUTH_QUEUE) and say
 * HTTPAUTH_PENDING; once a review is done the reviewer calls cfg.wake() and the caller asks
 * again. The HTTP service thread never waits for the API server: its other clients (the
 * kubelet's probes among them) are served meanwhile. Both are thread-safe.
 *
 * The pure parts (request bodies, answers, the Authorization header, messages) are public
 * for tests/unit/test_controller_httpauth.c and tests/fuzz/fuzz_httpauth.c. Nothing here
 * logs, and no message contains a token.
 */
#ifndef AIPROF_HTTPAUTH_H
#define AIPROF_HTTPAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kubeclient.h"

#define HTTPAUTH_KEY_LEN 32
#define HTTPAUTH_TOKEN_MAX 8192         /* longer Authorization headers are refused */
#define HTTPAUTH_CACHE 4096
#define HTTPAUTH_QUEUE 64
#define HTTPAUTH_TTL_YES_S 30
#define HTTPAUTH_TTL_NO_S 5
#define HTTPAUTH_TTL_ERROR_S 2
#define HTTPAUTH_TIMEOUT_MS 5000

enum httpauth_verdict {
	HTTPAUTH_ALLOW,                 /* authenticated, or allowed */
	HTTPAUTH_DENY,                  /* authenticated but not allowed: 403 */
	HTTPAUTH_UNAUTHENTICATED,       /* the token is not accepted: 401 */
	HTTPAUTH_PENDING,               /* a review is under way: ask again after wake() */
	HTTPAUTH_BUSY,                  /* too many reviews queued: ask again after wake() */
	HTTPAUTH_ERROR,                 /* the review failed (API server unreachable...): 503 */
};

/* A permission: a non-resource URL (path set), or a resource (path NULL). */
struct httpauth_attr {
	const char *verb;               /* "get", "list" */
	const char *path;               /* "/metrics", or NULL */
	const char *group, *resource;   /* "aiprof.io", "profilingsessions" */
	const char *ns;                 /* a namespace, or "" for every namespace */
};

/* Who a token is: TokenReview status.user. Reference-counted, immutable, any thread. */
struct httpauth_user;
const char *httpauth_user__name(const struct httpauth_user *u);
struct httpauth_user *httpauth_user__ref(struct httpauth_user *u);
void httpauth_user__unref(struct httpauth_user *u);     /* NULL-safe */

/* The reviewer's way to the API server: a POST of body (JSON) to path; 0 and the answer
 * (malloc'd, caller frees), or -errno with st filled (kube_client__request()'s contract). */
typedef int (*httpauth_post_fn)(void *ctx, const char *path, const char *body,
				char **ret_body, struct kube_status *st);

struct httpauth_config {
	const struct kube_config *kube; /* must outlive the reviewer */
	void (*wake)(void *ctx);        /* a review is done: called from the reviewer thread */
	void *ctx;
	/* for tests: the clock (monotonic ns; NULL: now_monotonic_ns()) and the transport
	 * (NULL: a kube client of kube) */
	uint64_t (*now_ns)(void);
	httpauth_post_fn post;
	void *post_ctx;
};

struct httpauth;

/* Returns 0, -ENOMEM, or kube_client__new()'s error. The reviewer starts with
 * httpauth__start(); without it httpauth__review_one() does the queued reviews (tests). */
int httpauth__new(const struct httpauth_config *cfg, struct httpauth **ret);
int httpauth__start(struct httpauth *a);
/* Stops the reviewer (a review in flight is cancelled); users handed out stay valid until
 * their last unref. NULL-safe. */
void httpauth__free(struct httpauth *a);
/* Takes one queued review and does it, then wake(); returns false when none was queued. */
bool httpauth__review_one(struct httpauth *a);

/* A token's cache key. */
void httpauth__key(const char *token, uint8_t key[HTTPAUTH_KEY_LEN]);

/*
 * Is the token (its key; token may be NULL when its review is known to be queued or cached)
 * a user? HTTPAUTH_ALLOW with *ret_user (a reference: unref it), UNAUTHENTICATED, PENDING,
 * BUSY or ERROR with why. With token NULL and nothing known of key: UNAUTHENTICATED.
 */
enum httpauth_verdict httpauth__authenticate(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN],
					     const char *token, struct httpauth_user **ret_user,
					     char *why, size_t whylen);
/* May u do at? HTTPAUTH_ALLOW, DENY (why says what is missing), PENDING, BUSY or ERROR. */
enum httpauth_verdict httpauth__authorize(struct httpauth *a, struct httpauth_user *u,
					  const struct httpauth_attr *at, char *why, size_t whylen);

/* ---- the pure part ------------------------------------------------------------------- */

/*
 * The token of an Authorization header value ("Bearer <token>", the scheme in any case, the
 * token 1-HTTPAUTH_TOKEN_MAX visible ASCII characters), copied into tok (toklen > its
 * length; tok may be header itself). -ENOENT (no header: header NULL or empty), -EINVAL (another scheme, or not a
 * token), -E2BIG (too long). Outside input.
 */
int httpauth__bearer(const char *header, char *tok, size_t toklen);

/* The review requests (malloc'd JSON; the token review's holds the token: wipe before
 * free). NULL when out of memory. */
char *httpauth__token_review(const char *token);
/* The same with spec.audiences [audience] (NULL: none, the API server's own audiences). */
char *httpauth__token_review_for(const char *token, const char *audience);
char *httpauth__access_review(const struct httpauth_user *u, const struct httpauth_attr *at);

/*
 * The API server's answers (outside input). A TokenReview: HTTPAUTH_ALLOW with *ret_user
 * (key recorded in it), or HTTPAUTH_UNAUTHENTICATED with why (status.error); a
 * SubjectAccessReview: HTTPAUTH_ALLOW, or HTTPAUTH_DENY with why (status.reason). -EPROTO
 * when the body is not such an answer, -ENOMEM.
 */
int httpauth__parse_token_review(const char *body, size_t len, const uint8_t key[HTTPAUTH_KEY_LEN],
				 struct httpauth_user **ret_user, char *why, size_t whylen);
int httpauth__parse_access_review(const char *body, size_t len, char *why, size_t whylen);

/* What a 403 says is missing: user "U" cannot get path "/metrics" (and how to grant it). */
void httpauth__forbidden(const struct httpauth_user *u, const struct httpauth_attr *at,
			 char *buf, size_t len);

#endif
