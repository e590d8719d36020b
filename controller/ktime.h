/* SPDX-License-Identifier: MIT */
/*
 * Kubernetes timestamps: metav1.Time ("2024-05-01T12:00:00Z", RFC 3339, second precision)
 * and metav1.MicroTime ("2024-05-01T12:00:00.000000Z", used by Leases). Pure functions;
 * times are int64 nanoseconds since the Unix epoch (CLOCK_REALTIME).
 */
#ifndef AIPROF_KTIME_H
#define AIPROF_KTIME_H

#include <stdint.h>

#define KTIME_LEN 21        /* "2024-05-01T12:00:00Z" + NUL */
#define KTIME_MICRO_LEN 28  /* "2024-05-01T12:00:00.000000Z" + NUL */

/*
 * Parses RFC 3339: "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)", 't'/'z' accepted too,
 * years 1970..2200.
 * Returns 0 and *ret_ns, or -EINVAL. *ret_ns is untouched on failure.
 */
int ktime_parse(const char *s, int64_t *ret_ns);

/* Formats ns (>= 0) as metav1.Time / MicroTime (UTC). Returns buf. */
char *ktime_format(int64_t ns, char buf[KTIME_LEN]);
char *ktime_format_micro(int64_t ns, char buf[KTIME_MICRO_LEN]);

#endif
