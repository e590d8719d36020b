/* SPDX-License-Identifier: MIT */
/* profile.pb.gz: the eBPF collectors' and the GPU launches' stacks as pprof's profile.proto
 * (pprof.c). */
#ifndef AIPROF_PPROF_H
#define AIPROF_PPROF_H

#include <stdint.h>

struct ebpf;
struct profile;

/*
 * Writes path (gzip). Sample types samples/count, cpu/nanoseconds (the default),
 * off_cpu/nanoseconds and gpu_time/nanoseconds (gpu_launches/count without GPU timing: the
 * default when there are no eBPF stacks), one sample per stack. e may be NULL (no eBPF
 * collectors), prof too (no launches). 0 (also when neither has a stack: nothing written),
 * or -errno.
 */
int pprof_write(const struct profile *prof, const struct ebpf *e, const char *path,
		uint64_t start_realtime_ns, uint64_t duration_ns);

#endif
