/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "elfsym.h"
#include "event_store.h"

void event_store__clear(struct event_store *s)
{
	for (size_t i = 0; i < s->nstrings; i++)
		free(s->strings[i]);
	free(s->strings);
	free(s->string_total);
	free(s->v);
	blobtab_clear(&s->over.keys);
	free(s->over.v);
	memset(s, 0, sizeof(*s));
}

/*
 * A chunk of a string, from the target's ring: untrusted. The first chunk of an id fixes
 * its length; a chunk that disagrees with it, lies outside it, or would take the strings
 * past their budget is counted in `rejected` and dropped.
 */
static void store_string_chunk(struct event_store *s, const struct aiprof_ev_str *c)
{
	size_t len;

	if (c->id == 0 || c->id > EVENT_STORE_MAX_STRING_ID || c->total == 0 || c->offset >= c->total)
		goto reject;
	if (c->id >= s->nstrings) {
		size_t n = s->nstrings ? s->nstrings : 64;
		char **ns;
		uint16_t *nt;

		while (n <= c->id)
			n *= 2;
		ns = realloc(s->strings, n * sizeof(*ns));
		if (!ns)
			goto oom;
		s->strings = ns;
		memset(s->strings + s->nstrings, 0, (n - s->nstrings) * sizeof(*ns));
		nt = realloc(s->string_total, n * sizeof(*nt));
		if (!nt)
			goto oom;  /* strings[] grew, nstrings did not: consistent */
		s->string_total = nt;
		memset(s->string_total + s->nstrings, 0, (n - s->nstrings) * sizeof(*nt));
		s->nstrings = n;
	}
	if (!s->strings[c->id]) {
		if (s->string_bytes + c->total + 1 > EVENT_STORE_STRING_BYTES)
			goto reject;
		s->strings[c->id] = calloc(1, (size_t)c->total + 1);
		if (!s->strings[c->id])
			goto oom;
		s->string_total[c->id] = c->total;
		s->string_bytes += (size_t)c->total + 1;
	} else if (s->string_total[c->id] != c->total) {
		goto reject;
	}
	len = (size_t)c->total - c->offset;
	if (len > AIPROF_STR_CHUNK)
		len = AIPROF_STR_CHUNK;
	memcpy(s->strings[c->id] + c->offset, c->s, len);
	return;
reject:
	s->rejected++;
	return;
oom:
	s->store_drops++;
}

/* The key an event is summed under: what the summary's tables tell apart. */
static struct event_total total_key(const struct aiprof_event *e)
{
	struct event_total k = { .type = e->type, .api = e->api };

	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
		k.flags = e->flags;
		k.key = e->u.launch.name_id ? EVENT_TOTAL_NAMED | e->u.launch.name_id :
			e->u.launch.func;
		break;
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET:
		k.flags = e->u.memcpy.flags;
		k.key = e->u.memcpy.kind;
		break;
	default:
		break;
	}
	return k;
}

static uint64_t total_bytes(const struct aiprof_event *e)
{
	switch (e->type) {
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET:
		return e->u.memcpy.bytes;
	case AIPROF_EV_CUDA_ALLOC:
	case AIPROF_EV_CUDA_FREE:
		return e->u.mem.bytes;
	case AIPROF_EV_NCCL_COLL:
		return e->u.nccl.bytes;
	default:
		return 0;
	}
}

/* An event past the budget, into its sum; counted as dropped only when even that fails. */
static void sum_event(struct event_store *s, const struct aiprof_event *e)
{
	struct event_totals *o = &s->over;
	struct event_total k = total_key(e);
	struct event_total *t;
	int64_t id;

	/* the key's bytes: type, api, flags, key (no padding among them) */
	id = blobtab_intern(&o->keys, &k, offsetof(struct event_total, count));
	if (id < 0)
		goto drop;
	if ((size_t)id == o->n) {
		if (o->n == o->cap) {
			size_t ncap = o->cap ? o->cap * 2 : 64;
			struct event_total *nv = realloc(o->v, ncap * sizeof(*nv));

			if (!nv)
				goto drop;      /* the key stays interned, unused: harmless */
			o->v = nv;
			o->cap = ncap;
		}
		o->v[o->n++] = k;
	}
	if ((size_t)id >= o->n)
		goto drop;
	t = &o->v[id];
	t->count++;
	t->dur_ns += e->dur;
	t->bytes += total_bytes(e);
	if (!o->events)
		o->first_ts = e->ts;
	o->events++;
	return;
drop:
	s->store_drops++;
}

void event_store__add(struct event_store *s, const struct aiprof_event *e)
{
	if (e->type == AIPROF_EV_NONE || e->type >= AIPROF_EV__MAX || e->api >= AIPROF_API__MAX) {
		s->rejected++;
		return;
	}
	if (e->type == AIPROF_EV_STRING) {
		store_string_chunk(s, &e->u.str);
		return;
	}
	size_t max = s->max_events ? s->max_events : EVENT_STORE_MAX_EVENTS;

	if (s->n >= max) {
		sum_event(s, e);  /* bounded, whatever the window's length */
		return;
	}
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 4096;

		if (ncap > max)
			ncap = max;     /* never more memory than the cap allows */
		struct aiprof_event *nv = realloc(s->v, ncap * sizeof(*nv));

		if (!nv) {
			s->store_drops++;
			return;
		}
		s->v = nv;
		s->cap = ncap;
	}
	memcpy(&s->v[s->n++], e, sizeof(*e));
}

/*
 * Kernel names come mangled from CUPTI and the driver (cuFuncGetName, cuKernelGetName), while
 * a launch through a host stub is named by the symboliser, demangled: after the window every
 * string that is a whole mangled C++ name is replaced by its demangled form, so a kernel and
 * its launch carry one name. Call stacks ("hex,hex,...") never start with "_Z".
 */
void event_store__demangle(struct event_store *s)
{
	for (size_t i = 1; i < s->nstrings; i++) {
		char *d = s->strings[i] ? symbol_demangle(s->strings[i]) : NULL;

		if (!d)
			continue;
		s->string_bytes += strlen(d) + 1;
		s->string_bytes -= strlen(s->strings[i]) + 1;
		free(s->strings[i]);
		s->strings[i] = d;
	}
}

const char *event_store__string(const struct event_store *s, uint32_t id)
{
	if (id == 0 || id >= s->nstrings)
		return NULL;
	return s->strings[id];
}
