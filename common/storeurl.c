// SPDX-License-Identifier: MIT
/* The in-cluster store's URLs and names: see storeurl.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3url.h"
#include "storeurl.h"

bool store_url_is_store(const char *url)
{
	return url && (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0);
}

bool store_k8s_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

bool store_name_ok(const char *name)
{
	size_t n = strlen(name), comp = 0;

	if (n == 0 || n > STORE_NAME_MAX || name[0] == '/')
		return false;
	for (size_t i = 0; i <= n; i++) {
		char c = name[i];

		if (c == '/' || c == '\0') {
			if (comp == 0 || (comp == 1 && name[i - 1] == '.') ||
			    (comp == 2 && name[i - 1] == '.' && name[i - 2] == '.'))
				return false;
			comp = 0;
			continue;
		}
		if (!(isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-'))
			return false;
		comp++;
	}
	return true;
}

static char *env_dup(const char *name, const char *fallback)
{
	const char *v = getenv(name);

	if (!v || !v[0])
		v = fallback;
	return v ? strdup(v) : NULL;
}

int store_dest__parse(const char *url, struct store_dest *d, char *why, size_t whylen)
{
	static const char *const want[] = { "v1", "artifacts" };
	struct s3_endpoint ep = { 0 };
	const char *path, *p;
	char *origin;
	size_t n;
	int r;

	memset(d, 0, sizeof(*d));
	if (!store_url_is_store(url)) {
		snprintf(why, whylen, "'%.200s' is not an http(s):// URL", url ? url : "");
		return -EINVAL;
	}
	path = strchr(url + (url[4] == 's' ? 8 : 7), '/');
	if (!path) {
		snprintf(why, whylen, "'%.200s' has no path: the store's URL is "
			 "http(s)://HOST[:PORT]/v1/artifacts/NAMESPACE/SESSION/POD", url);
		return -EINVAL;
	}
	origin = strndup(url, (size_t)(path - url));
	if (!origin)
		return -ENOMEM;
	r = s3_endpoint__parse(origin, &ep);
	free(origin);
	s3_endpoint__clear(&ep);
	if (r < 0) {
		snprintf(why, whylen, "'%.200s': the host part is not http(s)://HOST[:PORT] (no "
			 "user:password@, a host of letters, digits, dots and dashes or an IP)", url);
		return r == -ENOMEM ? r : -EINVAL;
	}
	/* /v1/artifacts/NAMESPACE/SESSION/POD, each of the last three a Kubernetes name */
	p = path + 1;
	for (int i = 0; i < 5; i++) {
		const char *end = strchr(p, '/');

		n = end ? (size_t)(end - p) : strlen(p);
		if (i < 2 ? (n != strlen(want[i]) || strncmp(p, want[i], n)) : !store_k8s_name_ok(p, n)) {
			snprintf(why, whylen, "'%.200s': the path is not /v1/artifacts/NAMESPACE/"
				 "SESSION/POD (lower-case Kubernetes names)", url);
			return -EINVAL;
		}
		if (i == 4 && end && end[1]) {
			snprintf(why, whylen, "'%.200s': nothing may follow /v1/artifacts/NAMESPACE/"
				 "SESSION/POD", url);
			return -EINVAL;
		}
		if (i < 4 && !end) {
			snprintf(why, whylen, "'%.200s': the path is not /v1/artifacts/NAMESPACE/"
				 "SESSION/POD", url);
			return -EINVAL;
		}
		p = end ? end + 1 : p + n;
	}
	n = strlen(url);
	while (n && url[n - 1] == '/')
		n--;
	d->base = strndup(url, n);
	d->token_file = env_dup("AIPROF_STORE_TOKEN_FILE", STORE_TOKEN_FILE_DEFAULT);
	d->ca_file = env_dup("AIPROF_STORE_CA_FILE", NULL);
	if (!d->base || !d->token_file || (getenv("AIPROF_STORE_CA_FILE") && !d->ca_file)) {
		store_dest__clear(d);
		return -ENOMEM;
	}
	return 0;
}

void store_dest__clear(struct store_dest *d)
{
	free(d->base);
	free(d->token_file);
	free(d->ca_file);
	memset(d, 0, sizeof(*d));
}

