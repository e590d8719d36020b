/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memlimit.h"
#include "readfile.h"

/* A limit file's number; "max" (v2) and v1's "unlimited" page-rounded LONG_MAX are none. */
static uint64_t read_limit(const char *path)
{
	char buf[64], *end;
	unsigned long long v;

	if (readfile_buf(path, buf, sizeof(buf)) <= 0)
		return UINT64_MAX;
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || end == buf || v == 0 || v >= (1ULL << 62))
		return UINT64_MAX;
	return v;
}

/* The smallest limit in `dir` and every folder above it, up to `root`. */
static uint64_t walk_up(const char *root, const char *rel, const char *file)
{
	char path[PATH_MAX], sub[PATH_MAX];
	uint64_t best = UINT64_MAX;
	char *slash;

	if (snprintf(sub, sizeof(sub), "%s", rel) >= (int)sizeof(sub))
		return UINT64_MAX;
	for (;;) {
		uint64_t v;

		if (snprintf(path, sizeof(path), "%s%s/%s", root, sub, file) < (int)sizeof(path)) {
			v = read_limit(path);
			if (v < best)
				best = v;
		}
		slash = strrchr(sub, '/');
		if (!slash || !sub[0])
			break;
		*slash = 0;
	}
	return best;
}

int memlimit_parse(const char *root, const char *proc_cgroup, uint64_t *ret_bytes)
{
	const char *line = proc_cgroup;
	char dir[PATH_MAX];
	uint64_t best = UINT64_MAX, v;

	while (line && *line) {
		const char *eol = strchr(line, '\n'), *c1, *c2;
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		char rel[PATH_MAX];
		bool v2;

		/* "0::/path" (v2) or "4:memory:/path" (v1) */
		c1 = memchr(line, ':', len);
		c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
		if (c2 && (size_t)(line + len - (c2 + 1)) < sizeof(rel)) {
			size_t ctl = (size_t)(c2 - c1 - 1);

			memcpy(rel, c2 + 1, (size_t)(line + len - (c2 + 1)));
			rel[line + len - (c2 + 1)] = 0;
			if (strcmp(rel, "/") == 0)
				rel[0] = 0;
			v2 = ctl == 0 && line[0] == '0';
			if (v2) {
				v = walk_up(root, rel, "memory.max");
				if (v < best)
					best = v;
				snprintf(dir, sizeof(dir), "%s/unified", root);
				v = walk_up(dir, rel, "memory.max");     /* hybrid: v2 at unified/ */
				if (v < best)
					best = v;
			} else if (ctl == 6 && memcmp(c1 + 1, "memory", 6) == 0) {
				snprintf(dir, sizeof(dir), "%s/memory", root);
				v = walk_up(dir, rel, "memory.limit_in_bytes");
				if (v < best)
					best = v;
			}
		}
		line = eol ? eol + 1 : NULL;
	}
	*ret_bytes = best;
	return 0;
}

uint64_t memlimit_self(void)
{
	char *text = NULL;
	uint64_t v = UINT64_MAX;

	if (readfile("/proc/self/cgroup", 1 << 16, 0, &text, NULL) < 0)
		return UINT64_MAX;
	memlimit_parse("/sys/fs/cgroup", text, &v);
	free(text);
	return v;
}
