/* SPDX-License-Identifier: MIT */
/*
 * A growable NUL-terminated string. Errors are sticky: after a failed allocation every append
 * is a no-op and strbuf__steal()/strbuf_err() report -ENOMEM, so a builder can append many
 * pieces and check once at the end.
 */
#ifndef AIPROF_STRBUF_H
#define AIPROF_STRBUF_H

#include <stddef.h>

struct strbuf {
	char *s;      /* NUL-terminated when len > 0 or after strbuf_reserve(); may be NULL */
	size_t len;
	size_t cap;
	int err;      /* 0 or -ENOMEM */
};

#define STRBUF_INIT { NULL, 0, 0, 0 }

int strbuf_reserve(struct strbuf *b, size_t extra);
void strbuf_add(struct strbuf *b, const char *s, size_t n);
void strbuf_adds(struct strbuf *b, const char *s);
void strbuf_addc(struct strbuf *b, char c);
void strbuf_addf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s with &, <, >, " and ' escaped for XML text and attribute values. */
void strbuf_add_xml(struct strbuf *b, const char *s);
static inline int strbuf_err(const struct strbuf *b) { return b->err; }
/* Returns the string (caller frees; "" when empty) and resets b; NULL after an error. */
char *strbuf__steal(struct strbuf *b);
/* Frees the buffer, overwriting it first (it may have held key material). */
void strbuf__release(struct strbuf *b);

/* src (NULL: "") into dst (len bytes, truncated, NUL-terminated when len > 0) with control
 * characters and non-ASCII bytes made '?': text from outside, for a message. */
void str_printable(char *dst, size_t len, const char *src);

#endif
