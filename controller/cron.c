/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cron.h"
#include "readfile.h"

#define TZ_FILE_MAX (1u << 20)  /* a TZif file is a few KiB; refuse anything past 1 MiB */

__attribute__((format(printf, 3, 4)))
static int fail(char *msg, size_t msglen, const char *fmt, ...)
{
	va_list ap;

	if (msg && msglen) {
		va_start(ap, fmt);
		vsnprintf(msg, msglen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* ---- civil calendar (proleptic Gregorian, days since 1970-01-01) ------------------------ */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era;
	unsigned yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned)(y - era * 400);
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	int64_t era;
	unsigned doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = (unsigned)(z - era * 146097);
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static unsigned weekday(int64_t days)   /* 0 Sunday */
{
	return (unsigned)(days >= -4 ? (days + 4) % 7 : (days + 5) % 7 + 6);
}

static bool is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned month_days(int64_t y, unsigned m)
{
	static const unsigned char n[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

	return m == 2 && is_leap(y) ? 29 : n[m - 1];
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* ---- schedules ------------------------------------------------------------------------ */

struct field_def {
	const char *name;
	unsigned lo, hi;
	const char *const *names;   /* names[i] is value lo + i, or NULL */
};

static const char *const month_names[] = { "jan", "feb", "mar", "apr", "may", "jun", "jul",
					    "aug", "sep", "oct", "nov", "dec", NULL };
static const char *const dow_names[] = { "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL };

static const struct field_def fields[5] = {
	{ "minute", 0, 59, NULL },
	{ "hour", 0, 23, NULL },
	{ "day-of-month", 1, 31, NULL },
	{ "month", 1, 12, month_names },
	{ "day-of-week", 0, 7, dow_names },
};

/* A value (number or name) at *p; advances *p. */
static int parse_value(const struct field_def *f, const char **p, unsigned *ret, char *msg,
		       size_t msglen)
{
	const char *s = *p;
	unsigned long v = 0;
	size_t n = 0;

	if (isdigit((unsigned char)*s)) {
		while (isdigit((unsigned char)s[n]) && n < 6)
			v = v * 10 + (unsigned long)(s[n++] - '0');
		if (isdigit((unsigned char)s[n]))
			return fail(msg, msglen, "%s: number too long", f->name);
	} else if (f->names && isalpha((unsigned char)*s)) {
		while (isalpha((unsigned char)s[n]))
			n++;
		for (v = 0; f->names[v]; v++)
			if (n == 3 && strncasecmp(s, f->names[v], 3) == 0)
				break;
		if (!f->names[v])
			return fail(msg, msglen, "%s: unknown name '%.*s' (use %s..%s)", f->name,
				    (int)(n > 16 ? 16 : n), s, f->names[0],
				    f->names[f == &fields[3] ? 11 : 6]);
		v += f->lo;
	} else {
		return fail(msg, msglen, "%s: expected a %s at '%.16s'", f->name,
			    f->names ? "number or name" : "number", s);
	}
	if (v < f->lo || v > f->hi)
		return fail(msg, msglen, "%s: %lu is out of range %u-%u", f->name, v, f->lo, f->hi);
	*p = s + n;
	*ret = (unsigned)v;
	return 0;
}

/* One field's text (NUL-terminated) into a bit set; *star when an item starts with * or ?. */
static int parse_field(const struct field_def *f, const char *text, uint64_t *ret, bool *star,
		       char *msg, size_t msglen)
{
	uint64_t bits = 0;
	const char *p = text;
	bool any_star = false;
	int r;

	for (;;) {
		unsigned a, b, step = 1;
		bool wild = false;

		if (*p == '*' || *p == '?') {
			if (*p == '?' && f != &fields[2] && f != &fields[4])
				return fail(msg, msglen, "%s: '?' is only for the day fields", f->name);
			wild = true;
			any_star = true;
			a = f->lo;
			b = f->hi;
			p++;
		} else {
			r = parse_value(f, &p, &a, msg, msglen);
			if (r < 0)
				return r;
			b = a;
			if (*p == '-') {
				p++;
				r = parse_value(f, &p, &b, msg, msglen);
				if (r < 0)
					return r;
				if (b < a)
					return fail(msg, msglen, "%s: range %u-%u goes backwards", f->name,
						    a, b);
			}
		}
		if (*p == '/') {
			unsigned long sv = 0;
			size_t n = 0;

			p++;
			while (isdigit((unsigned char)p[n]) && n < 6)
				sv = sv * 10 + (unsigned long)(p[n++] - '0');
			if (!n || isdigit((unsigned char)p[n]))
				return fail(msg, msglen, "%s: '/' needs a step number", f->name);
			if (sv == 0 || sv > f->hi - f->lo + 1)
				return fail(msg, msglen, "%s: step %lu is outside 1-%u", f->name, sv,
					    f->hi - f->lo + 1);
			step = (unsigned)sv;
			p += n;
			if (!wild && a == b)        /* "N/STEP": N to the field's end */
				b = f->hi;
		}
		for (unsigned v = a; v <= b; v += step)
			bits |= 1ULL << (f->hi == 7 && v == 7 ? 0 : v);
		if (*p == '\0')
			break;
		if (*p != ',')
			return fail(msg, msglen, "%s: unexpected '%c' in '%.32s'", f->name, *p, text);
		p++;
	}
	*ret = bits;
	*star = any_star;
	return 0;
}

static const struct {
	const char *name;
	const char *expr;
} macros[] = {
	{ "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
	{ "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" }, { "@midnight", "0 0 * * *" },
	{ "@hourly", "0 * * * *" },
};

int cron__parse(const char *expr, struct cron_schedule *ret, char *msg, size_t msglen)
{
	char buf[5][128];
	uint64_t bits[5];
	bool star[5];
	const char *p = expr;
	size_t nf = 0;
	int r;

	if (!expr)
		return fail(msg, msglen, "no schedule");
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '@') {
		size_t n = strcspn(p, " \t\r\n");
		const char *q = p + n;

		while (isspace((unsigned char)*q))
			q++;
		for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (strlen(macros[i].name) == n && strncasecmp(p, macros[i].name, n) == 0) {
				if (*q)
					return fail(msg, msglen, "nothing may follow %s",
						    macros[i].name);
				return cron__parse(macros[i].expr, ret, msg, msglen);
			}
		return fail(msg, msglen, "unknown macro '%.*s' (use @yearly, @annually, @monthly, "
			    "@weekly, @daily, @midnight or @hourly)", (int)(n > 24 ? 24 : n), p);
	}
	if (strncmp(p, "TZ=", 3) == 0 || strncmp(p, "CRON_TZ=", 8) == 0)
		return fail(msg, msglen, "a time zone inside the schedule is not supported: "
			    "set spec.timeZone instead");
	while (*p) {
		size_t n = strcspn(p, " \t\r\n");

		if (nf == 5)
			return fail(msg, msglen, "more than 5 fields: use 'minute hour day-of-month "
				    "month day-of-week'");
		if (n >= sizeof(buf[0]))
			return fail(msg, msglen, "%s: field too long", fields[nf].name);
		memcpy(buf[nf], p, n);
		buf[nf][n] = '\0';
		nf++;
		p += n;
		while (isspace((unsigned char)*p))
			p++;
	}
	if (nf != 5)
		return fail(msg, msglen, "expected 5 fields (minute hour day-of-month month "
			    "day-of-week), got %zu", nf);
	for (size_t i = 0; i < 5; i++) {
		r = parse_field(&fields[i], buf[i], &bits[i], &star[i], msg, msglen);
		if (r < 0)
			return r;
	}
	*ret = (struct cron_schedule){
		.minutes = bits[0], .hours = (uint32_t)bits[1], .doms = (uint32_t)bits[2],
		.months = (uint16_t)bits[3], .dows = (uint8_t)bits[4],
		.dom_star = star[2], .dow_star = star[4],
	};
	return 0;
}

static bool day_matches(const struct cron_schedule *s, int64_t y, unsigned m, unsigned d)
{
	bool dom = s->doms >> d & 1;
	bool dow = s->dows >> weekday(days_from_civil(y, m, d)) & 1;

	if (s->dom_star || s->dow_star)
		return dom && dow;
	return dom || dow;
}

/* ---- time zones ----------------------------------------------------------------------- */

enum rule_kind { RULE_JULIAN1, RULE_JULIAN0, RULE_MONTH };

struct tz_rule {
	enum rule_kind kind;
	unsigned m, w, d;       /* Mm.w.d; d also the day for J/n */
	int32_t time;           /* seconds after local midnight (may be < 0 or > 24 h) */
};

struct posix_tz {
	bool valid;
	int32_t std_off, dst_off;   /* seconds east of UTC */
	bool has_dst;
	struct tz_rule start, end;
};

struct tz {
	char *name;
	size_t n_trans;
	int64_t *trans;         /* transition times, ascending */
	uint8_t *idx;           /* type after each transition */
	size_t n_types;
	int32_t *utoff;         /* per type */
	struct posix_tz footer;
};

void tz__free(struct tz *z)
{
	if (!z)
		return;
	free(z->name);
	free(z->trans);
	free(z->idx);
	free(z->utoff);
	free(z);
}

/* [+-]hh[:mm[:ss]], hours up to max_h. */
static int posix_time(const char **p, unsigned max_h, int32_t *ret)
{
	const char *s = *p;
	int sign = 1;
	long parts[3] = { 0, 0, 0 };

	if (*s == '+' || *s == '-')
		sign = *s++ == '-' ? -1 : 1;
	for (int i = 0; i < 3; i++) {
		size_t n = 0;

		if (i > 0) {
			if (*s != ':')
				break;
			s++;
		}
		while (isdigit((unsigned char)s[n]) && n < 3)
			parts[i] = parts[i] * 10 + (s[n++] - '0');
		if (!n || (i > 0 && (n != 2 || parts[i] > 59)))
			return -EINVAL;
		s += n;
	}
	if (parts[0] > (long)max_h)
		return -EINVAL;
	*ret = (int32_t)(sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]));
	*p = s;
	return 0;
}

static int posix_name(const char **p)
{
	const char *s = *p;
	size_t n = 0;

	if (*s == '<') {
		s++;
		while (isalnum((unsigned char)s[n]) || s[n] == '+' || s[n] == '-')
			n++;
		if (s[n] != '>' || n < 3)
			return -EINVAL;
		*p = s + n + 1;
		return 0;
	}
	while (isalpha((unsigned char)s[n]))
		n++;
	if (n < 3)
		return -EINVAL;
	*p = s + n;
	return 0;
}

static int posix_rule(const char **p, struct tz_rule *r)
{
	const char *s = *p;
	unsigned long v[3] = { 0, 0, 0 };

	r->time = 7200;
	if (*s == 'M') {
		s++;
		for (int i = 0; i < 3; i++) {
			size_t n = 0;

			if (i && *s++ != '.')
				return -EINVAL;
			while (isdigit((unsigned char)s[n]) && n < 2)
				v[i] = v[i] * 10 + (unsigned long)(s[n++] - '0');
			if (!n)
				return -EINVAL;
			s += n;
		}
		if (v[0] < 1 || v[0] > 12 || v[1] < 1 || v[1] > 5 || v[2] > 6)
			return -EINVAL;
		r->kind = RULE_MONTH;
		r->m = (unsigned)v[0];
		r->w = (unsigned)v[1];
		r->d = (unsigned)v[2];
	} else {
		size_t n = 0;

		r->kind = RULE_JULIAN0;
		if (*s == 'J') {
			r->kind = RULE_JULIAN1;
			s++;
		}
		while (isdigit((unsigned char)s[n]) && n < 3)
			v[0] = v[0] * 10 + (unsigned long)(s[n++] - '0');
		if (!n || v[0] > 365 || (r->kind == RULE_JULIAN1 && v[0] < 1))
			return -EINVAL;
		s += n;
		r->d = (unsigned)v[0];
	}
	if (*s == '/') {
		s++;
		if (posix_time(&s, 167, &r->time) < 0)
			return -EINVAL;
	}
	*p = s;
	return 0;
}

static int posix_parse(const char *s, struct posix_tz *pz)
{
	int32_t off;

	memset(pz, 0, sizeof(*pz));
	if (posix_name(&s) < 0 || posix_time(&s, 24, &off) < 0)
		return -EINVAL;
	pz->std_off = -off;
	pz->dst_off = pz->std_off + 3600;
	if (*s) {
		if (posix_name(&s) < 0)
			return -EINVAL;
		pz->has_dst = true;
		if (*s && *s != ',') {
			if (posix_time(&s, 24, &off) < 0)
				return -EINVAL;
			pz->dst_off = -off;
		}
		if (*s == ',') {
			s++;
			if (posix_rule(&s, &pz->start) < 0 || *s++ != ',' ||
			    posix_rule(&s, &pz->end) < 0)
				return -EINVAL;
		} else {                /* no rule: the US rule, as glibc assumes */
			pz->start = (struct tz_rule){ RULE_MONTH, 3, 2, 0, 7200 };
			pz->end = (struct tz_rule){ RULE_MONTH, 11, 1, 0, 7200 };
		}
	}
	if (*s)
		return -EINVAL;
	pz->valid = true;
	return 0;
}

/* Days since the epoch of the rule's day in year y. */
static int64_t rule_day(const struct tz_rule *r, int64_t y)
{
	int64_t jan1 = days_from_civil(y, 1, 1);

	switch (r->kind) {
	case RULE_JULIAN1:
		return jan1 + r->d - 1 + (is_leap(y) && r->d >= 60);
	case RULE_JULIAN0:
		return jan1 + r->d;
	case RULE_MONTH: {
		int64_t first = days_from_civil(y, r->m, 1);
		unsigned wd = weekday(first);
		unsigned d = 1 + (r->d + 7 - wd) % 7 + (r->w - 1) * 7;

		while (d > month_days(y, r->m))
			d -= 7;
		return first + d - 1;
	}
	}
	return jan1;
}

static int32_t posix_offset(const struct posix_tz *pz, int64_t t)
{
	int64_t y, start, end;
	unsigned m, d;

	if (!pz->has_dst)
		return pz->std_off;
	civil_from_days(floor_div(t + pz->std_off, 86400), &y, &m, &d);
	start = rule_day(&pz->start, y) * 86400 + pz->start.time - pz->std_off;
	end = rule_day(&pz->end, y) * 86400 + pz->end.time - pz->dst_off;
	if (start < end)
		return t >= start && t < end ? pz->dst_off : pz->std_off;
	return t >= end && t < start ? pz->std_off : pz->dst_off;
}

int tz__parse_posix(const char *s, struct tz **ret, char *msg, size_t msglen)
{
	struct tz *z = calloc(1, sizeof(*z));

	if (!z)
		return -ENOMEM;
	if (posix_parse(s, &z->footer) < 0) {
		tz__free(z);
		return fail(msg, msglen, "'%.64s' is not a POSIX TZ string", s);
	}
	z->name = strdup(s);
	if (!z->name) {
		tz__free(z);
		return -ENOMEM;
	}
	*ret = z;
	return 0;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const uint8_t *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct tzif_counts {
	uint32_t isut, isstd, leap, time, type, chars;
};

static int tzif_header(const uint8_t *p, size_t len, struct tzif_counts *c)
{
	if (len < 44 || memcmp(p, "TZif", 4) != 0)
		return -EINVAL;
	c->isut = be32(p + 20);
	c->isstd = be32(p + 24);
	c->leap = be32(p + 28);
	c->time = be32(p + 32);
	c->type = be32(p + 36);
	c->chars = be32(p + 40);
	if (c->type == 0 || c->type > 256 || c->time > 100000 || c->chars > 65536 ||
	    c->leap > 100000 || (c->isut && c->isut != c->type) ||
	    (c->isstd && c->isstd != c->type))
		return -EINVAL;
	return 0;
}

static size_t tzif_data_len(const struct tzif_counts *c, size_t tsize)
{
	return (size_t)c->time * tsize + c->time + (size_t)c->type * 6 + c->chars +
	       (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

int tz__parse(const void *buf, size_t len, const char *name, struct tz **ret, char *msg,
	      size_t msglen)
{
	const uint8_t *p = buf;
	struct tzif_counts c;
	size_t tsize = 4, need;
	struct tz *z = NULL;
	int err = -EINVAL;

	if (tzif_header(p, len, &c) < 0)
		return fail(msg, msglen, "time zone %s: not a TZif file", name);
	need = 44 + tzif_data_len(&c, 4);
	if (p[4] >= '2') {                      /* skip the 32-bit block, use the 64-bit one */
		if (len < need || tzif_header(p + need, len - need, &c) < 0)
			return fail(msg, msglen, "time zone %s: truncated TZif file", name);
		p += need;
		len -= need;
		tsize = 8;
		need = 44 + tzif_data_len(&c, 8);
	}
	if (len < need)
		return fail(msg, msglen, "time zone %s: truncated TZif file", name);
	z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->name = strdup(name ? name : "");
	z->n_trans = c.time;
	z->n_types = c.type;
	z->trans = calloc(c.time ? c.time : 1, sizeof(*z->trans));
	z->idx = calloc(c.time ? c.time : 1, 1);
	z->utoff = calloc(c.type, sizeof(*z->utoff));
	if (!z->name || !z->trans || !z->idx || !z->utoff) {
		err = -ENOMEM;
		goto fail;
	}
	{
		const uint8_t *q = p + 44;

		for (size_t i = 0; i < c.time; i++, q += tsize) {
			z->trans[i] = tsize == 8 ? be64(q) : (int32_t)be32(q);
			if (i && z->trans[i] <= z->trans[i - 1]) {
				fail(msg, msglen, "time zone %s: transitions out of order", name);
				goto fail;
			}
		}
		for (size_t i = 0; i < c.time; i++, q++) {
			if (*q >= c.type) {
				fail(msg, msglen, "time zone %s: bad type index", name);
				goto fail;
			}
			z->idx[i] = *q;
		}
		for (size_t i = 0; i < c.type; i++, q += 6) {
			int32_t off = (int32_t)be32(q);

			if (off <= -25 * 3600 || off >= 26 * 3600 || (c.chars && q[5] >= c.chars)) {
				fail(msg, msglen, "time zone %s: bad local time type", name);
				goto fail;
			}
			z->utoff[i] = off;
		}
	}
	p += need;
	len -= need;
	if (tsize == 8 && len >= 2 && p[0] == '\n') {   /* footer: "\nTZ string\n" */
		const uint8_t *nl = memchr(p + 1, '\n', len - 1);
		char tzs[128];
		size_t n = nl ? (size_t)(nl - p - 1) : 0;

		if (!nl || n >= sizeof(tzs)) {
			fail(msg, msglen, "time zone %s: bad footer", name);
			goto fail;
		}
		memcpy(tzs, p + 1, n);
		tzs[n] = '\0';
		if (n && posix_parse(tzs, &z->footer) < 0) {
			fail(msg, msglen, "time zone %s: footer '%s' is not a POSIX TZ string", name,
			     tzs);
			goto fail;
		}
	}
	*ret = z;
	return 0;
fail:
	tz__free(z);
	return err;
}

int32_t tz__offset(const struct tz *z, int64_t t)
{
	size_t lo = 0, hi;

	if (!z)
		return 0;
	if (z->n_trans == 0 || t >= z->trans[z->n_trans - 1]) {
		if (z->footer.valid)
			return posix_offset(&z->footer, t);
		return z->n_types ? z->utoff[z->n_trans ? z->idx[z->n_trans - 1] : 0] : 0;
	}
	if (t < z->trans[0])
		return z->utoff[0];
	hi = z->n_trans - 1;            /* trans[lo] <= t < trans[hi] */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (z->trans[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	return z->utoff[z->idx[lo]];
}

/* The zone cache: zones are few (a few hundred names at most) and never change. */
struct tz_entry {
	struct tz_entry *next;
	struct tz *z;
};
static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tz_entry *tz_cache;

static bool tz_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 128 || name[0] == '/' || name[0] == '.' || strstr(name, "..") ||
	    strstr(name, "//") || name[n - 1] == '/')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("._+-/", name[i]))
			return false;
	return true;
}

int tz__load(const char *dir, const char *name, const struct tz **ret, char *msg,
	     size_t msglen)
{
	char path[512];
	char *buf = NULL;
	size_t len = 0;
	struct tz *z = NULL;
	struct tz_entry *e;
	int r;

	if (!name || !name[0] || strcmp(name, "UTC") == 0) {
		*ret = NULL;
		return 0;
	}
	if (!tz_name_ok(name))
		return fail(msg, msglen, "'%.64s' is not an IANA time zone name such as "
			    "Europe/Berlin or America/New_York", name);
	if (!dir)
		dir = TZ_DEFAULT_DIR;
	pthread_mutex_lock(&tz_lock);
	for (e = tz_cache; e; e = e->next)
		if (strcmp(e->z->name, name) == 0) {
			*ret = e->z;
			pthread_mutex_unlock(&tz_lock);
			return 0;
		}
	pthread_mutex_unlock(&tz_lock);

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	r = readfile(path, TZ_FILE_MAX, READFILE_REGULAR, &buf, &len);
	if (r == -ENOENT || r == -ENOTDIR || r == -EISDIR) {
		fail(msg, msglen, "unknown time zone '%s' (no such zone in %s)", name, dir);
		return r == -EISDIR ? -EINVAL : -ENOENT;
	}
	if (r < 0) {
		fail(msg, msglen, "time zone '%s': cannot read %s: %s", name, path, strerror(-r));
		return r == -ENOMEM ? r : -EINVAL;
	}
	r = tz__parse(buf, len, name, &z, msg, msglen);
	free(buf);
	if (r < 0)
		return r;
	pthread_mutex_lock(&tz_lock);
	for (e = tz_cache; e; e = e->next)      /* loaded meanwhile by another thread */
		if (strcmp(e->z->name, name) == 0)
			break;
	if (!e && (e = calloc(1, sizeof(*e)))) {
		e->z = z;
		e->next = tz_cache;
		tz_cache = e;
		z = NULL;
	}
	*ret = e ? e->z : NULL;
	pthread_mutex_unlock(&tz_lock);
	tz__free(z);
	return e ? 0 : -ENOMEM;
}

/* ---- next times ----------------------------------------------------------------------- */

struct wall {
	int64_t y;
	unsigned mo, d, h, mi;
};

static int64_t wall_seconds(const struct wall *w)
{
	return days_from_civil(w->y, w->mo, w->d) * 86400 + (int64_t)w->h * 3600 +
	       (int64_t)w->mi * 60;
}

static void wall_from_seconds(int64_t l, struct wall *w)
{
	int64_t days = floor_div(l, 86400), rem = l - days * 86400;

	civil_from_days(days, &w->y, &w->mo, &w->d);
	w->h = (unsigned)(rem / 3600);
	w->mi = (unsigned)(rem % 3600 / 60);
}

/* The first wall time >= *w that the schedule matches, in place; false past max_year. */
static bool next_wall(const struct cron_schedule *s, struct wall *w, int64_t max_year)
{
	while (w->y <= max_year) {
		if (!(s->months >> w->mo & 1)) {
			w->d = 1;
			w->h = w->mi = 0;
			if (++w->mo > 12) {
				w->mo = 1;
				w->y++;
			}
			continue;
		}
		if (w->d > month_days(w->y, w->mo) || !day_matches(s, w->y, w->mo, w->d)) {
			w->h = w->mi = 0;
			if (++w->d > month_days(w->y, w->mo)) {
				w->d = 1;
				if (++w->mo > 12) {
					w->mo = 1;
					w->y++;
				}
			}
			continue;
		}
		if (!(s->hours >> w->h & 1)) {
			w->mi = 0;
			if (++w->h == 24) {
				w->h = 0;
				w->d++;         /* may pass the month's end: handled above */
			}
			continue;
		}
		if (!(s->minutes >> w->mi & 1)) {
			if (++w->mi == 60) {
				w->mi = 0;
				if (++w->h == 24) {
					w->h = 0;
					w->d++;
				}
			}
			continue;
		}
		return true;
	}
	return false;
}

/* The instant of wall time l (local seconds): the first occurrence when it happens twice;
 * shifted forward by the gap when it does not happen. Assumes at most one offset change
 * within a day of it. */
static int64_t wall_instant(const struct tz *z, int64_t l)
{
	int32_t early = tz__offset(z, l - 86400 - 26 * 3600);
	int32_t late = tz__offset(z, l + 86400 + 26 * 3600);
	int64_t t1 = l - early, t2 = l - late;
	bool ok1 = tz__offset(z, t1) == early, ok2 = tz__offset(z, t2) == late;

	if (ok1 && ok2)
		return t1 < t2 ? t1 : t2;
	if (ok1)
		return t1;
	if (ok2)
		return t2;
	return t1;                      /* in the gap: the old offset carries it forward */
}

int cron__next(const struct cron_schedule *s, const struct tz *z, int64_t after, int64_t *ret)
{
	int64_t l = after + tz__offset(z, after), max_year;
	struct wall w;

	if (!s->minutes || !s->hours || !s->doms || !s->months || !s->dows)
		return -ENOENT;
	wall_from_seconds(floor_div(l, 60) * 60 + 60, &w);
	max_year = w.y + CRON_MAX_YEARS;
	/* each pass moves the wall time forward by at least a minute; the bound only guards
	 * against a zone file whose offsets make instants run backwards */
	for (int pass = 0; pass < 100000; pass++) {
		int64_t t;

		if (!next_wall(s, &w, max_year))
			return -ENOENT;
		t = wall_instant(z, wall_seconds(&w));
		if (t > after) {
			*ret = t;
			return 0;
		}
		wall_from_seconds(wall_seconds(&w) + 60, &w);
	}
	return -ENOENT;
}

int cron__missed(const struct cron_schedule *s, const struct tz *z, int64_t earliest,
		 int64_t now, int64_t *ret_last, unsigned *ret_count)
{
	static const int64_t windows[] = { 3600, 86400, 32 * 86400, 367 * 86400,
					   (CRON_MAX_YEARS + 1) * 366LL * 86400 };
	int64_t t, last = 0;
	unsigned count = 0;
	int r;

	*ret_last = 0;
	*ret_count = 0;
	r = cron__next(s, z, earliest, &t);
	if (r < 0)
		return r;
	while (t <= now) {
		last = t;
		if (++count > CRON_MISSED_CAP || cron__next(s, z, t, &t) < 0)
			break;
	}
	if (count > CRON_MISSED_CAP) {          /* too many to walk: find the latest near now */
		last = 0;
		for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]) && !last; i++) {
			t = now - windows[i] > earliest ? now - windows[i] : earliest;
			while (cron__next(s, z, t, &t) == 0 && t <= now)
				last = t;
		}
	}
	*ret_last = last;
	*ret_count = count;
	return 0;
}
