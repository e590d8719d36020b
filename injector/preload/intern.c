/* SPDX-License-Identifier: MIT */
/*
 * Interned kernel names and launch call stacks. A driver launch carries a CUfunction, a
 * CUPTI kernel record a name pointer, a launch's call stack a hash (callstack.c); each is
 * mapped to a small integer id, and the name is sent to the
 * consumer as AIPROF_EV_STRING chunks (before the first event that uses the id) once per
 * hdr->generation, so a later session gets the strings again.
 *
 * Lock-free: keys are claimed in an open-addressing table with CAS; names are copied
 * into a bump-allocated arena (the CUfunction's own name may go away with its module).
 * When a table or the arena is full, new keys get id 0 ("unknown") — never a wrong name.
 */
#include <sched.h>
#include <string.h>

#include "preload.h"

/* how many times a lookup yields to the thread still storing a slot's name */
#define INTERN_WAIT_YIELDS 1000

#define INTERN_SLOTS   8192                /* per table, power of two */
#define INTERN_IDS     32768               /* ids across all tables; id 0 = none */
#define ARENA_BYTES    (4u << 20)          /* names and call stacks */
#define NAME_MAX_LEN   4096u               /* longer names are truncated */

struct intern_slot {
	_Atomic uintptr_t key;
	_Atomic uint32_t id;                /* 0 while the name is being copied */
};

struct name_ref {
	uint32_t off;
	uint32_t len;
	_Atomic uint32_t emitted_gen;       /* generation + 1 the string was emitted in */
};

static struct intern_slot g_tables[INTERN__TABLES][INTERN_SLOTS];
static struct name_ref g_names[INTERN_IDS];
static _Atomic uint32_t g_next_id = 1;
static char g_arena[ARENA_BYTES];
static _Atomic uint32_t g_arena_used;

static uint32_t hash_ptr(uintptr_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k;
}

static uint32_t name_store(const char *name)
{
	size_t len = strnlen(name, NAME_MAX_LEN);
	uint32_t id, off;

	off = atomic_fetch_add_explicit(&g_arena_used, (uint32_t)len, memory_order_relaxed);
	if (off + len > ARENA_BYTES)
		return 0;
	id = atomic_fetch_add_explicit(&g_next_id, 1, memory_order_relaxed);
	if (id >= INTERN_IDS)
		return 0;
	memcpy(g_arena + off, name, len);
	g_names[id].off = off;
	g_names[id].len = (uint32_t)len;
	return id;
}

/* Sends the string of `id` unless it was already sent in this generation. */
static void name_emit(struct aiprof_ring_hdr *h, uint32_t id)
{
	struct name_ref *n = &g_names[id];
	uint32_t want = atomic_load_explicit(&h->generation, memory_order_relaxed) + 1;
	uint32_t cur = atomic_load_explicit(&n->emitted_gen, memory_order_acquire);

	if (cur == want)
		return;
	if (!atomic_compare_exchange_strong(&n->emitted_gen, &cur, want))
		return;             /* another thread is sending it */
	if (emit_string(h, AIPROF_EV_STRING, id, g_arena + n->off, n->len) < 0)
		atomic_store(&n->emitted_gen, 0);   /* ring full: try again next time */
}

uint32_t intern__id(struct aiprof_ring_hdr *h, enum intern_table t, uintptr_t key,
		    const char *(*get_name)(uintptr_t key))
{
	struct intern_slot *tab = g_tables[t];
	uint32_t i = hash_ptr(key) & (INTERN_SLOTS - 1);

	if (!key)
		return 0;
	for (uint32_t probe = 0; probe < 64; probe++, i = (i + 1) & (INTERN_SLOTS - 1)) {
		uintptr_t k = atomic_load_explicit(&tab[i].key, memory_order_acquire);
		uint32_t id;

		if (k == 0) {
			uintptr_t expected = 0;

			if (!atomic_compare_exchange_strong(&tab[i].key, &expected, key)) {
				if (expected != key)
					continue;
			} else {
				const char *name = get_name(key);

				id = name && name[0] ? name_store(name) : 0;
				/* UINT32_MAX marks "no name" so we do not ask again */
				atomic_store_explicit(&tab[i].id, id ? id : UINT32_MAX,
						      memory_order_release);
				if (id)
					name_emit(h, id);
				return id;
			}
		} else if (k != key) {
			continue;
		}
		id = atomic_load_explicit(&tab[i].id, memory_order_acquire);
		/*
		 * 0: the thread that claimed the slot is still storing the name (two ranks'
		 * threads launching the same kernel from the same call site at once). Give it
		 * the CPU rather than record this call without its name or stack; bounded, so a
		 * claimer that never returns (a signal handler's longjmp) costs one name only.
		 */
		for (int spin = 0; id == 0 && spin < INTERN_WAIT_YIELDS; spin++) {
			sched_yield();
			id = atomic_load_explicit(&tab[i].id, memory_order_acquire);
		}
		if (id == 0 || id == UINT32_MAX)
			return 0;
		name_emit(h, id);
		return id;
	}
	return 0;
}

bool intern__sent(struct aiprof_ring_hdr *h, uint32_t id)
{
	uint32_t want = atomic_load_explicit(&h->generation, memory_order_relaxed) + 1;

	return id && id < INTERN_IDS &&
	       atomic_load_explicit(&g_names[id].emitted_gen, memory_order_acquire) == want;
}

void intern__forget_sent(void)
{
	for (uint32_t i = 0; i < INTERN_IDS; i++)
		atomic_store_explicit(&g_names[i].emitted_gen, 0, memory_order_relaxed);
}
