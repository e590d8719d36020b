/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "recheck.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* Node counts saturate here: far above the limit, far below overflow when multiplied. */
#define COST_CAP ((uint64_t)1 << 40)

/* What a subexpression costs: its nodes, how many repeats are nested in it ("(a?)+" nests
 * two), and whether it can match the empty string. glibc's epsilon closures grow about
 * fourfold with each nesting level over a subexpression that can match empty
 * ("a?+?+?+?+?+?+?+?+": 16 levels, 3.5 s), whatever the node count, so that depth is bounded
 * on its own; the copies of a bounded repeat over such a subexpression nest one in the next
 * ("a*{,3}{,9}+": minutes), so those are refused; and a repeat over one costs about the cube
 * of its size ("(a?|b?|...|z?)++" with 150 branches: 1.5 s), so that size is bounded too. */
struct cost {
	uint64_t nodes;
	unsigned reps;
	bool empty;             /* it can match the empty string */
};

struct walk {
	const char *p;          /* the next character */
	unsigned depth;         /* groups open */
	int err;                /* the first refusal, 0 while none */
	const char *why;        /* what it was, for -ELOOP and -E2BIG found on the way */
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

/* a then b: empty only if both are */
static struct cost join(struct cost a, struct cost b)
{
	return (struct cost){ sat_add(a.nodes, b.nodes), a.reps > b.reps ? a.reps : b.reps,
			      a.empty && b.empty };
}

static void refuse(struct walk *w, int err, const char *why)
{
	if (!w->err) {
		w->err = err;
		w->why = why;
	}
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
			refuse(w, -ELOOP, NULL);
			return (struct cost){ COST_CAP, 0, false };
		}
		n = alternation(w);
		if (*w->p == ')')
			w->p++;
		w->depth--;
		n.nodes = sat_add(n.nodes, 1);
		return n;
	case '\\':
		c = *w->p;
		if (c >= '1' && c <= '9')
			refuse(w, -EINVAL, NULL);
		if (c)
			w->p++;
		/* glibc's word and buffer anchors match the empty string */
		return (struct cost){ 1, 0, c && strchr("<>bB`'", c) };
	case '^':
	case '$':
		return (struct cost){ 1, 0, true };
	case '[':
		bracket(w);
		/* fall through */
	default:
		return (struct cost){ 1, 0, false };
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
 * starred one), past the closing '}', with its m in *min and whether it has no n in *open;
 * 0 (and nothing consumed) when this is no interval, which regcomp() then takes literally or
 * refuses. */
static uint64_t interval(struct walk *w, uint64_t *min, bool *open)
{
	const char *p = w->p + 1;
	uint64_t m, n;
	bool any, unbounded = false;

	any = *p >= '0' && *p <= '9';
	m = count(&p);
	n = m;
	if (*p == ',') {
		p++;
		if (*p >= '0' && *p <= '9') {
			n = count(&p);
		} else {
			n = sat_add(m, 1);
			unbounded = true;
		}
		any = true;
	}
	if (!any || *p != '}')
		return 0;
	w->p = p + 1;
	*min = m;
	*open = unbounded;
	return n > m ? n : (m ?: 1);
}

/* An atom and the repeats that follow it. */
static struct cost piece(struct walk *w)
{
	struct cost n = atom(w);
	uint64_t copies, min;
	bool open;

	for (;;) {
		bool was_empty = n.empty;

		switch (*w->p) {
		case '*':
		case '?':
			w->p++;
			n.nodes = sat_add(n.nodes, 1);
			n.empty = true;
			break;
		case '+':
			w->p++;
			n.nodes = sat_add(sat_mul(n.nodes, 2), 1);
			break;
		case '{':
			copies = interval(w, &min, &open);
			if (!copies)
				return n;       /* a literal '{': the next piece */
			/* one copy, or {1,}: what '?', '*' and '+' make */
			if (was_empty && copies > 1 && !(min == 1 && open))
				refuse(w, -ELOOP, "a bounded repeat applies to something that can "
				       "match the empty string (such as \"(a?){2,5}\" or \"a*{1,3}\"), "
				       "which makes compiling it exponential; write it without the "
				       "{m,n}");
			n.nodes = sat_add(sat_mul(n.nodes, copies), 1);
			if (!min)
				n.empty = true;
			break;
		default:
			return n;
		}
		if (++n.reps > RECHECK_MAX_REPEAT_DEPTH)
			refuse(w, -ELOOP, "repeats are nested more than " STR(RECHECK_MAX_REPEAT_DEPTH)
			       " deep (such as \"((a?)+)*\" or \"a?+*\"); nest fewer");
		if (was_empty && n.nodes > RECHECK_MAX_EMPTY_REPEAT_NODES)
			refuse(w, -E2BIG, "a repeat over something that can match the empty string "
			       "is larger than " STR(RECHECK_MAX_EMPTY_REPEAT_NODES) " nodes (such as "
			       "\"(a?|b?|c?|...)+\" with many branches), which makes compiling it "
			       "take seconds; make that part smaller");
	}
}

static struct cost concatenation(struct walk *w)
{
	struct cost n = { 0, 0, true };

	while (*w->p && *w->p != '|' && !(*w->p == ')' && w->depth) && !w->err)
		n = join(n, piece(w));
	return n;
}

static struct cost alternation(struct walk *w)
{
	struct cost n = concatenation(w);

	while (*w->p == '|' && !w->err) {
		w->p++;
		struct cost b = concatenation(w);
		bool empty = n.empty || b.empty;

		n = join(n, b);
		n.nodes = sat_add(n.nodes, 1);
		n.empty = empty;
	}
	return n;
}

int recheck(const char *pattern, char *why, size_t whylen)
{
	struct walk w = { .p = pattern };
	struct cost n = alternation(&w);    /* the whole pattern: at the top a ')' is a piece */

	if (w.err && w.why) {
		snprintf(why, whylen, "%s", w.why);
		return w.err;
	}
	switch (w.err) {
	case -ELOOP:
		snprintf(why, whylen, "groups are nested more than %d deep", RECHECK_MAX_DEPTH);
		return -ELOOP;
	case -EINVAL:
		snprintf(why, whylen, "back-references (\\1 to \\9) are not supported: matching "
			 "them can take exponential time");
		return -EINVAL;
	}
	if (n.nodes > RECHECK_MAX_NODES) {
		snprintf(why, whylen, "it expands to more than %d nodes once its bounded repeats "
			 "are copied ({m,n} inside {m,n} multiplies); use smaller counts, or * and +",
			 RECHECK_MAX_NODES);
		return -E2BIG;
	}
	return 0;
}
