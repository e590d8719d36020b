/* SPDX-License-Identifier: MIT */
/* Exponential backoff with jitter, pure (the random value is passed in). */
#ifndef AIPROF_BACKOFF_H
#define AIPROF_BACKOFF_H

#include <stdint.h>

/*
 * The wait before try number attempt+1 after attempt (>= 1) failures: "equal jitter",
 * uniformly in [c/2, c] where c = min(cap, base * 2^(attempt-1)). rnd: any 64-bit random
 * value. attempt 0 gives 0.
 */
uint64_t backoff_ns(uint64_t base_ns, uint64_t cap_ns, unsigned attempt, uint64_t rnd);

/* A 64-bit random value (getrandom, falling back to a xorshift of the clock). */
uint64_t random_u64(void);

#endif
