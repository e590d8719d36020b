/* SPDX-License-Identifier: MIT */
/*
 * Does libcurl's own SigV4 signer (CURLOPT_AWS_SIGV4) serve the S3 requests aiprof sends?
 * Each case below is one request the S3 client makes (or a close variant), sent to a real
 * S3 server with curl signing it. For each, one line on stdout:
 *
 *   case=NAME status=HTTP code=S3CODE match=yes|no|n/a dates=N signed=SIGNED_HEADERS
 *
 * status/code are the server's verdict; match compares curl's signature with the one
 * common/sigv4.c (checked against the AWS SigV4 test suite and botocore) computes for the
 * bytes curl actually sent (request line, headers, body), so that a wrong signature is told
 * apart from a server that refuses for another reason; dates counts the x-amz-date headers
 * curl sent. The last line is "curl=VERSION".
 *
 * Environment: AWS_ENDPOINT_URL_S3 (http://127.0.0.1:PORT), AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_BUCKET; optional S3_VHOST_DOMAIN (radosgw's
 * "rgw dns name") for the virtual-hosted case. Driven by tests/integration/test_s3.py::test_curl_7_88_sigv4_against_radosgw.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <curl/curl.h>
#include "digest.h"
#include "s3xml.h"
#include "sigv4.h"
#include "strbuf.h"

struct env {
	const char *endpoint, *host, *ak, *sk, *region, *bucket, *vhost;
	int port;
};

struct kv {
	const char *k, *v;
};

struct probe_case {
	const char *name;
	const char *method;
	const char *raw_key;           /* object key, raw; NULL: the bucket itself */
	const char *url_query;         /* exactly as put in the URL (already encoded), or NULL */
	struct kv query[3];            /* the same, raw, for the reference signer */
	const char *body;              /* NULL: none */
	bool send_hash;                /* send x-amz-content-sha256 with the real hash */
	bool md5;                      /* send Content-MD5 */
	const char *extra_header;      /* "name: value", or NULL */
	bool vhost;                    /* virtual-hosted addressing */
};

struct capture {
	struct strbuf out;             /* the request head curl sent */
	struct strbuf body;            /* the response body */
	size_t sent_body;
};

static int on_debug(CURL *h, curl_infotype t, char *data, size_t n, void *ud)
{
	struct capture *c = ud;

	(void)h;
	if (t == CURLINFO_HEADER_OUT)
		strbuf_add(&c->out, data, n);
	return 0;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
	struct capture *c = ud;

	strbuf_add(&c->body, buf, size * n);
	return size * n;
}

struct reader {
	const char *p;
	size_t len, off;
};

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
	struct reader *r = ud;
	size_t want = size * n;

	if (want > r->len - r->off)
		want = r->len - r->off;
	memcpy(buf, r->p + r->off, want);
	r->off += want;
	return want;
}

/* The value of header name in the request head h, copied into out; false if absent. */
static bool head_value(const char *h, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);

	for (const char *p = strstr(h, "\r\n"); p; p = strstr(p, "\r\n")) {
		p += 2;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1, *e;

			while (*v == ' ')
				v++;
			e = strstr(v, "\r\n");
			snprintf(out, outlen, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
			return true;
		}
	}
	return false;
}

static int count_header(const char *h, const char *name)
{
	size_t nl = strlen(name);
	int n = 0;

	for (const char *p = strstr(h, "\r\n"); p; p = strstr(p, "\r\n")) {
		p += 2;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':')
			n++;
	}
	return n;
}

/*
 * Recomputes curl's signature with common/sigv4.c from what curl sent: the same signed
 * headers and values, the date curl used, the payload hash curl announced (or the body's).
 * Returns 1 when equal, 0 when not, -1 when it could not tell.
 */
