/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the merge of `aiprof stacks` dumps: the input is split at NUL bytes
 * into up to four dumps (files other hosts wrote), added, grouped and written out.
 * FUZZ_SOURCES: injector/merge/stacks_merge.c injector/analyze/collective.c common/jsonw.c common/readfile.c
 * FUZZ_LIBS: -ljansson -lz -lm
 * FUZZ_ARGS: -max_len=65536
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "injector/merge/stacks_merge.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stacks_merge *m = NULL;
	char msg[512];
	size_t off = 0;
	FILE *devnull;

	CHECK(stacks_merge__new(&m) == 0);
	for (int i = 0; i < 4 && off < size; i++) {
		const uint8_t *nul = memchr(data + off, 0, size - off);
		size_t len = nul ? (size_t)(nul - (data + off)) : size - off;

		msg[0] = 0;
		if (stacks_merge__add(m, "fuzz", (const char *)data + off, len, msg, sizeof(msg)) < 0)
			CHECK(msg[0]);   /* a refusal always says why */
		off += len + 1;
	}
	CHECK(stacks_merge__run(m) == 0);
	devnull = fopen("/dev/null", "w");
	CHECK(devnull);
	CHECK(stacks_merge__write_json(m, devnull) == 0);
	stacks_merge__write_text(m, devnull);
	fclose(devnull);
	stacks_merge__free(m);
	return 0;
}
