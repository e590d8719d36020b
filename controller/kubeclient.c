/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <curl/curl.h>
#include <jansson.h>
#include "kubeclient.h"
#include "readfile.h"
#include "timeutil.h"

#define BODY_MAX (256u << 20)   /* a non-streamed answer larger than this is refused */
#define ERRBODY_MAX (64u << 10) /* what is kept of an error answer */
#define TOKEN_MAX 16384

struct kube_client {
	const struct kube_config *cfg;
	CURL *curl;
	struct curl_blob ca, cert, key;
	char *base;             /* scheme://host[:port][/prefix], host replaced by tls-server-name */
	struct curl_slist *connect_to;
	const atomic_bool *stop;
	long timeout_ms;
	bool skip_gate;         /* writes skip the write gate */
	const char *accept;     /* the Accept header's value; NULL: application/json */
	/* token file cache: re-read when the file's identity changes */
	char *token;
	struct stat token_st;
	bool token_loaded;
};

/* kube_client__set_write_gate() */
static kube_write_gate_fn write_gate;
static void *write_gate_ctx;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int kube_errno(int code, const char *reason)
{
	switch (code) {
	case 400:
	case 422:
		return -EINVAL;
	case 401:
		return -EKEYREJECTED;
	case 403:
		return -EACCES;
	case 404:
		return -ENOENT;
	case 405:
		return -EOPNOTSUPP;
	case 409:
		return reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -ESTALE;
	case 410:
		return -ETIME;
	case 429:
		return -EBUSY;
	case 504:
		return -ETIMEDOUT;
	default:
		if (code >= 200 && code < 300)
			return 0;
		return code >= 500 ? -EIO : -EPROTO;
	}
}

static const char *default_reason(int code)
{
	switch (code) {
	case 400: return "BadRequest";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "NotFound";
	case 405: return "MethodNotAllowed";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 422: return "Invalid";
	case 429: return "TooManyRequests";
	case 500: return "InternalError";
	case 503: return "ServiceUnavailable";
	case 504: return "Timeout";
	default: return "";
	}
}

