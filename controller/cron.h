/* SPDX-License-Identifier: MIT */
/*
 * Cron schedules as a CronJob reads them, and the time zones they run in.
 *
 * Schedule: five fields "minute hour day-of-month month day-of-week" (0-59, 0-23, 1-31,
 * 1-12 or jan-dec, 0-7 or sun-sat with 0 and 7 both Sunday); each a comma list of `*`, `?`
 * (day fields), `N`, `A-B`, with an optional `/STEP` (`*` /STEP, A-B/STEP, N/STEP = N to the
 * field's end); or a macro @yearly @annually @monthly @weekly @daily @midnight @hourly.
 * Day of month and day of week: when both are restricted (neither starts with `*` or `?`) a
 * day matches if EITHER does, as in Vixie cron; otherwise both must.
 *
 * Time zones: IANA names resolved through TZif files (RFC 8536, versions 1-4) under
 * /usr/share/zoneinfo, read and parsed here (no TZ environment, no localtime(): safe in
 * threads), with the footer's POSIX TZ rule for times after the last transition.
 * Leap-second records are ignored.
 *
 * Next times are computed in the zone's wall clock. A wall time the zone skips (the hour lost
 * when daylight saving starts) runs shifted forward by the gap, as Go's time.Date does (02:30
 * -> 03:30); a wall time that happens twice (the hour repeated when it ends) runs once, at its
 * first occurrence.
 *
 * Times are int64 seconds since the Unix epoch; every function takes the time as an argument
 * (the injected clock of tests/unit/test_cron.c). Pure; outside input (tests/fuzz/fuzz_cron.c).
 */
#ifndef AIPROF_CRON_H
#define AIPROF_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cron_schedule {
	uint64_t minutes;       /* bit m: minute m (0..59) */
	uint32_t hours;         /* bit h: hour h (0..23) */
	uint32_t doms;          /* bit d: day of month d (1..31) */
	uint16_t months;        /* bit m: month m (1..12) */
	uint8_t dows;           /* bit d: day of week d (0 Sunday .. 6 Saturday) */
	bool dom_star, dow_star;/* the field starts with '*' or '?' (the OR rule above) */
};

#define CRON_MAX_YEARS 10       /* cron__next() looks this far ahead */

/* Parses expr into *ret. Returns 0, or -EINVAL with msg saying which field and what is wrong
 * (*ret untouched). */
int cron__parse(const char *expr, struct cron_schedule *ret, char *msg, size_t msglen);

struct tz;

#define TZ_DEFAULT_DIR "/usr/share/zoneinfo"

/* Parses a TZif file's bytes (name is kept for messages). Returns 0 and *ret (free with
 * tz__free()), -EINVAL with msg, -ENOMEM. */
int tz__parse(const void *buf, size_t len, const char *name, struct tz **ret, char *msg,
	      size_t msglen);
/* A zone from a POSIX TZ string ("CET-1CEST,M3.5.0,M10.5.0/3"). Same returns. */
int tz__parse_posix(const char *s, struct tz **ret, char *msg, size_t msglen);
void tz__free(struct tz *z);    /* NULL-safe */

/*
 * The zone called name: NULL, "" and "UTC" are UTC; otherwise dir/name (dir NULL:
 * TZ_DEFAULT_DIR), refusing names that are not IANA-shaped ("..", a leading '/', characters
 * outside [A-Za-z0-9._+-/]). Zones are loaded once and kept for the life of the process
 * (thread-safe); *ret stays valid. Returns 0, -EINVAL (bad name or file, msg says which),
 * -ENOENT (no such zone), -ENOMEM.
 */
int tz__load(const char *dir, const char *name, const struct tz **ret, char *msg,
	     size_t msglen);

/* Seconds east of UTC at t (z NULL: UTC). */
int32_t tz__offset(const struct tz *z, int64_t t);

/* The first scheduled time strictly after `after`. Returns 0, or -ENOENT when there is none
 * within CRON_MAX_YEARS (e.g. "0 0 30 2 *"). */
int cron__next(const struct cron_schedule *s, const struct tz *z, int64_t after, int64_t *ret);

/*
 * The schedule's times in (earliest, now]: *ret_last the most recent (0 if none) and
 * *ret_count how many (counted up to CRON_MISSED_CAP; more is reported as CRON_MISSED_CAP + 1).
 * Returns 0 or -ENOENT (never fires).
 */
#define CRON_MISSED_CAP 1000
int cron__missed(const struct cron_schedule *s, const struct tz *z, int64_t earliest,
		 int64_t now, int64_t *ret_last, unsigned *ret_count);

#endif
