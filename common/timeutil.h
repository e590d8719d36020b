/* SPDX-License-Identifier: MIT */
#ifndef AIPROF_TIMEUTIL_H
#define AIPROF_TIMEUTIL_H

#include <stdint.h>
#include <stddef.h>

#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC  1000000000ULL

/* CLOCK_MONOTONIC in ns: the one timebase of every event aiprof records. */
uint64_t now_monotonic_ns(void);
/* CLOCK_REALTIME in ns, for wall-clock labels only. */
uint64_t now_realtime_ns(void);

/*
 * Parses a duration: one or more <number><unit>, the unit one of ns, us, ms, s, m, h and the
 * number decimal with an optional fraction ("5s", "1.5ms", "1h30m", "2m0.5s"), the grammar
 * of the CRDs' duration fields and of Go's time.ParseDuration without signs; or a bare
 * number of seconds ("30"). Exact to the nanosecond (finer fractions are cut). Returns 0
 * and stores ns, or -EINVAL (malformed) / -ERANGE (past UINT64_MAX ns, about 584 years).
 */
int parse_duration_ns(const char *s, uint64_t *ret_ns);

/* Formats ns as "1.5s", "250ms", "40us" into buf. Returns buf. */
const char *format_duration(char *buf, size_t len, uint64_t ns);

/* Sleeps for ns, resuming after signals. */
void sleep_ns(uint64_t ns);

#endif
