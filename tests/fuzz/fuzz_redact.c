/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for redact_cmdline(): a profiled process's command line is its own to
 * write. The first input byte picks the buffer's size (the redaction may grow the text and
 * must cut it, never overrun); the rest is the command line, NULs as spaces, as
 * /proc/PID/cmdline is shown; then the same bytes as the arguments themselves, NULs and all,
 * through redact_argv().
 * FUZZ_SOURCES: common/redact.c common/readfile.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redact.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t cap, n;
	char *buf;

	if (size < 1)
		return 0;
	cap = (size_t)data[0] + 1;
	data++;
	size--;
	buf = malloc(cap);
	if (!buf)
		return 0;
	n = size < cap - 1 ? size : cap - 1;
	for (size_t i = 0; i < n; i++)
		buf[i] = data[i] ? (char)data[i] : ' ';
	buf[n] = '\0';
	redact_cmdline(buf, cap);
	CHECK(strlen(buf) < cap);
	redact_cmdline(buf, cap);       /* a redacted line stays as it is */
	CHECK(strlen(buf) < cap);
	{
		char *argv = malloc(size ? size : 1);  /* exactly size bytes: ASan sees overruns */

		if (argv) {
			memcpy(argv, data, size);
			n = redact_argv(argv, size, buf, cap);
			CHECK(n == strlen(buf) && n < cap);
			free(argv);
		}
	}
	free(buf);
	return 0;
}
