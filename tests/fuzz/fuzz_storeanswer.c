/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for injector/artifacts/storeanswer.c: the store's answer to an upload,
 * the server's bytes. The input is both a header line as libcurl hands it (exactly its
 * bytes, no NUL) and an answer body. The wait is at most a minute; the detail is one
 * printable line.
 * FUZZ_SOURCES: injector/artifacts/storeanswer.c common/strbuf.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "artifacts/storeanswer.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);   /* exactly size bytes: ASan sees any overrun */
	char out[256];

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	CHECK(store_retry_after_ns(copy, size) <= STORE_RETRY_AFTER_MAX_S * 1000000000ULL);
	store_answer_detail(copy, size, out, sizeof(out));
	CHECK(strlen(out) < sizeof(out) && !strchr(out, '\n'));
	for (size_t i = 0; out[i]; i++)
		CHECK(out[i] >= 0x20 && out[i] < 0x7f);
	free(copy);
	return 0;
}
