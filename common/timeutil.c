/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "timeutil.h"

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t now_monotonic_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t now_realtime_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

/* The unit at *s (longest match first), its length in *ret_len; 0 if none. */
static uint64_t duration_unit(const char *s, size_t *ret_len)
{
	static const struct { const char *name; uint64_t ns; } units[] = {
		{ "ns", 1 }, { "us", NSEC_PER_USEC }, { "ms", NSEC_PER_MSEC }, { "s", NSEC_PER_SEC },
		{ "m", 60 * NSEC_PER_SEC }, { "h", 3600 * NSEC_PER_SEC },
	};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t n = strlen(units[i].name);

		if (strncmp(s, units[i].name, n) == 0) {
			*ret_len = n;
			return units[i].ns;
		}
	}
	return 0;
}

int parse_duration_ns(const char *s, uint64_t *ret_ns)
{
	unsigned __int128 total = 0;
	bool bare = true;

	if (!s || !*s)
		return -EINVAL;
	while (*s) {
		unsigned __int128 whole = 0, frac = 0, scale = 1, part;
		uint64_t unit;
		size_t ndigits = 0, len;

		for (; *s >= '0' && *s <= '9'; s++, ndigits++) {
			whole = whole * 10 + (unsigned)(*s - '0');
			if (whole > UINT64_MAX)
				return -ERANGE;
		}
		if (*s == '.') {
			/* digits past the nanosecond of an hour (12) change nothing: read, not kept */
			for (s++; *s >= '0' && *s <= '9'; s++, ndigits++)
				if (scale < (unsigned __int128)1000000000000000000ULL) {
					frac = frac * 10 + (unsigned)(*s - '0');
					scale *= 10;
				}
		}
		if (ndigits == 0)
			return -EINVAL;
		unit = duration_unit(s, &len);
		if (!unit) {
			/* a bare number is seconds, and only when it is all there is */
			if (*s || !bare)
				return -EINVAL;
			unit = NSEC_PER_SEC;
			len = 0;
		}
		bare = false;
		s += len;
		part = whole * unit + frac * unit / scale;
		total += part;
		if (total > UINT64_MAX)
			return -ERANGE;
	}
	*ret_ns = (uint64_t)total;
	return 0;
}

const char *format_duration(char *buf, size_t len, uint64_t ns)
{
	if (ns >= NSEC_PER_SEC)
		snprintf(buf, len, "%.3gs", (double)ns / 1e9);
	else if (ns >= NSEC_PER_MSEC)
		snprintf(buf, len, "%.3gms", (double)ns / 1e6);
	else if (ns >= NSEC_PER_USEC)
		snprintf(buf, len, "%.3gus", (double)ns / 1e3);
	else
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	return buf;
}

void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = ns / NSEC_PER_SEC, .tv_nsec = ns % NSEC_PER_SEC };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}
