/* SPDX-License-Identifier: MIT */
/*
 * System calls of the targets (syscalls.bpf.c <-> injector/collect/ebpf_syscalls.c): latency per
 * syscall kind aggregated in the kernel, and one record per slow call with the file or
 * socket behind its fd (or the path it was given) and its byte count.
 */
#ifndef AIPROF_BPF_SYSCALLS_H
#define AIPROF_BPF_SYSCALLS_H

#include "stack.h"

#define SYSCALL_NR_MAX    512     /* syscall numbers at or above are counted, not classified */
#define SYSCALL_HIST      40      /* log2(ns) buckets: bucket b holds [2^b, 2^(b+1)) ns */
#define SYSCALL_PATH_DEPTH 16     /* path components walked up from a dentry */
#define SYSCALL_NAME_LEN  64      /* bytes kept per component (NUL included) */
#define SYSCALL_BYTES_UNKNOWN (~0ull) /* a flush's bytes where the writes were not all seen */

/* What user space says about each syscall number (map sys_kinds, one byte per nr). */
enum syscall_kind {
	SYS_K_FD0 = 1 << 0,       /* args[0] is a file descriptor */
	SYS_K_PATH0 = 1 << 1,     /* args[0] is a path string in user memory */
	SYS_K_PATH1 = 1 << 2,     /* args[1] is a path string in user memory */
	SYS_K_WRITES = 1 << 3,    /* a positive return is bytes written to fd args[0] */
	SYS_K_SYNCS = 1 << 4,     /* flushes fd args[0]: report and reset bytes written to it */
	SYS_K_CLOSES = 1 << 5,    /* closes fd args[0] */
};

struct syscall_stat_key {
	__u32 tgid;
	__u32 nr;
};

struct syscall_stat {          /* per CPU; user space sums */
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 slow;               /* calls at or above the slow threshold */
	__u64 untimed;            /* switch mode: calls that gave up the CPU past their thread's
				   * rate, counted at the switch-in and not timed (in none of
				   * the fields above; one per time a call gave up the CPU;
				   * those slow already then are in slow and limited too) */
	__u64 limited;            /* of slow: no record, past their thread's record rate */
	__u64 site;               /* of slow (switch mode): at a site their thread recorded one
				   * at less than site_fresh_ns ago, a syscall_site_event each
				   * (also in untimed) */
	__u32 hist[SYSCALL_HIST];
};



#define SYS_UNTIMED_SLOTS 4

#define ARMED_HELD 3

struct sys_untimed {
	__u32 nr;
	__u32 count;              /* 0: the slot is free */
};

/* Per target thread (task storage sys_start): the call it is in, and its buckets. */
struct sys_enter_state {
	__u64 ts;                 /* 0: not in a call we saw start (switch mode: give up the CPU) */
	__u64 args[3];
	__u32 nr;
	__u32 armed;              /* switch mode: its task work is scheduled (2: the call was
				   * slow at its switch-in, its record's token taken there;
				   * ARMED_HELD: by sys_hold, asleep in it as a pause began) */
	__u32 epoch;              /* switch mode: the collector's epoch as the call was seen */
	__u32 nsw;                /* and the thread's context switches then */
	struct rl_bucket rl_rec;  /* its slow-call records */
	struct rl_bucket rl_time; /* switch mode: its short calls timed by a task work */
	/* its untimed calls not yet in sys_stats, per syscall (a thread that waits in a few
	 * calls in turn, a GIL futex and a recv, touches no hash for them): one is folded
	 * when a fifth syscall needs its slot, all at the thread's exit; user space reads the
	 * rest at the end */
	struct sys_untimed un[SYS_UNTIMED_SLOTS];
	struct site_slot sites[SITE_SLOTS];  /* switch mode: its last slow-call records' sites
					      * (syscall, first argument, user pc) */
};

enum syscall_path_src {
	SYS_PATH_NONE = 0,
	SYS_PATH_DENTRY = 1,      /* comps[] leaf first, up to the root of the mount tree; an empty
				   * component marks a mount point crossed */
	SYS_PATH_USER = 2,        /* upath: the string the caller passed */
};

struct syscall_event {
	struct ebpf_rec_hdr hdr;  /* type EBPF_REC_SYSCALL; ts = entry (switch mode: the
				   * first time the call gave up the CPU) */
	__u64 dur_ns;
	__s64 ret;
	__u64 args[3];
	__u64 bytes;              /* ret for reads/writes; for an fsync-like call the bytes written
				   * to the file since the last one (or since recording began),
				   * SYSCALL_BYTES_UNKNOWN in switch mode */
	__u64 file_size;          /* i_size of the file, 0 if none */
	__u64 ino;
	__u32 nr;
	__u32 i_mode;             /* 0 when there was no file */
	__u32 s_magic;            /* superblock magic: pipefs, sockfs, anon_inodefs, ... */
	__u32 path_src;           /* enum syscall_path_src */
	__u32 depth;              /* comps[] filled (SYS_PATH_DENTRY) */
	__u16 sk_family, sk_proto;
	__u16 sport, dport;       /* host order */
	__u16 sk_type;
	__u16 path_truncated;     /* deeper than SYSCALL_PATH_DEPTH: comps[] end below the root */
	__u8 saddr[16], daddr[16];
	union {
		char comps[SYSCALL_PATH_DEPTH][SYSCALL_NAME_LEN];
		char upath[SYSCALL_PATH_DEPTH * SYSCALL_NAME_LEN];
	};
};

/* A slow call at a site its thread recorded one at a moment ago (switch mode): no file
 * looked up (user space gives it that record's), timed until it got the CPU back, no return
 * value, no task work. A record of type EBPF_REC_SYSCALL this size, flags SYSCALL_F_SITE. */
#define SYSCALL_F_SITE 1

struct syscall_site_event {
	struct ebpf_rec_hdr hdr;  /* ts = the first time it gave up the CPU */
	__u64 dur_ns;             /* until it got the CPU back */
	__u64 args[3];
	__u32 nr;
	__u32 flags;
};

_Static_assert(sizeof(struct syscall_stat) == 56 + 4 * SYSCALL_HIST, "syscall_stat layout");
_Static_assert(sizeof(struct syscall_site_event) == 80, "syscall_site_event layout");
_Static_assert(sizeof(struct sys_enter_state) == 80 + 8 * SYS_UNTIMED_SLOTS + 16 * SITE_SLOTS, "sys_enter_state layout");
_Static_assert(sizeof(struct syscall_event) ==
	       40 + 8 * 8 + 4 * 5 + 2 * 6 + 32 + SYSCALL_PATH_DEPTH * SYSCALL_NAME_LEN,
	       "syscall_event layout");

#endif