static void copy_printable(char *dst, size_t dstlen, const char *src, size_t n)
{
	size_t i;

	for (i = 0; i < n && i + 1 < dstlen; i++) {
		unsigned char ch = (unsigned char)src[i];

		dst[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	dst[i] = '\0';
}

int kube_status__parse(const char *body, size_t len, int http_code, struct kube_status *st)
{
	json_t *j = NULL, *v;

	memset(st, 0, sizeof(*st));
	st->code = http_code;
	if (body && len)
		j = json_loadb(body, len, 0, NULL);
	if (json_is_object(j) && json_is_string(v = json_object_get(j, "kind")) &&
	    strcmp(json_string_value(v), "Status") == 0) {
		if (json_is_string(v = json_object_get(j, "reason")))
			copy_printable(st->reason, sizeof(st->reason), json_string_value(v),
				       json_string_length(v));
		if (json_is_string(v = json_object_get(j, "message")))
			copy_printable(st->message, sizeof(st->message), json_string_value(v),
				       json_string_length(v));
		v = json_object_get(j, "code");
		if (json_is_integer(v) && json_integer_value(v) >= 100 &&
		    json_integer_value(v) <= 599 && (http_code == 0 || http_code == 200))
			st->code = (int)json_integer_value(v);   /* a watch's ERROR event */
	} else if (body && len) {
		copy_printable(st->message, sizeof(st->message), body, len);
	}
	json_decref(j);
	if (!st->reason[0])
		snprintf(st->reason, sizeof(st->reason), "%s", default_reason(st->code));
	if (!st->message[0])
		snprintf(st->message, sizeof(st->message), "HTTP %d %s", st->code, st->reason);
	return kube_errno(st->code, st->reason);
}

static int transport_errno(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return -ECONNRESET;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CRL_BADFILE:
		return -EPROTO;
	case CURLE_ABORTED_BY_CALLBACK:
		return -ECANCELED;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

/* Splits "https://host:port/prefix" so that the URL can name tls-server-name instead of host
 * while libcurl still connects to host (CURLOPT_CONNECT_TO). */
static int build_base(struct kube_client *c)
{
	const char *srv = c->cfg->server, *hs, *he, *ps;
	char *connect_to = NULL;
	const char *port;
	size_t hlen;

	if (!c->cfg->tls_server_name) {
		c->base = strdup(srv);
		return c->base ? 0 : -ENOMEM;
	}
	hs = strstr(srv, "://");
	if (!hs)
		return -EINVAL;
	hs += 3;
	ps = hs + strcspn(hs, "/");
	if (*hs == '[') {
		he = memchr(hs, ']', (size_t)(ps - hs));
		if (!he)
			return -EINVAL;
		he++;
	} else {
		he = hs + strcspn(hs, ":/");
	}
	hlen = (size_t)(he - hs);
	port = *he == ':' ? he + 1 : (strncmp(srv, "https", 5) == 0 ? "443" : "80");
	if (asprintf(&c->base, "%.*s%s%.*s", (int)(hs - srv), srv, c->cfg->tls_server_name,
		     (int)strlen(he), he) < 0) {
		c->base = NULL;
		return -ENOMEM;
	}
	if (asprintf(&connect_to, "%s:%.*s:%.*s:%.*s", c->cfg->tls_server_name,
		     (int)strcspn(port, "/"), port, (int)hlen, hs, (int)strcspn(port, "/"), port) < 0)
		return -ENOMEM;
	c->connect_to = curl_slist_append(NULL, connect_to);
	free(connect_to);
	return c->connect_to ? 0 : -ENOMEM;
}

int kube_client__new(const struct kube_config *cfg, struct kube_client **ret)
{
	struct kube_client *c;
	int err;

	pthread_once(&curl_once, curl_init_once);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = cfg;
	c->timeout_ms = 30000;
	err = build_base(c);
	if (err < 0)
		goto fail;
	c->curl = curl_easy_init();
	if (!c->curl) {
		err = -ENOMEM;
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	kube_client__free(c);
	return err;
}

void kube_client__free(struct kube_client *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	curl_slist_free_all(c->connect_to);
	free(c->base);
	if (c->token) {
		explicit_bzero(c->token, strlen(c->token));
		free(c->token);
	}
	free(c);
}

void kube_client__set_stop(struct kube_client *c, const atomic_bool *stop)
{
	c->stop = stop;
}

void kube_client__set_timeout_ms(struct kube_client *c, long ms)
{
	c->timeout_ms = ms;
}

void kube_client__set_accept(struct kube_client *c, const char *accept)
{
	c->accept = accept;
}

void kube_client__set_write_gate(kube_write_gate_fn fn, void *ctx)
{
	write_gate = fn;
	write_gate_ctx = ctx;
}

void kube_client__skip_write_gate(struct kube_client *c)
{
	c->skip_gate = true;
}

/* The write gate on a request about to go out: 0, with a write's timeout cut to the time
 * left to act, or -ENOLCK (st says why). */
static int pass_write_gate(struct kube_client *c, const char *method, const char *path,
			   struct kube_status *st)
{
	uint64_t left_ms;

	if (!write_gate || c->skip_gate || strcmp(method, "GET") == 0)
		return 0;
	left_ms = write_gate(write_gate_ctx) / NSEC_PER_MSEC;
	if (left_ms == 0) {
		snprintf(st->reason, sizeof(st->reason), "NotLeader");
		snprintf(st->message, sizeof(st->message), "not the leader (lease lost or not "
			 "renewed in time): %s %.300s not sent", method, path);
		return -ENOLCK;
	}
	if (c->timeout_ms <= 0 || left_ms < (uint64_t)c->timeout_ms)
		curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, (long)left_ms);
	return 0;
}

/* The bearer token to send now: the fixed one, or the token file's current contents. */
static int current_token(struct kube_client *c, bool force, const char **ret)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int r;

	*ret = c->cfg->token;
	if (!c->cfg->token_file)
		return 0;
	if (stat(c->cfg->token_file, &st) < 0) {
		*ret = c->token;        /* keep the last one while the file is being swapped */
		return c->token ? 0 : -errno;
	}
	if (!force && c->token_loaded && st.st_ino == c->token_st.st_ino &&
	    st.st_dev == c->token_st.st_dev && st.st_size == c->token_st.st_size &&
	    st.st_mtim.tv_sec == c->token_st.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == c->token_st.st_mtim.tv_nsec) {
		*ret = c->token;
		return 0;
	}
	r = readfile(c->cfg->token_file, TOKEN_MAX, 0, &buf, &len);
	if (r < 0) {
		*ret = c->token;
		return c->token ? 0 : r;
	}
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	if (c->token) {
		explicit_bzero(c->token, strlen(c->token));
		free(c->token);
	}
	c->token = buf;
	c->token_st = st;
	c->token_loaded = true;
	*ret = c->token;
	return 0;
}

struct xfer {
	struct kube_client *c;
	char *buf;              /* the body, or an error answer */
	size_t len, cap;
	size_t max;
	long code;              /* HTTP status, known once the first body byte arrives */
	kube_chunk_fn fn;       /* streaming: 2xx bodies go here */
	void *ctx;
	int fn_err;
};

static int buf_append(struct xfer *x, const char *p, size_t n)
{
	if (x->len + n > x->max)
		return -E2BIG;
	if (x->len + n + 1 > x->cap) {
		size_t cap = x->cap ? x->cap : 16384;
		char *nb;

		while (cap < x->len + n + 1)
			cap *= 2;
		nb = realloc(x->buf, cap);
		if (!nb)
			return -ENOMEM;
		x->buf = nb;
		x->cap = cap;
	}
	memcpy(x->buf + x->len, p, n);
	x->len += n;
	x->buf[x->len] = '\0';
	return 0;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
	struct xfer *x = ud;
	size_t n = size * nmemb;
	int r;

	if (!x->code)
		curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &x->code);
	if (x->fn && x->code >= 200 && x->code < 300) {
		r = x->fn(x->ctx, p, n);
	} else {
		r = buf_append(x, p, n);
		if (r == -E2BIG && x->code >= 300)
			r = 0;          /* an error answer is only kept in part */
	}
	if (r < 0) {
		x->fn_err = r;
		return 0;               /* CURLE_WRITE_ERROR */
	}
	return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct xfer *x = ud;

	return x->c->stop && atomic_load(x->c->stop) ? 1 : 0;
}

static int add_header(struct curl_slist **hdrs, const char *line)
{
	struct curl_slist *h = curl_slist_append(*hdrs, line);

	if (!h)
		return -ENOMEM;
	*hdrs = h;
	return 0;
}

/* Accept, Content-Type (with a body), Authorization (with a token), and no Expect. The list
 * holds copies: the caller frees it with curl_slist_free_all() whatever this returns. */
static int request_headers(const char *token, const char *accept, const char *content_type,
			   bool with_body, struct curl_slist **hdrs)
{
	char *auth = NULL, *ctype = NULL, *acc = NULL;
	int err = -ENOMEM;

	if (token && token[0] && asprintf(&auth, "Authorization: Bearer %s", token) < 0) {
		auth = NULL;
		goto out;
	}
	if (asprintf(&ctype, "Content-Type: %s", content_type ? content_type : "application/json") < 0) {
		ctype = NULL;
		goto out;
	}
	if (asprintf(&acc, "Accept: %s", accept ? accept : "application/json") < 0) {
		acc = NULL;
		goto out;
	}
	if (add_header(hdrs, acc) < 0 ||
	    (with_body && add_header(hdrs, ctype) < 0) ||
	    (auth && add_header(hdrs, auth) < 0) ||
	    add_header(hdrs, "Expect:") < 0)
		goto out;
	err = 0;
out:
	if (auth) {
		explicit_bzero(auth, strlen(auth));
		free(auth);
	}
	free(ctype);
	free(acc);
	return err;
}

/* The TLS settings of the configuration: verification, CA, client certificate and key. */
static void set_tls(struct kube_client *c)
{
	CURL *e = c->curl;

	if (c->cfg->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	} else {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
	}
	if (c->cfg->ca_data) {
		c->ca.data = c->cfg->ca_data;
		c->ca.len = c->cfg->ca_len;
		c->ca.flags = CURL_BLOB_NOCOPY;
		curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &c->ca);
	} else if (c->cfg->ca_file) {
		curl_easy_setopt(e, CURLOPT_CAINFO, c->cfg->ca_file);
	}
	if (c->cfg->cert_data) {
		c->cert.data = c->cfg->cert_data;
		c->cert.len = c->cfg->cert_len;
		c->cert.flags = CURL_BLOB_NOCOPY;
		curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &c->cert);
		curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
	} else if (c->cfg->cert_file) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, c->cfg->cert_file);
	}
	if (c->cfg->key_data) {
		c->key.data = c->cfg->key_data;
		c->key.len = c->cfg->key_len;
		c->key.flags = CURL_BLOB_NOCOPY;
		curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &c->key);
		curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
	} else if (c->cfg->key_file) {
		curl_easy_setopt(e, CURLOPT_SSLKEY, c->cfg->key_file);
	}
}

