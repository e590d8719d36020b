/* SPDX-License-Identifier: MIT */
/*
 * Why aiprof signs its S3 requests here and not with libcurl's CURLOPT_AWS_SIGV4, although
 * it links libcurl. Checked against Debian 12's libcurl 7.88.1 and a real radosgw by
 * tests/integration/test_s3.py::test_curl_7_88_sigv4_against_radosgw
 * (tests/s3/curl_sigv4_probe.c), which sends the S3
 * client's requests signed by curl and pins the outcome of each:
 *
 *  - The query is signed as written, not sorted (curl issue 9717, fixed in 8.3.0): an
 *    UploadPart written "?uploadId=..&partNumber=.." gets 403 SignatureDoesNotMatch.
 *  - A name without a value is signed as "uploads", not "uploads=" (curl issue 10129, fixed
 *    in 8.5.0): CreateMultipartUpload as S3 documents it ("?uploads") gets 403.
 *  - The payload hash is the SHA-256 of CURLOPT_POSTFIELDS, so of nothing for a PUT from a
 *    read callback, and no x-amz-content-sha256 header is added: every upload gets 403
 *    unless the caller hashes the body and sends that header itself.
 *  - A "Name:" entry in CURLOPT_HTTPHEADER (libcurl's way to remove a header, e.g. "Expect:")
 *    is signed as an empty header that is never sent: 403.
 *  - No signing clock can be injected: the date is time(NULL) (CURL_FORCETIME works in debug
 *    builds only), and a caller's x-amz-date is used but curl adds its own as well, so the
 *    header goes out twice.
 *
 * Each of the first four can be avoided by the caller (write the query canonical, sorted and
 * with "name=", hash the body, never remove a header), and with that every request aiprof
 * sends (PUT, HEAD, GET, multipart create/part/complete/abort, keys with ' ', '+', '&', '=',
 * UTF-8, virtual-hosted or path-style, with a session token) is accepted. But the caller then
 * still builds the canonical URI and query itself, the signature can no longer be checked
 * offline with a fixed clock (the AWS test suite and botocore cases in tests/unit/
 * test_sigv4.c), and it changes with the libcurl the binary meets at run time: 8.3.0 and
 * 8.5.0 changed how the query is signed, later releases the payload hash and the header
 * rules, and current curl decodes and re-encodes each query value, signing a "%2B" ('+') as
 * "%20" (lib/http_aws_sigv4.c, encode_query_component(); read, not tried here), which S3
 * would refuse. What is left to write by hand is the HMAC chain and the canonical headers,
 * about 150 lines; the hashes and HMACs themselves are OpenSSL's (digest.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "digest.h"
#include "sigv4.h"
#include "strbuf.h"

#define ALGORITHM "AWS4-HMAC-SHA256"

char *sigv4_format_date(time_t now, char buf[17])
{
	struct tm tm;

	if (!gmtime_r(&now, &tm) || strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm) != 16)
		memcpy(buf, "19700101T000000Z", 17);
	return buf;
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

size_t sigv4_uri_encode(char *out, size_t outlen, const char *in, size_t len, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (unreserved(c) || (keep_slash && c == '/')) {
			if (o + 1 < outlen)
				out[o] = (char)c;
			o++;
		} else {
			if (o + 3 < outlen) {
				out[o] = '%';
				out[o + 1] = hex[c >> 4];
				out[o + 2] = hex[c & 15];
			} else if (o < outlen) {
				outlen = o + 1; /* never emit a partial escape */
			}
			o += 3;
		}
	}
	if (outlen)
		out[o < outlen ? o : outlen - 1] = '\0';
	return o;
}

static void add_encoded(struct strbuf *b, const char *s, size_t len, bool keep_slash)
{
	size_t n = sigv4_uri_encode(NULL, 0, s, len, keep_slash);

	if (strbuf_reserve(b, n) < 0)
		return;
	sigv4_uri_encode(b->s + b->len, n + 1, s, len, keep_slash);
	b->len += n;
}

/* RFC 3986 remove_dot_segments plus collapsing empty segments, as the test suite's
 * "normalized" cases ask ("//example//" -> "/example/", "/example/.." -> "/"). */
