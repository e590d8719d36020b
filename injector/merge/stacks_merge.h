/* SPDX-License-Identifier: MIT */
/*
 * `aiprof merge` of `aiprof stacks --format json` dumps (aiprof.stacks/v1), one or more per
 * rank: the ranks grouped by the stack of their main thread, and the ones that are not
 * where the others are named — for a hang, the ranks that never arrived at the collective
 * the others wait in. Reading the dumps is the parser of outside input here (fuzzed by
 * tests/fuzz/fuzz_stacks_merge.c).
 */
#ifndef AIPROF_STACKS_MERGE_H
#define AIPROF_STACKS_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct stacks_merge;

/* Is path a stacks dump (a regular file whose JSON says schema aiprof.stacks/v1)? */
bool stacks_merge__is_dump(const char *path);

/* Adds the processes of one dump, given as text (len bytes); src names it in messages. 0,
 * or -EINVAL with msg saying what is wrong, -ENOMEM. */
int stacks_merge__add(struct stacks_merge *m, const char *src, const char *text, size_t len,
		      char *msg, size_t msglen);
/* The same for the stacks.json of one rank's profile folder: rank_hint (>= 0) is the rank
 * of a process whose dump names none (the merge knows it from its collectives). */
int stacks_merge__add_ranked(struct stacks_merge *m, const char *src, const char *text,
			     size_t len, int rank_hint, char *msg, size_t msglen);
int stacks_merge__new(struct stacks_merge **ret);
void stacks_merge__free(struct stacks_merge *m);  /* NULL-safe */

/* Groups the ranks and decides who is not where the others are. */
int stacks_merge__run(struct stacks_merge *m);
/* The result as JSON (schema aiprof.stacks-merge/v1) and as text. 0 or -errno. */
int stacks_merge__write_json(const struct stacks_merge *m, FILE *f);
void stacks_merge__write_text(const struct stacks_merge *m, FILE *f);
/* The finding (category, severity, summary, not_arrived, evidence: the named ranks'
 * stacks) as a new JSON object; NULL when no rank is named. */
typedef struct json_t json_t;
json_t *stacks_merge__finding(const struct stacks_merge *m);
/* How many ranks are named as not where the others are (0: all together, or undecided). */
size_t stacks_merge__outliers(const struct stacks_merge *m);

#endif
