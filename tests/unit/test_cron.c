/* SPDX-License-Identifier: MIT */
/*
 * controller/cron.c: schedules, time zones from /usr/share/zoneinfo and next times, all with
 * an injected clock (every function takes "now" as an argument). Expected instants are
 * written as RFC 3339 so that a reader can check them against a calendar.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "controller/cron.h"
#include "controller/ktime.h"

static int64_t T(const char *s)
{
	int64_t ns = 0;

	if (ktime_parse(s, &ns) < 0)
		fail_msg("bad time in test: %s", s);
	return ns / 1000000000;
}

static const char *F(int64_t t)
{
	static char buf[4][KTIME_LEN];
	static int i;

	return ktime_format(t * 1000000000, buf[i++ % 4]);
}

static struct cron_schedule P(const char *expr)
{
	struct cron_schedule s;
	char msg[256] = "";

	if (cron__parse(expr, &s, msg, sizeof(msg)) < 0)
		fail_msg("'%s' did not parse: %s", expr, msg);
	return s;
}

static const struct tz *Z(const char *name)
{
	const struct tz *z = NULL;
	char msg[256] = "";

	if (tz__load(NULL, name, &z, msg, sizeof(msg)) < 0)
		fail_msg("zone %s: %s", name, msg);
	return z;
}

/* next time after `after` (RFC 3339) of expr in zone, as RFC 3339 */
static const char *next_of(const char *expr, const char *zone, const char *after)
{
	struct cron_schedule s = P(expr);
	int64_t t = 0;

	if (cron__next(&s, zone ? Z(zone) : NULL, T(after), &t) < 0)
		return "none";
	return F(t);
}

static void expect_error(const char *expr, const char *words)
{
	struct cron_schedule s;
	char msg[256] = "";

	assert_int_equal(cron__parse(expr, &s, msg, sizeof(msg)), -EINVAL);
	if (!strstr(msg, words))
		fail_msg("'%s': message '%s' does not say '%s'", expr, msg, words);
}

static void test_parse_errors(void **state)
{
	(void)state;
	expect_error("", "expected 5 fields");
	expect_error("* * * *", "got 4");
	expect_error("* * * * * *", "more than 5 fields");
	expect_error("60 * * * *", "minute: 60 is out of range 0-59");
	expect_error("* 24 * * *", "hour: 24 is out of range 0-23");
	expect_error("* * 0 * *", "day-of-month: 0 is out of range 1-31");
	expect_error("* * * 13 *", "month: 13 is out of range 1-12");
	expect_error("* * * * 8", "day-of-week: 8 is out of range 0-7");
	expect_error("*/0 * * * *", "step 0 is outside 1-60");
	expect_error("*/61 * * * *", "step 61");
	expect_error("5-1 * * * *", "range 5-1 goes backwards");
	expect_error("* * * foo *", "unknown name 'foo'");
	expect_error("* * * * funday", "unknown name 'funday'");
	expect_error("1,,2 * * * *", "minute: expected a number");
	expect_error("1-2-3 * * * *", "unexpected '-'");
	expect_error("*/ * * * *", "'/' needs a step");
	expect_error("? * * * *", "only for the day fields");
	expect_error("@every 5m", "unknown macro '@every'");
	expect_error("@hourly 5", "nothing may follow @hourly");
	expect_error("TZ=UTC 0 * * * *", "set spec.timeZone");
	expect_error("CRON_TZ=Europe/Berlin 0 * * * *", "set spec.timeZone");
	expect_error("mon * * * *", "minute: expected a number at 'mon'");
	expect_error("99999999 * * * *", "number too long");
}

