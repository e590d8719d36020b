/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for maps__parse() and what is built on its result.
 * FUZZ_SOURCES: common/procmaps.c common/readfile.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "procmaps.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct maps *m = NULL;
	struct maps_module mod;
	size_t pos = 0, n_mods = 0;

	if (maps__parse((const char *)data, size, &m) < 0) {
		CHECK(m == NULL);
		return 0;
	}
	for (size_t i = 0; i < m->n; i++) {
		const struct maps_entry *e = &m->v[i], *hit;

		CHECK(e->start < e->end);
		CHECK(i == 0 || m->v[i - 1].start <= e->start);
		CHECK(!e->path || e->path[0] != '\0');
		hit = maps__find_addr(m, e->start);
		CHECK(hit && hit->start <= e->start && e->start < hit->end);
		hit = maps__find_addr(m, e->end - 1);
		CHECK(hit && hit->start <= e->end - 1 && e->end - 1 < hit->end);
		hit = maps__find_addr(m, e->end);
		CHECK(!hit || (hit->start <= e->end && e->end < hit->end));
		(void)maps_entry__is_file(e);
		if (i > 0)
			(void)maps_entry__same_file(&m->v[i - 1], e);
	}
	while (maps__next_module(m, &pos, &mod) == 0) {
		CHECK(mod.first <= mod.last && mod.last < m->n && pos == mod.last + 1);
		CHECK(maps_entry__is_file(&m->v[mod.first]));
		(void)maps_path__matches(mod.path, "libc.so.6");
		(void)maps_path__matches(mod.path, "ld-musl-*");
		CHECK(++n_mods <= m->n);
	}
	(void)maps__find_module(m, "libc-2.*.so", &mod);
	maps__free(m);
	return 0;
}