static int normalized_path(const char *path, struct strbuf *out)
{
	size_t n = strlen(path), nseg = 0, *starts = NULL, *lens = NULL;
	bool trailing = n > 0 && path[n - 1] == '/';
	const char *p = path;
	int err = 0;

	starts = calloc(n + 1, sizeof(*starts));
	lens = calloc(n + 1, sizeof(*lens));
	if (!starts || !lens) {
		err = -ENOMEM;
		goto fail;
	}
	while (*p) {
		const char *e;
		size_t l;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		e = strchr(p, '/');
		l = e ? (size_t)(e - p) : strlen(p);
		if (l == 1 && p[0] == '.') {
			trailing = true;
		} else if (l == 2 && p[0] == '.' && p[1] == '.') {
			if (nseg)
				nseg--;
			trailing = true;
		} else {
			starts[nseg] = (size_t)(p - path);
			lens[nseg++] = l;
			trailing = e != NULL;
		}
		p += l;
	}
	strbuf_addc(out, '/');
	for (size_t i = 0; i < nseg; i++) {
		if (i)
			strbuf_addc(out, '/');
		add_encoded(out, path + starts[i], lens[i], false);
	}
	if (trailing && nseg)
		strbuf_addc(out, '/');
	err = strbuf_err(out);
fail:
	free(starts);
	free(lens);
	return err;
}

struct enc_kv {
	char *key;      /* encoded */
	char *value;    /* encoded, never NULL */
	size_t order;   /* input position, for stable merges */
};

static int cmp_query(const void *a, const void *b)
{
	const struct enc_kv *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : strcmp(x->value, y->value);
}

static int cmp_header(const void *a, const void *b)
{
	const struct enc_kv *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

static void free_kvs(struct enc_kv *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++) {
		free(v[i].key);
		free(v[i].value);
	}
	free(v);
}

static char *encode_dup(const char *s)
{
	struct strbuf b = STRBUF_INIT;

	add_encoded(&b, s ? s : "", s ? strlen(s) : 0, false);
	return strbuf__steal(&b);
}