static void test_parse_fields(void **state)
{
	struct cron_schedule s;

	(void)state;
	s = P("*/15 */6 1,15 jan-MAR Mon-fri");
	assert_true(s.minutes == (1ULL | 1ULL << 15 | 1ULL << 30 | 1ULL << 45));
	assert_int_equal(s.hours, 1u | 1u << 6 | 1u << 12 | 1u << 18);
	assert_int_equal(s.doms, 1u << 1 | 1u << 15);
	assert_int_equal(s.months, 1u << 1 | 1u << 2 | 1u << 3);
	assert_int_equal(s.dows, 0x3e);
	assert_false(s.dom_star);
	assert_false(s.dow_star);

	s = P("5/20 10-20/5 ? * 7");          /* N/STEP runs to the field's end; 7 is Sunday */
	assert_true(s.minutes == (1ULL << 5 | 1ULL << 25 | 1ULL << 45));
	assert_int_equal(s.hours, 1u << 10 | 1u << 15 | 1u << 20);
	assert_true(s.dom_star);
	assert_int_equal(s.dows, 1);
	assert_int_equal(P("0 0 * * 0").dows, P("0 0 * * sun").dows);
	assert_int_equal(P("0 0 * * 5-7").dows, 1u | 1u << 5 | 1u << 6);
	assert_int_equal(P("0 0 * * */2").dows, 1u | 1u << 2 | 1u << 4 | 1u << 6);
	assert_true(P("*/60 * * * *").minutes == 1);   /* a step as large as the field: once */
	assert_int_equal(P("0 0 * * 1/2").dows, 1u << 1 | 1u << 3 | 1u << 5 | 1u);  /* ..7=Sun */
	assert_true(P("59/15 * * * *").minutes == 1ULL << 59);      /* a start near the end */
	assert_true(P("0-59/30 * * * *").minutes == (1ULL | 1ULL << 30));
	assert_true(P("*/1 * * * *").minutes == (1ULL << 60) - 1);
	assert_int_equal(P("0 23/2 * * *").hours, 1u << 23);
	assert_int_equal(P("0 0 31/1 * *").doms, 1u << 31);
	assert_int_equal(P("0 0 * 12/5 *").months, 1u << 12);
	assert_int_equal(P("0 0 * */12 *").months, 1u << 1);
	assert_int_equal(P("0 0 * * 7/1").dows, 1);                    /* Sunday (7) alone */
	assert_true(P("1,1,1-1 * * * *").minutes == 2);                /* repeats are harmless */
	assert_true(P(" \t0   0 * * *  ").hours == 1);
	assert_true(P("0 0 */2 * *").dom_star);        /* '*' with a step still counts as '*' */

	/* macros equal their five-field forms */
	s = P("@hourly");
	assert_true(s.minutes == 1 && s.hours == 0xffffff);
	assert_int_equal(P("@daily").hours, 1);
	assert_int_equal(P("@midnight").hours, 1);
	assert_int_equal(P("@weekly").dows, 1);
	assert_int_equal(P("@monthly").doms, 2);
	assert_int_equal(P("@yearly").months, 2);
	assert_int_equal(P("@ANNUALLY").months, 2);
}