static int reference_match(const struct env *e, const struct probe_case *pc, const char *path,
			   const char *head, char *signed_out, size_t signed_len)
{
	char auth[1024], date[32], hash[80], names[512], *sh, *sig, *n, *next;
	struct sigv4_kv hdr[16], q[3];
	char vals[16][512];
	size_t nh = 0, nq = 0;
	struct sigv4_result r = { 0 };
	struct sigv4_credentials cred = { e->ak, e->sk, NULL };
	struct sigv4_request req;
	struct tm tm = { 0 };
	time_t now;
	int ok;

	signed_out[0] = '\0';
	if (!head_value(head, "Authorization", auth, sizeof(auth)) ||
	    !head_value(head, "x-amz-date", date, sizeof(date)))
		return -1;
	sh = strstr(auth, "SignedHeaders=");
	sig = strstr(auth, "Signature=");
	if (!sh || !sig)
		return -1;
	snprintf(names, sizeof(names), "%.*s", (int)strcspn(sh + 14, ","), sh + 14);
	snprintf(signed_out, signed_len, "%s", names);
	for (n = names; *n && nh < 16; n = next) {
		next = n + strcspn(n, ";");
		if (*next)
			*next++ = '\0';
		if (!head_value(head, n, vals[nh], sizeof(vals[nh])))
			return -1;
		hdr[nh] = (struct sigv4_kv){ n, vals[nh] };
		nh++;
	}
	if (!head_value(head, "x-amz-content-sha256", hash, sizeof(hash))) {
		uint8_t d[SHA256_LEN];

		sha256(pc->body ? pc->body : "", pc->body ? strlen(pc->body) : 0, d);
		hex_encode(d, sizeof(d), hash);
	}
	for (; nq < 3 && pc->query[nq].k; nq++)
		q[nq] = (struct sigv4_kv){ pc->query[nq].k, pc->query[nq].v };
	if (!strptime(date, "%Y%m%dT%H%M%SZ", &tm))
		return -1;
	now = timegm(&tm);
	req = (struct sigv4_request){
		.method = pc->method, .path = path, .query = q, .n_query = nq, .headers = hdr,
		.n_headers = nh, .payload_hash = hash,
	};
	if (sigv4__sign(&req, &cred, e->region, "s3", now, &r) < 0)
		return -1;
	ok = strncmp(sig + 10, r.signature, 64) == 0;
	sigv4_result__clear(&r);
	return ok;
}

