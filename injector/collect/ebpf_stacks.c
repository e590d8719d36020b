/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ebpf_stacks.h"

/* ---- stack store ----------------------------------------------------------------------- */

void stack_store__init(struct stack_store *s)
{
	memset(s, 0, sizeof(*s));
}

void stack_store__clear(struct stack_store *s)
{
	blobtab_clear(&s->frames);
	blobtab_clear(&s->stacks);
	for (int k = 0; k < STACK_KINDS; k++)
		free(s->weight[k]);
	memset(s, 0, sizeof(*s));
}

int stack_store__frame(struct stack_store *s, const char *name)
{
	char buf[1024];
	size_t n = 0;
	int64_t id;

	if (!name || !*name)
		name = "[unknown]";
	for (; name[n] && n < sizeof(buf) - 1; n++) {
		char c = name[n];

		buf[n] = c == ';' ? ':' : (c == '\n' || c == '\r') ? ' ' : c;
	}
	buf[n] = 0;
	id = blobtab_intern(&s->frames, buf, n + 1);
	return (int)id;
}

const char *stack_store__frame_name(const struct stack_store *s, uint32_t id)
{
	const char *p = blobtab_get(&s->frames, id, NULL);

	return p ? p : "[unknown]";
}

size_t stack_store__nframes(const struct stack_store *s)
{
	return s->frames.n;
}

int stack_store__stack(struct stack_store *s, const uint32_t *frames, size_t n)
{
	int64_t id;

	if (n > STACK_MAX_FRAMES || (n && !frames))
		return -EINVAL;
	id = blobtab_intern(&s->stacks, frames, n * sizeof(*frames));
	return (int)id;
}

const uint32_t *stack_store__stack_frames(const struct stack_store *s, uint32_t id, size_t *ret_n)
{
	size_t len = 0;
	const void *p = blobtab_get(&s->stacks, id, &len);

	*ret_n = p ? len / sizeof(uint32_t) : 0;
	return p;
}

size_t stack_store__nstacks(const struct stack_store *s)
{
	return s->stacks.n;
}

int stack_store__add(struct stack_store *s, uint32_t stack, enum stack_kind kind, uint64_t w)
{
	if (kind >= STACK_KINDS || stack >= s->stacks.n)
		return -EINVAL;
	if (stack >= s->weight_cap) {
		size_t ncap = s->weight_cap ? s->weight_cap : 256;

		while (ncap <= stack)
			ncap *= 2;
		for (int k = 0; k < STACK_KINDS; k++) {
			uint64_t *nv = realloc(s->weight[k], ncap * sizeof(*nv));

			if (!nv)
				return -ENOMEM;
			memset(nv + s->weight_cap, 0, (ncap - s->weight_cap) * sizeof(*nv));
			s->weight[k] = nv;
		}
		s->weight_cap = ncap;
	}
	s->weight[kind][stack] += w;
	return 0;
}

void stack_store__sub(struct stack_store *s, uint32_t stack, enum stack_kind kind, uint64_t w)
{
	if (kind < STACK_KINDS && stack < s->weight_cap)
		s->weight[kind][stack] -= w < s->weight[kind][stack] ? w : s->weight[kind][stack];
}

uint64_t stack_store__weight(const struct stack_store *s, uint32_t stack, enum stack_kind kind)
{
	if (kind >= STACK_KINDS || stack >= s->weight_cap)
		return 0;
	return s->weight[kind][stack];
}

int stack_store__write_folded(const struct stack_store *s, enum stack_kind kind, FILE *f)
{
	for (uint32_t id = 0; id < s->stacks.n; id++) {
		uint64_t w = stack_store__weight(s, id, kind);
		const uint32_t *fr;
		size_t n;

		if (!w)
			continue;
		fr = stack_store__stack_frames(s, id, &n);
		if (!n)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (i)
				fputc(';', f);
			fputs(stack_store__frame_name(s, fr[i]), f);
		}
		fprintf(f, " %llu\n", (unsigned long long)w);
	}
	return ferror(f) ? -EIO : 0;
}

/* ---- merging --------------------------------------------------------------------------- */

/* How many interpreter-loop frames of the native stack the Python frames cut from the
 * middle ran in: those beyond the segments py has */
