/* SPDX-License-Identifier: MIT */
/*
 * What every eBPF collector shares with user space: the record header on the ring buffer,
 * the stacks block (kernel, user, Python) and the map of target processes. Fixed-width
 * types only; the sizes are asserted on both sides.
 *
 * Include after <linux/types.h> (user space) or vmlinux.h (BPF).
 */
#ifndef AIPROF_BPF_STACK_H
#define AIPROF_BPF_STACK_H

#define EBPF_KSTACK_MAX 48      /* kernel frames kept per stack */
#define EBPF_USTACK_MAX 96      /* user (native) frames kept per stack */
#define EBPF_PY_MAX     64      /* Python frames kept per stack: */
#define EBPF_PY_INNER   48      /* the innermost ones, then */
#define EBPF_PY_OUTER   16      /* the outermost ones (a power of two), the root's side */
#define EBPF_PY_WALK_MAX 1024   /* frames walked at most (the frames between the inner and
				 * outer ones are counted, not kept) */
#define EBPF_MAX_TARGETS 1024   /* processes (tgids) one session can watch */
#define EBPF_TARGET_SLOTS 16384 /* slots of the target filter, a power of two */
#define EBPF_TARGET_PROBES 8    /* a target sits at most this many slots after tgid's own */

enum ebpf_rec_type {
	EBPF_REC_CPU_SAMPLE = 1,  /* struct cpu_sample (cpu.h) */
	EBPF_REC_OFFCPU,          /* struct offcpu_event (offcpu.h) */
	EBPF_REC_SYSCALL,         /* struct syscall_event (syscalls.h) */
	EBPF_REC_TASK,            /* struct task_dump (tasks.h): read from an iterator, not the ring */
	EBPF_REC_FOLLOW,          /* struct follow_event (follow.h) */
};

/* A thread's token bucket for its costly records (bpf/ratelimit.bpf.h), in task storage. */
struct rl_bucket {
	__u64 last;               /* when it was last refilled, CLOCK_MONOTONIC ns; 0: never */
	__u64 tokens;             /* RL_ONE per token */
};

/* A place a thread's record with stacks (off-CPU) or file (slow syscall) was taken at, in its
 * task storage (bpf/ratelimit.bpf.h): later waits there within site_fresh_ns borrow it. */
#define SITE_SLOTS 4

struct site_slot {
	__u64 key;                /* 0: an empty slot */
	__u64 recorded;           /* when its last record was taken, CLOCK_MONOTONIC ns */
};

/* First bytes of every ring-buffer record. ts is bpf_ktime_get_ns(): CLOCK_MONOTONIC ns. */
struct ebpf_rec_hdr {
	__u32 type;               /* enum ebpf_rec_type */
	__u32 tgid;               /* host pid */
	__u32 tid;                /* host tid */
	__u32 cpu;
	__u64 ts;
	char comm[16];            /* thread name */
};

/*
 * One Python frame as read from the interpreter: the code object (PyCodeObject *) and the
 * instruction pointer into its bytecode. The byte at bit 48 of instr_flags is the frame's
 * `owner`, the one at bit 56 its `is_entry` (3.11 only); the low 48 bits are the pointer.
 */
struct ebpf_py_frame {
	__u64 code;
	__u64 instr_flags;
};

#define EBPF_PY_INSTR_MASK   0x0000ffffffffffffULL
#define EBPF_PY_OWNER_SHIFT  48
#define EBPF_PY_ENTRY_SHIFT  56

enum ebpf_py_status {
	EBPF_PY_ST_NONE = 0,          /* not a Python thread (or Python not enabled) */
	EBPF_PY_ST_OK = 1,            /* frames read up to the bottom of the stack */
	EBPF_PY_ST_TRUNCATED = 2,     /* more frames than EBPF_PY_WALK_MAX: the outer ones
				       * kept are not the outermost */
	EBPF_PY_ST_READ_ERROR = 3,    /* a frame could not be read: stopped there */
	EBPF_PY_ST_NO_FRAME = 4,      /* Python thread outside any Python code */
};

