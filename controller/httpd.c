/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <libwebsockets.h>
#include "artstore.h"
#include "artupload.h"
#include "httpauth.h"
#include "httpd.h"
#include "timeutil.h"

#define NS_MAX 64               /* a namespace name (63 characters) and its NUL */
#define WHY_MAX 512
#define SKIP_BATCH 256          /* messages of hidden namespaces skipped in one turn */
#define RETRY_AFTER "5"
#define WS_CLOSE_REASON_MAX 123 /* RFC 6455: a close frame's payload is at most 125 bytes */
/* A request waiting for its review: the review's timeout and some (lws closes it after). */
#define PARK_TIMEOUT_S (HTTPAUTH_TIMEOUT_MS / 1000 + 5)
/* An upload's body may take this long to come, and its checks and writes this long (a
 * review, three reads and up to 22 ConfigMaps at ARTUPLOAD_TIMEOUT_MS each, in the worst
 * case, come to more: the client then sees the connection close, and retries). */
#define BODY_TIMEOUT_S 120
#define UPLOAD_TIMEOUT_S 120

/* The websocket's close codes: the HTTP status + 4000, as an application's own (4000-4999). */
#define WS_CLOSE_UNAUTHORIZED 4401
#define WS_CLOSE_TRY_AGAIN 1013

enum refusal {
	REFUSED_CONNECTIONS, REFUSED_WEBSOCKETS, REFUSED_UNAUTHENTICATED, REFUSED_FORBIDDEN,
	REFUSED_UNAVAILABLE, REFUSED__MAX, REFUSED_NONE = REFUSED__MAX,
};

static const char *const refusal_names[REFUSED__MAX] = {
	"connections", "websockets", "unauthenticated", "forbidden", "unavailable",
};

static const struct httpauth_attr metrics_attr = { .verb = "get", .path = "/metrics" };

struct msg {
	unsigned char *buf;     /* LWS_PRE bytes of room, then the text */
	size_t len;
	char ns[NS_MAX];        /* the session's namespace ("" for none: every client sees it) */
};

struct snap_line {
	size_t off, len;
	char ns[NS_MAX];
};

/* Every session as one feed message, shared by the clients that connect until the feed
 * moved on by HTTPD_RING / 2 messages (service thread only). */
struct snapshot {
	unsigned refs;
	uint64_t seq;           /* the feed before it is in it: its clients go on from there */
	char *text;             /* the messages, newline-separated */
	size_t n;
	struct snap_line line[];
};

struct pss;

/* The answers of uploads counted in the metrics, by status. */
static const unsigned upload_codes[] = { 201, 400, 401, 403, 404, 409, 413, 500, 503 };
#define UPLOAD_CODES (sizeof(upload_codes) / sizeof(upload_codes[0]))

struct httpd {
	struct httpd_handlers h;
	struct httpd_config cfg;        /* addr not kept */
	struct httpauth *auth;          /* NULL: HTTPD_AUTH_NONE */
	struct artupload *store;        /* the artifact store's worker; NULL: HTTPD_AUTH_NONE */
	struct lws_context *ctx;
	struct lws_protocols protocols[2];
	pthread_t thread;
	bool running;
	atomic_bool stop;
	char iface[64];
	int port;
	pthread_mutex_t lock;           /* the ring */
	struct msg ring[HTTPD_RING];
	uint64_t next_seq;              /* sequence number of the next broadcast */
	atomic_bool pending;            /* a broadcast came */
	atomic_bool reviewed;           /* a review is done: parked clients ask again */
	/* the service thread's own */
	struct snapshot *snap;          /* the latest */
	struct pss *parked;             /* clients waiting for a review */
	unsigned conns, ws_clients;
	unsigned long long refused[REFUSED__MAX];
	unsigned uploads;               /* from their headers until answered */
	uint64_t buffered;              /* their Content-Lengths */
	unsigned long long uploaded[UPLOAD_CODES];
	unsigned long long timed_out;   /* uploads closed at --store-upload-timeout */
};

/* Per connection (per HTTP transaction): an answer being sent, or a websocket client. */
struct pss {
	struct lws *wsi;
	struct pss *prev, *next;        /* in httpd.parked */
	bool parked;
	bool waiting;                   /* /metrics waits for its review */
	bool flow_off;                  /* its input is paused meanwhile */
	unsigned char *body;            /* LWS_PRE + answer */
	size_t len;
	bool ws;
	uint8_t key[HTTPAUTH_KEY_LEN];  /* its token's */
	struct httpauth_user *user;     /* once the token is reviewed */
	uint64_t seq;                   /* next ring message to send */
	struct snapshot *snap;          /* snapshot lines still to send, from snap_i */
	size_t snap_i;
	bool gap;
	/* an upload: its request, checked by the worker (its input paused), then its body
	 * read, then stored by the worker */
	struct artupload_req *up;
	size_t up_expect;               /* its Content-Length */
	enum { UP_CHECK = 1, UP_BODY, UP_STORE } up_state;
	bool up_body_done;
	uint64_t up_deadline_ns;        /* CLOCK_MONOTONIC: its body is all in by then, or it
					 * is closed (lws resets its own timeout at every chunk) */
};

static struct httpd *of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

/* ---- answers ----------------------------------------------------------------------------- */

/* The status line and headers of an answer of len bytes, written now. 0 or -1. */
static int write_head(struct lws *wsi, unsigned code, const char *ctype, size_t len)
{
	static const char bearer[] = "Bearer realm=\"aiprof-controller\"";
	unsigned char hdr[LWS_PRE + 512], *start = &hdr[LWS_PRE], *pos = start,
		      *end = &hdr[sizeof(hdr) - 1];

	if (lws_add_http_common_headers(wsi, code, ctype, (lws_filepos_t)len, &pos, end) ||
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
					 (const unsigned char *)"no-store", 8, &pos, end))
		return -1;
	if (code == HTTP_STATUS_UNAUTHORIZED &&
	    lws_add_http_header_by_name(wsi, (const unsigned char *)"www-authenticate:",
					(const unsigned char *)bearer, sizeof(bearer) - 1, &pos, end))
		return -1;
	if (code == HTTP_STATUS_SERVICE_UNAVAILABLE &&
	    lws_add_http_header_by_name(wsi, (const unsigned char *)"retry-after:",
					(const unsigned char *)RETRY_AFTER,
					sizeof(RETRY_AFTER) - 1, &pos, end))
		return -1;
	return lws_finalize_write_http_header(wsi, start, &pos, end) ? -1 : 0;
}

/* Headers now, the body when the connection is writable. */
static int answer(struct lws *wsi, struct pss *p, unsigned code, const char *ctype,
		  struct strbuf *b)
{
	if (strbuf_err(b))
		return -1;
	p->len = b->len;
	p->body = malloc(LWS_PRE + b->len + 1);
	if (!p->body)
		return -1;
	if (b->len)
		memcpy(p->body + LWS_PRE, b->s, b->len);
	if (write_head(wsi, code, ctype, b->len))
		return 1;
	lws_callback_on_writable(wsi);
	return 0;
}

