/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "strbuf.h"

int strbuf_reserve(struct strbuf *b, size_t extra)
{
	size_t need, cap;
	char *s;

	if (b->err)
		return b->err;
	if (extra > (size_t)-1 / 2 - b->len)
		return b->err = -ENOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	s = realloc(b->s, cap);
	if (!s)
		return b->err = -ENOMEM;
	if (!b->s)
		s[0] = '\0';
	b->s = s;
	b->cap = cap;
	return 0;
}

void strbuf_add(struct strbuf *b, const char *s, size_t n)
{
	if (strbuf_reserve(b, n) < 0)
		return;
	if (n)
		memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void strbuf_adds(struct strbuf *b, const char *s)
{
	strbuf_add(b, s, strlen(s));
}

void strbuf_addc(struct strbuf *b, char c)
{
	strbuf_add(b, &c, 1);
}

void strbuf_addf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || strbuf_reserve(b, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void strbuf_add_xml(struct strbuf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': strbuf_adds(b, "&amp;"); break;
		case '<': strbuf_adds(b, "&lt;"); break;
		case '>': strbuf_adds(b, "&gt;"); break;
		case '"': strbuf_adds(b, "&quot;"); break;
		case '\'': strbuf_adds(b, "&apos;"); break;
		default: strbuf_addc(b, *s);
		}
	}
}

char *strbuf__steal(struct strbuf *b)
{
	char *s;

	if (b->err) {
		strbuf__release(b);
		return NULL;
	}
	if (!b->s && strbuf_reserve(b, 0) < 0)
		return NULL;
	s = b->s;
	b->s = NULL;
	b->len = b->cap = 0;
	return s;
}

void str_printable(char *dst, size_t len, const char *src)
{
	size_t i = 0;

	for (; src && src[i] && i + 1 < len; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
	if (len)
		dst[i] = '\0';
}

void strbuf__release(struct strbuf *b)
{
	if (b->s)
		explicit_bzero(b->s, b->cap);
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
	b->err = 0;
}
