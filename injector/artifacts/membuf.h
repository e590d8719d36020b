/* SPDX-License-Identifier: MIT */
/*
 * A growable byte buffer for the SVG and HTML writers, with escaping for XML/HTML text and
 * attributes. Errors are sticky: after a failed allocation every append is a no-op and
 * membuf_failed() says so; the caller frees with membuf_free().
 */
#ifndef AIPROF_MEMBUF_H
#define AIPROF_MEMBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct membuf {
	char *p;
	size_t len, cap;
	bool failed;
};

void membuf_put(struct membuf *b, const char *s, size_t n);
void membuf_puts(struct membuf *b, const char *s);
__attribute__((format(printf, 2, 3))) void membuf_printf(struct membuf *b, const char *fmt, ...);
/*
 * Text escaped for XML and HTML (element content and quoted attributes): & < > " ' become
 * entities; control characters and invalid UTF-8 (text from a target process) become '?'.
 * At most max_chars characters when max_chars is not 0, followed by ".." when cut.
 */
void membuf_escape(struct membuf *b, const char *s, size_t n, size_t max_chars);
void membuf_free(struct membuf *b);
static inline bool membuf_failed(const struct membuf *b) { return b->failed; }

/* Writes the buffer to path (O_CLOEXEC, truncating). 0 or -errno. */
int membuf_write_file(const struct membuf *b, const char *path);

#endif