static void run_case(const struct env *e, const struct probe_case *pc, const char *upload_id)
{
	struct strbuf url = STRBUF_INIT, path = STRBUF_INIT, q = STRBUF_INIT, hv = STRBUF_INIT;
	struct capture cap = { STRBUF_INIT, STRBUF_INIT, 0 };
	struct reader rd = { pc->body ? pc->body : "", pc->body ? strlen(pc->body) : 0, 0 };
	struct curl_slist *hl = NULL;
	struct probe_case c = *pc;
	char sigv4[256], userpwd[512], code[64] = "", signed_hdrs[512], enc[1024];
	char resolve[300];
	struct curl_slist *res = NULL;
	long status = 0;
	CURLcode rc;
	CURL *h = curl_easy_init();
	int m = -1;

	if (!h)
		return;
	/* the upload id, raw in the query table and encoded in the URL */
	if (c.url_query) {
		sigv4_uri_encode(enc, sizeof(enc), upload_id, strlen(upload_id), false);
		for (const char *p = c.url_query; *p; p++) {
			if (strncmp(p, "@ID@", 4) == 0) {
				strbuf_adds(&q, enc);
				p += 3;
			} else {
				strbuf_addc(&q, *p);
			}
		}
		for (size_t i = 0; i < 3; i++)
			if (c.query[i].v && strcmp(c.query[i].v, "@ID@") == 0)
				c.query[i].v = upload_id;
	}
	if (c.vhost)
		strbuf_addf(&path, "/%s", c.raw_key ? c.raw_key : "");
	else if (c.raw_key)
		strbuf_addf(&path, "/%s/%s", e->bucket, c.raw_key);
	else
		strbuf_addf(&path, "/%s", e->bucket);
	sigv4_uri_encode(enc, sizeof(enc), path.s, path.len, true);
	if (c.vhost) {
		strbuf_addf(&url, "http://%s.%s:%d%s", e->bucket, e->vhost, e->port, enc);
		snprintf(resolve, sizeof(resolve), "%s.%s:%d:%s", e->bucket, e->vhost, e->port,
			 e->host);
		res = curl_slist_append(NULL, resolve);
	} else {
		strbuf_addf(&url, "%s%s", e->endpoint, enc);
	}
	if (q.len)
		strbuf_addf(&url, "?%s", q.s);

	if (c.send_hash) {
		uint8_t d[SHA256_LEN];
		char hex[SHA256_HEX_LEN + 1];

		sha256(rd.p, rd.len, d);
		strbuf_addf(&hv, "x-amz-content-sha256: %s", hex_encode(d, sizeof(d), hex));
		hl = curl_slist_append(hl, hv.s);
	}
	if (c.md5) {
		uint8_t d[MD5_LEN];
		char b64[25], line[64];

		md5(rd.p, rd.len, d);
		snprintf(line, sizeof(line), "Content-MD5: %s", base64_encode(d, sizeof(d), b64));
		hl = curl_slist_append(hl, line);
	}
	if (c.extra_header && strcmp(c.extra_header, "@DATE@") == 0) {
		char d[17], line[40];

		snprintf(line, sizeof(line), "x-amz-date: %s",
			 sigv4_format_date(time(NULL), d));
		hl = curl_slist_append(hl, line);
	} else if (c.extra_header) {
		hl = curl_slist_append(hl, c.extra_header);
	}

	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", e->region);
	snprintf(userpwd, sizeof(userpwd), "%s:%s", e->ak, e->sk);
	curl_easy_setopt(h, CURLOPT_URL, url.s);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERPWD, userpwd);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
	curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
	curl_easy_setopt(h, CURLOPT_DEBUGDATA, &cap);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &cap);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
	if (res)
		curl_easy_setopt(h, CURLOPT_RESOLVE, res);
	if (strcmp(c.method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &rd);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rd.len);
	} else if (strcmp(c.method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, rd.p);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rd.len);
	} else if (strcmp(c.method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(c.method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c.method);
	}
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (cap.body.len)
		s3xml_text(cap.body.s, cap.body.len, "Code", code, sizeof(code));
	if (rc != CURLE_OK)
		snprintf(code, sizeof(code), "curl:%d", (int)rc);
	if (cap.out.len)
		m = reference_match(e, &c, path.s, cap.out.s, signed_hdrs, sizeof(signed_hdrs));
	else
		signed_hdrs[0] = '\0';
	printf("case=%s status=%ld code=%s match=%s dates=%d signed=%s\n", c.name, status,
	       code[0] ? code : "-", m < 0 ? "n/a" : m ? "yes" : "no",
	       cap.out.len ? count_header(cap.out.s, "x-amz-date") : 0,
	       signed_hdrs[0] ? signed_hdrs : "-");
	if (getenv("PROBE_VERBOSE") && cap.out.len)
		fprintf(stderr, "---- %s\n%s\n%.*s\n", c.name, cap.out.s, (int)cap.body.len,
			cap.body.s ? cap.body.s : "");
	fflush(stdout);
	curl_slist_free_all(hl);
	curl_slist_free_all(res);
	curl_easy_cleanup(h);
	strbuf__release(&url);
	strbuf__release(&path);
	strbuf__release(&q);
	strbuf__release(&hv);
	strbuf__release(&cap.out);
	strbuf__release(&cap.body);
}

/* CreateMultipartUpload signed by common/sigv4.c (known good), for the part cases' upload
 * ids, so that they do not depend on whether curl got the ?uploads case right. */
