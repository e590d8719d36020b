/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
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

int parse_duration_ns(const char *s, uint64_t *ret_ns)
{
	static const struct { const char *suffix; double mult; } units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 }, { "m", 60e9 },
		{ "h", 3600e9 }, { "", 1e9 },
	};
	char *end;
	double v;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			double ns = v * units[i].mult;

			if (ns >= 1.8e19)
				return -ERANGE;
			*ret_ns = (uint64_t)ns;
			return 0;
		}
	}
	return -EINVAL;
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
