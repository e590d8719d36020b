/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the launch-stack text that comes out of a target process's ring
 * (launch_stack_parse()): whatever the bytes, no crash, no read past the string, never
 * more entries than asked for; and what it parsed, written back in the library's format,
 * parses to the same values.
 * Input: byte 0 picks how many native / Python entries to keep; the rest is the text.
 * FUZZ_SOURCES: injector/artifacts/launch_stack_text.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "injector/artifacts/launch_stacks.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)
#define MAXN 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t pc[MAXN], py[MAXN][2], pc2[MAXN], py2[MAXN][2];
	size_t max, maxpy, n, npy, n2, npy2, o = 0;
	char *text, *back;
	size_t cap;

	if (size < 1)
		return 0;
	max = (size_t)(data[0] & 0x3f) + 1;
	maxpy = (size_t)(data[0] >> 6) * 16 + 1;
	text = malloc(size);   /* data[1..] plus a NUL */
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = 0;
	launch_stack_parse(text, pc, max, &n, py, maxpy, &npy);
	CHECK(n <= max && npy <= maxpy);

	cap = (MAXN * 3) * 17 + 2;
	back = malloc(cap);
	if (!back) {
		free(text);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(back + o, cap - o, i ? ",%llx" : "%llx", (unsigned long long)pc[i]);
	if (npy)
		back[o++] = '|';
	for (size_t i = 0; i < npy; i++)
		o += (size_t)snprintf(back + o, cap - o, i ? ",%llx:%llx" : "%llx:%llx",
				      (unsigned long long)py[i][0], (unsigned long long)py[i][1]);
	back[o] = 0;
	launch_stack_parse(back, pc2, max, &n2, py2, maxpy, &npy2);
	CHECK(n2 == n && memcmp(pc, pc2, n * sizeof(*pc)) == 0);
	CHECK(npy2 == npy && memcmp(py, py2, npy * sizeof(*py)) == 0);
	free(back);
	free(text);
	return 0;
}
