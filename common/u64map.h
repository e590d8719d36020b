/* SPDX-License-Identifier: MIT */
/*
 * The hash map of the injector: open addressing from uint64_t to uint64_t (address ->
 * frame, code object -> decoded code, id -> index, ...). Key 0 is allowed. Keys that do
 * not fit in 64 bits are interned first (blobtab.h). Not thread-safe.
 */
#ifndef AIPROF_U64MAP_H
#define AIPROF_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map {
	uint64_t *keys;
	uint64_t *vals;
	uint8_t *used;
	size_t cap, n;            /* cap is 0 or a power of two */
};

/* Returns true and *ret_val if key is present. */
bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *ret_val);
/* Inserts or replaces. 0, or -ENOMEM (the map is unchanged). */
int u64map_put(struct u64map *m, uint64_t key, uint64_t val);
void u64map_clear(struct u64map *m);  /* frees the storage; the map is empty and reusable */

/* Iteration: for (size_t i = 0; u64map_next(m, &i, &k, &v);) */
bool u64map_next(const struct u64map *m, size_t *pos, uint64_t *ret_key, uint64_t *ret_val);

/* A 64-bit mix of two words, for composite keys. */
uint64_t u64_hash2(uint64_t a, uint64_t b);

#endif
