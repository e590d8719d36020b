/* SPDX-License-Identifier: MIT */
/*
 * pingpong: two threads pass a byte back and forth over two pipes as fast as they can
 * (each pass two context switches) and print "it t=<CLOCK_MONOTONIC ns> n=<round trips>"
 * every 100 ms, for tests/bench/bench_sampler.py: what the CPU sampler's events cost a
 * target that switches hundreds of thousands of times a second. Prints "ready pid=N"
 * first; runs until killed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "timeutil.h"

static int ab[2], ba[2];

static void *peer(void *arg)
{
	char c;

	(void)arg;
	while (read(ab[0], &c, 1) == 1)
		if (write(ba[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(void)
{
	pthread_t t;
	uint64_t n = 0, next;
	char c = 0;

	if (pipe(ab) < 0 || pipe(ba) < 0 || pthread_create(&t, NULL, peer, NULL) != 0) {
		perror("pingpong");
		return 1;
	}
	printf("ready pid=%d\n", (int)getpid());
	fflush(stdout);
	next = now_monotonic_ns();
	for (;;) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			return 1;
		n++;
		if ((n & 255) == 0 && now_monotonic_ns() >= next) {
			printf("it t=%llu n=%llu\n", (unsigned long long)now_monotonic_ns(),
			       (unsigned long long)n);
			fflush(stdout);
			next += 100 * NSEC_PER_MSEC;
		}
	}
}
