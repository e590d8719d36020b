/* SPDX-License-Identifier: MIT */
/*
 * The controller's HTTP endpoint (libwebsockets, one service thread):
 *   GET /healthz       200 "ok" while the process serves
 *   GET /readyz        200 "ok" once ready() says so, else 503 with the reason
 *   GET /metrics       Prometheus text format 0.0.4, from metrics(), then the endpoint's own
 *   GET /ws/sessions   websocket: a snapshot of every session (one JSON text message each),
 *                      then one message per status change, as httpd__broadcast() is called
 * A client that falls more than HTTPD_RING messages behind skips ahead (it gets a
 * {"type":"gap"} message) rather than holding memory for it. Clients that connect while the
 * feed moved on by less than HTTPD_RING / 2 messages share one snapshot.
 *
 * With HTTPD_AUTH_KUBERNETES (httpauth.h) /metrics and /ws/sessions need
 * "Authorization: Bearer <token>": /metrics a token that may get the non-resource URL
 * /metrics (401 without one, 403 with a token that may not, saying which permission is
 * missing); /ws/sessions a token the API server accepts, and the feed then carries only the
 * sessions of namespaces where it may list profilingsessions.aiprof.io (everything when it
 * may at the cluster scope). An upgrade whose answer is known refuses with 401 (or 503)
 * before the handshake; one whose token is still under review opens and, if the review says
 * no, closes with code 4401 and the reason. /healthz and /readyz stay open (the kubelet's
 * probes). With HTTPD_AUTH_NONE nothing is checked: only on a loopback address.
 *
 * PUT /v1/artifacts/{namespace}/{session}/{name} is the in-cluster artifact store
 * (docs/artifact-store.md, artupload.h), served with HTTPD_AUTH_KUBERNETES only (403 without):
 * the body (Content-Length at most store_max_file, else 413 before it is read) is buffered,
 * then checked and stored by the store's own thread; at most HTTPD_STORE_UPLOADS uploads at
 * once, whose bodies take at most HTTPD_STORE_BUFFER_MAX bytes together unless one alone
 * is larger (more: 503 with Retry-After).
 *
 * Bounds: at most max_connections connections (more are closed as they are accepted) and
 * max_ws_clients websocket clients (more get 503 with Retry-After).
 */
#ifndef AIPROF_HTTPD_H
#define AIPROF_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kubeconfig.h"
#include "strbuf.h"

#define HTTPD_RING 1024
#define HTTPD_MAX_WS_CLIENTS 100        /* the defaults of --max-ws-clients */
#define HTTPD_MAX_CONNECTIONS 256       /* and --max-connections */
#define HTTPD_SPARE_CONNECTIONS 16      /* beyond the websockets: probes, scrapes */
#define HTTPD_STORE_UPLOADS 4
#define HTTPD_STORE_BUFFER_MAX (64ull << 20)
#define HTTPD_STORE_UPLOAD_TIMEOUT_S 300

struct httpd_handlers {
	bool (*ready)(void *ctx, char *why, size_t whylen);
	void (*metrics)(void *ctx, struct strbuf *b);
	void (*snapshot)(void *ctx, struct strbuf *b);    /* newline-separated JSON messages */
	void (*log)(void *ctx, int level, const char *msg);
	void *ctx;
};

enum httpd_auth { HTTPD_AUTH_KUBERNETES, HTTPD_AUTH_NONE };

struct httpd_config {
	const char *addr;               /* ":8080", "127.0.0.1:8080", "[::1]:0" (0: any port) */
	enum httpd_auth auth;
	const struct kube_config *kube; /* HTTPD_AUTH_KUBERNETES: reviews go there; outlives */
	unsigned max_ws_clients, max_connections;
	uint64_t store_max_file, store_max_session;     /* bytes; 0: the defaults (artstore.h) */
	const char *store_injector_ns;  /* artupload_config.injector_ns; outlives */
	uint64_t store_max_ns_bytes;    /* artupload_config's namespace bounds (0: none) */
	unsigned store_max_ns_sessions;
	/* one upload from its headers to its last byte (0: HTTPD_STORE_UPLOAD_TIMEOUT_S) */
	uint64_t store_upload_timeout_ms;
};

struct httpd;

/* "kubernetes" or "none" into *ret; -EINVAL otherwise. */
int httpd__parse_auth(const char *s, enum httpd_auth *ret);

/* Whether cfg holds together: 0, or -EINVAL with msg saying why (HTTPD_AUTH_NONE off a
 * loopback address; too few connections for the websocket clients; a bad address). */
int httpd__check(const struct httpd_config *cfg, char *msg, size_t msglen);

/* Returns 0, -EINVAL (httpd__check() says why), -EADDRINUSE or -EIO (cannot listen),
 * -ENOMEM, or the review client's error. */
int httpd__new(const struct httpd_config *cfg, const struct httpd_handlers *h,
	       struct httpd **ret);
int httpd__port(struct httpd *h);                /* the port listened on */
int httpd__start(struct httpd *h);               /* the service thread, and the reviewer */
/* One turn of the service loop on the caller's thread, for a fuzzer that sends requests
 * itself: only without httpd__start() (no service thread, no workers: reviews and uploads
 * stay queued). 0, or -EIO. */
int httpd__service(struct httpd *h);
/* Queues a message for every websocket client. Thread-safe. */
void httpd__broadcast(struct httpd *h, const char *json, size_t len);
void httpd__free(struct httpd *h);               /* stops; NULL-safe */

#endif
