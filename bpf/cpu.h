/* SPDX-License-Identifier: MIT */
/* On-CPU sampling (cpu.bpf.c <-> injector/collect/ebpf_cpu.c): one record per sample. */
#ifndef AIPROF_BPF_CPU_H
#define AIPROF_BPF_CPU_H

#include "stack.h"

struct cpu_sample {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_CPU_SAMPLE; ts = when the sample fired */
	struct ebpf_stacks st;
};

_Static_assert(sizeof(struct cpu_sample) == 40 + EBPF_STACKS_SIZE, "cpu_sample layout");

#endif
