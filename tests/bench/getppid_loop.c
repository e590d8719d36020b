/* SPDX-License-Identifier: MIT */
/*
 * getppid_loop: calls getppid() (through syscall(2): glibc does not cache it, but be sure)
 * as fast as it can and prints "rate t=<CLOCK_MONOTONIC ns> ns_per_call=<x>" every 50 ms,
 * for tests/bench/bench_bystander.py: what a process that is NOT profiled pays per system
 * call while aiprof records another one. Prints "ready pid=N" first; runs for argv[1]
 * seconds (default 30).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "timeutil.h"

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 30;
	uint64_t start, t0;

	printf("ready pid=%d\n", (int)getpid());
	fflush(stdout);
	start = t0 = now_monotonic_ns();
	for (;;) {
		uint64_t n = 0, t;

		do {
			for (int i = 0; i < 1000; i++)
				syscall(SYS_getppid);
			n += 1000;
			t = now_monotonic_ns();
		} while (t - t0 < 50000000ull);
		printf("rate t=%llu ns_per_call=%.2f\n", (unsigned long long)t,
		       (double)(t - t0) / (double)n);
		fflush(stdout);
		t0 = t;
		if ((double)(t - start) / 1e9 >= seconds)
			return 0;
	}
}
