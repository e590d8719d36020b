// SPDX-License-Identifier: MIT
/* PUTs to the in-cluster artifact store: see storeput.h and docs/artifact-store.md. */
#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "readfile.h"
#include "storeanswer.h"
#include "storeput.h"
#include "strbuf.h"
#include "timeutil.h"

#define STALL_SECONDS 30
#define CONNECT_SECONDS 10

/* ---- one request ------------------------------------------------------------------- */

struct put_try {
	const struct store_dest *d;
	const char *url;
	int fd;
	const char *buf;
	uint64_t size, off;
	const char *sha;
	struct strbuf body;             /* the answer, at most 4 KiB kept */
	uint64_t retry_after_ns;        /* from a 503's Retry-After */
};

static size_t read_body(char *out, size_t size, size_t nmemb, void *ctx)
{
	struct put_try *t = ctx;
	size_t want = size * nmemb;
	ssize_t n;

	if (want > t->size - t->off)
		want = (size_t)(t->size - t->off);
	if (want == 0)
		return 0;
	if (t->fd < 0) {
		memcpy(out, t->buf + t->off, want);
		n = (ssize_t)want;
	} else {
		n = read_some(t->fd, out, want, (int64_t)t->off);
		if (n <= 0)
			return CURL_READFUNC_ABORT;    /* shrank or failed: the try fails */
	}
	t->off += (uint64_t)n;
	return (size_t)n;
}

static size_t keep_answer(char *in, size_t size, size_t nmemb, void *ctx)
{
	struct put_try *t = ctx;
	size_t n = size * nmemb;

	if (t->body.len < 4096)
		strbuf_add(&t->body, in, n < 4096 - t->body.len ? n : 4096 - t->body.len);
	return n;
}

static size_t keep_header(char *in, size_t size, size_t nmemb, void *ctx)
{
	struct put_try *t = ctx;
	size_t n = size * nmemb;

	if (n > 12 && strncasecmp(in, "Retry-After:", 12) == 0)
		t->retry_after_ns = store_retry_after_ns(in, n);   /* not NUL-terminated */
	return n;
}

/* The token, trimmed; 0, or -ENOKEY when the file is missing, empty or too long. */
static int read_token(const char *path, char **ret)
{
	char *s = NULL;
	size_t n = 0;
	int r = readfile(path, STORE_TOKEN_MAX, READFILE_REGULAR, &s, &n);

	if (r < 0 || n == 0) {
		free(s);
		return r == -ENOMEM ? r : -ENOKEY;
	}
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f) {
			explicit_bzero(s, n);
			free(s);
			return -ENOKEY;
		}
	*ret = s;
	return n ? 0 : -ENOKEY;
}

static int put_try_fn(void *ctx, struct s3_attempt *a)
{
	struct put_try *t = ctx;
	struct curl_slist *hdr = NULL;
	struct strbuf auth = STRBUF_INIT, sha = STRBUF_INIT;
	char *token = NULL;
	CURL *c;
	CURLcode rc;
	int r;

	t->off = 0;
	t->retry_after_ns = 0;
	strbuf__release(&t->body);
	r = read_token(t->d->token_file, &token);
	if (r < 0)
		return r;
	c = curl_easy_init();
	strbuf_addf(&auth, "Authorization: Bearer %s", token);
	strbuf_addf(&sha, "X-Aiprof-Sha256: %s", t->sha);
	explicit_bzero(token, strlen(token));
	free(token);
	if (!c || strbuf_err(&auth) || strbuf_err(&sha)) {
		r = -ENOMEM;
		goto out;
	}
	hdr = curl_slist_append(hdr, auth.s);
	hdr = hdr ? curl_slist_append(hdr, sha.s) : NULL;
	hdr = hdr ? curl_slist_append(hdr, "Content-Type: application/octet-stream") : NULL;
	hdr = hdr ? curl_slist_append(hdr, "Expect:") : NULL;
	if (!hdr) {
		r = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, t->url);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)t->size);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
	curl_easy_setopt(c, CURLOPT_READDATA, t);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_answer);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, keep_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, t);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_SECONDS);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)STALL_SECONDS);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	if (t->d->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, t->d->ca_file);
	rc = curl_easy_perform(c);
	a->net = s3_net_of_curl(rc);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
		/* the store refuses with one line of text (controller/artupload.c) */
		store_answer_detail(t->body.s ? t->body.s : "", t->body.len, a->detail,
				    sizeof(a->detail));
	} else {
		snprintf(a->detail, sizeof(a->detail), "%s", curl_easy_strerror(rc));
	}
	r = 0;
