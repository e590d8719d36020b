/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blobtab.h"

static uint64_t hash_bytes(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;  /* FNV-1a */

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h ^ (h >> 31);
}

void blobtab_clear(struct blobtab *t)
{
	u64map_clear(&t->heads);
	free(t->items);
	free(t->data);
	memset(t, 0, sizeof(*t));
}

const void *blobtab_get(const struct blobtab *t, uint32_t id, size_t *ret_len)
{
	if (id >= t->n)
		return NULL;
	if (ret_len)
		*ret_len = t->items[id].len;
	return t->data + t->items[id].off;
}

/* Room for one more item and len + 1 more bytes at a 4-byte boundary; its offset. */
static int reserve(struct blobtab *t, size_t len, size_t *ret_off)
{
	size_t aligned = (t->data_len + 3) & ~(size_t)3;

	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 256;
		struct blob *nv = realloc(t->items, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		t->items = nv;
		t->cap = ncap;
	}
	if (aligned + len + 1 > t->data_cap) {
		size_t ncap = t->data_cap ? t->data_cap : 4096;
		uint8_t *nd;

		while (aligned + len + 1 > ncap)
			ncap *= 2;
		nd = realloc(t->data, ncap);
		if (!nd)
			return -ENOMEM;
		t->data = nd;
		t->data_cap = ncap;
	}
	*ret_off = aligned;
	return 0;
}

int64_t blobtab_intern(struct blobtab *t, const void *p, size_t len)
{
	uint64_t h = hash_bytes(p, len), head = 0;
	size_t off;

	if (u64map_get(&t->heads, h, &head)) {
		for (uint64_t i = head; i; i = t->items[i - 1].next) {
			const struct blob *b = &t->items[i - 1];

			if (b->len == len && memcmp(t->data + b->off, p, len) == 0)
				return (int64_t)(i - 1);
		}
	}
	if (t->n >= UINT32_MAX - 1 || reserve(t, len, &off) < 0 ||
	    u64map_put(&t->heads, h, t->n + 1) < 0)
		return -ENOMEM;
	if (len)
		memcpy(t->data + off, p, len);
	t->data[off + len] = 0;
	t->data_len = off + len + 1;
	t->items[t->n] = (struct blob){ .off = off, .len = len, .hash = h, .next = (uint32_t)head };
	return (int64_t)t->n++;
}
