/* SPDX-License-Identifier: MIT */
/*
 * Maps every collector object declares identically, so that user space creates them once
 * and hands the same fds to each object (bpf_map__reuse_fd): the target filter, the
 * Python maps and the ring buffer all records go through.
 */
#ifndef AIPROF_MAPS_BPF_H
#define AIPROF_MAPS_BPF_H

#include "stack.h"
#include "pystack.h"

/* the only processes any program looks at (see struct ebpf_target) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EBPF_TARGET_SLOTS);
	__type(key, __u32);
	__type(value, struct ebpf_target);
} targets SEC(".maps");

/* tgid -> where the interpreter keeps its frames (Python targets only) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EBPF_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct py_offsets);
} py_procs SEC(".maps");

/* host tid -> its PyThreadState, refreshed by user space while recording */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* every record of every collector; user space sets the size before load */
/* User space consumes this on its own tick and never waits on it: every record goes in with
 * BPF_RB_NO_WAKEUP (a wakeup is an irq_work, a self-IPI, per record) */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* A 64-bit mix of a key and one more word: the wait-site keys (ratelimit.bpf.h) */
static __always_inline __u64 site_mix(__u64 k, __u64 v)
{
	k ^= v + 0x9e3779b97f4a7c15ULL + (k << 6) + (k >> 2);
	return k * 0xff51afd7ed558ccdULL;
}

static __always_inline bool is_target(__u32 tgid)
{
	for (__u32 i = 0; i < EBPF_TARGET_PROBES; i++) {
		__u32 slot = (tgid + i) & (EBPF_TARGET_SLOTS - 1);
		const struct ebpf_target *t = bpf_map_lookup_elem(&targets, &slot);

		if (!t || !t->tgid)
			return false;
		if (t->tgid == tgid)
			return true;
	}
	return false;
}

static __always_inline void fill_hdr(struct ebpf_rec_hdr *h, __u32 type, __u64 pid_tgid,
				     __u64 ts)
{
	h->type = type;
	h->tgid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->cpu = bpf_get_smp_processor_id();
	h->ts = ts;
	bpf_get_current_comm(h->comm, sizeof(h->comm));
}

#endif