static void count(struct httpd *d, enum refusal why)
{
	if (why != REFUSED_NONE)
		d->refused[why]++;
}

/* A refusal (plain text, why and a newline) as the answer of p's request. */
static int refuse(struct lws *wsi, struct pss *p, unsigned code, enum refusal r, const char *why)
{
	struct strbuf b = STRBUF_INIT;
	int ret;

	count(of(wsi), r);
	strbuf_addf(&b, "%s\n", why);
	ret = answer(wsi, p, code, "text/plain", &b);
	free(b.s);
	return ret;
}

/* A refusal written whole now, where there is no per-connection state (an upgrade being
 * confirmed). Returns 1: the upgrade is answered. */
static int refuse_now(struct lws *wsi, unsigned code, enum refusal r, const char *why)
{
	unsigned char buf[LWS_PRE + WHY_MAX + 2];
	int n = snprintf((char *)buf + LWS_PRE, WHY_MAX + 2, "%s\n", why);

	count(of(wsi), r);
	if (n > WHY_MAX + 1)
		n = WHY_MAX + 1;
	if (write_head(wsi, code, "text/plain", (size_t)n) ||
	    lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_HTTP_FINAL) < n)
		return -1;
	return 1;
}

/* ---- authentication ---------------------------------------------------------------------- */

static void park(struct httpd *d, struct pss *p, struct lws *wsi)
{
	if (p->parked)
		return;
	p->wsi = wsi;
	p->parked = true;
	p->prev = NULL;
	p->next = d->parked;
	if (d->parked)
		d->parked->prev = p;
	d->parked = p;
}

static void unpark(struct httpd *d, struct pss *p)
{
	if (!p->parked)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		d->parked = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->parked = false;
}

/* The reviewer's wake(): any thread. */
static void reviewed(void *ctx)
{
	struct httpd *d = ctx;

	atomic_store(&d->reviewed, true);
	lws_cancel_service(d->ctx);
}

/* Every parked client asks again (service thread). A request's input is let on first:
 * libwebsockets does not call a connection back as writable while its input is paused. */
static void unpark_all(struct httpd *d)
{
	while (d->parked) {
		struct pss *p = d->parked;

		unpark(d, p);
		if (p->flow_off)
			lws_rx_flow_control(p->wsi, 1);
		p->flow_off = false;
		lws_callback_on_writable(p->wsi);
	}
}

/* The request's bearer token into tok (toklen > HTTPAUTH_TOKEN_MAX + 64 holds the whole
 * header), or 401's text into why. */
static int bearer_of(struct lws *wsi, char *tok, size_t toklen, const char *may,
		     char *why, size_t whylen)
{
	int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION), r;

	if (n >= (int)toklen)
		r = -E2BIG;
	else if (n <= 0 || lws_hdr_copy(wsi, tok, (int)toklen, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
		r = -ENOENT;
	else
		r = httpauth__bearer(tok, tok, toklen);     /* in place */
	if (r == -ENOENT)
		snprintf(why, whylen, "unauthorized: send 'Authorization: Bearer <token>' with a "
			 "Kubernetes token (a service account's: kubectl create token NAME) that "
			 "may %s", may);
	else if (r == -E2BIG)
		snprintf(why, whylen, "unauthorized: the bearer token is longer than %d bytes",
			 HTTPAUTH_TOKEN_MAX);
	else if (r < 0)
		snprintf(why, whylen, "unauthorized: the Authorization header is not "
			 "'Bearer <token>'");
	return r;
}

/* Who the request's token is: HTTPAUTH_ALLOW with *ret_user, or another verdict with why
 * (HTTPAUTH_UNAUTHENTICATED: no token). ret_key (may be NULL) gets the token's key. */
static enum httpauth_verdict authenticate(struct httpd *d, struct lws *wsi, const char *may,
					  uint8_t *ret_key, struct httpauth_user **ret_user,
					  char *why, size_t whylen)
{
	char tok[HTTPAUTH_TOKEN_MAX + 64];
	uint8_t key[HTTPAUTH_KEY_LEN];
	enum httpauth_verdict v;

	if (bearer_of(wsi, tok, sizeof(tok), may, why, whylen) < 0) {
		explicit_bzero(tok, sizeof(tok));
		return HTTPAUTH_UNAUTHENTICATED;
	}
	httpauth__key(tok, key);
	v = httpauth__authenticate(d->auth, key, tok, ret_user, why, whylen);
	explicit_bzero(tok, sizeof(tok));
	if (ret_key)
		memcpy(ret_key, key, HTTPAUTH_KEY_LEN);
	return v;
}

/* The HTTP status for a verdict, with why made a full sentence; 0 for one still to come. */
static unsigned status_of(enum httpauth_verdict v, char *why, size_t whylen, enum refusal *r)
{
	char reason[WHY_MAX];

	snprintf(reason, sizeof(reason), "%s", why);
	*r = REFUSED_NONE;
	switch (v) {
	case HTTPAUTH_ALLOW:
		return HTTP_STATUS_OK;
	case HTTPAUTH_PENDING:
	case HTTPAUTH_BUSY:
		return 0;
	case HTTPAUTH_UNAUTHENTICATED:
		*r = REFUSED_UNAUTHENTICATED;
		if (strncmp(reason, "unauthorized: ", 14) != 0)
			snprintf(why, whylen, "unauthorized: %s", reason);
		return HTTP_STATUS_UNAUTHORIZED;
	case HTTPAUTH_DENY:
		*r = REFUSED_FORBIDDEN;
		snprintf(why, whylen, "forbidden: %s", reason);
		return HTTP_STATUS_FORBIDDEN;
	case HTTPAUTH_ERROR:
	default:
		*r = REFUSED_UNAVAILABLE;
		snprintf(why, whylen, "service unavailable: cannot review the token now (%s): "
			 "try again", reason);
		return HTTP_STATUS_SERVICE_UNAVAILABLE;
	}
}

/* ---- HTTP -------------------------------------------------------------------------------- */

/* The endpoint's own metrics, after the controller's. */
static void own_metrics(struct httpd *d, struct strbuf *b)
{
	strbuf_addf(b, "# HELP aiprof_http_connections Connections open to the HTTP endpoint "
		    "(websockets included; at most --max-connections).\n"
		    "# TYPE aiprof_http_connections gauge\naiprof_http_connections %u\n", d->conns);
	strbuf_addf(b, "# HELP aiprof_websocket_clients Clients of /ws/sessions (at most "
		    "--max-ws-clients).\n# TYPE aiprof_websocket_clients gauge\n"
		    "aiprof_websocket_clients %u\n", d->ws_clients);
	strbuf_adds(b, "# HELP aiprof_http_refused_total Connections closed over "
		    "--max-connections, websockets refused over --max-ws-clients, requests "
		    "without a valid token (401), not allowed (403), whose review failed (503).\n"
		    "# TYPE aiprof_http_refused_total counter\n");
	for (int i = 0; i < REFUSED__MAX; i++)
		strbuf_addf(b, "aiprof_http_refused_total{reason=\"%s\"} %llu\n", refusal_names[i],
			    d->refused[i]);
	if (!d->store)
		return;
	strbuf_addf(b, "# HELP aiprof_artifact_uploads_in_flight Artifact uploads being received "
		    "or stored (at most %d).\n# TYPE aiprof_artifact_uploads_in_flight gauge\n"
		    "aiprof_artifact_uploads_in_flight %u\n", HTTPD_STORE_UPLOADS, d->uploads);
	strbuf_addf(b, "# HELP aiprof_artifact_upload_buffered_bytes Bytes of their bodies held.\n"
		    "# TYPE aiprof_artifact_upload_buffered_bytes gauge\n"
		    "aiprof_artifact_upload_buffered_bytes %llu\n", (unsigned long long)d->buffered);
	strbuf_addf(b, "# HELP aiprof_artifact_upload_queue Uploads waiting for the store's worker "
		    "(a request whose client went is taken out).\n# TYPE aiprof_artifact_upload_queue "
		    "gauge\naiprof_artifact_upload_queue %zu\n", artupload__queued(d->store));
	strbuf_addf(b, "# HELP aiprof_artifact_uploads_timed_out_total Uploads closed at "
		    "--store-upload-timeout.\n# TYPE aiprof_artifact_uploads_timed_out_total counter\n"
		    "aiprof_artifact_uploads_timed_out_total %llu\n", d->timed_out);
	strbuf_adds(b, "# HELP aiprof_artifact_uploads_total Artifact uploads answered, by status "
		    "(201 stored).\n# TYPE aiprof_artifact_uploads_total counter\n");
	for (size_t i = 0; i < UPLOAD_CODES; i++)
		strbuf_addf(b, "aiprof_artifact_uploads_total{code=\"%u\"} %llu\n", upload_codes[i],
			    d->uploaded[i]);
}

/* Whether p's request may get /metrics: HTTP_STATUS_OK, a refusal's status with why, or 0
 * while its review is under way: the request is parked (its input paused) and comes back
 * through LWS_CALLBACK_HTTP_WRITEABLE when a review is done. */
static unsigned metrics_gate(struct httpd *d, struct lws *wsi, struct pss *p, enum refusal *r,
			     char *why, size_t whylen)
{
	struct httpauth_user *u = NULL;
	enum httpauth_verdict v;
	unsigned code;

	*r = REFUSED_NONE;
	if (!d->auth)
		return HTTP_STATUS_OK;
	v = authenticate(d, wsi, "get /metrics", NULL, &u, why, whylen);
	if (v == HTTPAUTH_ALLOW) {
		v = httpauth__authorize(d->auth, u, &metrics_attr, why, whylen);
		httpauth_user__unref(u);
	}
	code = status_of(v, why, whylen, r);
	if (code)
		return code;
	park(d, p, wsi);
	p->waiting = true;
	if (!p->flow_off)
		lws_rx_flow_control(wsi, 0);
	p->flow_off = true;
	lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, PARK_TIMEOUT_S);
	return 0;
}

