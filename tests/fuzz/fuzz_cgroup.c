/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the /proc/PID/cgroup parser behind --container-id and
 * --container-name: lines, membership of a container and the cgroup key.
 * FUZZ_SOURCES: injector/target/container.c common/procmaps.c common/readfile.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "injector/target/container.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

#define ID "3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	char key[256], id[CONTAINER_ID_MAX + 1], why[256], *arg;
	int in = cgroup_file__in_container(text, size, ID);
	int k = cgroup_file__key(text, size, key, sizeof(key));
	struct cgroup_line l;

	CHECK(in == 0 || in == 1 || in == -22);
	/* both read the same lines: what is malformed for one is for the other (the key also
	 * refuses an empty file, and membership stops at the first line naming the id) */
	CHECK(in != -22 || k == -22);
	if (k == 0)
		CHECK(key[0] == '/' && strlen(key) < sizeof(key));
	if (cgroup_line__parse(text, size, &l) == 0) {
		CHECK(l.path >= text && l.path + l.path_len == text + size);
		CHECK(l.path_len > 0 && l.path[0] == '/');
		CHECK(l.controllers + l.controllers_len < l.path);
		(void)cgroup_path__names_container(l.path, l.path_len, ID);
	}
	/* the same bytes as a --container-id argument */
	arg = malloc(size + 1);
	if (!arg)
		return 0;
	memcpy(arg, data, size);
	arg[size] = 0;
	if (container_id__parse(arg, id, sizeof(id), why, sizeof(why)) == 0) {
		CHECK(id[0] && strlen(id) <= CONTAINER_ID_MAX);
		CHECK(strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
		      == strlen(id));
		/* a path made of the id names it */
		{
			size_t n = strlen(id);
			char *p = malloc(n + 2);

			if (p) {
				p[0] = '/';
				memcpy(p + 1, id, n + 1);
				CHECK(cgroup_path__names_container(p, n + 1, id));
				free(p);
			}
		}
	} else {
		CHECK(why[0]);
	}
	free(arg);
	return 0;
}
