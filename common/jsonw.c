/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "jsonw.h"

#define JSONW_BUF   (64 * 1024)
#define JSONW_DEPTH 64

struct jsonw {
	jsonw_sink_fn sink;
	void *ctx;
	int err;
	int depth;
	bool after_key;
	bool has_items[JSONW_DEPTH];
	size_t len;
	char buf[JSONW_BUF];
};

struct jsonw *jsonw__new(jsonw_sink_fn sink, void *ctx)
{
	struct jsonw *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->sink = sink;
	w->ctx = ctx;
	return w;
}

static void flush(struct jsonw *w)
{
	if (w->len && !w->err)
		w->err = w->sink(w->ctx, w->buf, w->len);
	w->len = 0;
}

static inline void put(struct jsonw *w, const char *s, size_t n)
{
	if (w->len + n > sizeof(w->buf)) {
		flush(w);
		if (n > sizeof(w->buf)) {
			if (!w->err)
				w->err = w->sink(w->ctx, s, n);
			return;
		}
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static inline void putc1(struct jsonw *w, char c)
{
	if (w->len + 1 > sizeof(w->buf))
		flush(w);
	w->buf[w->len++] = c;
}

int jsonw__finish(struct jsonw *w)
{
	int err;

	if (!w)
		return 0;
	flush(w);
	err = w->err;
	if (!err && w->depth != 0)
		err = -EINVAL; /* unbalanced: a bug in the caller */
	free(w);
	return err;
}

/* Separator before a value (or a key) in the current container. */
static void before_value(struct jsonw *w)
{
	if (w->after_key) {
		w->after_key = false;
		return;
	}
	if (w->depth > 0) {
		if (w->has_items[w->depth - 1])
			putc1(w, ',');
		w->has_items[w->depth - 1] = true;
	}
}

static void open_container(struct jsonw *w, char c)
{
	before_value(w);
	putc1(w, c);
	if (w->depth < JSONW_DEPTH)
		w->has_items[w->depth] = false;
	else if (!w->err)
		w->err = -E2BIG;
	w->depth++;
}

static void close_container(struct jsonw *w, char c)
{
	if (w->depth > 0)
		w->depth--;
	putc1(w, c);
}

void jsonw_obj_open(struct jsonw *w) { open_container(w, '{'); }
void jsonw_obj_close(struct jsonw *w) { close_container(w, '}'); }
void jsonw_arr_open(struct jsonw *w) { open_container(w, '['); }
void jsonw_arr_close(struct jsonw *w) { close_container(w, ']'); }

void jsonw_newline(struct jsonw *w)
{
	putc1(w, '\n');
}

static void put_escaped(struct jsonw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;

	putc1(w, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6];
		size_t elen = 0;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(w, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': esc[0] = '\\'; esc[1] = '"'; elen = 2; break;
		case '\\': esc[0] = '\\'; esc[1] = '\\'; elen = 2; break;
		case '\n': esc[0] = '\\'; esc[1] = 'n'; elen = 2; break;
		case '\r': esc[0] = '\\'; esc[1] = 'r'; elen = 2; break;
		case '\t': esc[0] = '\\'; esc[1] = 't'; elen = 2; break;
		default:
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			elen = 6;
		}
		put(w, esc, elen);
	}
	put(w, s + run, n - run);
	putc1(w, '"');
}

/*
 * Strings from a target process may not be valid UTF-8; invalid bytes become U+FFFD so
 * the file always parses.
 */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		size_t need;

		if (c < 0x80) { i++; continue; }
		if (c >= 0xc2 && c <= 0xdf) need = 1;
		else if (c >= 0xe0 && c <= 0xef) need = 2;
		else if (c >= 0xf0 && c <= 0xf4) need = 3;
		else return i;
		if (i + need >= n)
			return i;
		for (size_t k = 1; k <= need; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		/* no overlong forms, no surrogates, nothing past U+10FFFF */
		if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0) ||
		    (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] >= 0x90))
			return i;
		i += need + 1;
	}
	return n;
}

