/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include "s3xml.h"

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == ':';
}

/* Position just past the '>' of the first start tag <tag> or <tag ...> at or after from, or
 * (size_t)-1. A self-closing <tag/> counts as an element with no text: returns the position
 * of its '>' + 1 and sets *empty. */
static size_t find_start(const char *b, size_t len, const char *tag, size_t tlen, size_t from,
			 bool *empty)
{
	for (size_t i = from; i + tlen + 2 <= len; i++) {
		size_t j;

		if (b[i] != '<' || memcmp(b + i + 1, tag, tlen) != 0)
			continue;
		j = i + 1 + tlen;
		if (b[j] == '>') {
			*empty = false;
			return j + 1;
		}
		if (b[j] != ' ' && b[j] != '\t' && b[j] != '\r' && b[j] != '\n' && b[j] != '/')
			continue;
		for (; j < len && b[j] != '>'; j++)
			;
		if (j >= len)
			return (size_t)-1;
		*empty = b[j - 1] == '/';
		return j + 1;
	}
	return (size_t)-1;
}

static int put(char *out, size_t outlen, size_t *o, char c)
{
	if (*o + 1 >= outlen)
		return -ENOBUFS;
	out[(*o)++] = ((unsigned char)c < 0x20 || c == 0x7f) ? '?' : c;
	return 0;
}

/* Decodes the entity at b[i] == '&'; returns its length (0 if not an entity). */
static size_t entity(const char *b, size_t len, size_t i, char *ret)
{
	static const struct { const char *name; char c; } named[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' },
		{ "&apos;", '\'' },
	};
	unsigned long v = 0;
	size_t j;

	for (size_t k = 0; k < sizeof(named) / sizeof(named[0]); k++) {
		size_t n = strlen(named[k].name);

		if (i + n <= len && memcmp(b + i, named[k].name, n) == 0) {
			*ret = named[k].c;
			return n;
		}
	}
	if (i + 3 >= len || b[i + 1] != '#')
		return 0;
	j = i + 2;
	if (b[j] == 'x' || b[j] == 'X') {
		size_t start = ++j;

		for (; j < len && j - start < 8; j++) {
			char c = b[j];

			if (c >= '0' && c <= '9')
				v = v * 16 + (unsigned long)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v = v * 16 + (unsigned long)(c - 'a' + 10);
			else if (c >= 'A' && c <= 'F')
				v = v * 16 + (unsigned long)(c - 'A' + 10);
			else
				break;
		}
		if (j == start)
			return 0;
	} else {
		size_t start = j;

		for (; j < len && j - start < 8 && b[j] >= '0' && b[j] <= '9'; j++)
			v = v * 10 + (unsigned long)(b[j] - '0');
		if (j == start)
			return 0;
	}
	if (j >= len || b[j] != ';')
		return 0;
	*ret = v > 0 && v < 0x80 ? (char)v : '?';
	return j + 1 - i;
}

int s3xml_text(const char *body, size_t len, const char *tag, char *out, size_t outlen)
{
	size_t tlen = tag ? strlen(tag) : 0, start, o = 0;
	bool empty = false;

	if (!outlen || !tlen || tlen > 64)
		return -EINVAL;
	for (size_t i = 0; i < tlen; i++)
		if (!name_char(tag[i]))
			return -EINVAL;
	out[0] = '\0';
	if (!body)
		return -ENOENT;
	start = find_start(body, len, tag, tlen, 0, &empty);
	if (start == (size_t)-1)
		return -ENOENT;
	if (empty)
		return 0;
	for (size_t i = start; i < len; i++) {
		char c = body[i];
		int r;

		if (c == '<') {
			if (i + 2 + tlen < len && body[i + 1] == '/' &&
			    memcmp(body + i + 2, tag, tlen) == 0 && body[i + 2 + tlen] == '>') {
				out[o] = '\0';
				return 0;
			}
			out[o] = '\0';
			return -ENOENT;  /* nested elements or an unterminated one: not text */
		}
		if (c == '&') {
			char d;
			size_t n = entity(body, len, i, &d);

			if (n) {
				r = put(out, outlen, &o, d);
				i += n - 1;
			} else {
				r = put(out, outlen, &o, c);
			}
		} else {
			r = put(out, outlen, &o, c);
		}
		if (r < 0) {
			out[o] = '\0';
			return r;
		}
	}
	out[o] = '\0';
	return -ENOENT;
}

bool s3xml_is_error(const char *body, size_t len)
{
	size_t i = 0;

	if (!body)
		return false;
	for (;;) {
		while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' ||
				   body[i] == '\n'))
			i++;
		if (i + 1 < len && body[i] == '<' && body[i + 1] == '?') {
			/* the XML declaration */
			const char *e = memmem(body + i, len - i, "?>", 2);

			if (!e)
				return false;
			i = (size_t)(e - body) + 2;
			continue;
		}
		break;
	}
	return i + 7 <= len && memcmp(body + i, "<Error", 6) == 0 &&
	       (body[i + 6] == '>' || body[i + 6] == ' ' || body[i + 6] == '\n' ||
		body[i + 6] == '\r' || body[i + 6] == '\t');
}
