/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/utf8.c: text from a target, as it reaches a status. After
 * utf8_fix() it is valid UTF-8 that jansson takes, no longer than the bound and than the
 * input; a cut of valid text by utf8_cut() is valid text again.
 * FUZZ_SOURCES: common/utf8.c
 * FUZZ_LIBS: -ljansson
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "utf8.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t bound = size ? data[0] % 64 + 1 : 1, n, k;
	char *s = malloc(size + 1);
	json_t *j;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	n = strlen(s);
	/* a cut of whatever is there never passes the bound */
	k = utf8_cut(s, n, bound);
	CHECK(k <= bound && k <= n);
	k = utf8_fix(s, size + 1 > bound + 8 ? bound + 8 : size + 1);
	CHECK(k == strlen(s) && k <= n && k <= bound + 7);
	CHECK(utf8_valid(s, k));
	j = json_stringn(s, k);
	CHECK(j != NULL);
	json_decref(j);
	/* valid text cut anywhere: still valid */
	for (size_t max = 0; max <= k; max++)
		CHECK(utf8_valid(s, utf8_cut(s, k, max)));
	free(s);
	return 0;
}
