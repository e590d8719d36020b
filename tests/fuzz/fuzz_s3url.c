/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the parsers of where artifacts go: s3://bucket/prefix and endpoint
 * URLs, with the invariants the uploader relies on.
 * FUZZ_SOURCES: common/s3url.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "s3url.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_location(const char *s)
{
	struct s3_location l = { 0 };
	size_t n;

	if (s3_location__parse(s, &l) < 0) {
		CHECK(l.bucket == NULL && l.prefix == NULL);
		return;
	}
	CHECK(s3url_is_s3(s));
	n = strlen(l.bucket);
	CHECK(n >= 3 && n <= 255);
	CHECK(!strchr(l.bucket, '/'));
	n = strlen(l.prefix);
	CHECK(n <= S3_PREFIX_MAX);
	if (n) {
		CHECK(l.prefix[0] != '/' && l.prefix[n - 1] != '/');
		CHECK(!strstr(l.prefix, "//"));
	}
	for (size_t i = 0; i < n; i++)
		CHECK((unsigned char)l.prefix[i] >= 0x20 && l.prefix[i] != 0x7f);
	if (s3_bucket_dns_compatible(l.bucket))
		CHECK(strlen(l.bucket) <= 63);
	s3_location__clear(&l);
	CHECK(l.bucket == NULL);
}

static void check_endpoint(const char *s)
{
	struct s3_endpoint e = { 0 };

	if (s3_endpoint__parse(s, &e) < 0) {
		CHECK(e.host == NULL && e.host_header == NULL);
		return;
	}
	CHECK(e.port >= 1 && e.port <= 65535);
	CHECK(e.host[0] != '\0');
	CHECK(!strpbrk(e.host, "/?#@ \t\r\n"));
	CHECK(strncmp(e.host_header, e.host, strlen(e.host)) == 0);
	if (e.port == (e.https ? 443u : 80u))
		CHECK(strcmp(e.host_header, e.host) == 0);
	(void)s3_host_is_literal(e.host);
	s3_endpoint__clear(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 8);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	check_location(s);
	check_endpoint(s);
	(void)s3_bucket_dns_compatible(s);
	/* the same bytes behind the schemes, so the fuzzer need not find them */
	if (size < 4096) {
		memcpy(s, "s3://", 5);
		memcpy(s + 5, data, size);
		s[size + 5] = '\0';
		check_location(s);
		memcpy(s, "http://", 7);
		memcpy(s + 7, data, size);
		s[size + 7] = '\0';
		check_endpoint(s);
	}
	free(s);
	return 0;
}
