/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for procstat_exit_status() and procstat_cpu_ticks(): a /proc/PID/stat
 * line whose process name the target chose. The answer is a wait(2) status or -1, never a
 * read past the line. And procstatus_value() and procstatus_text_number() on the same bytes as a /proc/PID/status text:
 * a value inside the text, on the line of its key. And timens_monotonic_offset() on them as
 * a /proc/PID/timens_offsets text.
 * FUZZ_SOURCES: common/procstat.c common/readfile.c
 */
#include <errno.h>
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
	{
		int64_t off = 42;

		/* an offset only from a line that holds one */
		CHECK(timens_monotonic_offset(copy, size, &off) == 0 || off == 42);
		CHECK(off == 42 || memmem(copy, size, "monotonic", 9));
	}
	{
		static const char *const keys[] = { "Tgid", "NSpid", "VmLib", "Name", "" };

		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			size_t len = 0;
			const char *val = procstatus_value(copy, size, keys[k], &len);

			long long num = 7;

			CHECK(!val || (val > copy && val + len <= copy + size &&
				       !memchr(val, '\n', len)));
			/* a number only where there is a value to read it from */
			CHECK(procstatus_text_number(copy, size, keys[k], 10, &num) == -ENODATA ?
			      num == 7 : val != NULL);
		}
	}
	free(copy);
	return 0;
}
