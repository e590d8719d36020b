/* SPDX-License-Identifier: MIT */
/*
 * What the injector reads of the in-cluster store's answers to an upload (storeput.c): the
 * Retry-After of a 503 and the first line of a refusal. The server's bytes, so read within
 * the lengths libcurl gives (its header lines are not NUL-terminated) and made printable.
 */
#ifndef AIPROF_STOREANSWER_H
#define AIPROF_STOREANSWER_H

#include <stddef.h>
#include <stdint.h>

#define STORE_RETRY_AFTER_MAX_S 60

/* The wait a header line line[0..n) asks for, when it is "Retry-After: SECONDS" (at most
 * STORE_RETRY_AFTER_MAX_S); 0 for any other line or value. */
uint64_t store_retry_after_ns(const char *line, size_t n);

/* The first line of the answer body[0..n) into out (NUL-terminated, printable). */
void store_answer_detail(const char *body, size_t n, char *out, size_t outlen);

#endif
