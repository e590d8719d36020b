/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "redact.h"

static const char MARK[] = "[redacted]";

/* Does the name n (len bytes: an option's or a variable's) say it holds a secret? */
static bool secret_name(const char *n, size_t len)
{
	static const char *const words[] = { "password", "passwd", "token", "secret", "credential",
					     "key" };
	char low[128];

	if (len == 0 || len >= sizeof(low))
		return false;
	for (size_t i = 0; i < len; i++)
		low[i] = (char)tolower((unsigned char)n[i]);
	low[len] = '\0';
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

/* Replaces s[from, to) by MARK, within size; returns where the replaced part now ends. */
static size_t replace(char *s, size_t size, size_t from, size_t to)
{
	size_t tail = strlen(s + to), mark = sizeof(MARK) - 1;

	if (to - from == mark && memcmp(s + from, MARK, mark) == 0)
		return to;
	if (from + mark + tail + 1 > size) {   /* no room: cut the rest off */
		if (from + mark + 1 <= size) {
			memcpy(s + from, MARK, mark);
			s[from + mark] = '\0';
			return from + mark;
		}
		s[from] = '\0';
		return from;
	}
	memmove(s + from + mark, s + to, tail + 1);
	memcpy(s + from, MARK, mark);
	return from + mark;
}

/* The password of scheme://user:password@host inside the argument s[a, b). */
static size_t redact_userinfo(char *s, size_t size, size_t a, size_t b)
{
	char *p = memmem(s + a, b - a, "://", 3);

	if (!p) {
		return b;
	} else {
		size_t u = (size_t)(p - s) + 3, at, colon;

		for (at = u; at < b && s[at] != '@' && s[at] != '/'; at++)
			;
		if (at >= b || s[at] != '@')
			return b;
		for (colon = u; colon < at && s[colon] != ':'; colon++)
			;
		if (colon >= at)
			return b;
		/* the argument's end moved by what the password's replacement added; where there
		 * was no room and the text was cut, it is the text's end */
		b = b - at + replace(s, size, colon + 1, at);
		return b < strlen(s) ? b : strlen(s);
	}
}

void redact_cmdline(char *s, size_t size)
{
	bool next_secret = false;
	size_t i = 0;

	if (!s || !size)
		return;
	while (s[i]) {
		size_t a, b, eq, name0;

		while (s[i] == ' ')
			i++;
		if (!s[i])
			break;
		a = i;
		while (s[i] && s[i] != ' ')
			i++;
		b = i;
		if (next_secret) {          /* the value of `--password V` */
			next_secret = false;
			i = replace(s, size, a, b);
			continue;
		}
		for (eq = a; eq < b && s[eq] != '='; eq++)
			;
		for (name0 = a; name0 < b && s[name0] == '-'; name0++)
			;
		if (eq < b && secret_name(s + name0, eq - name0)) {
			i = replace(s, size, eq + 1, b);
			continue;
		}
		if (eq >= b && name0 > a && secret_name(s + name0, b - name0)) {
			next_secret = true;
			continue;
		}
		i = redact_userinfo(s, size, a, b);
	}
}