static size_t evals_cut(const struct stack_merge_in *in, size_t cut)
{
	size_t evals = 0, segs = 0;

	if (!in->native_eval || cut >= in->np)
		return 0;
	for (size_t i = 0; i < in->nn; i++)
		evals += in->native_eval[i];
	for (size_t i = 0; i < in->np; i++)
		segs += (in->py_seg_end && in->py_seg_end[i]) || i + 1 == in->np;
	return evals > segs ? evals - segs : 0;
}

size_t stack_merge(const struct stack_merge_in *in, uint32_t *out, size_t max)
{
	uint32_t tmp[STACK_MAX_FRAMES];
	size_t n = 0, pi = 0, cut = in->py_cut_at ? in->py_cut_at - 1 : SIZE_MAX;
	size_t skip = evals_cut(in, cut);
	bool skipping = false;

#define PUSH(x) do { if (n < STACK_MAX_FRAMES) tmp[n++] = (x); } while (0)
	for (size_t i = 0; i < in->nk; i++)
		PUSH(in->kernel[i]);
	if (in->nk && in->kernel_cut)
		PUSH(in->kernel_cut - 1);
	for (size_t i = 0; i < in->nn; i++) {
		bool eval = in->native_eval && in->native_eval[i];

		if (skipping) {
			/* inside the cut: the loop frame the outer Python frames ran in is the
			 * last of those skipped */
			if (!eval || --skip)
				continue;
			skipping = false;
		} else if (!eval || pi >= in->np) {
			PUSH(in->native[i]);
			continue;
		}
		/* one C-level interpreter call: its Python frames, innermost first */
		while (pi < in->np) {
			bool end = in->py_seg_end && in->py_seg_end[pi];

			PUSH(in->py[pi]);
			if (pi++ == cut && skip) {
				skipping = true;
				break;
			}
			if (end)
				break;
		}
	}
	for (; pi < in->np; pi++)
		PUSH(in->py[pi]);
	if (in->native_cut)
		PUSH(in->native_cut - 1);
	if (in->root != UINT32_MAX)
		PUSH(in->root);
#undef PUSH
	/* root first; if out is too short, the innermost frames are the ones dropped */
	for (size_t i = 0; i < n && i < max; i++)
		out[i] = tmp[n - 1 - i];
	return n < max ? n : max;
}

/* ---- frame tree ------------------------------------------------------------------------ */

void stack_tree__init(struct stack_tree *t)
{
	memset(t, 0, sizeof(*t));
}

void stack_tree__clear(struct stack_tree *t)
{
	u64map_clear(&t->edges);
	u64map_clear(&t->leaf_of);
	free(t->parent);
	free(t->frame);
	memset(t, 0, sizeof(*t));
}

int64_t stack_tree__leaf(struct stack_tree *t, const struct stack_store *s, uint32_t stack)
{
	const uint32_t *fr;
	uint64_t node = 0, v;
	size_t n;

	if (u64map_get(&t->leaf_of, stack, &v))
		return (int64_t)v;
	fr = stack_store__stack_frames(s, stack, &n);
	for (size_t i = 0; i < n; i++) {
		uint64_t key = node << 32 | fr[i];

		if (u64map_get(&t->edges, key, &v)) {
			node = v;
			continue;
		}
		if (t->n + 1 >= t->cap) {
			size_t ncap = t->cap ? t->cap * 2 : 1024;
			uint32_t *np = realloc(t->parent, ncap * sizeof(*np));

			if (!np)
				return -ENOMEM;
			t->parent = np;
			np = realloc(t->frame, ncap * sizeof(*np));
			if (!np)
				return -ENOMEM;
			t->frame = np;
			t->cap = ncap;
		}
		t->n++;  /* node ids start at 1 */
		t->parent[t->n] = (uint32_t)node;
		t->frame[t->n] = fr[i];
		if (u64map_put(&t->edges, key, t->n) < 0) {
			t->n--;
			return -ENOMEM;
		}
		node = t->n;
	}
	if (u64map_put(&t->leaf_of, stack, node) < 0)
		return -ENOMEM;
	return (int64_t)node;
}