static int create_upload(const struct env *e, const char *key, char *id, size_t idlen)
{
	struct strbuf url = STRBUF_INIT, path = STRBUF_INIT, hosth = STRBUF_INIT;
	struct capture cap = { STRBUF_INIT, STRBUF_INIT, 0 };
	struct sigv4_kv q[1] = { { "uploads", NULL } }, hdr[3];
	struct sigv4_credentials cred = { e->ak, e->sk, NULL };
	struct sigv4_result r = { 0 };
	struct sigv4_request req;
	struct curl_slist *hl = NULL;
	char date[17], line[1200], enc[512];
	time_t now = time(NULL);
	CURL *h = curl_easy_init();
	int err = -EIO;

	if (!h)
		return -ENOMEM;
	strbuf_addf(&path, "/%s/%s", e->bucket, key);
	sigv4_uri_encode(enc, sizeof(enc), path.s, path.len, true);
	strbuf_addf(&url, "%s%s?uploads", e->endpoint, enc);
	strbuf_addf(&hosth, "%s:%d", e->host, e->port);
	hdr[0] = (struct sigv4_kv){ "Host", hosth.s };
	hdr[1] = (struct sigv4_kv){ "x-amz-date", sigv4_format_date(now, date) };
	hdr[2] = (struct sigv4_kv){ "x-amz-content-sha256", SIGV4_EMPTY_SHA256 };
	req = (struct sigv4_request){
		.method = "POST", .path = path.s, .query = q, .n_query = 1, .headers = hdr,
		.n_headers = 3, .payload_hash = SIGV4_EMPTY_SHA256,
	};
	if (sigv4__sign(&req, &cred, e->region, "s3", now, &r) < 0)
		goto out;
	for (size_t i = 0; i < 3; i++) {
		snprintf(line, sizeof(line), "%s: %s", hdr[i].key, hdr[i].value);
		hl = curl_slist_append(hl, line);
	}
	snprintf(line, sizeof(line), "Authorization: %s", r.authorization);
	hl = curl_slist_append(hl, line);
	curl_easy_setopt(h, CURLOPT_URL, url.s);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &cap);
	if (curl_easy_perform(h) == CURLE_OK && cap.body.len &&
	    s3xml_text(cap.body.s, cap.body.len, "UploadId", id, idlen) == 0 && id[0])
		err = 0;
out:
	sigv4_result__clear(&r);
	curl_slist_free_all(hl);
	curl_easy_cleanup(h);
	strbuf__release(&url);
	strbuf__release(&path);
	strbuf__release(&hosth);
	strbuf__release(&cap.body);
	return err;
}

#define SPECIAL "probe/rank 0/stacks+\xc3\xa4=&.folded"
#define PART "part one, more than nothing"

static const struct probe_case cases[] = {
	{ "put_object", "PUT", "probe/plain", NULL, { { 0 } }, "hello", true, true,
	  "x-amz-meta-sha256: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
	  false },
	{ "put_object_no_hash_header", "PUT", "probe/nohash", NULL, { { 0 } }, "hello", false,
	  false, NULL, false },
	{ "put_key_special_chars", "PUT", SPECIAL, NULL, { { 0 } }, "x", true, false, NULL,
	  false },
	{ "get_object", "GET", "probe/plain", NULL, { { 0 } }, NULL, true, false, NULL, false },
	{ "get_object_no_hash_header", "GET", "probe/plain", NULL, { { 0 } }, NULL, false, false,
	  NULL, false },
	{ "get_key_special_chars", "GET", SPECIAL, NULL, { { 0 } }, NULL, true, false, NULL,
	  false },
	{ "head_object", "HEAD", "probe/plain", NULL, { { 0 } }, NULL, true, false, NULL, false },
	{ "list_objects_v2", "GET", NULL, "list-type=2&prefix=probe%2Frank%200%2F",
	  { { "list-type", "2" }, { "prefix", "probe/rank 0/" } }, NULL, true, false, NULL,
	  false },
	{ "list_objects_v2_unsorted", "GET", NULL, "prefix=probe%2F&list-type=2",
	  { { "prefix", "probe/" }, { "list-type", "2" } }, NULL, true, false, NULL, false },
	{ "mp_create_valueless_uploads", "POST", "probe/mp1", "uploads", { { "uploads", NULL } },
	  "", true, false, "Content-Type: application/octet-stream", false },
	{ "mp_create_uploads_equals", "POST", "probe/mp1", "uploads=", { { "uploads", "" } },
	  "", true, false, "Content-Type: application/octet-stream", false },
	{ "mp_upload_part_sorted", "PUT", "probe/mp2", "partNumber=1&uploadId=@ID@",
	  { { "partNumber", "1" }, { "uploadId", "@ID@" } }, PART, true, true, NULL, false },
	{ "mp_upload_part_unsorted", "PUT", "probe/mp2", "uploadId=@ID@&partNumber=2",
	  { { "uploadId", "@ID@" }, { "partNumber", "2" } }, PART, true, true, NULL, false },
	{ "mp_abort", "DELETE", "probe/mp2", "uploadId=@ID@", { { "uploadId", "@ID@" } }, NULL,
	  true, false, NULL, false },
	{ "delete_object", "DELETE", "probe/nohash", NULL, { { 0 } }, NULL, true, false, NULL,
	  false },
	{ "put_virtual_hosted", "PUT", "probe/vhost", NULL, { { 0 } }, "v", true, false, NULL,
	  true },
	{ "put_header_removed_expect", "PUT", "probe/noexpect", NULL, { { 0 } }, "e", true,
	  false, "Expect:", false },
	{ "put_caller_date", "PUT", "probe/date", NULL, { { 0 } }, "d", true, false,
	  "@DATE@", false },
	{ "put_session_token", "PUT", "probe/token", NULL, { { 0 } }, "t", true, false,
	  "x-amz-security-token: FQoGZXIvYXdzEXAMPLETOKEN", false },
};

