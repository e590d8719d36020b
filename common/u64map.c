/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "u64map.h"

static size_t slot_of(uint64_t key, size_t cap)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdULL;
	key ^= key >> 33;
	key *= 0xc4ceb9fe1a85ec53ULL;
	key ^= key >> 33;
	return (size_t)key & (cap - 1);
}

uint64_t u64_hash2(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ULL;

	h ^= b + 0x7f4a7c159e3779b9ULL + (h << 6) + (h >> 2);
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 32);
}

bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *ret_val)
{
	if (!m->cap)
		return false;
	for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->used[i])
			return false;
		if (m->keys[i] == key) {
			if (ret_val)
				*ret_val = m->vals[i];
			return true;
		}
	}
}

static void put_nogrow(struct u64map *m, uint64_t key, uint64_t val)
{
	for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->used[i]) {
			m->used[i] = 1;
			m->keys[i] = key;
			m->vals[i] = val;
			m->n++;
			return;
		}
		if (m->keys[i] == key) {
			m->vals[i] = val;
			return;
		}
	}
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t val)
{
	if ((m->n + 1) * 4 > m->cap * 3) {
		struct u64map g = { 0 };

		g.cap = m->cap ? m->cap * 2 : 64;
		g.keys = malloc(g.cap * sizeof(*g.keys));
		g.vals = malloc(g.cap * sizeof(*g.vals));
		g.used = calloc(g.cap, 1);
		if (!g.keys || !g.vals || !g.used) {
			free(g.keys);
			free(g.vals);
			free(g.used);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m->cap; i++)
			if (m->used[i])
				put_nogrow(&g, m->keys[i], m->vals[i]);
		u64map_clear(m);
		*m = g;
	}
	put_nogrow(m, key, val);
	return 0;
}

void u64map_clear(struct u64map *m)
{
	free(m->keys);
	free(m->vals);
	free(m->used);
	*m = (struct u64map){ 0 };
}

bool u64map_next(const struct u64map *m, size_t *pos, uint64_t *ret_key, uint64_t *ret_val)
{
	for (; *pos < m->cap; (*pos)++) {
		if (!m->used[*pos])
			continue;
		if (ret_key)
			*ret_key = m->keys[*pos];
		if (ret_val)
			*ret_val = m->vals[*pos];
		(*pos)++;
		return true;
	}
	return false;
}
