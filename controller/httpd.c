/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libwebsockets.h>
#include "httpd.h"

struct msg {
	unsigned char *buf;     /* LWS_PRE bytes of room, then the text */
	size_t len;
};

struct httpd {
	struct httpd_handlers h;
	struct lws_context *ctx;
	struct lws_protocols protocols[2];
	pthread_t thread;
	bool running;
	atomic_bool stop;
	char iface[64];
	int port;
	pthread_mutex_t lock;
	struct msg ring[HTTPD_RING];
	uint64_t next_seq;      /* sequence number of the next broadcast */
	atomic_bool pending;
};

/* Per connection: an HTTP answer being sent, or a websocket client's position. */
struct pss {
	unsigned char *body;    /* LWS_PRE + answer */
	size_t len;
	bool ws;
	uint64_t seq;           /* next ring message to send */
	char *snap;             /* snapshot lines still to send (malloc'd), or NULL */
	size_t snap_off, snap_len;
	bool gap;
};

static struct httpd *of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

static int answer(struct lws *wsi, struct pss *p, unsigned code, const char *ctype,
		  struct strbuf *b)
{
	unsigned char hdr[LWS_PRE + 512], *start = &hdr[LWS_PRE], *pos = start,
		      *end = &hdr[sizeof(hdr) - 1];

	if (strbuf_err(b))
		return -1;
	p->len = b->len;
	p->body = malloc(LWS_PRE + b->len + 1);
	if (!p->body)
		return -1;
	if (b->len)
		memcpy(p->body + LWS_PRE, b->s, b->len);
	if (lws_add_http_common_headers(wsi, code, ctype, (lws_filepos_t)b->len, &pos, end) ||
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
					 (const unsigned char *)"no-store", 8, &pos, end) ||
	    lws_finalize_write_http_header(wsi, start, &pos, end))
		return 1;
	lws_callback_on_writable(wsi);
	return 0;
}