/* CompleteMultipartUpload needs the part's ETag: done by hand below. */
static void run_complete(const struct env *e, const char *id)
{
	struct probe_case c = {
		"mp_upload_part_for_complete", "PUT", "probe/mp3", "partNumber=1&uploadId=@ID@",
		{ { "partNumber", "1" }, { "uploadId", "@ID@" } }, PART, true, true, NULL, false,
	};
	static char xml[512];

	run_case(e, &c, id);
	/* the ETag of a single-part upload of PART is its MD5 */
	{
		uint8_t d[MD5_LEN];
		char hex[33];

		md5(PART, strlen(PART), d);
		snprintf(xml, sizeof(xml), "<CompleteMultipartUpload><Part><PartNumber>1"
			 "</PartNumber><ETag>\"%s\"</ETag></Part></CompleteMultipartUpload>",
			 hex_encode(d, sizeof(d), hex));
	}
	c = (struct probe_case){
		"mp_complete", "POST", "probe/mp3", "uploadId=@ID@", { { "uploadId", "@ID@" } },
		xml, true, true, "Content-Type: application/xml", false,
	};
	run_case(e, &c, id);
}

int main(void)
{
	struct env e = {
		getenv("AWS_ENDPOINT_URL_S3"), NULL, getenv("AWS_ACCESS_KEY_ID"),
		getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_REGION"), getenv("S3_BUCKET"),
		getenv("S3_VHOST_DOMAIN"), 0,
	};
	static char host[256];
	char id[1024];

	if (!e.endpoint || !e.ak || !e.sk || !e.region || !e.bucket ||
	    sscanf(e.endpoint, "http://%255[^:]:%d", host, &e.port) != 2) {
		fprintf(stderr, "curl_sigv4_probe: set AWS_ENDPOINT_URL_S3=http://HOST:PORT, "
			"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_BUCKET\n");
		return 2;
	}
	e.host = host;
	if (!e.vhost)
		e.vhost = "localhost";
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return 1;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (cases[i].url_query && strstr(cases[i].url_query, "@ID@")) {
			if (strcmp(cases[i].name, "mp_upload_part_sorted") == 0 &&
			    create_upload(&e, cases[i].raw_key, id, sizeof(id)) < 0) {
				fprintf(stderr, "curl_sigv4_probe: CreateMultipartUpload failed\n");
				return 1;
			}
		}
		run_case(&e, &cases[i], id);
	}
	if (create_upload(&e, "probe/mp3", id, sizeof(id)) < 0) {
		fprintf(stderr, "curl_sigv4_probe: CreateMultipartUpload failed\n");
		return 1;
	}
	run_complete(&e, id);
	printf("curl=%s\n", curl_version_info(CURLVERSION_NOW)->version);
	curl_global_cleanup();
	return 0;
}
