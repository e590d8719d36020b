/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for procstat_exit_status(): a /proc/PID/stat line whose process name the
 * target chose. The answer is a wait(2) status or -1, never a read past the line.
 * FUZZ_SOURCES: common/procstat.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "procstat.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);   /* exactly size bytes: ASan sees any overrun */
	int v;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	v = procstat_exit_status(copy, size);
	CHECK(v >= -1 && v <= 0xffff);
	{
		uint64_t t = 12345;

		CHECK(procstat_cpu_ticks(copy, size, &t) == 0 || t == 12345);
	}
	free(copy);
	return 0;
}
