/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "s3url.h"

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool starts_with_ci(const char *s, const char *prefix)
{
	return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

bool s3url_is_s3(const char *s)
{
	return s && starts_with_ci(s, "s3://");
}

static bool valid_bucket(const char *b, size_t n)
{
	if (n < 3 || n > 255 || !is_alnum(b[0]) || !is_alnum(b[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(b[i]) && b[i] != '.' && b[i] != '-' && b[i] != '_')
			return false;
	return true;
}

/* Segments of a prefix: non-empty, not "." or "..", no control characters. */
static bool valid_prefix(const char *p, size_t n)
{
	size_t seg = 0;

	if (n > S3_PREFIX_MAX)
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || p[i] == '/') {
			size_t len = i - seg;

			if (len == 0 || (len == 1 && p[seg] == '.') ||
			    (len == 2 && p[seg] == '.' && p[seg + 1] == '.'))
				return false;
			seg = i + 1;
			continue;
		}
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			return false;
	}
	return true;
}

int s3_location__parse(const char *url, struct s3_location *ret)
{
	const char *b, *slash, *p;
	size_t blen, plen;
	char *bucket, *prefix;

	if (!s3url_is_s3(url))
		return -EINVAL;
	b = url + 5;
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (!valid_bucket(b, blen))
		return -EINVAL;
	p = slash ? slash + 1 : b + blen;
	plen = strlen(p);
	while (plen && p[plen - 1] == '/')
		plen--;
	if (plen && !valid_prefix(p, plen))
		return -EINVAL;
	bucket = strndup(b, blen);
	prefix = strndup(p, plen);
	if (!bucket || !prefix) {
		free(bucket);
		free(prefix);
		return -ENOMEM;
	}
	ret->bucket = bucket;
	ret->prefix = prefix;
	return 0;
}

void s3_location__clear(struct s3_location *l)
{
	if (!l)
		return;
	free(l->bucket);
	free(l->prefix);
	l->bucket = l->prefix = NULL;
}

static bool is_ipv4(const char *s)
{
	int parts = 0;

	while (*s) {
		int v = 0, digits = 0;

		while (*s >= '0' && *s <= '9' && digits < 4) {
			v = v * 10 + (*s++ - '0');
			digits++;
		}
		if (!digits || v > 255)
			return false;
		parts++;
		if (*s == '.' && parts < 4)
			s++;
		else if (*s)
			return false;
	}
	return parts == 4;
}

bool s3_bucket_dns_compatible(const char *bucket)
{
	size_t n = strlen(bucket);

	if (n < 3 || n > 63 || is_ipv4(bucket) || strstr(bucket, "..") ||
	    strstr(bucket, ".-") || strstr(bucket, "-."))
		return false;
	if (!((bucket[0] >= 'a' && bucket[0] <= 'z') || (bucket[0] >= '0' && bucket[0] <= '9')))
		return false;
	if (!((bucket[n - 1] >= 'a' && bucket[n - 1] <= 'z') ||
	      (bucket[n - 1] >= '0' && bucket[n - 1] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = bucket[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
			return false;
	}
	return true;
}

bool s3_host_is_literal(const char *host)
{
	return host[0] == '[' || is_ipv4(host) || strcasecmp(host, "localhost") == 0;
}

static bool valid_hostname(const char *h, size_t n)
{
	if (n == 0 || n > 253 || h[0] == '.' || h[0] == '-' || h[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!is_alnum(h[i]) && h[i] != '.' && h[i] != '-')
			return false;
		if (h[i] == '.' && i + 1 < n && h[i + 1] == '.')
			return false;
	}
	return true;
}

static bool valid_ipv6_literal(const char *h, size_t n)
{
	/* "[...]" with hex digits, ':' and '.' (an embedded IPv4) inside; at least one ':' */
	bool colon = false;

	if (n < 4 || n > 47 || h[0] != '[' || h[n - 1] != ']')
		return false;
	for (size_t i = 1; i + 1 < n; i++) {
		char c = h[i];

		if (c == ':')
			colon = true;
		else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
			   (c >= 'A' && c <= 'F') || c == '.'))
			return false;
	}
	return colon;
}

int s3_endpoint__parse(const char *url, struct s3_endpoint *ret)
{
	const char *h, *end, *colon;
	char *host = NULL, *hh = NULL;
	unsigned long port;
	bool https, port_given = false;
	size_t hlen;

	if (!url)
		return -EINVAL;
	if (starts_with_ci(url, "https://")) {
		https = true;
		h = url + 8;
	} else if (starts_with_ci(url, "http://")) {
		https = false;
		h = url + 7;
	} else {
		return -EINVAL;
	}
	end = h + strcspn(h, "/?#");
	if (*end == '/' && end[1] != '\0')
		return -EINVAL;        /* a path: S3 endpoints have none */
	if (*end == '?' || *end == '#')
		return -EINVAL;
	if (memchr(h, '@', (size_t)(end - h)))
		return -EINVAL;        /* userinfo: never put credentials in a URL */
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));

		if (!rb)
			return -EINVAL;
		hlen = (size_t)(rb + 1 - h);
		if (!valid_ipv6_literal(h, hlen))
			return -EINVAL;
		colon = rb + 1 < end ? rb + 1 : NULL;
		if (colon && *colon != ':')
			return -EINVAL;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		hlen = colon ? (size_t)(colon - h) : (size_t)(end - h);
		if (!valid_hostname(h, hlen))
			return -EINVAL;
	}
	port = https ? 443 : 80;
	if (colon) {
		const char *p = colon + 1;

		if (p == end || end - p > 5)
			return -EINVAL;
		port = 0;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -EINVAL;
			port = port * 10 + (unsigned long)(*p - '0');
		}
		if (port < 1 || port > 65535)
			return -EINVAL;
		port_given = true;
	}
	host = strndup(h, hlen);
	if (!host)
		return -ENOMEM;
	if (port != (https ? 443u : 80u)) {
		size_t n = hlen + 7;

		hh = malloc(n);
		if (hh)
			snprintf(hh, n, "%s:%lu", host, port);
	} else {
		hh = strdup(host);
	}
	if (!hh) {
		free(host);
		return -ENOMEM;
	}
	for (char *c = host; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	for (char *c = hh; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	ret->https = https;
	ret->host = host;
	ret->port = (unsigned)port;
	ret->port_given = port_given;
	ret->host_header = hh;
	return 0;
}

void s3_endpoint__clear(struct s3_endpoint *e)
{
	if (!e)
		return;
	free(e->host);
	free(e->host_header);
	e->host = e->host_header = NULL;
}
