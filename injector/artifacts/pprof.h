/* SPDX-License-Identifier: MIT */
/* profile.pb.gz: the eBPF collectors' stacks as pprof's profile.proto (pprof.c). */
#ifndef AIPROF_PPROF_H
#define AIPROF_PPROF_H

#include <stdint.h>

struct ebpf;

/*
 * Writes path (gzip). Sample types samples/count, cpu/nanoseconds (the default) and
 * off_cpu/nanoseconds, one sample per stack. 0 (also when e is NULL: nothing written),
 * or -errno.
 */
int pprof_write(const struct ebpf *e, const char *path, uint64_t start_realtime_ns,
		uint64_t duration_ns);

#endif
