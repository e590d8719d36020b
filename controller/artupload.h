/* SPDX-License-Identifier: MIT */
/*
 * The artifact store's uploads (docs/artifact-store.md), checked and stored by a thread of
 * their own with a kube client of their own. The HTTP service thread (httpd.c) hands an
 * upload over twice: at its headers (ARTUPLOAD_CHECK: who uploads; the body is read only
 * once that said yes, so that a client without a valid token holds no place while it sends
 * slowly), then with its body buffered (ARTUPLOAD_STORE). Each time, once cfg.wake() was
 * called and artupload_req__done() says so, the request holds the answer (code 0 after a
 * CHECK that lets it go on).
 *
 * What the worker does, in order, and the answer when a step says no:
 *   CHECK: TokenReview of the token, spec.audiences [aiprof.io/artifacts] 401, 403, 503
 *   the token's pod in the injector namespace (injector_ns)              403
 *   GET the session named in the path: it runs, and its status recorded the token's pod
 *     as the injector of the name's target (artstore__check_session())   404, 403, 503
 *   GET the pod the token is bound to, in the injector namespace: an injector of that
 *     session (artstore__check_injector()) with the token's pod UID      403, 503
 *   STORE: SHA-256 of the body against X-Aiprof-Sha256                   400
 *   list the session's ConfigMaps (metadata only): the same name with another checksum
 *     409; the other artifacts' bytes + this one over the session bound   413
 *   list the namespace's artifact ConfigMaps: every session's bytes over the namespace's
 *     bound, or a new session past the namespace's count of sessions     413
 *   create the ConfigMaps; one that exists with the same aiprof.io/sha256 is taken as
 *     stored (a retry), with another 409                                  201
 * The token is wiped once its review request is built; no message holds it. The client's
 * writes skip the leader's write gate: a standby replica serves uploads too, and what it
 * writes is immutable, named by the session and the artifact, and checked by checksum.
 */
#ifndef AIPROF_ARTUPLOAD_H
#define AIPROF_ARTUPLOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "artstore.h"
#include "kubeclient.h"

#define ARTUPLOAD_TIMEOUT_MS 10000      /* one request to the API server */

/* The way to the API server: kube_client__request()'s contract, with the Accept header
 * (NULL: application/json). */
typedef int (*artupload_request_fn)(void *ctx, const char *method, const char *path,
				    const char *accept, const char *body, size_t len,
				    char **ret_body, size_t *ret_len, struct kube_status *st);

struct artupload_config {
	const struct kube_config *kube; /* must outlive the worker */
	uint64_t max_file, max_session; /* bytes */
	/* a namespace's bounds over every session's artifacts, finished sessions' included:
	 * bytes, and sessions with artifacts stored (0: none) */
	uint64_t max_ns_bytes;
	size_t max_ns_sessions;
	/* where the controller runs every store session's injector pods (--injector-namespace,
	 * injspec__pods_namespace()); NULL or "": in the session's namespace */
	const char *injector_ns;
	void (*wake)(void *ctx);        /* an upload is done: called from the worker thread */
	void *ctx;
	artupload_request_fn request;   /* for tests; NULL: a kube client of kube */
	void *request_ctx;
};

enum artupload_phase { ARTUPLOAD_CHECK, ARTUPLOAD_STORE };

/* One upload: reference-counted (the HTTP connection's and, once submitted, the worker's). */
struct artupload_req {
	atomic_int refs;
	atomic_bool done;
	enum artupload_phase phase;     /* what the next submit asks for */
	char session_uid[ARTSTORE_UID_MAX + 1]; /* set by a CHECK that said yes */
	struct artstore_path path;
	char *token;                    /* wiped and freed once reviewed */
	uint8_t *body;                  /* len bytes (filled by the caller while it is checked) */
	size_t len;
	char sha256[SHA256_HEX_LEN + 1];        /* X-Aiprof-Sha256 as sent (64 hex digits) */
	/* the answer, set before done */
	unsigned code;
	const char *ctype;
	char *answer;
	struct artupload_req *next;     /* in the worker's queue */
	bool queued;                    /* in it (the worker's lock) */
};

/* A request for path with token (copied) and room for len bytes of body; NULL: no memory. */
struct artupload_req *artupload_req__new(const struct artstore_path *path, const char *token,
					 size_t len);
void artupload_req__unref(struct artupload_req *r);     /* NULL-safe */
bool artupload_req__done(struct artupload_req *r);

struct artupload;

/* Returns 0, -ENOMEM, or kube_client__new()'s error. */
int artupload__new(const struct artupload_config *cfg, struct artupload **ret);
int artupload__start(struct artupload *u);
/* Stops the worker (a request under way finishes or is cancelled) and drops the queued
 * requests' references. NULL-safe. */
void artupload__free(struct artupload *u);
/* Queues r for its phase (takes a reference; done turns false); the worker sets its answer,
 * then done, and calls wake(). */
void artupload__submit(struct artupload *u, struct artupload_req *r);
/* Takes r out of the queue if it is still there (its client went away): the worker never
 * reviews or stores it, and its reference is dropped. One the worker took already runs to
 * its end. Thread-safe. */
void artupload__cancel(struct artupload *u, struct artupload_req *r);
/* How many requests wait in the queue (metrics, tests). */
size_t artupload__queued(struct artupload *u);
/* Does one queued upload and calls wake(); false when none was queued (tests). */
bool artupload__run_one(struct artupload *u);

#endif
