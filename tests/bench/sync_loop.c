/* SPDX-License-Identifier: MIT */
/*
 * sync_loop: calls cudaStreamSynchronize() on an idle stream of the fake CUDA runtime (a
 * call of well under a microsecond) as fast as it can, and prints
 * "rate t=<CLOCK_MONOTONIC ns> ns_per_call=<x>" every 50 ms, for
 * tests/bench/bench_uprobe_vs_hook.py: the cost of a traced call with a uprobe pair
 * (--method ebpf) against libaiprof's hook (--method ptrace), side by side.
 * Prints "ready pid=N" first; runs for argv[1] seconds (default 30). With argv[2], at most
 * that many calls a second (paced every millisecond), for tests/bench/bench_memory.py.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "timeutil.h"

#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 30;
	long per_ms = argc > 2 ? atol(argv[2]) / 1000 : 0;
	cudaStream_t stream;
	uint64_t start, t0;

	if (cudaStreamCreate(&stream) != cudaSuccess) {
		fprintf(stderr, "sync_loop: no stream\n");
		return 1;
	}
	printf("ready pid=%d\n", (int)getpid());
	fflush(stdout);
	start = t0 = now_monotonic_ns();
	while (t0 - start < (uint64_t)(seconds * 1e9)) {
		long n = 0;
		uint64_t t1;

		do {
			int batch = per_ms > 0 ? (int)per_ms : 256;

			for (int i = 0; i < batch; i++)
				if (cudaStreamSynchronize(stream) != cudaSuccess)
					return 1;
			n += batch;
			if (per_ms > 0) {   /* sleep to the next millisecond of the schedule */
				uint64_t due = t0 + (uint64_t)(n / per_ms) * 1000000ull, now = now_monotonic_ns();

				if (due > now)
					nanosleep(&(struct timespec){ 0, (long)(due - now) }, NULL);
			}
			t1 = now_monotonic_ns();
		} while (t1 - t0 < 50000000ull);
		printf("rate t=%llu ns_per_call=%.2f\n", (unsigned long long)t1, (double)(t1 - t0) / (double)n);
		fflush(stdout);
		t0 = now_monotonic_ns();
	}
	return 0;
}