/* The handle, reset, for one transfer into x: idle_s > 0 allows a stream to run as long as
 * bytes keep coming (a watch), else the client's timeout bounds the whole request. */
static void set_transfer(struct kube_client *c, const char *url, struct curl_slist *hdrs,
			 char *errbuf, struct xfer *x, long idle_s)
{
	CURL *e = c->curl;

	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "aiprof-controller/0.1");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
	if (idle_s > 0) {
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, idle_s);
	} else {
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	}
	if (c->connect_to)
		curl_easy_setopt(e, CURLOPT_CONNECT_TO, c->connect_to);
	set_tls(c);
}

/* What the transfer came to: 0 for a 2xx answer, else -errno and st says why. */
static int transfer_result(struct kube_client *c, struct xfer *x, CURLcode rc,
			   const char *errbuf, struct kube_status *st)
{
	const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
	int err;

	if (!x->code)
		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &x->code);
	if (x->fn_err && x->fn_err != -E2BIG) {
		snprintf(st->message, sizeof(st->message), "%s", strerror(-x->fn_err));
		st->code = (int)x->code;
		return x->fn_err;
	}
	if (rc != CURLE_OK) {
		err = x->fn_err == -E2BIG ? -E2BIG : transport_errno(rc);
		if (c->stop && atomic_load(c->stop))
			err = -ECANCELED;
		copy_printable(st->message, sizeof(st->message), why, strlen(why));
		return err;
	}
	if (x->code >= 200 && x->code < 300) {
		st->code = (int)x->code;
		return 0;
	}
	err = kube_status__parse(x->buf, x->len, (int)x->code, st);
	return err == 0 ? -EPROTO : err;
}

