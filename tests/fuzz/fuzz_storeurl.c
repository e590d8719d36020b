/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the in-cluster store's URL and name checks, with the invariants the
 * client relies on: a parsed URL has a base with no trailing '/', and a name that passes
 * has no empty, '.' or '..' component.
 * FUZZ_SOURCES: common/storeurl.c common/s3url.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "storeurl.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s)
{
	char *copy, *save = NULL;

	if (!store_name_ok(s))
		return;
	CHECK(strlen(s) >= 1 && strlen(s) <= STORE_NAME_MAX && s[0] != '/');
	copy = strdup(s);
	if (!copy)
		return;
	CHECK(!strstr(s, "//") && s[strlen(s) - 1] != '/');
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save))
		CHECK(strcmp(c, ".") && strcmp(c, ".."));
	free(copy);
}

static void check_url(const char *s)
{
	struct store_dest d;
	char why[400];
	size_t n;

	if (store_dest__parse(s, &d, why, sizeof(why)) < 0) {
		CHECK(d.base == NULL && why[0]);
		return;
	}
	CHECK(store_url_is_store(d.base));
	n = strlen(d.base);
	CHECK(n && d.base[n - 1] != '/');
	CHECK(strstr(d.base, "/v1/artifacts/"));
	CHECK(!strchr(d.base, '@') && !strpbrk(d.base, " \t\r\n?#"));
	store_dest__clear(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 64);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	check_name(s);
	check_url(s);
	/* the same bytes behind the path, so the fuzzer need not find it */
	if (size < 4096) {
		static const char pre[] = "http://127.0.0.1:8080/v1/artifacts/";

		memcpy(s, pre, sizeof(pre) - 1);
		memcpy(s + sizeof(pre) - 1, data, size);
		s[size + sizeof(pre) - 1] = '\0';
		check_url(s);
	}
	free(s);
	return 0;
}
