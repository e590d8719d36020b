/* SPDX-License-Identifier: MIT */
/* Valid UTF-8 for status text; see utf8.h. */
#include <stdint.h>
#include <string.h>

#include "utf8.h"

size_t utf8_seq_len(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t cp, min;
	size_t len;

	if (n == 0 || u[0] == 0)
		return 0;
	if (u[0] < 0x80)
		return 1;
	if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		len = 2, cp = u[0] & 0x1fu, min = 0x80;
	} else if ((u[0] & 0xf0) == 0xe0) {
		len = 3, cp = u[0] & 0x0fu, min = 0x800;
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		len = 4, cp = u[0] & 0x07u, min = 0x10000;
	} else {
		return 0;         /* a continuation byte, 0xc0/0xc1 (overlong) or past U+10FFFF */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (u[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq_len(s + i, n - i);

		if (!k)
			return false;
		i += k;
	}
	return true;
}

size_t utf8_cut(const char *s, size_t n, size_t max)
{
	size_t k = n < max ? n : max, b = k;

	if (k == n)
		return k;
	/* back over the continuation bytes before the cut, to the lead byte they follow */
	while (b > 0 && k - b < 3 && ((unsigned char)s[b] & 0xc0) == 0x80)
		b--;
	return ((unsigned char)s[b] & 0xc0) == 0x80 ? k : b;
}

/* Whether s[0..n) is the start of a sequence that goes on past n (text cut inside it). */
static bool cut_inside(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t len = u[0] >= 0xc2 && u[0] <= 0xdf ? 2 : (u[0] & 0xf0) == 0xe0 ? 3 :
		     u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : 0;

	if (len <= n)
		return false;
	for (size_t i = 1; i < n; i++)
		if ((u[i] & 0xc0) != 0x80)
			return false;
	return true;
}

size_t utf8_fix(char *s, size_t size)
{
	size_t n, i = 0;

	if (!size)
		return 0;
	n = strlen(s);
	if (n > size - 1)
		n = size - 1;
	while (i < n) {
		size_t k = utf8_seq_len(s + i, n - i);

		if (k) {
			i += k;
		} else if (cut_inside(s + i, n - i)) {
			break;    /* a character the cut split: it goes */
		} else {
			s[i++] = '?';
		}
	}
	s[i] = 0;
	return i;
}
