/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "membuf.h"

static bool reserve(struct membuf *b, size_t n)
{
	size_t ncap;
	char *np;

	if (b->failed)
		return false;
	if (b->len + n + 1 <= b->cap)
		return true;
	ncap = b->cap ? b->cap : 4096;
	while (ncap < b->len + n + 1) {
		if (ncap > ((size_t)-1) / 2) {
			b->failed = true;
			return false;
		}
		ncap *= 2;
	}
	np = realloc(b->p, ncap);
	if (!np) {
		b->failed = true;
		return false;
	}
	b->p = np;
	b->cap = ncap;
	return true;
}

void membuf_put(struct membuf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void membuf_puts(struct membuf *b, const char *s)
{
	membuf_put(b, s, strlen(s));
}

void membuf_printf(struct membuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* length of a valid UTF-8 sequence at s (1..4), or 0 */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t need;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		need = 1;
	else if (c >= 0xe0 && c <= 0xef)
		need = 2;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 3;
	else
		return 0;
	if (need >= n)
		return 0;
	for (size_t k = 1; k <= need; k++)
		if ((s[k] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
		return 0;
	return need + 1;
}

void membuf_escape(struct membuf *b, const char *s, size_t n, size_t max_chars)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t chars = 0;

	for (size_t i = 0; i < n;) {
		size_t l;

		if (max_chars && chars >= max_chars) {
			membuf_put(b, "..", 2);
			return;
		}
		chars++;
		switch (u[i]) {
		case '&': membuf_put(b, "&amp;", 5); i++; continue;
		case '<': membuf_put(b, "&lt;", 4); i++; continue;
		case '>': membuf_put(b, "&gt;", 4); i++; continue;
		case '"': membuf_put(b, "&quot;", 6); i++; continue;
		case '\'': membuf_put(b, "&#39;", 5); i++; continue;
		default: break;
		}
		if (u[i] < 0x20 || u[i] == 0x7f) {
			membuf_put(b, "?", 1);
			i++;
			continue;
		}
		l = utf8_len(u + i, n - i);
		if (!l) {
			membuf_put(b, "?", 1);
			i++;
			continue;
		}
		membuf_put(b, s + i, l);
		i += l;
	}
}

void membuf_free(struct membuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}

int membuf_write_file(const struct membuf *b, const char *path)
{
	int fd = -1, r = 0;
	size_t off = 0;

	if (b->failed)
		return -ENOMEM;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (off < b->len) {
		ssize_t w = write(fd, b->p + off, b->len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0 && !r)
		r = -errno;
	return r;
}
