/* SPDX-License-Identifier: MIT */
/*
 * The GPU-launch flame graph's input: the CPU call stack at every kernel launch
 * (cudaLaunchKernel / cuLaunchKernel), as libaiprof's launch hooks recorded it
 * (u.launch.stack_id, injector/preload/callstack.c), symbolised here, with the hooked
 * API and the kernel on top:
 *
 *     comm-PID;outermost;...;caller;cudaLaunchKernel;kernel WEIGHT
 *
 * WEIGHT is the kernel's GPU time in ns when the window has CUPTI kernel records
 * (matched to the launch by correlation id; kernels whose launch was not recorded, e.g.
 * launched before the window opened, sit under "[launch not recorded]" so the total is
 * the GPU time of every kernel in the window), else 1 per launch. Launches without a
 * stack (eBPF-only method, a walk that found no frame) sit under "[no call stack]".
 */
#ifndef AIPROF_LAUNCH_STACKS_H
#define AIPROF_LAUNCH_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct profile;
struct membuf;

struct launch_stacks_stats {
	bool by_gpu_time;               /* weights are GPU ns (CUPTI), else launches */
	uint64_t total;                 /* sum of the weights */
	uint64_t launches;              /* kernel launches recorded */
	uint64_t launches_with_stack;   /* of which carried a call stack */
	uint64_t launches_stack_cfi;    /* of those, unwound by CFI (the rest: frame pointers) */
	uint64_t kernels;               /* CUPTI kernel records */
	uint64_t kernels_without_launch;/* of which had no recorded launch */
};

/* The counts and the total weight alone (no symbolisation): for the summary. */
void launch_stacks_count(const struct profile *p, struct launch_stacks_stats *ret);

/*
 * Appends the folded stacks of every target to out (lines in first-seen order, equal
 * stacks merged) and fills *ret. 0, or -ENOMEM.
 */
int launch_stacks_folded(const struct profile *p, struct membuf *out,
			 struct launch_stacks_stats *ret);

/*
 * Parses a launch stack as libaiprof sends it (injector/preload/callstack.c): '@' first
 * when it was unwound by CFI, return
 * addresses in lower-case hex, innermost first, separated by ',', then optionally '|' and
 * the Python frames "code:flags" the same way. Text from the target: at most max / maxpy
 * entries are kept, and parsing stops at anything else (a chunk lost with a full ring
 * leaves the string cut short), keeping what came before.
 */
void launch_stack_parse(const char *s, uint64_t *pc, size_t max, size_t *ret_n,
			uint64_t (*py)[2], size_t maxpy, size_t *ret_npy);


#endif