static int perform(struct kube_client *c, const char *method, const char *path,
		   const char *content_type, const char *body, size_t body_len, struct xfer *x,
		   long idle_s, bool force_token, struct kube_status *st)
{
	struct curl_slist *hdrs = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	const char *token = NULL;
	char *url = NULL;
	int err;

	memset(st, 0, sizeof(*st));
	err = current_token(c, force_token, &token);
	if (err < 0) {
		snprintf(st->message, sizeof(st->message), "cannot read the token file %.200s: %s",
			 c->cfg->token_file, strerror(-err));
		return err;
	}
	if (asprintf(&url, "%s%s", c->base, path) < 0)
		return -ENOMEM;
	err = request_headers(token, c->accept, content_type, body != NULL, &hdrs);
	if (err < 0)
		goto out;
	set_transfer(c, url, hdrs, errbuf, x, idle_s);
	if (strcmp(method, "GET") != 0)
		curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	}
	err = pass_write_gate(c, method, path, st);
	if (err == 0)
		err = transfer_result(c, x, curl_easy_perform(c->curl), errbuf, st);
out:
	/* libcurl keeps no pointer to these once the transfer is over */
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	free(url);
	return err;
}

int kube_client__request(struct kube_client *c, const char *method, const char *path,
			 const char *content_type, const char *body, size_t body_len,
			 char **ret_body, size_t *ret_len, struct kube_status *st)
{
	struct xfer x = { .c = c, .max = BODY_MAX };
	int err;

	err = perform(c, method, path, content_type, body, body_len, &x, 0, false, st);
	if (err == -EKEYREJECTED && c->cfg->token_file) {
		free(x.buf);
		memset(&x, 0, sizeof(x));
		x.c = c;
		x.max = BODY_MAX;
		err = perform(c, method, path, content_type, body, body_len, &x, 0, true, st);
	}
	if (err == 0 && ret_body) {
		if (!x.buf && !(x.buf = calloc(1, 1))) {
			err = -ENOMEM;
		} else {
			*ret_body = x.buf;
			if (ret_len)
				*ret_len = x.len;
			x.buf = NULL;
		}
	}
	free(x.buf);
	return err;
}

int kube_client__stream(struct kube_client *c, const char *path, kube_chunk_fn fn, void *ctx,
			long idle_s, struct kube_status *st)
{
	struct xfer x = { .c = c, .max = ERRBODY_MAX, .fn = fn, .ctx = ctx };
	int err;

	err = perform(c, "GET", path, NULL, NULL, 0, &x, idle_s > 0 ? idle_s : 60, false, st);
	if (err == -EKEYREJECTED && c->cfg->token_file) {
		free(x.buf);
		memset(&x, 0, sizeof(x));
		x.c = c;
		x.max = ERRBODY_MAX;
		x.fn = fn;
		x.ctx = ctx;
		err = perform(c, "GET", path, NULL, NULL, 0, &x, idle_s > 0 ? idle_s : 60, true, st);
	}
	free(x.buf);
	return err;
}