static int on_http(struct lws *wsi, struct pss *p, const char *uri)
{
	struct httpd *d = of(wsi);
	struct strbuf b = STRBUF_INIT;
	char why[256] = "";
	int r;

	if (strcmp(uri, "/healthz") == 0 || strcmp(uri, "/livez") == 0) {
		strbuf_adds(&b, "ok\n");
		r = answer(wsi, p, HTTP_STATUS_OK, "text/plain", &b);
	} else if (strcmp(uri, "/readyz") == 0) {
		bool ok = !d->h.ready || d->h.ready(d->h.ctx, why, sizeof(why));

		strbuf_addf(&b, "%s\n", ok && !why[0] ? "ok" : why);
		r = answer(wsi, p, ok ? HTTP_STATUS_OK : HTTP_STATUS_SERVICE_UNAVAILABLE,
			   "text/plain", &b);
	} else if (strcmp(uri, "/metrics") == 0) {
		if (d->h.metrics)
			d->h.metrics(d->h.ctx, &b);
		r = answer(wsi, p, HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8", &b);
	} else {
		strbuf_adds(&b, "not found: try /healthz, /readyz, /metrics or /ws/sessions\n");
		r = answer(wsi, p, HTTP_STATUS_NOT_FOUND, "text/plain", &b);
	}
	free(b.s);
	return r;
}

/* Sends one message (snapshot line, gap notice or ring entry) to a websocket client. */
static int ws_write_next(struct lws *wsi, struct pss *p)
{
	struct httpd *d = of(wsi);
	unsigned char *buf = NULL;
	size_t len = 0;
	bool more;
	int r;

	if (p->snap && p->snap_off < p->snap_len) {
		char *line = p->snap + p->snap_off, *nl = memchr(line, '\n', p->snap_len - p->snap_off);

		len = nl ? (size_t)(nl - line) : p->snap_len - p->snap_off;
		p->snap_off += len + 1;
		buf = malloc(LWS_PRE + len + 1);
		if (!buf)
			return -1;
		memcpy(buf + LWS_PRE, line, len);
	} else {
		pthread_mutex_lock(&d->lock);
		if (d->next_seq - p->seq > HTTPD_RING) {
			p->seq = d->next_seq - HTTPD_RING;
			p->gap = true;
		}
		if (p->gap) {
			static const char gap[] = "{\"type\":\"gap\"}";

			len = sizeof(gap) - 1;
			buf = malloc(LWS_PRE + len + 1);
			if (buf)
				memcpy(buf + LWS_PRE, gap, len);
			p->gap = false;
		} else if (p->seq < d->next_seq) {
			struct msg *m = &d->ring[p->seq % HTTPD_RING];

			len = m->len;
			buf = malloc(LWS_PRE + len + 1);
			if (buf)
				memcpy(buf + LWS_PRE, m->buf + LWS_PRE, len);
			p->seq++;
		}
		pthread_mutex_unlock(&d->lock);
		if (!buf)
			return len ? -1 : 0;
	}
	r = lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT);
	free(buf);
	if (r < (int)len)
		return -1;
	pthread_mutex_lock(&d->lock);
	more = (p->snap && p->snap_off < p->snap_len) || p->seq < d->next_seq;
	pthread_mutex_unlock(&d->lock);
	if (more)
		lws_callback_on_writable(wsi);
	return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		    size_t len)
{
	struct pss *p = user;
	struct httpd *d;
	char uri[128];

	switch (reason) {
	case LWS_CALLBACK_HTTP:
		return on_http(wsi, p, in ? (const char *)in : "/");
	case LWS_CALLBACK_HTTP_WRITEABLE:
		if (!p->body)
			break;
		if (lws_write(wsi, p->body + LWS_PRE, p->len, LWS_WRITE_HTTP_FINAL) < (int)p->len)
			return 1;
		free(p->body);
		p->body = NULL;
		if (lws_http_transaction_completed(wsi))
			return -1;
		return 0;
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
	case LWS_CALLBACK_CLOSED_HTTP:
		free(p->body);
		p->body = NULL;
		break;
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 ||
		    strcmp(uri, "/ws/sessions") != 0)
			return 1;       /* websockets only there */
		break;
	case LWS_CALLBACK_ESTABLISHED: {
		struct strbuf b = STRBUF_INIT;

		d = of(wsi);
		memset(p, 0, sizeof(*p));
		p->ws = true;
		if (d->h.snapshot)
			d->h.snapshot(d->h.ctx, &b);
		pthread_mutex_lock(&d->lock);
		p->seq = d->next_seq;   /* the snapshot covers what came before */
		pthread_mutex_unlock(&d->lock);
		if (!strbuf_err(&b) && b.len) {
			p->snap = b.s;
			p->snap_len = b.len;
			b.s = NULL;
		}
		free(b.s);
		lws_callback_on_writable(wsi);
		break;
	}
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (p->ws)
			return ws_write_next(wsi, p);
		break;
	case LWS_CALLBACK_CLOSED:
		free(p->snap);
		p->snap = NULL;
		break;
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		d = lws_context_user(lws_get_context(wsi));
		if (d && atomic_exchange(&d->pending, false))
			lws_callback_on_writable_all_protocol(d->ctx, &d->protocols[0]);
		break;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

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

int httpd__new(const char *addr, const struct httpd_handlers *h, struct httpd **ret)
{
	struct lws_context_creation_info info;
	struct lws_vhost *vh;
	struct httpd *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	d->h = *h;
	r = parse_addr(addr, d->iface, sizeof(d->iface), &d->port);
	if (r < 0) {
		free(d);
		return r;
	}
	pthread_mutex_init(&d->lock, NULL);
	d->protocols[0] = (struct lws_protocols){
		.name = "aiprof-sessions", .callback = callback,
		.per_session_data_size = sizeof(struct pss), .rx_buffer_size = 4096,
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
	d->ctx = lws_create_context(&info);
	if (!d->ctx) {
		pthread_mutex_destroy(&d->lock);
		free(d);
		return -EADDRINUSE;
	}
	vh = lws_get_vhost_by_name(d->ctx, "default");
	if (vh)
		d->port = lws_get_vhost_listen_port(vh);
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

int httpd__start(struct httpd *h)
{
	int r = pthread_create(&h->thread, NULL, serve, h);

	if (r)
		return -r;
	h->running = true;
	return 0;
}

void httpd__broadcast(struct httpd *h, const char *json, size_t len)
{
	unsigned char *buf = malloc(LWS_PRE + len + 1);
	struct msg *m;

	if (!buf || !h)
		goto out;
	memcpy(buf + LWS_PRE, json, len);
	pthread_mutex_lock(&h->lock);
	m = &h->ring[h->next_seq % HTTPD_RING];
	free(m->buf);
	m->buf = buf;
	m->len = len;
	h->next_seq++;
	pthread_mutex_unlock(&h->lock);
	buf = NULL;
	atomic_store(&h->pending, true);
	lws_cancel_service(h->ctx);
out:
	free(buf);
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
	lws_context_destroy(h->ctx);
	if (log_target == h)
		log_target = NULL;
	for (size_t i = 0; i < HTTPD_RING; i++)
		free(h->ring[i].buf);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