out:
	curl_slist_free_all(hdr);
	if (auth.s)
		explicit_bzero(auth.s, auth.len);
	strbuf__release(&auth);
	strbuf__release(&sha);
	if (c)
		curl_easy_cleanup(c);
	return r;
}

/* Sleeps at least a 503's Retry-After before s3_retry_run's own backoff. */
struct sleep_floor {
	const struct s3_hooks *inner;
	struct put_try *t;
};

static void floor_sleep(void *ctx, uint64_t ns)
{
	struct sleep_floor *f = ctx;

	if (f->t->retry_after_ns > ns)
		ns = f->t->retry_after_ns;
	if (f->inner && f->inner->sleep_ns)
		f->inner->sleep_ns(f->inner->ctx, ns);
	else
		sleep_ns(ns);
}

/* the caller's random source, when it gave one (else s3_retry_run uses its own) */
static uint64_t floor_random(void *ctx)
{
	struct sleep_floor *f = ctx;

	return f->inner->random(f->inner->ctx);
}

static void floor_notify(void *ctx, const char *msg)
{
	struct sleep_floor *f = ctx;

	if (f->inner && f->inner->notify)
		f->inner->notify(f->inner->ctx, msg);
}

static int status_errno(const struct s3_attempt *a)
{
	if (a->net != S3_NET_OK || a->status == 429 || a->status >= 500)
		return s3_attempt_errno(a);
	switch (a->status) {
	case 401:
	case 403: return -EACCES;
	case 404: return -ENOENT;
	case 409: return -EEXIST;
	case 413: return -EFBIG;
	default: return a->status >= 200 && a->status < 300 ? 0 : -EPROTO;
	}
}

int store_put(const struct store_dest *d, const char *name, int fd, const void *buf,
	      uint64_t size, const char *sha256_hex, const struct s3_retry_policy *p,
	      const struct s3_hooks *h, struct s3_error *err)
{
	struct put_try t = { .d = d, .fd = fd, .buf = buf, .size = size, .sha = sha256_hex,
			     .body = STRBUF_INIT };
	struct sleep_floor f = { h, &t };
	struct s3_hooks fh = { floor_sleep, h && h->random ? floor_random : NULL, NULL, floor_notify,
			       &f };
	struct strbuf url = STRBUF_INIT;
	int r;

	memset(err, 0, sizeof(*err));
	snprintf(err->op, sizeof(err->op), "PUT %.80s/%.60s", d->base, name);
	if (!store_name_ok(name)) {
		err->local_err = -EINVAL;
		return -EINVAL;
	}
	strbuf_addf(&url, "%s/%s", d->base, name);
	if (strbuf_err(&url)) {
		strbuf__release(&url);
		return -ENOMEM;
	}
	t.url = url.s;
	r = s3_retry_run(p, &fh, put_try_fn, &t, err);
	if (r < 0 && !err->local_err)
		r = status_errno(&err->last);
	strbuf__release(&t.body);
	strbuf__release(&url);
	return r;
}

void store_error__describe(const struct s3_error *e, int err, char *buf, size_t len)
{
	const struct s3_attempt *a = &e->last;
	const char *hint = "";
	char what[400];

	if (e->local_err == -ENOKEY) {
		snprintf(buf, len, "%s: no service-account token to send (set "
			 "AIPROF_STORE_TOKEN_FILE to a readable token file; in a cluster the "
			 "injector pod mounts it)", e->op);
		return;
	}
	if (e->local_err) {
		snprintf(buf, len, "%s: %s", e->op, strerror(-e->local_err));
		return;
	}
	if (a->net != S3_NET_OK)
		snprintf(what, sizeof(what), "%s", a->detail);
	else
		snprintf(what, sizeof(what), "HTTP %ld%s%s", a->status, a->detail[0] ? ": " : "",
			 a->detail);
	switch (err) {
	case -EACCES:
		hint = "; the controller accepts only the injector pods it made for this session, "
		       "with their service-account token of audience aiprof.io/artifacts";
		break;
	case -EFBIG:
		hint = "; the controller's --store-max-file-bytes / --store-max-session-bytes "
		       "bound what a session keeps in the cluster (use S3 for more)";
		break;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ETIMEDOUT:
		hint = "; check the controller's --store-url and that a NetworkPolicy lets the "
		       "injector pods reach the controller's port";
		break;
	default:
		break;
	}
	snprintf(buf, len, "%s: %s (after %u %s)%s", e->op, what, e->attempts,
		 e->attempts == 1 ? "try" : "tries", hint);
	for (char *s = buf; *s; s++)
		if ((unsigned char)*s < 0x20)
			*s = '?';
}
