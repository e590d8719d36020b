/* SPDX-License-Identifier: MIT */
/* On-CPU sampling (cpu.bpf.c <-> injector/collect/ebpf_cpu.c): one record per sample. */
#ifndef AIPROF_BPF_CPU_H
#define AIPROF_BPF_CPU_H

#include "stack.h"

struct cpu_sample {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_CPU_SAMPLE; ts = when the sample fired */
	struct ebpf_stacks st;
};

/* a sample with its stack copy: only its first sizeof(s) + EBPF_UCOPY_HDR + u.bytes go out */
struct cpu_sample_ucopy {
	struct cpu_sample s;
	struct ebpf_ucopy u;
};

_Static_assert(sizeof(struct cpu_sample) == 40 + EBPF_STACKS_SIZE, "cpu_sample layout");
_Static_assert(sizeof(struct cpu_sample_ucopy) == sizeof(struct cpu_sample) +
	       sizeof(struct ebpf_ucopy), "cpu_sample_ucopy layout");

#endif