/* Whether a Python thread held the GIL when its stack was read (the GIL's last_holder is
 * its thread state and the GIL is locked). */
enum ebpf_py_gil {
	EBPF_PY_GIL_UNKNOWN = 0,      /* not a Python thread, or the version's GIL not known */
	EBPF_PY_GIL_HELD = 1,
	EBPF_PY_GIL_NOT_HELD = 2,
};

struct ebpf_stacks {
	__s32 kstack_bytes;       /* bpf_get_stack() result: bytes of kips, or -errno */
	__s32 ustack_bytes;       /* same, for uips */
	/* entries of py used: innermost first, up to EBPF_PY_INNER; with py_cut > 0 the
	 * EBPF_PY_OUTER outermost frames walked follow in a ring, the innermost of them at
	 * py[EBPF_PY_INNER + py_cut % EBPF_PY_OUTER] */
	__u16 py_frames;
	__u16 py_cut;             /* frames walked between the inner and the outer ones */
	__u16 py_status;          /* enum ebpf_py_status */
	__u16 py_gil;             /* enum ebpf_py_gil: the thread held the GIL as read */
	__u64 kips[EBPF_KSTACK_MAX];
	__u64 uips[EBPF_USTACK_MAX];
	struct ebpf_py_frame py[EBPF_PY_MAX];
};

/*
 * The target filter is an array (lookups the verifier inlines: no helper call on the path
 * every syscall and context switch of the machine takes) of EBPF_TARGET_SLOTS slots; a
 * target's tgid is in slot tgid % EBPF_TARGET_SLOTS or in one of the next
 * EBPF_TARGET_PROBES - 1 (open addressing, placed by user space). tgid 0 = empty;
 * EBPF_TARGET_GONE: a target that exited (bpf/follow.bpf.c), a slot that matches no tgid
 * again but keeps the probe sequences through it whole.
 */
#define EBPF_TARGET_GONE 0xffffffffu
struct ebpf_target {
	__u32 tgid;
	__u32 index;              /* position in the session's target list */
};

#define EBPF_STACKS_SIZE (16 + 8 * (EBPF_KSTACK_MAX + EBPF_USTACK_MAX) + 16 * EBPF_PY_MAX)

/*
 * For unwinding by CFI in user space (injector/target/unwind.h): the thread's user
 * registers and a copy of its user stack from the stack pointer up, appended to a CPU
 * sample or an off-CPU record. Whole pages after the first partial one, until a page
 * cannot be read (the top of the stack) or ucopy_max bytes. Only the used part of data
 * is on the ring buffer: a record is sizeof(fixed part) + EBPF_UCOPY_HDR + bytes.
 */
#define EBPF_UCOPY_MAX 16384      /* bytes of stack at most, a multiple of the page size */
#define EBPF_UCOPY_REGS 17        /* x86_64 DWARF order: rax rdx rcx rbx rsi rdi rbp rsp
				   * r8..r15, rip */
#define EBPF_UCOPY_HDR (8 * EBPF_UCOPY_REGS + 8)

struct ebpf_ucopy {
	__u64 regs[EBPF_UCOPY_REGS];
	__u32 bytes;              /* of data used, copied from regs[7] (sp) upward */
	__u32 pad;
	__u8 data[EBPF_UCOPY_MAX];
};

_Static_assert(sizeof(struct ebpf_rec_hdr) == 40, "ebpf_rec_hdr layout");
_Static_assert(sizeof(struct ebpf_py_frame) == 16, "ebpf_py_frame layout");
_Static_assert(EBPF_PY_INNER + EBPF_PY_OUTER == EBPF_PY_MAX &&
	       !(EBPF_PY_OUTER & (EBPF_PY_OUTER - 1)), "Python frame slots");
_Static_assert(sizeof(struct ebpf_stacks) == EBPF_STACKS_SIZE, "ebpf_stacks layout");
_Static_assert(sizeof(struct ebpf_ucopy) == EBPF_UCOPY_HDR + EBPF_UCOPY_MAX, "ebpf_ucopy layout");

#endif