static int serve_metrics(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	struct strbuf b = STRBUF_INIT;
	char why[WHY_MAX] = "";
	enum refusal rf;
	unsigned code = metrics_gate(d, wsi, p, &rf, why, sizeof(why));
	int r;

	if (!code)
		return 0;
	if (p->flow_off)
		lws_rx_flow_control(wsi, 1);
	p->flow_off = false;
	if (code != HTTP_STATUS_OK)
		return refuse(wsi, p, code, rf, why);
	if (d->h.metrics)
		d->h.metrics(d->h.ctx, &b);
	own_metrics(d, &b);
	r = answer(wsi, p, HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8", &b);
	free(b.s);
	return r;
}

/* ---- the artifact store ---------------------------------------------------------------- */

static void count_upload(struct httpd *d, unsigned code)
{
	for (size_t i = 0; i < UPLOAD_CODES; i++)
		if (upload_codes[i] == code)
			d->uploaded[i]++;
}

/* A PUT refused before its body is read: the answer is written now and the connection
 * closes (the body's bytes would otherwise be read as the next request). Returns -1. */
static int refuse_upload(struct lws *wsi, unsigned code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int refuse_upload(struct lws *wsi, unsigned code, const char *fmt, ...)
{
	enum refusal r = code == HTTP_STATUS_UNAUTHORIZED ? REFUSED_UNAUTHENTICATED :
			 code == HTTP_STATUS_FORBIDDEN ? REFUSED_FORBIDDEN :
			 code == HTTP_STATUS_SERVICE_UNAVAILABLE ? REFUSED_UNAVAILABLE : REFUSED_NONE;
	char why[WHY_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	count_upload(of(wsi), code);
	refuse_now(wsi, code, r, why);
	return -1;
}

/* The upload's place is given back: it is answered, or its connection closed. */
static void upload_end(struct httpd *d, struct pss *p)
{
	if (!p->up)
		return;
	d->uploads--;
	d->buffered -= p->up_expect;
	/* a request whose client went costs nothing more: out of the queue, no review */
	if (d->store)
		artupload__cancel(d->store, p->up);
	artupload_req__unref(p->up);
	p->up = NULL;
	p->up_state = 0;
	p->up_body_done = false;
}

/* Pauses the request's input while it waits for the worker's check. */
static void pause_input(struct lws *wsi, struct pss *p)
{
	if (!p->flow_off)
		lws_rx_flow_control(wsi, 0);
	p->flow_off = true;
}

/* The worker takes the upload for phase: the client waits (parked) for it; while it is
 * checked its input is paused (its body is read once its token was found good). */
static int upload_submit(struct httpd *d, struct lws *wsi, struct pss *p,
			 enum artupload_phase phase)
{
	p->up->phase = phase;
	artupload__submit(d->store, p->up);
	p->up_state = phase == ARTUPLOAD_CHECK ? UP_CHECK : UP_STORE;
	if (phase == ARTUPLOAD_CHECK)
		pause_input(wsi, p);
	park(d, p, wsi);
	lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, UPLOAD_TIMEOUT_S);
	return 0;
}

/* The request's Content-Length into *ret; -EINVAL without one (a chunked body). */
static int content_length(struct lws *wsi, uint64_t *ret)
{
	char cl[32], *end;
	int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
	unsigned long long v;

	if (n <= 0 || n >= (int)sizeof(cl) ||
	    lws_hdr_copy(wsi, cl, sizeof(cl), WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0 ||
	    cl[0] < '0' || cl[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(cl, &end, 10);
	if (*end || errno)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* X-Aiprof-Sha256 into sha (64 hex digits); -EINVAL when missing or not that. */
static int sha256_header(struct lws *wsi, char sha[SHA256_HEX_LEN + 1])
{
	static const int name_len = sizeof(ARTSTORE_SHA256_HEADER) - 1;
	uint8_t digest[SHA256_LEN];
	char buf[SHA256_HEX_LEN + 2];

	if (lws_hdr_custom_length(wsi, ARTSTORE_SHA256_HEADER, name_len) != SHA256_HEX_LEN ||
	    lws_hdr_custom_copy(wsi, buf, sizeof(buf), ARTSTORE_SHA256_HEADER, name_len) < 0 ||
	    artstore__parse_sha256(buf, digest) < 0)
		return -EINVAL;
	memcpy(sha, buf, SHA256_HEX_LEN + 1);
	return 0;
}

/* PUT /v1/artifacts/{namespace}/{session}/{name}: what can be checked here is; then the
 * worker checks who uploads (the input paused), then the body is buffered
 * (LWS_CALLBACK_HTTP_BODY) and handed to the worker again to be stored. */
static int store_put(struct lws *wsi, struct pss *p, const char *uri)
{
	struct httpd *d = of(wsi);
	char tok[HTTPAUTH_TOKEN_MAX + 64], why[WHY_MAX], sha[SHA256_HEX_LEN + 1];
	struct artstore_path path;
	uint64_t len = 0;

	if (lws_hdr_total_length(wsi, WSI_TOKEN_PUT_URI) <= 0)
		return refuse_upload(wsi, HTTP_STATUS_METHOD_NOT_ALLOWED, "method not allowed: "
				     "PUT an artifact to " ARTSTORE_ROUTE "{namespace}/{session}/{name}");
	if (!d->store)
		return refuse_upload(wsi, HTTP_STATUS_FORBIDDEN, "forbidden: the artifact store is "
				     "served only with --http-auth=kubernetes (it checks the "
				     "uploader's token with the API server)");
	if (artstore__parse_path(uri, &path, why, sizeof(why)) < 0)
		return refuse_upload(wsi, HTTP_STATUS_BAD_REQUEST, "bad request: %s", why);
	if (content_length(wsi, &len) < 0)
		return refuse_upload(wsi, HTTP_STATUS_BAD_REQUEST, "bad request: send the body with "
				     "a Content-Length (no chunked bodies)");
	if (len > d->cfg.store_max_file)
		return refuse_upload(wsi, HTTP_STATUS_REQ_ENTITY_TOO_LARGE, "payload too large: "
				     "%llu bytes, over --store-max-file-bytes %llu",
				     (unsigned long long)len,
				     (unsigned long long)d->cfg.store_max_file);
	if (sha256_header(wsi, sha) < 0)
		return refuse_upload(wsi, HTTP_STATUS_BAD_REQUEST, "bad request: send "
				     "X-Aiprof-Sha256 with the body's SHA-256 (64 hex digits)");
	if (bearer_of(wsi, tok, sizeof(tok), "upload artifacts (an injector pod's projected "
		      "token for audience " ARTSTORE_AUDIENCE ")", why, sizeof(why)) < 0) {
		explicit_bzero(tok, sizeof(tok));
		return refuse_upload(wsi, HTTP_STATUS_UNAUTHORIZED, "%s", why);
	}
	if (d->uploads >= HTTPD_STORE_UPLOADS ||
	    (d->uploads && d->buffered + len > HTTPD_STORE_BUFFER_MAX)) {
		explicit_bzero(tok, sizeof(tok));
		return refuse_upload(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "service unavailable: "
				     "%u uploads are under way: try again", d->uploads);
	}
	p->up = artupload_req__new(&path, tok, (size_t)len);
	explicit_bzero(tok, sizeof(tok));
	if (!p->up)
		return refuse_upload(wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "out of memory");
	memcpy(p->up->sha256, sha, sizeof(sha));
	p->up_expect = (size_t)len;
	p->up_body_done = len == 0;
	p->up_deadline_ns = now_monotonic_ns() + d->cfg.store_upload_timeout_ms * 1000000ull;
	lws_set_timer_usecs(wsi, (lws_usec_t)d->cfg.store_upload_timeout_ms * 1000);
	d->uploads++;
	d->buffered += len;
	return upload_submit(d, wsi, p, ARTUPLOAD_CHECK);
}

/* The seconds left to p's upload deadline, at least 1. */
static unsigned deadline_left_s(const struct pss *p)
{
	uint64_t now = now_monotonic_ns();

	return now >= p->up_deadline_ns ? 1 : (unsigned)((p->up_deadline_ns - now) / NSEC_PER_SEC) + 1;
}

/* LWS_CALLBACK_TIMER: the upload's deadline passed. One whose body is not all in is closed
 * (-1), however slowly its bytes still come; one being stored is the worker's, which has
 * its own bounds. */
static int store_deadline(struct httpd *d, struct pss *p)
{
	if (!p || !p->up || p->up_state == UP_STORE || now_monotonic_ns() < p->up_deadline_ns)
		return 0;
	d->timed_out++;
	if (d->h.log) {
		char msg[300];

		snprintf(msg, sizeof(msg), "artifact upload to %s/%s/%s closed: its body was not all "
			 "in within --store-upload-timeout (%zu of %zu bytes)", p->up->path.ns,
			 p->up->path.session, p->up->path.name, p->up->len, p->up_expect);
		d->h.log(d->h.ctx, 1, msg);
	}
	return -1;
}

/* Body bytes: kept while the upload is checked (what came with the headers) or read. */
static int store_body(struct lws *wsi, struct pss *p, const void *in, size_t len)
{
	if (!p->up)
		return 0;       /* a body nobody asked for (a refused request's) */
	if (now_monotonic_ns() >= p->up_deadline_ns)
		return store_deadline(of(wsi), p);
	/* lws has just reset its body timeout: not past the upload's own deadline */
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, deadline_left_s(p) < BODY_TIMEOUT_S ?
			deadline_left_s(p) : BODY_TIMEOUT_S);
	if (p->up_state == UP_STORE || len > p->up_expect - p->up->len)
		return -1;
	memcpy(p->up->body + p->up->len, in, len);
	p->up->len += len;
	return 0;
}

static int store_body_done(struct lws *wsi, struct pss *p)
{
	if (!p->up || p->up_state == UP_STORE)
		return 0;
	if (p->up->len != p->up_expect)
		return -1;
	p->up_body_done = true;
	return p->up_state == UP_BODY ? upload_submit(of(wsi), wsi, p, ARTUPLOAD_STORE) : 0;
}

/* The worker's check is done: a refusal is answered now (the body unread: the connection
 * closes after it, -1); else the body is read, and stored once it is all in. */
static int store_checked(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	struct artupload_req *up = p->up;
	enum refusal rf;

	if (up->code) {
		rf = up->code == HTTP_STATUS_UNAUTHORIZED ? REFUSED_UNAUTHENTICATED :
		     up->code == HTTP_STATUS_FORBIDDEN ? REFUSED_FORBIDDEN :
		     up->code == HTTP_STATUS_SERVICE_UNAVAILABLE ? REFUSED_UNAVAILABLE :
		     REFUSED_NONE;
		count_upload(d, up->code);
		refuse_now(wsi, up->code, rf, up->answer ? up->answer : "refused");
		upload_end(d, p);
		return -1;
	}
	p->up_state = UP_BODY;
	if (p->flow_off)
		lws_rx_flow_control(wsi, 1);
	p->flow_off = false;
	if (p->up_body_done)
		return upload_submit(d, wsi, p, ARTUPLOAD_STORE);
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, deadline_left_s(p) < BODY_TIMEOUT_S ?
			deadline_left_s(p) : BODY_TIMEOUT_S);
	return 0;
}

/* The worker's answer, once it is done (else the client waits on). */
static int store_answer(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	struct artupload_req *up = p->up;
	struct strbuf b = STRBUF_INIT;
	enum refusal rf;
	int r;

	if (!artupload_req__done(up)) {
		if (p->up_state == UP_CHECK)
			pause_input(wsi, p);
		park(d, p, wsi);
		return 0;
	}
	if (p->up_state == UP_CHECK)
		return store_checked(wsi, p);
	rf = up->code == HTTP_STATUS_UNAUTHORIZED ? REFUSED_UNAUTHENTICATED :
	     up->code == HTTP_STATUS_FORBIDDEN ? REFUSED_FORBIDDEN :
	     up->code == HTTP_STATUS_SERVICE_UNAVAILABLE ? REFUSED_UNAVAILABLE : REFUSED_NONE;
	count(d, rf);
	count_upload(d, up->code);
	strbuf_addf(&b, "%s\n", up->answer ? up->answer : "");
	r = answer(wsi, p, up->code, up->ctype ? up->ctype : "text/plain", &b);
	free(b.s);
	upload_end(d, p);
	return r;
}

static int on_http(struct lws *wsi, struct pss *p, const char *uri)
{
	struct httpd *d = of(wsi);
	struct strbuf b = STRBUF_INIT;
	char why[256] = "";
	uint64_t body = 0;
	int r;

	if (strncmp(uri, ARTSTORE_ROUTE, sizeof(ARTSTORE_ROUTE) - 1) == 0)
		return store_put(wsi, p, uri);
	/* Only an upload has a body. Another request's would be read after its answer, and
	 * lws 4.1 turns a pipelined body-carrying request with no HTTP version into a service
	 * loop that never ends (found by fuzz_httpd: 40 bytes held the controller at 100% CPU,
	 * /healthz unanswered): answered now, and the connection closed. */
	if ((lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 &&
	     (content_length(wsi, &body) < 0 || body > 0)) ||
	    lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
		refuse_now(wsi, HTTP_STATUS_BAD_REQUEST, REFUSED_NONE, "bad request: only PUT "
			   ARTSTORE_ROUTE "{namespace}/{session}/{name} takes a body");
		return -1;
	}
	if (strcmp(uri, "/metrics") == 0)
		return serve_metrics(wsi, p);
	if (strcmp(uri, "/healthz") == 0 || strcmp(uri, "/livez") == 0) {
		strbuf_adds(&b, "ok\n");
		r = answer(wsi, p, HTTP_STATUS_OK, "text/plain", &b);
	} else if (strcmp(uri, "/readyz") == 0) {
		bool ok = !d->h.ready || d->h.ready(d->h.ctx, why, sizeof(why));

		strbuf_addf(&b, "%s\n", ok && !why[0] ? "ok" : why);
		r = answer(wsi, p, ok ? HTTP_STATUS_OK : HTTP_STATUS_SERVICE_UNAVAILABLE,
			   "text/plain", &b);
	} else {
		strbuf_adds(&b, "not found: try /healthz, /readyz, /metrics, /ws/sessions or PUT "
			    ARTSTORE_ROUTE "{namespace}/{session}/{name}\n");
		r = answer(wsi, p, HTTP_STATUS_NOT_FOUND, "text/plain", &b);
	}
	free(b.s);
	return r;
}

static int http_writeable(struct lws *wsi, struct pss *p)
{
	if (p->waiting) {
		p->waiting = false;
		return serve_metrics(wsi, p);
	}
	if (p->up && (p->up_state == UP_CHECK || p->up_state == UP_STORE))
		return store_answer(wsi, p);
	if (!p->body)
		return 0;
	if (lws_write(wsi, p->body + LWS_PRE, p->len, LWS_WRITE_HTTP_FINAL) < (int)p->len)
		return 1;
	free(p->body);
	p->body = NULL;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ---- the feed ---------------------------------------------------------------------------- */

/* The namespace a feed message is about. One that cannot be read gets "-", a namespace
 * nobody can be granted: it goes only to clients that may list every namespace. */
static void feed_namespace(const char *json, size_t len, char ns[NS_MAX])
{
	json_t *j = json_loadb(json, len, 0, NULL);
	const char *s = json_string_value(json_object_get(j, "namespace"));

	snprintf(ns, NS_MAX, "%s", s && *s && strlen(s) < NS_MAX ? s : "-");
	json_decref(j);
}

static void snapshot_unref(struct snapshot *s)
{
	if (s && !--s->refs) {
		free(s->text);
		free(s);
	}
}

/* The sessions now, as the feed's messages; seq: the next broadcast's, read before. */
static struct snapshot *snapshot_new(struct httpd *d, uint64_t seq)
{
	struct strbuf b = STRBUF_INIT;
	struct snapshot *s;
	size_t n = 0;

	if (d->h.snapshot)
		d->h.snapshot(d->h.ctx, &b);
	for (size_t i = 0; i < b.len; i++)
		n += b.s[i] == '\n';
	s = strbuf_err(&b) ? NULL : malloc(sizeof(*s) + (n + 1) * sizeof(s->line[0]));
	if (!s) {
		free(b.s);
		return NULL;
	}
	*s = (struct snapshot){ .refs = 1, .seq = seq, .text = b.s };
	for (size_t off = 0; off < b.len;) {
		const char *nl = memchr(b.s + off, '\n', b.len - off);
		size_t len = nl ? (size_t)(nl - (b.s + off)) : b.len - off;

		if (len) {
			s->line[s->n] = (struct snap_line){ .off = off, .len = len };
			feed_namespace(b.s + off, len, s->line[s->n++].ns);
		}
		off += len + 1;
	}
	return s;
}

/* The snapshot for a client connecting now (a reference): the latest while the feed moved
 * on by less than HTTPD_RING / 2 since (the client replays those from the ring), else a new
 * one. NULL when out of memory. */
static struct snapshot *snapshot_get(struct httpd *d)
{
	uint64_t seq;

	pthread_mutex_lock(&d->lock);
	seq = d->next_seq;
	pthread_mutex_unlock(&d->lock);
	if (!d->snap || seq - d->snap->seq >= HTTPD_RING / 2) {
		struct snapshot *s = snapshot_new(d, seq);

		if (!s)
			return NULL;
		snapshot_unref(d->snap);
		d->snap = s;
	}
	d->snap->refs++;
	return d->snap;
}

/* Is there a message for p? Its namespace into ns. */
static bool peek(struct httpd *d, struct pss *p, char ns[NS_MAX])
{
	bool got = true;

	if (p->snap && p->snap_i < p->snap->n) {
		memcpy(ns, p->snap->line[p->snap_i].ns, NS_MAX);
		return true;
	}
	snapshot_unref(p->snap);
	p->snap = NULL;
	pthread_mutex_lock(&d->lock);
	if (d->next_seq - p->seq > HTTPD_RING) {
		p->seq = d->next_seq - HTTPD_RING;
		p->gap = true;
	}
	if (p->gap)
		ns[0] = '\0';
	else if (p->seq < d->next_seq)
		memcpy(ns, d->ring[p->seq % HTTPD_RING].ns, NS_MAX);
	else
		got = false;
	pthread_mutex_unlock(&d->lock);
	return got;
}

static unsigned char *copy_msg(const char *text, size_t len)
{
	unsigned char *buf = malloc(LWS_PRE + len + 1);

	if (buf)
		memcpy(buf + LWS_PRE, text, len);
	return buf;
}

/* Moves p past the message peek() saw, into *ret_buf (LWS_PRE + text) when send. Returns 1
 * when there is one to send (or skip), 0 when the ring moved on meanwhile (peek again),
 * -1 when out of memory. */
static int take(struct httpd *d, struct pss *p, bool send, unsigned char **ret_buf,
		size_t *ret_len)
{
	static const char gap[] = "{\"type\":\"gap\"}";
	const char *text = NULL;
	int r = 1;

	if (p->snap) {
		const struct snap_line *l = &p->snap->line[p->snap_i++];

		*ret_len = l->len;
		text = p->snap->text + l->off;
		*ret_buf = send ? copy_msg(text, l->len) : NULL;
		return send && !*ret_buf ? -1 : 1;
	}
	pthread_mutex_lock(&d->lock);
	if (d->next_seq - p->seq > HTTPD_RING) {
		r = 0;
	} else if (p->gap) {
		p->gap = false;
		text = gap;
		*ret_len = sizeof(gap) - 1;
	} else {
		const struct msg *m = &d->ring[p->seq++ % HTTPD_RING];

		text = (const char *)m->buf + LWS_PRE;
		*ret_len = m->len;
	}
	*ret_buf = r && send ? copy_msg(text, *ret_len) : NULL;
	pthread_mutex_unlock(&d->lock);
	return r && send && !*ret_buf ? -1 : r;
}

static bool more(struct httpd *d, const struct pss *p)
{
	bool m;

	if (p->snap && p->snap_i < p->snap->n)
		return true;
	pthread_mutex_lock(&d->lock);
	m = p->gap || p->seq < d->next_seq;
	pthread_mutex_unlock(&d->lock);
	return m;
}

/* May p see the sessions of namespace ns ("": a message about none)? */
static enum httpauth_verdict may_see(struct httpd *d, struct pss *p, const char *ns, char *why,
				     size_t whylen)
{
	struct httpauth_attr at = {
		.verb = "list", .group = "aiprof.io", .resource = "profilingsessions", .ns = "",
	};
	enum httpauth_verdict v;

	if (!d->auth || !ns[0])
		return HTTPAUTH_ALLOW;
	v = httpauth__authorize(d->auth, p->user, &at, why, whylen);
	if (v != HTTPAUTH_DENY)
		return v;
	at.ns = ns;
	return httpauth__authorize(d->auth, p->user, &at, why, whylen);
}

static int ws_close(struct lws *wsi, int code, const char *why)
{
	size_t n = strlen(why);

	lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)why,
			 n < WS_CLOSE_REASON_MAX ? n : WS_CLOSE_REASON_MAX);
	return -1;
}

/* The client's token, reviewed: 0 to go on, 1 while the review is under way (parked), -1
 * once the connection is to close. */
static int ws_authenticated(struct httpd *d, struct lws *wsi, struct pss *p)
{
	char why[WHY_MAX];
	enum httpauth_verdict v;

	if (!d->auth || p->user)
		return 0;
	v = httpauth__authenticate(d->auth, p->key, NULL, &p->user, why, sizeof(why));
	switch (v) {
	case HTTPAUTH_ALLOW:
		return 0;
	case HTTPAUTH_PENDING:
	case HTTPAUTH_BUSY:
		park(d, p, wsi);
		return 1;
	case HTTPAUTH_UNAUTHENTICATED:
		count(d, REFUSED_UNAUTHENTICATED);
		return ws_close(wsi, WS_CLOSE_UNAUTHORIZED, why);
	default:
		count(d, REFUSED_UNAVAILABLE);
		return ws_close(wsi, WS_CLOSE_TRY_AGAIN, why);
	}
}

/* Sends the client's next message it may see (snapshot line, gap notice or ring entry),
 * skipping those of namespaces it may not list. */
static int ws_write_next(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	unsigned char *buf;
	char ns[NS_MAX], why[WHY_MAX];
	size_t len = 0;
	int r = ws_authenticated(d, wsi, p);

	if (r)
		return r < 0 ? -1 : 0;
	for (int i = 0; i < SKIP_BATCH; i++) {
		enum httpauth_verdict v;

		if (!peek(d, p, ns))
			return 0;
		v = may_see(d, p, ns, why, sizeof(why));
		if (v == HTTPAUTH_PENDING || v == HTTPAUTH_BUSY) {
			park(d, p, wsi);
			return 0;
		}
		if (v == HTTPAUTH_ERROR) {
			count(d, REFUSED_UNAVAILABLE);
			return ws_close(wsi, WS_CLOSE_TRY_AGAIN, why);
		}
		r = take(d, p, v == HTTPAUTH_ALLOW, &buf, &len);
		if (r < 0)
			return -1;
		if (r == 0 || !buf)
			continue;
		r = lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT);
		free(buf);
		if (r < (int)len)
			return -1;
		break;
	}
	if (more(d, p))
		lws_callback_on_writable(wsi);
	return 0;
}

/* An upgrade to the websocket, before the handshake (no per-connection state yet): 0 lets it
 * go on, 1 when refused here with an answer. The token is reviewed now; the client waits for
 * a review under way after the handshake (ws_authenticated()), for the handshake cannot
 * wait. */
static int ws_confirm(struct lws *wsi)
{
	struct httpd *d = of(wsi);
	struct httpauth_user *u = NULL;
	char uri[128], why[WHY_MAX];
	enum httpauth_verdict v;
	enum refusal rf;
	unsigned code;

	if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 ||
	    strcmp(uri, "/ws/sessions") != 0)
		return refuse_now(wsi, HTTP_STATUS_NOT_FOUND, REFUSED_NONE,
				  "not found: the websocket is /ws/sessions");
	if (d->ws_clients >= d->cfg.max_ws_clients) {
		snprintf(why, sizeof(why), "service unavailable: %u websocket clients are "
			 "connected, as many as --max-ws-clients allows: try again later",
			 d->ws_clients);
		return refuse_now(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, REFUSED_WEBSOCKETS, why);
	}
	if (!d->auth)
		return 0;
	v = authenticate(d, wsi, "list profilingsessions", NULL, &u, why, sizeof(why));
	httpauth_user__unref(u);
	code = status_of(v, why, sizeof(why), &rf);
	if (code == 0 && v == HTTPAUTH_BUSY) {
		snprintf(why, sizeof(why), "service unavailable: too many token reviews under "
			 "way: try again");
		return refuse_now(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, REFUSED_UNAVAILABLE, why);
	}
	return code == 0 || code == HTTP_STATUS_OK ? 0 : refuse_now(wsi, code, rf, why);
}

/* The handshake is about to be answered: the client's token key (ws_confirm() reviewed it). */
static int ws_filter(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	char uri[128], why[WHY_MAX];
	enum httpauth_verdict v;

	if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 ||
	    strcmp(uri, "/ws/sessions") != 0)
		return 1;       /* websockets only there */
	if (!d->auth)
		return 0;
	v = authenticate(d, wsi, "list profilingsessions", p->key, &p->user, why, sizeof(why));
	return v == HTTPAUTH_ALLOW || v == HTTPAUTH_PENDING ? 0 : 1;
}

