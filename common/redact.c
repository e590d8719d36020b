/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "readfile.h"
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

/* Where the JSON string starting at s[q] (a '"') ends, past its closing quote, or b. */
static size_t json_string_end(const char *s, size_t q, size_t b)
{
	for (size_t i = q + 1; i < b; i++) {
		if (s[i] == '\\')
			i++;
		else if (s[i] == '"')
			return i + 1;
	}
	return b;
}

/*
 * The values of JSON members with secret names in s[a, b) (`--config={"api_key": "V"}`):
 * a string value's text, or a bare one up to the next ',', '}' or ']'. Returns b moved by
 * what the replacements changed.
 */
static size_t redact_json(char *s, size_t size, size_t a, size_t b)
{
	for (size_t i = a; i < b && s[i];) {
		size_t k, v, end;

		if (s[i] != '"') {
			i++;
			continue;
		}
		k = json_string_end(s, i, b);
		for (v = k; v < b && (s[v] == ' ' || s[v] == '\t'); v++)
			;
		if (k < i + 2 || k > b || s[k - 1] != '"' || v >= b || s[v] != ':' ||
		    !secret_name(s + i + 1, k - i - 2)) {
			i = k > i + 1 ? k : i + 1;
			continue;
		}
		for (v++; v < b && (s[v] == ' ' || s[v] == '\t'); v++)
			;
		if (v < b && s[v] == '"') {
			end = json_string_end(s, v, b);
			v++;
			if (end > v && s[end - 1] == '"')
				end--;
		} else if (b - v >= sizeof(MARK) - 1 && !memcmp(s + v, MARK, sizeof(MARK) - 1)) {
			end = v + sizeof(MARK) - 1;      /* redacted already */
		} else {
			for (end = v; end < b && s[end] != ',' && s[end] != '}' && s[end] != ']'; end++)
				;
			while (end > v && (s[end - 1] == ' ' || s[end - 1] == '\t'))
				end--;
		}
		if (end == v) {
			i = v;
			continue;
		}
		i = replace(s, size, v, end);
		b = b + i - end;
		if (b > strlen(s))
			return strlen(s);
		if (i < b && s[i] == '"' && s[v - 1] == '"')
			i++;            /* the value's closing quote: not a key's opening one */
	}
	return b;
}

/* A short option with its value attached whose letter says password: -pV (mysql, and
 * tools in its style). "-p V" is left alone: a port as often as a password. */
static bool short_password(const char *s, size_t a, size_t b)
{
	return b - a > 2 && s[a] == '-' && s[a + 1] == 'p' && !memchr(s + a, '=', b - a);
}

/*
 * One argument s[a, b) of a command line whose text goes on after b: its secret redacted
 * (*next_secret: this argument is the value of the previous one, `--password V`; set for
 * the next). Returns where the argument ends now.
 */
static size_t redact_arg(char *s, size_t size, size_t a, size_t b, bool *next_secret)
{
	size_t eq, name0;

	if (*next_secret) {
		*next_secret = false;
		return replace(s, size, a, b);
	}
	for (eq = a; eq < b && s[eq] != '='; eq++)
		;
	for (name0 = a; name0 < b && s[name0] == '-'; name0++)
		;
	if (eq < b && secret_name(s + name0, eq - name0))
		return replace(s, size, eq + 1, b);
	if (eq >= b && name0 > a && secret_name(s + name0, b - name0)) {
		*next_secret = true;
		return b;
	}
	if (short_password(s, a, b))
		return replace(s, size, a + 2, b);
	b = redact_json(s, size, a, b);
	return redact_userinfo(s, size, a, b);
}

void redact_cmdline(char *s, size_t size)
{
	bool next_secret = false;
	size_t i = 0;

	if (!s || !size)
		return;
	while (s[i]) {
		size_t a;

		while (s[i] == ' ')
			i++;
		if (!s[i])
			break;
		a = i;
		while (s[i] && s[i] != ' ')
			i++;
		i = redact_arg(s, size, a, i, &next_secret);
	}
}

size_t redact_argv(const char *argv, size_t len, char *out, size_t size)
{
	bool next_secret = false;
	size_t n = 0;

	if (!size)
		return 0;
	out[0] = '\0';
	while (len && argv[len - 1] == '\0')
		len--;
	for (size_t i = 0; i < len && n + 1 < size;) {
		const char *arg = argv + i;
		size_t k = strnlen(arg, len - i), a, take;

		if (n) {
			out[n++] = ' ';
			out[n] = '\0';
		}
		a = n;
		take = k < size - 1 - n ? k : size - 1 - n;
		memcpy(out + n, arg, take);
		n += take;
		out[n] = '\0';
		/* the whole argument is one value, spaces and all */
		n = redact_arg(out, size, a, n, &next_secret);
		n = strlen(out);
		i += k + 1;
	}
	return n;
}

ssize_t redact_cmdline_file(const char *path, char *out, size_t size)
{
	char buf[8192];
	ssize_t n = readfile_buf(path, buf, sizeof(buf));

	if (n < 0) {
		if (size)
			out[0] = '\0';
		return n;
	}
	return (ssize_t)redact_argv(buf, (size_t)n, out, size);
}
