/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what `aiprof merge` reads from a bucket: a rank's timeline (the
 * decompressed JSON) and its summary.json, then the clock fit over whatever collectives
 * came out. Input: timeline, a NUL byte, summary (no NUL: a fixed valid summary); input
 * that starts as gzip does is gunzipped first (as timeline.json.gz is) and used whole.
 * FUZZ_SOURCES: injector/merge/merge_read.c injector/merge/merge_align.c
 * FUZZ_LIBS: -ljansson -lz
 * FUZZ_ARGS: -max_len=65536
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "injector/merge/merge.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char fixed[] = "{\"schema\":\"aiprof.summary/v2\",\"window\":{\"start_monotonic_ns\":1,"
				    "\"end_monotonic_ns\":2},\"ebpf\":{\"collectors\":[\"offcpu\"]},\"findings\":"
				    "[{\"category\":\"NcclHang\",\"evidence\":{\"blocked_in\":\"x\"}}]}";
	const uint8_t *nul = size > 2 && data[0] == 0x1f && data[1] == 0x8b ? NULL : memchr(data, 0, size);
	size_t tl_len = nul ? (size_t)(nul - data) : size;
	const char *sum = nul ? (const char *)nul + 1 : fixed;
	size_t sum_len = nul ? size - tl_len - 1 : strlen(fixed);
	char *tl = NULL, msg[512];
	struct merge_source s;
	struct merge_fit f;
	int r;

	if (size > 2 && data[0] == 0x1f && data[1] == 0x8b) {
		r = merge_gunzip(data, size, 4U << 20, &tl, &tl_len);
		if (r < 0)
			return 0;
		CHECK(tl_len <= (4U << 20) && tl[tl_len] == 0);
	} else {
		tl = malloc(tl_len + 1);
		if (!tl)
			return 0;
		memcpy(tl, data, tl_len);
		tl[tl_len] = 0;
	}
	r = merge_source__parse(&s, "fuzz", tl, tl_len, sum, sum_len, msg, sizeof(msg));
	if (r < 0) {
		CHECK(msg[0] != 0);
		CHECK(memchr(msg, 0, sizeof(msg)) != NULL);
	} else {
		CHECK(s.rank < s.nranks || s.rank == -1);
		for (size_t i = 0; i < s.nev; i++)
			CHECK(s.ev[i].off + s.ev[i].len <= s.tl_len);
		for (size_t i = 1; i < s.ncoll; i++)
			CHECK(s.coll[i - 1].start_ns <= s.coll[i].start_ns);
		CHECK(merge_fit_offset(s.coll, s.ncoll, s.coll, s.ncoll, &f) == 0);
		CHECK(!f.ok || (f.shift == 0 && f.offset_ns == 0) || s.ncoll > 0);
	}
	merge_source__clear(&s);
	return 0;
}
