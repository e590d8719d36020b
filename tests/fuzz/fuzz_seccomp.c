/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for seccomp_status_parse(): a /proc/PID/status text, whose Name: line the
 * target chose. The answer is a mode (0..2) or -1 and a count >= 0, never a read past len.
 * FUZZ_SOURCES: injector/attach/seccomp.c common/readfile.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "attach/seccomp.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);   /* exactly size bytes: ASan sees any overrun */
	int mode, filters = -1;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	mode = seccomp_status_parse(copy, size, &filters);
	CHECK(mode >= -1 && mode <= 2 && filters >= 0);
	free(copy);
	return 0;
}