static void test_next_utc(void **state)
{
	(void)state;
	/* strictly after: a time on the schedule is not its own next */
	assert_string_equal(next_of("0 * * * *", NULL, "2024-05-01T10:00:00Z"), "2024-05-01T11:00:00Z");
	assert_string_equal(next_of("0 * * * *", NULL, "2024-05-01T10:59:59Z"), "2024-05-01T11:00:00Z");
	assert_string_equal(next_of("* * * * *", NULL, "2024-05-01T10:00:30Z"), "2024-05-01T10:01:00Z");
	/* month ends: the 31st skips the short months */
	assert_string_equal(next_of("0 0 31 * *", NULL, "2024-01-31T00:00:00Z"), "2024-03-31T00:00:00Z");
	assert_string_equal(next_of("0 0 31 * *", NULL, "2024-04-01T00:00:00Z"), "2024-05-31T00:00:00Z");
	assert_string_equal(next_of("59 23 31 12 *", NULL, "2024-12-31T23:59:00Z"), "2025-12-31T23:59:00Z");
	assert_string_equal(next_of("0 0 1 * *", NULL, "2024-12-31T23:59:00Z"), "2025-01-01T00:00:00Z");
	/* Feb 29: the next leap year; 2100 is not one */
	assert_string_equal(next_of("0 12 29 2 *", NULL, "2023-03-01T00:00:00Z"), "2024-02-29T12:00:00Z");
	assert_string_equal(next_of("0 12 29 2 *", NULL, "2024-02-29T12:00:00Z"), "2028-02-29T12:00:00Z");
	assert_string_equal(next_of("0 12 29 2 *", NULL, "2097-01-01T00:00:00Z"), "2104-02-29T12:00:00Z");
	assert_string_equal(next_of("0 0 28-31 2 *", NULL, "2023-02-28T00:00:00Z"), "2024-02-28T00:00:00Z");
	/* never: the 30th of February */
	assert_string_equal(next_of("0 0 30 2 *", NULL, "2024-01-01T00:00:00Z"), "none");
	assert_string_equal(next_of("0 0 31 4,6,9,11 *", NULL, "2024-01-01T00:00:00Z"), "none");
	/* day of month OR day of week when both are restricted (2024-09-01 is a Sunday) */
	assert_string_equal(next_of("0 0 13 * 5", NULL, "2024-09-01T00:00:00Z"), "2024-09-06T00:00:00Z");
	assert_string_equal(next_of("0 0 13 * 5", NULL, "2024-09-06T00:00:00Z"), "2024-09-13T00:00:00Z");
	assert_string_equal(next_of("0 0 13 * 5", NULL, "2024-09-13T00:00:00Z"), "2024-09-20T00:00:00Z");
	/* ... AND when one of them is '*' (with a step): odd days that are Fridays */
	assert_string_equal(next_of("0 0 */2 * 5", NULL, "2024-09-01T00:00:00Z"), "2024-09-13T00:00:00Z");
	assert_string_equal(next_of("0 0 ? * mon", NULL, "2024-09-01T00:00:00Z"), "2024-09-02T00:00:00Z");
	assert_string_equal(next_of("0 0 1 * ?", NULL, "2024-09-01T00:00:00Z"), "2024-10-01T00:00:00Z");
	/* Friday the 13th needs AND, which cron cannot say: "13 * 5" is 13th OR Friday */
	assert_string_equal(next_of("@weekly", NULL, "2024-09-04T08:00:00Z"), "2024-09-08T00:00:00Z");
	assert_string_equal(next_of("@yearly", NULL, "2024-09-04T08:00:00Z"), "2025-01-01T00:00:00Z");
	assert_string_equal(next_of("@monthly", NULL, "2024-02-29T08:00:00Z"), "2024-03-01T00:00:00Z");
	/* steps over a day boundary and a year boundary */
	assert_string_equal(next_of("*/7 23 * * *", NULL, "2024-12-31T23:56:00Z"), "2025-01-01T23:00:00Z");
	assert_string_equal(next_of("0 0 * jan mon", NULL, "2024-02-01T00:00:00Z"), "2025-01-06T00:00:00Z");
}

/* Brute force for fixed-offset zones: scan minute by minute. */
static bool wall_matches(const struct cron_schedule *s, int64_t local)
{
	time_t tt = (time_t)local;
	struct tm tm;
	bool dom, dow;

	gmtime_r(&tt, &tm);
	if (!(s->minutes >> tm.tm_min & 1) || !(s->hours >> tm.tm_hour & 1) ||
	    !(s->months >> (tm.tm_mon + 1) & 1))
		return false;
	dom = s->doms >> tm.tm_mday & 1;
	dow = s->dows >> tm.tm_wday & 1;
	return s->dom_star || s->dow_star ? dom && dow : dom || dow;
}

static void test_next_brute_force(void **state)
{
	static const char *const exprs[] = {
		"*/7 * * * *", "15,45 3-5 * * *", "0 0 13 * 5", "0 0 */3 * 1-5", "30 */5 1-7 * sun",
		"0 12 * feb,aug *", "0 0 31 * *", "59 23 * * 6", "0 9-17/2 ? * mon-fri",
		"5/20 1 10-20/3 * *", "0 0 1 1 *", "*/13 */7 */11 */5 */3",
	};
	static const char *const zones[] = { NULL, "Asia/Kolkata", "Asia/Kathmandu" };
	int64_t start = T("2023-12-20T00:00:00Z");
	uint64_t rnd = 88172645463325252ULL;

	(void)state;
	for (size_t zi = 0; zi < 3; zi++) {
		const struct tz *z = zones[zi] ? Z(zones[zi]) : NULL;

		for (size_t i = 0; i < sizeof(exprs) / sizeof(exprs[0]); i++) {
			struct cron_schedule s = P(exprs[i]);

			for (int k = 0; k < 20; k++) {
				int64_t after, want, got = 0;

				rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
				after = start + (int64_t)(rnd % (400ULL * 86400));
				want = (after / 60 + 1) * 60;
				while (!wall_matches(&s, want + tz__offset(z, want)))
					want += 60;
				assert_int_equal(cron__next(&s, z, after, &got), 0);
				if (got != want)
					fail_msg("%s in %s after %s: got %s, want %s", exprs[i],
						 zones[zi] ? zones[zi] : "UTC", F(after), F(got), F(want));
			}
		}
	}
}

