/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "recheck.h"

/* Node counts saturate here: far above the limit, far below overflow when multiplied. */
#define COST_CAP ((uint64_t)1 << 40)

/* What a subexpression costs: its nodes, and how many repeats are nested in it ("(a?)+"
 * nests two). glibc's epsilon closures grow about fourfold with each nesting level over a
 * subexpression that can match empty ("a?+?+?+?+?+?+?+?+": 16 levels, 3.5 s), whatever the
 * node count, so that depth is bounded on its own. */
struct cost {
	uint64_t nodes;
	unsigned reps;
};

struct walk {
	const char *p;          /* the next character */
	unsigned depth;         /* groups open */
	int err;                /* the first refusal, 0 while none */
};

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b > COST_CAP ? COST_CAP : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	if (a && b > COST_CAP / a)
		return COST_CAP;
	return a * b > COST_CAP ? COST_CAP : a * b;
}

static struct cost alternation(struct walk *w);

static struct cost join(struct cost a, struct cost b)
{
	return (struct cost){ sat_add(a.nodes, b.nodes), a.reps > b.reps ? a.reps : b.reps };
}

/* After '[': past the closing ']'. A ']' first is a member; [:class:], [=x=] and [.x.] may
 * hold a ']'. An unterminated list stops at the end (regcomp() refuses it). */
static void bracket(struct walk *w)
{
	if (*w->p == '^')
		w->p++;
	if (*w->p == ']')
		w->p++;
	while (*w->p && *w->p != ']') {
		char end = w->p[1];

		if (w->p[0] == '[' && (end == ':' || end == '=' || end == '.')) {
			const char *q = w->p + 2;

			while (*q && !(q[0] == end && q[1] == ']'))
				q++;
			w->p = *q ? q + 2 : q;
		} else {
			w->p++;
		}
	}
	if (*w->p)
		w->p++;
}

static struct cost atom(struct walk *w)
{
	struct cost n;
	char c = *w->p++;

	switch (c) {
	case '(':
		if (++w->depth > RECHECK_MAX_DEPTH) {
			w->err = w->err ?: -ELOOP;
			return (struct cost){ COST_CAP, 0 };
		}
		n = alternation(w);
		if (*w->p == ')')
			w->p++;
		w->depth--;
		n.nodes = sat_add(n.nodes, 1);
		return n;
	case '\\':
		if (*w->p >= '1' && *w->p <= '9')
			w->err = w->err ?: -EINVAL;
		if (*w->p)
			w->p++;
		return (struct cost){ 1, 0 };
	case '[':
		bracket(w);
		/* fall through */
	default:
		return (struct cost){ 1, 0 };
	}
}

/* A count of an interval: digits, saturated. */
static uint64_t count(const char **p)
{
	uint64_t v = 0;

	for (; **p >= '0' && **p <= '9'; (*p)++)
		v = v > COST_CAP ? COST_CAP : v * 10 + (uint64_t)(**p - '0');
	return v;
}

/* At '{': the copies regcomp() makes of the repeated subexpression ({m,n}: n; {m,}: m and a
 * starred one), past the closing '}'; 0 (and nothing consumed) when this is no interval, which
 * regcomp() then takes literally or refuses. */
static uint64_t interval(struct walk *w)
{
	const char *p = w->p + 1;
	uint64_t m, n;
	bool any;

	any = *p >= '0' && *p <= '9';
	m = count(&p);
	n = m;
	if (*p == ',') {
		p++;
		if (*p >= '0' && *p <= '9')
			n = count(&p);
		else
			n = sat_add(m, 1);
		any = true;
	}
	if (!any || *p != '}')
		return 0;
	w->p = p + 1;
	return n > m ? n : (m ?: 1);
}

/* An atom and the repeats that follow it. */
static struct cost piece(struct walk *w)
{
	struct cost n = atom(w);
	uint64_t copies;

	for (;;) {
		switch (*w->p) {
		case '*':
		case '?':
			w->p++;
			n.nodes = sat_add(n.nodes, 1);
			break;
		case '+':
			w->p++;
			n.nodes = sat_add(sat_mul(n.nodes, 2), 1);
			break;
		case '{':
			copies = interval(w);
			if (!copies)
				return n;       /* a literal '{': the next piece */
			n.nodes = sat_add(sat_mul(n.nodes, copies), 1);
			break;
		default:
			return n;
		}
		n.reps++;
	}
}

static struct cost concatenation(struct walk *w)
{
	struct cost n = { 0, 0 };

	while (*w->p && *w->p != '|' && !(*w->p == ')' && w->depth) && !w->err)
		n = join(n, piece(w));
	return n;
}

static struct cost alternation(struct walk *w)
{
	struct cost n = concatenation(w);

	while (*w->p == '|' && !w->err) {
		w->p++;
		n = join(n, concatenation(w));
		n.nodes = sat_add(n.nodes, 1);
	}
	return n;
}

int recheck(const char *pattern, char *why, size_t whylen)
{
	struct walk w = { .p = pattern };
	struct cost n = alternation(&w);    /* the whole pattern: at the top a ')' is a piece */

	switch (w.err) {
	case -ELOOP:
		snprintf(why, whylen, "groups are nested more than %d deep", RECHECK_MAX_DEPTH);
		return -ELOOP;
	case -EINVAL:
		snprintf(why, whylen, "back-references (\\1 to \\9) are not supported: matching "
			 "them can take exponential time");
		return -EINVAL;
	}
	if (n.reps > RECHECK_MAX_REPEAT_DEPTH) {
		snprintf(why, whylen, "repeats are nested more than %d deep (such as \"((a?)+)*\" "
			 "or \"a?+*\"); nest fewer", RECHECK_MAX_REPEAT_DEPTH);
		return -ELOOP;
	}
	if (n.nodes > RECHECK_MAX_NODES) {
		snprintf(why, whylen, "it expands to more than %d nodes once its bounded repeats "
			 "are copied ({m,n} inside {m,n} multiplies); use smaller counts, or * and +",
			 RECHECK_MAX_NODES);
		return -E2BIG;
	}
	return 0;
}
