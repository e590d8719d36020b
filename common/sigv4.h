/* SPDX-License-Identifier: MIT */
/*
 * AWS Signature Version 4 for requests signed in the Authorization header: the canonical
 * request, the string to sign, the signing key and the signature, as pure functions of the
 * request, the credentials and an injected clock (no I/O, no global state).
 *
 * The caller decides which headers are signed: every header passed in is signed, so pass
 * Host, X-Amz-Date (sigv4_format_date()), X-Amz-Content-Sha256 and, with temporary
 * credentials, X-Amz-Security-Token, plus whatever else must be covered (Content-MD5,
 * Content-Type, x-amz-meta-*), and send exactly those values. Headers left out (User-Agent,
 * Expect, Content-Length) may be added by the HTTP layer afterwards.
 *
 * Paths and query parameters are passed raw (not percent-encoded); the canonical form encodes
 * them once as S3 and the test suite expect (RFC 3986 unreserved characters are kept, '/' is
 * kept in paths). Use sigv4_uri_encode() to build the URL that is sent, so that the two agree.
 * Checked against the AWS SigV4 test suite (tests/sigv4/) and botocore (tests/unit/test_sigv4.c).
 */
#ifndef AIPROF_SIGV4_H
#define AIPROF_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct sigv4_kv {
	const char *key;
	const char *value;     /* query: NULL or "" for "?key" alone */
};

struct sigv4_request {
	const char *method;            /* "PUT" */
	const char *path;              /* raw, starts with '/' */
	const struct sigv4_kv *query;  /* raw names and values, any order */
	size_t n_query;
	const struct sigv4_kv *headers; /* any case, any order; duplicates are merged in order */
	size_t n_headers;
	const char *payload_hash;      /* lower-case hex SHA-256 of the body, or UNSIGNED-PAYLOAD */
	bool normalize_path;           /* remove dot segments and empty segments (not for S3) */
};

struct sigv4_credentials {
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token;     /* NULL unless temporary credentials; the caller sends and
	                                * passes it as an X-Amz-Security-Token header */
};

struct sigv4_result {
	char *canonical_request;       /* each malloc'd; freed by sigv4_result__clear() */
	char *string_to_sign;
	char *signed_headers;          /* "host;x-amz-content-sha256;x-amz-date" */
	char *authorization;           /* the value of the Authorization header */
	char signature[65];            /* lower-case hex */
};

/* "20150830T123600Z" for now (seconds since the epoch) into buf[17]. Returns buf. */
char *sigv4_format_date(time_t now, char buf[17]);

/*
 * Signs req for region/service at time now (which must equal the X-Amz-Date header's value).
 * Returns 0 and fills *ret (clear it with sigv4_result__clear()), or -EINVAL for a request
 * that cannot be signed (no Host header, path not starting with '/', a header name that is
 * empty or has characters a header name cannot have), -ENOMEM. *ret is untouched on failure.
 */
int sigv4__sign(const struct sigv4_request *req, const struct sigv4_credentials *cred,
		const char *region, const char *service, time_t now, struct sigv4_result *ret);
void sigv4_result__clear(struct sigv4_result *r); /* NULL-safe; wipes the buffers */

/*
 * Percent-encodes in (len bytes) as SigV4 asks: A-Z a-z 0-9 - . _ ~ are kept, '/' too when
 * keep_slash, every other byte becomes %XX (upper-case hex). Writes at most outlen bytes
 * including the NUL, like snprintf, and returns the length the full result needs.
 */
size_t sigv4_uri_encode(char *out, size_t outlen, const char *in, size_t len, bool keep_slash);

#endif