static void test_next_dst(void **state)
{
	(void)state;
	/* Berlin, 2024-03-31: 02:00 CET becomes 03:00 CEST (01:00Z). A daily 02:30 falls in
	 * the gap and runs shifted by it, at 03:30 CEST; the next day at 02:30 CEST again. */
	assert_string_equal(next_of("30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z"), "2024-03-31T01:30:00Z");
	assert_string_equal(next_of("30 2 * * *", "Europe/Berlin", "2024-03-31T01:30:00Z"), "2024-04-01T00:30:00Z");
	/* an hourly at :30 runs once at 03:30 CEST, not twice */
	assert_string_equal(next_of("30 * * * *", "Europe/Berlin", "2024-03-31T00:30:00Z"), "2024-03-31T01:30:00Z");
	assert_string_equal(next_of("30 * * * *", "Europe/Berlin", "2024-03-31T01:30:00Z"), "2024-03-31T02:30:00Z");
	/* times not in the gap are not moved */
	assert_string_equal(next_of("0 3 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z"), "2024-03-31T01:00:00Z");
	assert_string_equal(next_of("0 1 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z"), "2024-03-31T00:00:00Z");
	/* Berlin, 2024-10-27: 03:00 CEST becomes 02:00 CET (01:00Z); 02:30 happens twice and
	 * runs once, at its first occurrence (CEST) */
	assert_string_equal(next_of("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00Z"), "2024-10-27T00:30:00Z");
	assert_string_equal(next_of("30 2 * * *", "Europe/Berlin", "2024-10-27T00:30:00Z"), "2024-10-28T01:30:00Z");
	assert_string_equal(next_of("*/30 * * * *", "Europe/Berlin", "2024-10-27T00:30:00Z"), "2024-10-27T02:00:00Z");
	/* New York: 09:00 is 14:00Z in winter, 13:00Z in summer; the 2024 switches */
	assert_string_equal(next_of("0 9 * * *", "America/New_York", "2024-01-10T00:00:00Z"), "2024-01-10T14:00:00Z");
	assert_string_equal(next_of("0 9 * * *", "America/New_York", "2024-07-10T00:00:00Z"), "2024-07-10T13:00:00Z");
	assert_string_equal(next_of("30 2 * * *", "America/New_York", "2024-03-10T05:00:00Z"), "2024-03-10T07:30:00Z");
	assert_string_equal(next_of("30 1 * * *", "America/New_York", "2024-11-03T04:00:00Z"), "2024-11-03T05:30:00Z");
	assert_string_equal(next_of("30 1 * * *", "America/New_York", "2024-11-03T05:30:00Z"), "2024-11-04T06:30:00Z");
	/* southern hemisphere: Sydney is +11 in January, +10 in July */
	assert_string_equal(next_of("0 12 * * *", "Australia/Sydney", "2024-01-15T00:00:00Z"), "2024-01-15T01:00:00Z");
	assert_string_equal(next_of("0 12 * * *", "Australia/Sydney", "2024-07-15T00:00:00Z"), "2024-07-15T02:00:00Z");
	/* beyond the file's last transition the footer's POSIX rule rules */
	assert_string_equal(next_of("0 12 * * *", "Europe/Berlin", "2050-07-01T00:00:00Z"), "2050-07-01T10:00:00Z");
	assert_string_equal(next_of("0 12 * * *", "Europe/Berlin", "2050-01-10T00:00:00Z"), "2050-01-10T11:00:00Z");
	assert_string_equal(next_of("0 12 * * *", "Australia/Sydney", "2060-01-15T00:00:00Z"), "2060-01-15T01:00:00Z");
	assert_string_equal(next_of("0 12 * * *", "Australia/Sydney", "2060-07-15T00:00:00Z"), "2060-07-15T02:00:00Z");
	/* half-hour zone: midnight in Kolkata is 18:30Z the day before */
	assert_string_equal(next_of("@daily", "Asia/Kolkata", "2024-05-01T12:00:00Z"), "2024-05-01T18:30:00Z");
}

