/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "readfile.h"
#include "container.h"
#include "memlimit.h"

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

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

int memlimit_parse(const char *root, const char *proc_cgroup, uint64_t *ret_bytes)
{
	const char *line = proc_cgroup;
	char dir[PATH_MAX];
	uint64_t best = UINT64_MAX;

	while (line && *line) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		struct cgroup_line cl;
		char rel[PATH_MAX];

		if (cgroup_line__parse(line, len, &cl) == 0 && cl.path_len < sizeof(rel)) {
			memcpy(rel, cl.path, cl.path_len);
			rel[cl.path_len] = 0;
			if (strcmp(rel, "/") == 0)
				rel[0] = 0;
			if (cl.hierarchy == 0 && cl.controllers_len == 0) {
				best = min_u64(best, walk_up(root, rel, "memory.max"));
				snprintf(dir, sizeof(dir), "%s/unified", root);  /* hybrid: v2 there */
				best = min_u64(best, walk_up(dir, rel, "memory.max"));
			} else if (cl.controllers_len == 6 && memcmp(cl.controllers, "memory", 6) == 0) {
				snprintf(dir, sizeof(dir), "%s/memory", root);
				best = min_u64(best, walk_up(dir, rel, "memory.limit_in_bytes"));
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
