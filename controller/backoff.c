/* SPDX-License-Identifier: MIT */
#include <sys/random.h>
#include <time.h>
#include "backoff.h"

uint64_t backoff_ns(uint64_t base_ns, uint64_t cap_ns, unsigned attempt, uint64_t rnd)
{
	uint64_t c = base_ns;

	if (attempt == 0)
		return 0;
	for (unsigned i = 1; i < attempt && c < cap_ns; i++)
		c = c > UINT64_MAX / 2 ? UINT64_MAX : c * 2;
	if (c > cap_ns)
		c = cap_ns;
	if (c < 2)
		return c;
	return c / 2 + rnd % (c - c / 2 + 1);
}

uint64_t random_u64(void)
{
	static __thread uint64_t state;
	uint64_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
		return v;
	if (!state) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		state = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL + (uint64_t)ts.tv_sec + 1;
	}
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}
