/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 for text that reaches a Kubernetes status or a termination message: the API server
 * and jansson take only valid UTF-8 (no overlong forms, no surrogates, nothing past
 * U+10FFFF), and one bad byte costs the whole message. Text from a target (its argv, its
 * paths, its thread names) is anything; text cut at a byte count can end inside a sequence.
 */
#ifndef AIPROF_UTF8_H
#define AIPROF_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid sequence at s[0..n), or 0 when s does not start with one. */
size_t utf8_seq_len(const char *s, size_t n);

/* Whether s[0..n) is valid UTF-8 with no NUL. */
bool utf8_valid(const char *s, size_t n);

/* The largest k <= max (and <= n) such that s[0..k) does not end inside a sequence. */
size_t utf8_cut(const char *s, size_t n, size_t max);

/*
 * Makes the NUL-terminated s valid UTF-8 in place: every byte that does not start a valid
 * sequence becomes '?' (the length is kept), then the text is cut at a sequence's boundary
 * to fit size (at most size - 1 bytes). Returns the new length.
 */
size_t utf8_fix(char *s, size_t size);

#endif
