/* SPDX-License-Identifier: MIT */
/*
 * A bound on what a POSIX extended regular expression costs before regcomp() sees it.
 *
 * glibc's regcomp() copies the subexpression of a bounded repeat once per count, so nested
 * bounds multiply: "((a{1,32767}){1,32767}){1,32767}" is a few dozen characters that expand
 * into gigabytes, and regcomp() does not return until it has built them. Patterns come from
 * people who may not be trusted (a ProfilingSession's process.match), so the controller and
 * the injector measure a pattern first: recheck() walks it once (linear in its length, no
 * allocation) and estimates the number of nodes regcomp() will build, with every bounded
 * repeat counted as its copies, and how deep repeats nest in repeats. Repeats over what can
 * match the empty string cost glibc far more than their nodes (epsilon closures): a bounded
 * repeat of more than one copy over one is refused, and other repeats over one are held to
 * RECHECK_MAX_EMPTY_REPEAT_NODES. A pattern over a limit, or one with back-references (\1..\9:
 * glibc accepts them in EREs and matching them is exponential) is refused with the reason;
 * anything else is left to regcomp(), which still has the last word on syntax.
 */
#ifndef AIPROF_RECHECK_H
#define AIPROF_RECHECK_H

#include <stddef.h>

#define RECHECK_MAX_NODES 4096          /* regcomp() builds that in well under a millisecond */
#define RECHECK_MAX_DEPTH 32            /* nested groups */
#define RECHECK_MAX_REPEAT_DEPTH 4      /* repeats nested in repeats: "((a?)+)*" is 3 */
#define RECHECK_MAX_EMPTY_REPEAT_NODES 256  /* a repeat over what can match empty */

/* 0 when pattern is cheap enough to compile; else, with the reason in why: -E2BIG (too many
 * nodes once repeats are expanded), -ELOOP (groups or repeats nested too deep, or a bounded
 * repeat over what can match empty) or -EINVAL (a back-reference). */
int recheck(const char *pattern, char *why, size_t whylen);

#endif