/* tz__offset agrees with the C library (which reads the same files) over 1970..2100. */
static void test_offsets_match_libc(void **state)
{
	static const char *const zones[] = { "Europe/Berlin", "America/New_York", "Australia/Sydney",
					     "Asia/Kolkata", "America/Sao_Paulo", "Pacific/Chatham",
					     "Africa/Casablanca", "Europe/Dublin", "Asia/Tehran" };
	char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
		const struct tz *z = Z(zones[i]);

		setenv("TZ", zones[i], 1);
		tzset();
		for (int64_t t = 0; t < T("2100-01-01T00:00:00Z"); t += 86400 * 7 + 3607) {
			time_t tt = (time_t)t;
			struct tm tm;

			localtime_r(&tt, &tm);
			if (tm.tm_gmtoff != tz__offset(z, t))
				fail_msg("%s at %s: %d, libc says %ld", zones[i], F(t), tz__offset(z, t),
					 tm.tm_gmtoff);
		}
	}
	if (old)
		setenv("TZ", old, 1);
	else
		unsetenv("TZ");
	tzset();
	free(old);
}

static void test_zone_errors(void **state)
{
	const struct tz *z = (const struct tz *)1;
	char msg[256] = "";

	(void)state;
	assert_int_equal(tz__load(NULL, "Mars/Olympus_Mons", &z, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "unknown time zone 'Mars/Olympus_Mons'"));
	assert_int_equal(tz__load(NULL, "../../etc/passwd", &z, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not an IANA time zone name"));
	assert_int_equal(tz__load(NULL, "/etc/localtime", &z, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(tz__load(NULL, "Europe", &z, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(tz__load(NULL, "Europe/Berlin;rm", &z, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(tz__load(NULL, "zone.tab", &z, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a TZif file"));
	assert_int_equal(tz__load(NULL, "UTC", &z, msg, sizeof(msg)), 0);
	assert_null(z);
	assert_int_equal(tz__load(NULL, "", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__load(NULL, "Etc/UTC", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2024-07-01T00:00:00Z")), 0);
	/* loaded once */
	assert_ptr_equal(Z("Europe/Berlin"), Z("Europe/Berlin"));
}

static void test_tzif_damaged(void **state)
{
	FILE *f = fopen("/usr/share/zoneinfo/Europe/Berlin", "rb");
	static unsigned char buf[8192];
	char msg[256];
	size_t n;
	struct tz *z = NULL;

	(void)state;
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	assert_int_equal(tz__parse(buf, n, "Berlin", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2024-07-01T00:00:00Z")), 7200);
	tz__free(z);
	/* every truncation is refused or parses; none crashes (ASan run) */
	for (size_t k = 0; k < n; k += 7) {
		z = NULL;
		if (tz__parse(buf, k, "cut", &z, msg, sizeof(msg)) == 0)
			tz__free(z);
	}
	assert_int_equal(tz__parse(buf, 40, "cut", &z, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a TZif file"));
	assert_int_equal(tz__parse(buf, 300, "cut", &z, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "truncated"));
	buf[0] = 'X';
	assert_int_equal(tz__parse(buf, n, "bad", &z, msg, sizeof(msg)), -EINVAL);
}

static void test_posix_rules(void **state)
{
	struct tz *z = NULL;
	char msg[256];

	(void)state;
	assert_int_equal(tz__parse_posix("CET-1CEST,M3.5.0,M10.5.0/3", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2030-03-31T00:59:59Z")), 3600);
	assert_int_equal(tz__offset(z, T("2030-03-31T01:00:00Z")), 7200);
	assert_int_equal(tz__offset(z, T("2030-10-27T00:59:59Z")), 7200);
	assert_int_equal(tz__offset(z, T("2030-10-27T01:00:00Z")), 3600);
	tz__free(z);
	/* the US default when no rule is given; hours west are negative offsets */
	assert_int_equal(tz__parse_posix("EST5EDT", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2030-01-15T12:00:00Z")), -5 * 3600);
	assert_int_equal(tz__offset(z, T("2030-07-15T12:00:00Z")), -4 * 3600);
	tz__free(z);
	assert_int_equal(tz__parse_posix("<+0330>-3:30", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, 0), 3 * 3600 + 1800);
	tz__free(z);
	/* Julian days: J60 is March 1st, leap year or not */
	assert_int_equal(tz__parse_posix("AAA0BBB,J60/0,J305/0", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2028-02-29T12:00:00Z")), 0);
	assert_int_equal(tz__offset(z, T("2028-03-01T00:00:00Z")), 3600);
	tz__free(z);
	/* southern hemisphere: DST across the new year */
	assert_int_equal(tz__parse_posix("AEST-10AEDT,M10.1.0,M4.1.0/3", &z, msg, sizeof(msg)), 0);
	assert_int_equal(tz__offset(z, T("2031-01-15T00:00:00Z")), 11 * 3600);
	assert_int_equal(tz__offset(z, T("2031-07-15T00:00:00Z")), 10 * 3600);
	tz__free(z);
	assert_int_equal(tz__parse_posix("X5", &z, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a POSIX TZ string"));
	assert_int_equal(tz__parse_posix("CET-1CEST,M13.5.0,M10.5.0", &z, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(tz__parse_posix("CET-1CEST,M3.5.0", &z, msg, sizeof(msg)), -EINVAL);
}

static void test_missed(void **state)
{
	struct cron_schedule s = P("@hourly"), never = P("0 0 31 2 *");
	int64_t last = -1;
	unsigned n = 99;

	(void)state;
	assert_int_equal(cron__missed(&s, NULL, T("2024-05-01T10:00:00Z"), T("2024-05-01T13:30:00Z"),
				      &last, &n), 0);
	assert_string_equal(F(last), "2024-05-01T13:00:00Z");
	assert_int_equal(n, 3);         /* 11:00, 12:00, 13:00 */
	assert_int_equal(cron__missed(&s, NULL, T("2024-05-01T10:00:00Z"), T("2024-05-01T11:00:00Z"),
				      &last, &n), 0);
	assert_string_equal(F(last), "2024-05-01T11:00:00Z");
	assert_int_equal(n, 1);
	assert_int_equal(cron__missed(&s, NULL, T("2024-05-01T10:00:00Z"), T("2024-05-01T10:59:59Z"),
				      &last, &n), 0);
	assert_int_equal(last, 0);
	assert_int_equal(n, 0);
	/* a year of minutes: counted to the cap, the latest still found */
	s = P("* * * * *");
	assert_int_equal(cron__missed(&s, NULL, T("2023-05-01T10:00:00Z"), T("2024-05-01T10:17:42Z"),
				      &last, &n), 0);
	assert_int_equal(n, CRON_MISSED_CAP + 1);
	assert_string_equal(F(last), "2024-05-01T10:17:00Z");
	s = P("0 0 1 1 *");
	assert_int_equal(cron__missed(&s, NULL, T("2015-05-01T10:00:00Z"), T("2024-05-01T10:17:42Z"),
				      &last, &n), 0);
	assert_int_equal(n, 9);
	assert_string_equal(F(last), "2024-01-01T00:00:00Z");
	assert_int_equal(cron__missed(&never, NULL, T("2024-05-01T10:00:00Z"), T("2024-05-01T11:00:00Z"),
				      &last, &n), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_fields),
		cmocka_unit_test(test_next_utc),
		cmocka_unit_test(test_next_brute_force),
		cmocka_unit_test(test_next_dst),
		cmocka_unit_test(test_offsets_match_libc),
		cmocka_unit_test(test_zone_errors),
		cmocka_unit_test(test_tzif_damaged),
		cmocka_unit_test(test_posix_rules),
		cmocka_unit_test(test_missed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