void jsonw_strn(struct jsonw *w, const char *s, size_t n)
{
	size_t ok;

	before_value(w);
	if (!s) {
		put(w, "null", 4);
		return;
	}
	ok = utf8_valid_prefix((const unsigned char *)s, n);
	if (ok == n) {
		put_escaped(w, s, n);
		return;
	}
	/* slow path: rebuild with replacement characters */
	{
		char *tmp = malloc(n * 3 + 1);
		size_t o = 0, i = 0;

		if (!tmp) {
			put(w, "null", 4);
			return;
		}
		while (i < n) {
			size_t good = utf8_valid_prefix((const unsigned char *)s + i, n - i);

			memcpy(tmp + o, s + i, good);
			o += good;
			i += good;
			if (i < n) {
				memcpy(tmp + o, "\xef\xbf\xbd", 3);
				o += 3;
				i++;
			}
		}
		put_escaped(w, tmp, o);
		free(tmp);
	}
}

void jsonw_str(struct jsonw *w, const char *s)
{
	jsonw_strn(w, s, s ? strlen(s) : 0);
}

void jsonw_key(struct jsonw *w, const char *key)
{
	before_value(w);
	put_escaped(w, key, strlen(key));
	putc1(w, ':');
	w->after_key = true;
}

static size_t fmt_u64(char *out, uint64_t v)
{
	char tmp[24];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

void jsonw_uint(struct jsonw *w, uint64_t v)
{
	char b[24];

	before_value(w);
	put(w, b, fmt_u64(b, v));
}

void jsonw_int(struct jsonw *w, int64_t v)
{
	char b[24];
	size_t n = 0;

	before_value(w);
	if (v < 0) {
		b[n++] = '-';
		n += fmt_u64(b + 1, (uint64_t)0 - (uint64_t)v);
	} else {
		n = fmt_u64(b, (uint64_t)v);
	}
	put(w, b, n);
}

void jsonw_fixed3(struct jsonw *w, uint64_t thousandths)
{
	char b[32];
	size_t n;
	unsigned frac = (unsigned)(thousandths % 1000);

	before_value(w);
	n = fmt_u64(b, thousandths / 1000);
	if (frac) {
		b[n++] = '.';
		b[n++] = (char)('0' + frac / 100);
		b[n++] = (char)('0' + frac / 10 % 10);
		b[n++] = (char)('0' + frac % 10);
	}
	put(w, b, n);
}

void jsonw_double(struct jsonw *w, double v)
{
	char b[40];
	int n;

	before_value(w);
	if (!isfinite(v)) {
		put(w, "null", 4);
		return;
	}
	n = snprintf(b, sizeof(b), "%.17g", v);
	if (n > 0)
		put(w, b, (size_t)n);
}

void jsonw_bool(struct jsonw *w, bool v)
{
	before_value(w);
	if (v)
		put(w, "true", 4);
	else
		put(w, "false", 5);
}

void jsonw_null(struct jsonw *w)
{
	before_value(w);
	put(w, "null", 4);
}

void jsonw_raw(struct jsonw *w, const char *json)
{
	before_value(w);
	put(w, json, strlen(json));
}

void jsonw_kv_str(struct jsonw *w, const char *k, const char *v) { jsonw_key(w, k); jsonw_str(w, v); }
void jsonw_kv_int(struct jsonw *w, const char *k, int64_t v) { jsonw_key(w, k); jsonw_int(w, v); }
void jsonw_kv_uint(struct jsonw *w, const char *k, uint64_t v) { jsonw_key(w, k); jsonw_uint(w, v); }
void jsonw_kv_double(struct jsonw *w, const char *k, double v) { jsonw_key(w, k); jsonw_double(w, v); }
void jsonw_kv_bool(struct jsonw *w, const char *k, bool v) { jsonw_key(w, k); jsonw_bool(w, v); }

int jsonw_sink_file(void *file, const char *buf, size_t len)
{
	if (fwrite(buf, 1, len, file) != len)
		return errno ? -errno : -EIO;
	return 0;
}

int jsonw_sink_gz(void *gzfile, const char *buf, size_t len)
{
	while (len) {
		unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
		int n = gzwrite((gzFile)gzfile, buf, chunk);

		if (n <= 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}
