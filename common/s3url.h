/* SPDX-License-Identifier: MIT */
/*
 * Parsers for what a user types to say where artifacts go: "s3://bucket/prefix" and an S3
 * endpoint URL ("https://s3.example.com", "http://127.0.0.1:7480", "http://[::1]:9000").
 * Outside input: each has a fuzz target (tests/fuzz/fuzz_s3url.c).
 */
#ifndef AIPROF_S3URL_H
#define AIPROF_S3URL_H

#include <stdbool.h>
#include <stddef.h>

#define S3_KEY_MAX 1024        /* S3's limit on a key, in bytes */
#define S3_PREFIX_MAX 768      /* what we allow for a prefix, leaving room for names */

struct s3_location {
	char *bucket;           /* 3..255 of [A-Za-z0-9._-], starting and ending with a letter or
	                         * digit (AWS wants 3..63 lower-case: s3_bucket_dns_compatible();
	                         * Ceph and MinIO can be relaxed) */
	char *prefix;           /* no leading or trailing '/', no "//"; "" for the bucket's root */
};

/* True if s starts with "s3://" (the caller's cue to upload rather than write a folder). */
bool s3url_is_s3(const char *s);

/*
 * Parses "s3://bucket[/prefix[/]]". Returns 0 and fills *ret (free with
 * s3_location__clear()), or -EINVAL (not s3://, bad bucket name, a prefix with control
 * characters, empty segments, "." or ".." segments, or longer than S3_PREFIX_MAX),
 * -ENOMEM. *ret is untouched on failure.
 */
int s3_location__parse(const char *url, struct s3_location *ret);
void s3_location__clear(struct s3_location *l);

/* S3's rules for a bucket that can be a DNS label of virtual-hosted addressing:
 * 3..63 of [a-z0-9.-], starting and ending with a letter or digit, no "..", not an IPv4. */
bool s3_bucket_dns_compatible(const char *bucket);

struct s3_endpoint {
	bool https;
	char *host;             /* "s3.example.com", "127.0.0.1", "[::1]" (brackets kept) */
	unsigned port;          /* 1..65535; 443 or 80 when not given */
	bool port_given;
	char *host_header;      /* host, or host:port when the port is not the scheme's default */
};

/*
 * Parses "http[s]://host[:port][/]". Rejects user:password@ (credentials do not go into
 * URLs), a path, query or fragment, and hosts with characters outside [A-Za-z0-9.-] or an
 * IPv6 literal. Returns 0 and fills *ret (free with s3_endpoint__clear()), -EINVAL, -ENOMEM.
 */
int s3_endpoint__parse(const char *url, struct s3_endpoint *ret);
void s3_endpoint__clear(struct s3_endpoint *e);

/* True for an IPv4 or bracketed IPv6 literal, or "localhost". */
bool s3_host_is_literal(const char *host);

#endif