static int ws_established(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);

	p->snap = snapshot_get(d);
	if (!p->snap)
		return -1;
	p->ws = true;
	p->wsi = wsi;
	d->ws_clients++;
	p->seq = p->snap->seq;
	lws_callback_on_writable(wsi);
	return 0;
}

static void ws_closed(struct httpd *d, struct pss *p)
{
	if (!p->ws)
		return;
	d->ws_clients--;
	unpark(d, p);
	snapshot_unref(p->snap);
	p->snap = NULL;
	httpauth_user__unref(p->user);
	p->user = NULL;
	p->ws = false;
}

/* ---- the callback ------------------------------------------------------------------------ */

static int on_connections(struct httpd *d, enum lws_callback_reasons reason)
{
	switch (reason) {
	case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
		if (d->conns < d->cfg.max_connections)
			return 0;
		count(d, REFUSED_CONNECTIONS);
		return 1;               /* closed as accepted */
	case LWS_CALLBACK_WSI_CREATE:
		d->conns++;
		return 0;
	default:                        /* LWS_CALLBACK_WSI_DESTROY; the listener's too */
		d->conns -= d->conns > 0;
		return 0;
	}
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		    size_t len)
{
	struct pss *p = user;
	struct httpd *d = wsi ? of(wsi) : NULL;

	switch (reason) {
	case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
	case LWS_CALLBACK_WSI_CREATE:
	case LWS_CALLBACK_WSI_DESTROY:
		if (d && on_connections(d, reason))
			return 1;
		break;
	case LWS_CALLBACK_HTTP:
		return on_http(wsi, p, in ? (const char *)in : "/");
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return http_writeable(wsi, p);
	/* not on to lws_callback_http_dummy(): it would end the transaction */
	case LWS_CALLBACK_HTTP_BODY:
		return p ? store_body(wsi, p, in, len) : 0;
	case LWS_CALLBACK_TIMER:
		return d ? store_deadline(d, p) : 0;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		return p ? store_body_done(wsi, p) : 0;
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
	case LWS_CALLBACK_CLOSED_HTTP:
		if (p) {        /* the next transaction on the connection starts afresh */
			unpark(d, p);
			upload_end(d, p);
			free(p->body);
			memset(p, 0, sizeof(*p));
		}
		break;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		return ws_confirm(wsi);
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		return ws_filter(wsi, p);
	case LWS_CALLBACK_ESTABLISHED:
		return ws_established(wsi, p);
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (p && p->ws)
			return ws_write_next(wsi, p);
		break;
	case LWS_CALLBACK_CLOSED:
		if (p)
			ws_closed(d, p);
		break;
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		if (d && atomic_exchange(&d->reviewed, false))
			unpark_all(d);
		if (d && atomic_exchange(&d->pending, false))
			lws_callback_on_writable_all_protocol(d->ctx, &d->protocols[0]);
		break;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* ---- set-up ------------------------------------------------------------------------------ */

static struct httpd *log_target;

static void lws_log(int level, const char *line)
{
	char buf[300];
	size_t n;

	if (!log_target || !log_target->h.log)
		return;
	snprintf(buf, sizeof(buf), "http: %s", line);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	log_target->h.log(log_target->h.ctx, level == LLL_ERR ? 1 : 4, buf);
}

static int parse_addr(const char *addr, char *iface, size_t ilen, int *port)
{
	const char *colon = strrchr(addr, ':');
	char *end;
	long p;

	if (!colon)
		return -EINVAL;
	p = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || p < 0 || p > 65535)
		return -EINVAL;
	*port = (int)p;
	if (colon == addr) {
		iface[0] = '\0';
		return 0;
	}
	if (addr[0] == '[' && colon[-1] == ']')
		snprintf(iface, ilen, "%.*s", (int)(colon - addr - 2), addr + 1);
	else
		snprintf(iface, ilen, "%.*s", (int)(colon - addr), addr);
	return 0;
}

/* 127.0.0.0/8, ::1 or localhost: reachable from this host (this pod) only. */
static bool loopback(const char *iface)
{
	struct in_addr a4;

	if (strcmp(iface, "localhost") == 0 || strcmp(iface, "::1") == 0)
		return true;
	return inet_pton(AF_INET, iface, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

int httpd__parse_auth(const char *s, enum httpd_auth *ret)
{
	if (strcmp(s, "kubernetes") == 0)
		*ret = HTTPD_AUTH_KUBERNETES;
	else if (strcmp(s, "none") == 0)
		*ret = HTTPD_AUTH_NONE;
	else
		return -EINVAL;
	return 0;
}

int httpd__check(const struct httpd_config *cfg, char *msg, size_t msglen)
{
	char iface[64];
	int port;

	if (parse_addr(cfg->addr, iface, sizeof(iface), &port) < 0)
		snprintf(msg, msglen, "--metrics-addr '%s' is not [HOST]:PORT", cfg->addr);
	else if (cfg->auth == HTTPD_AUTH_NONE && !loopback(iface))
		snprintf(msg, msglen, "--http-auth=none serves the metrics and every namespace's "
			 "sessions to whoever connects: it needs a loopback --metrics-addr such as "
			 "127.0.0.1:8080, not '%s'", cfg->addr);
	else if (cfg->auth == HTTPD_AUTH_KUBERNETES && !cfg->kube)
		snprintf(msg, msglen, "--http-auth=kubernetes needs the API server's configuration");
	else if (cfg->max_ws_clients < 1)
		snprintf(msg, msglen, "--max-ws-clients must be 1 or more");
	else if (cfg->max_connections < cfg->max_ws_clients + HTTPD_SPARE_CONNECTIONS)
		snprintf(msg, msglen, "--max-connections %u leaves too little room beside "
			 "--max-ws-clients %u for probes and scrapes: give at least %u",
			 cfg->max_connections, cfg->max_ws_clients,
			 cfg->max_ws_clients + HTTPD_SPARE_CONNECTIONS);
	else
		return 0;
	return -EINVAL;
}

static int create_context(struct httpd *d)
{
	struct lws_context_creation_info info;
	struct lws_vhost *vh;

	d->protocols[0] = (struct lws_protocols){
		.name = "aiprof-sessions", .callback = callback,
		/* clients send nothing but control frames (at most 125 bytes) */
		.per_session_data_size = sizeof(struct pss), .rx_buffer_size = 512,
	};
	log_target = d;
	lws_set_log_level(LLL_ERR, lws_log);
	memset(&info, 0, sizeof(info));
	info.port = d->port;
	info.iface = d->iface[0] ? d->iface : NULL;
	info.protocols = d->protocols;
	info.user = d;
	info.options = LWS_SERVER_OPTION_DISABLE_IPV6 * (d->iface[0] && !strchr(d->iface, ':'));
	info.vhost_name = "default";
	/* a header table for every connection allowed: one waiting for its review holds its
	 * own, and must not keep a probe waiting for one */
	info.max_http_header_pool = (unsigned short)(d->cfg.max_connections < 65535 ?
						     d->cfg.max_connections : 65535);
	d->ctx = lws_create_context(&info);
	if (!d->ctx)
		return -EADDRINUSE;
	vh = lws_get_vhost_by_name(d->ctx, "default");
	if (vh)
		d->port = lws_get_vhost_listen_port(vh);
	return 0;
}

int httpd__new(const struct httpd_config *cfg, const struct httpd_handlers *h,
	       struct httpd **ret)
{
	struct httpauth_config ac = { .kube = cfg->kube, .wake = reviewed };
	struct artupload_config uc = { .kube = cfg->kube, .wake = reviewed };
	struct httpd *d;
	char msg[256];
	int r;

	if (httpd__check(cfg, msg, sizeof(msg)) < 0)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->h = *h;
	d->cfg = *cfg;
	d->cfg.addr = NULL;
	if (!d->cfg.store_max_file)
		d->cfg.store_max_file = ARTSTORE_MAX_FILE_BYTES;
	if (!d->cfg.store_max_session)
		d->cfg.store_max_session = ARTSTORE_MAX_SESSION_BYTES;
	if (!d->cfg.store_upload_timeout_ms)
		d->cfg.store_upload_timeout_ms = HTTPD_STORE_UPLOAD_TIMEOUT_S * 1000ull;
	parse_addr(cfg->addr, d->iface, sizeof(d->iface), &d->port);
	pthread_mutex_init(&d->lock, NULL);
	ac.ctx = d;
	uc.ctx = d;
	uc.max_file = d->cfg.store_max_file;
	uc.max_session = d->cfg.store_max_session;
	uc.injector_ns = cfg->store_injector_ns;
	uc.max_ns_bytes = cfg->store_max_ns_bytes;
	uc.max_ns_sessions = cfg->store_max_ns_sessions;
	r = cfg->auth == HTTPD_AUTH_KUBERNETES ? httpauth__new(&ac, &d->auth) : 0;
	if (r == 0 && cfg->auth == HTTPD_AUTH_KUBERNETES)
		r = artupload__new(&uc, &d->store);
	if (r == 0)
		r = create_context(d);
	if (r < 0) {
		httpd__free(d);
		return r;
	}
	*ret = d;
	return 0;
}

int httpd__port(struct httpd *h)
{
	return h->port;
}

static void *serve(void *arg)
{
	struct httpd *d = arg;

	while (!atomic_load(&d->stop))
		if (lws_service(d->ctx, 0) < 0)
			break;
	return NULL;
}

int httpd__service(struct httpd *h)
{
	if (h->running)
		return -EIO;
	lws_cancel_service(h->ctx);     /* returns after what is pending, never waits on */
	return lws_service(h->ctx, 0) < 0 ? -EIO : 0;
}

int httpd__start(struct httpd *h)
{
	int r = h->auth ? httpauth__start(h->auth) : 0;

	if (r == 0 && h->store)
		r = artupload__start(h->store);
	if (r < 0)
		return r;
	r = pthread_create(&h->thread, NULL, serve, h);
	if (r)
		return -r;
	h->running = true;
	return 0;
}

void httpd__broadcast(struct httpd *h, const char *json, size_t len)
{
	unsigned char *buf;
	char ns[NS_MAX];
	struct msg *m;

	if (!h)
		return;
	buf = copy_msg(json, len);
	if (!buf)
		return;
	feed_namespace(json, len, ns);
	pthread_mutex_lock(&h->lock);
	m = &h->ring[h->next_seq % HTTPD_RING];
	free(m->buf);
	*m = (struct msg){ .buf = buf, .len = len };
	memcpy(m->ns, ns, NS_MAX);
	h->next_seq++;
	pthread_mutex_unlock(&h->lock);
	atomic_store(&h->pending, true);
	lws_cancel_service(h->ctx);
}

void httpd__free(struct httpd *h)
{
	if (!h)
		return;
	if (h->running) {
		atomic_store(&h->stop, true);
		lws_cancel_service(h->ctx);
		pthread_join(h->thread, NULL);
	}
	/* the reviewer first: its wake() needs the context */
	httpauth__free(h->auth);
	h->auth = NULL;
	artupload__free(h->store);
	h->store = NULL;
	if (h->ctx)
		lws_context_destroy(h->ctx);
	if (log_target == h)
		log_target = NULL;
	for (size_t i = 0; i < HTTPD_RING; i++)
		free(h->ring[i].buf);
	snapshot_unref(h->snap);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
