/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for controller/cron.c: a ProfilingPolicy's schedule and the time zone
 * files behind its timeZone. The first byte picks what the rest is: a cron expression (then
 * next times from a time taken from the input, in UTC and in a POSIX zone), a POSIX TZ
 * string, or a TZif file. Next times must lie strictly after the start, on a minute of the
 * zone's wall clock, and the schedule's missed-time count must be consistent.
 * FUZZ_SOURCES: controller/cron.c common/readfile.c
 * FUZZ_ARGS: -max_len=4096
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "controller/cron.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_next(const struct cron_schedule *s, const struct tz *z, int64_t after)
{
	int64_t t = 0, t2 = 0, last = 0;
	unsigned n = 0;

	if (cron__next(s, z, after, &t) < 0)
		return;
	CHECK(t > after);
	CHECK((t + tz__offset(z, t)) % 60 == 0);     /* on a minute of the wall clock */
	if (cron__next(s, z, t, &t2) == 0)
		CHECK(t2 > t);
	CHECK(cron__missed(s, z, after, t, &last, &n) == 0);
	CHECK(n >= 1 && last == t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[600], msg[256];
	struct cron_schedule s;
	struct tz *z = NULL, *pz = NULL;
	int64_t after = 1700000000;

	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		if (size > sizeof(text))
			size = sizeof(text);
		if (size > 9) {                  /* a start time between 1970 and ~2106 */
			uint32_t v;

			memcpy(&v, data + 1, 4);
			after = v;
			data += 4;
			size -= 4;
		}
		memcpy(text, data + 1, size - 1);
		text[size - 1] = '\0';
		if (cron__parse(text, &s, msg, sizeof(msg)) < 0) {
			CHECK(memchr(msg, '\0', sizeof(msg)) && msg[0]);
			return 0;
		}
		check_next(&s, NULL, after);
		if (tz__parse_posix("CET-1CEST,M3.5.0,M10.5.0/3", &pz, msg, sizeof(msg)) == 0) {
			check_next(&s, pz, after);
			tz__free(pz);
		}
		break;
	case 1:
		if (size > sizeof(text))
			size = sizeof(text);
		memcpy(text, data + 1, size - 1);
		text[size - 1] = '\0';
		if (tz__parse_posix(text, &z, msg, sizeof(msg)) == 0) {
			for (int64_t t = -86400; t < 5000000000LL; t += 86400 * 37 + 1234) {
				int32_t off = tz__offset(z, t);

				CHECK(off > -200 * 3600 && off < 200 * 3600);
			}
			tz__free(z);
		}
		break;
	case 2:
		if (tz__parse(data + 1, size - 1, "fuzz", &z, msg, sizeof(msg)) == 0) {
			struct cron_schedule hourly;

			CHECK(cron__parse("@hourly", &hourly, msg, sizeof(msg)) == 0);
			for (int64_t t = -86400; t < 5000000000LL; t += 86400 * 97 + 4321)
				(void)tz__offset(z, t);
			check_next(&hourly, z, after);
			tz__free(z);
		}
		break;
	}
	return 0;
}
