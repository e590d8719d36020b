/* SPDX-License-Identifier: MIT */
/*
 * Interning: byte strings (names, arrays of ids) to small dense ids, 0, 1, 2... in the
 * order they were first seen, each kept once. Built on the one generic hash map (u64map:
 * a blob's hash -> the latest id with that hash, the others chained behind it), for the
 * stack store's frames and stacks and the flame graph's names. Not thread-safe.
 */
#ifndef AIPROF_BLOBTAB_H
#define AIPROF_BLOBTAB_H

#include <stddef.h>
#include <stdint.h>

#include "u64map.h"

struct blobtab {
	struct u64map heads;      /* hash -> id + 1 of the latest blob with that hash */
	struct blob {
		size_t off, len;
		uint64_t hash;
		uint32_t next;    /* id + 1 of the blob before it with the same hash; 0: none */
	} *items;
	size_t n, cap;
	uint8_t *data;
	size_t data_len, data_cap;
};

/* Frees everything; the table is empty and reusable. */
void blobtab_clear(struct blobtab *t);

/* The id of the blob (p, len), added if new; -ENOMEM. Blobs are stored 4-byte aligned and
 * followed by a NUL byte (not counted in their length), so text can be read as a string. */
int64_t blobtab_intern(struct blobtab *t, const void *p, size_t len);

/* The blob with that id and its length, or NULL. */
const void *blobtab_get(const struct blobtab *t, uint32_t id, size_t *ret_len);

#endif
