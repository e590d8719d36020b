/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "ktime.h"

static bool digits(const char *s, int n, int *ret)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*ret = v;
	return true;
}

int ktime_parse(const char *s, int64_t *ret_ns)
{
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int year, mon, day, hour, min, sec, oh = 0, om = 0;
	int64_t frac_ns = 0, offset_s = 0;
	struct tm tm = { 0 };
	const char *p;
	time_t t;

	if (!s || strlen(s) < 20)
		return -EINVAL;
	if (!digits(s, 4, &year) || s[4] != '-' || !digits(s + 5, 2, &mon) || s[7] != '-' ||
	    !digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't') ||
	    !digits(s + 11, 2, &hour) || s[13] != ':' || !digits(s + 14, 2, &min) ||
	    s[16] != ':' || !digits(s + 17, 2, &sec))
		return -EINVAL;
	/* int64 nanoseconds end in 2262 */
	if (year < 1970 || year > 2200 || mon < 1 || mon > 12 || day < 1 || day > mdays[mon - 1] || hour > 23 ||
	    min > 59 || sec > 60)
		return -EINVAL;
	p = s + 19;
	if (*p == '.') {
		int n = 0;

		for (p++; *p >= '0' && *p <= '9'; p++, n++)
			if (n < 9)
				frac_ns = frac_ns * 10 + (*p - '0');
		if (n == 0)
			return -EINVAL;
		for (; n < 9; n++)
			frac_ns *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 ||
		    om > 59)
			return -EINVAL;
		offset_s = (int64_t)(oh * 3600 + om * 60) * (*p == '+' ? 1 : -1);
		p += 6;
	} else {
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	if ((int64_t)t - offset_s < 0)
		return -EINVAL;
	*ret_ns = ((int64_t)t - offset_s) * 1000000000LL + frac_ns;
	return 0;
}

static void split(int64_t ns, struct tm *tm, long *us)
{
	time_t t;

	if (ns < 0)
		ns = 0;
	t = (time_t)(ns / 1000000000LL);
	*us = (long)(ns % 1000000000LL / 1000);
	gmtime_r(&t, tm);
}

char *ktime_format(int64_t ns, char buf[KTIME_LEN])
{
	struct tm tm;
	long us;

	split(ns, &tm, &us);
	strftime(buf, KTIME_LEN, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

char *ktime_format_micro(int64_t ns, char buf[KTIME_MICRO_LEN])
{
	char base[KTIME_LEN];
	struct tm tm;
	long us;

	split(ns, &tm, &us);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, KTIME_MICRO_LEN, "%.19s.%06ldZ", base, us);
	return buf;
}