static bool token_char(unsigned char c)
{
	/* RFC 7230 tchar */
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Lower-case name; value trimmed with every run of whitespace (including folded lines) made
 * one space, as the spec's Trimall asks. */
static int canonical_header(const struct sigv4_kv *h, struct enc_kv *ret)
{
	struct strbuf v = STRBUF_INIT;
	size_t nlen = h->key ? strlen(h->key) : 0;
	const char *s = h->value ? h->value : "";
	bool space = false;
	char *name;

	if (!nlen)
		return -EINVAL;
	for (size_t i = 0; i < nlen; i++)
		if (!token_char((unsigned char)h->key[i]))
			return -EINVAL;
	name = strdup(h->key);
	if (!name)
		return -ENOMEM;
	for (size_t i = 0; i < nlen; i++)
		if (name[i] >= 'A' && name[i] <= 'Z')
			name[i] = (char)(name[i] - 'A' + 'a');
	while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
		s++;
	for (; *s; s++) {
		if (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') {
			space = true;
			continue;
		}
		if (space)
			strbuf_addc(&v, ' ');
		space = false;
		strbuf_addc(&v, *s);
	}
	ret->value = strbuf__steal(&v);
	if (!ret->value) {
		free(name);
		return -ENOMEM;
	}
	ret->key = name;
	return 0;
}

static void hex_sha256(const char *s, size_t len, char out[SHA256_HEX_LEN + 1])
{
	uint8_t d[SHA256_LEN];

	sha256(s, len, d);
	hex_encode(d, sizeof(d), out);
}

int sigv4__sign(const struct sigv4_request *req, const struct sigv4_credentials *cred,
		const char *region, const char *service, time_t now, struct sigv4_result *ret)
{
	struct strbuf cr = STRBUF_INIT, sts = STRBUF_INIT, sh = STRBUF_INIT, auth = STRBUF_INIT;
	struct strbuf key = STRBUF_INIT;
	struct enc_kv *q = NULL, *h = NULL;
	size_t nq = 0, nh = 0;
	char date[17], day[9], crhash[SHA256_HEX_LEN + 1], sig[SHA256_HEX_LEN + 1];
	uint8_t k[SHA256_LEN];
	bool have_host = false;
	int err = 0;

	if (!req->method || !req->path || req->path[0] != '/' || !req->payload_hash ||
	    !cred->access_key_id || !cred->secret_access_key || !region || !service) {
		err = -EINVAL;
		goto fail;
	}
	sigv4_format_date(now, date);
	memcpy(day, date, 8);
	day[8] = '\0';

	/* 1. canonical request */
	strbuf_adds(&cr, req->method);
	strbuf_addc(&cr, '\n');
	if (req->normalize_path) {
		err = normalized_path(req->path, &cr);
		if (err < 0)
			goto fail;
	} else {
		add_encoded(&cr, req->path, strlen(req->path), true);
	}
	strbuf_addc(&cr, '\n');

	q = calloc(req->n_query + 1, sizeof(*q));
	h = calloc(req->n_headers + 1, sizeof(*h));
	if (!q || !h) {
		err = -ENOMEM;
		goto fail;
	}
	for (; nq < req->n_query; nq++) {
		q[nq].key = encode_dup(req->query[nq].key);
		q[nq].value = encode_dup(req->query[nq].value);
		if (!q[nq].key || !q[nq].value) {
			nq++;
			err = -ENOMEM;
			goto fail;
		}
	}
	qsort(q, nq, sizeof(*q), cmp_query);
	for (size_t i = 0; i < nq; i++) {
		if (i)
			strbuf_addc(&cr, '&');
		strbuf_adds(&cr, q[i].key);
		strbuf_addc(&cr, '=');
		strbuf_adds(&cr, q[i].value);
	}
	strbuf_addc(&cr, '\n');

	for (; nh < req->n_headers; nh++) {
		err = canonical_header(&req->headers[nh], &h[nh]);
		if (err < 0)
			goto fail;
		h[nh].order = nh;
		if (strcmp(h[nh].key, "host") == 0)
			have_host = true;
	}
	if (!have_host) {
		err = -EINVAL;
		goto fail;
	}
	qsort(h, nh, sizeof(*h), cmp_header);
	for (size_t i = 0; i < nh; i++) {
		bool first = i == 0 || strcmp(h[i - 1].key, h[i].key) != 0;
		bool last = i + 1 == nh || strcmp(h[i + 1].key, h[i].key) != 0;

		if (first) {
			strbuf_adds(&cr, h[i].key);
			strbuf_addc(&cr, ':');
			if (sh.len)
				strbuf_addc(&sh, ';');
			strbuf_adds(&sh, h[i].key);
		} else {
			strbuf_addc(&cr, ',');
		}
		strbuf_adds(&cr, h[i].value);
		if (last)
			strbuf_addc(&cr, '\n');
	}
	strbuf_addc(&cr, '\n');
	strbuf_adds(&cr, sh.s ? sh.s : "");
	strbuf_addc(&cr, '\n');
	strbuf_adds(&cr, req->payload_hash);
	if ((err = strbuf_err(&cr)) < 0 || (err = strbuf_err(&sh)) < 0)
		goto fail;

	/* 2. string to sign */
	hex_sha256(cr.s, cr.len, crhash);
	strbuf_addf(&sts, ALGORITHM "\n%s\n%s/%s/%s/aws4_request\n%s", date, day, region, service,
		    crhash);

	/* 3. signing key and signature */
	strbuf_addf(&key, "AWS4%s", cred->secret_access_key);
	if ((err = strbuf_err(&sts)) < 0 || (err = strbuf_err(&key)) < 0)
		goto fail;
	hmac_sha256(key.s, key.len, day, strlen(day), k);
	hmac_sha256(k, sizeof(k), region, strlen(region), k);
	hmac_sha256(k, sizeof(k), service, strlen(service), k);
	hmac_sha256(k, sizeof(k), "aws4_request", 12, k);
	{
		uint8_t s[SHA256_LEN];

		hmac_sha256(k, sizeof(k), sts.s, sts.len, s);
		hex_encode(s, sizeof(s), sig);
	}

	strbuf_addf(&auth, ALGORITHM " Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
		    "Signature=%s", cred->access_key_id, day, region, service, sh.s, sig);
	if ((err = strbuf_err(&auth)) < 0)
		goto fail;

	memcpy(ret->signature, sig, sizeof(ret->signature));
	ret->canonical_request = strbuf__steal(&cr);
	ret->string_to_sign = strbuf__steal(&sts);
	ret->signed_headers = strbuf__steal(&sh);
	ret->authorization = strbuf__steal(&auth);
fail:
	explicit_bzero(k, sizeof(k));
	strbuf__release(&key);
	strbuf__release(&cr);
	strbuf__release(&sts);
	strbuf__release(&sh);
	strbuf__release(&auth);
	free_kvs(q, nq);
	free_kvs(h, nh);
	return err;
}

void sigv4_result__clear(struct sigv4_result *r)
{
	if (!r)
		return;
	free(r->canonical_request);
	free(r->string_to_sign);
	free(r->signed_headers);
	free(r->authorization);
	memset(r, 0, sizeof(*r));
}
