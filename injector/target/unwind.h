/* SPDX-License-Identifier: MIT */
/*
 * Native stacks of another process without frame pointers: the call frame information
 * (.eh_frame, else .debug_frame) of each module, read with elfutils' libdw, executed in
 * user space over a copy of the thread's registers and stack (taken by the eBPF
 * collectors at the sample, or read live by `aiprof stacks`). x86_64 only.
 *
 * Where a frame's code has no CFI (JIT code, anonymous memory, a stripped module without
 * .eh_frame) one frame-pointer step is tried, so that code built with frame pointers is
 * still crossed; if that fails too the walk ends there and the reason is returned.
 *
 * Tables are per module (an ELF file, by the caller's key: build-id or file identity) for
 * the life of the unwind_tables, shared by every process unwound with them, opened when
 * first needed. The frames libdw decodes are cached per (module, address) up to a bound;
 * the bytes are counted. With unwind_tables__share(), decoded rows are also shared with
 * every other aiprof on the node through a cache directory (uwshare.h): a row another
 * injector decoded is taken from there, and a module whose rows all come from there is
 * never decoded here. The walk is the same either way (tests/fuzz/fuzz_unwind.c compares).
 *
 * The stack and the ELF files are the target's: untrusted. Nothing in them can make this
 * loop (the stack pointer must grow at every step, and the depth is bounded) or read
 * outside what the callbacks return (tests/fuzz/fuzz_unwind.c).
 */
#ifndef AIPROF_UNWIND_H
#define AIPROF_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uwshare.h"

struct Elf;

/* DWARF register numbers of x86_64 (the psABI's), and the return address column */
enum {
	UW_RAX, UW_RDX, UW_RCX, UW_RBX, UW_RSI, UW_RDI, UW_RBP, UW_RSP,
	UW_R8, UW_R9, UW_R10, UW_R11, UW_R12, UW_R13, UW_R14, UW_R15,
	UW_RIP,
	UW_NREGS
};

#define UNWIND_MAX_FRAMES 128     /* native frames kept per stack by the collectors */

struct unwind_regs {
	uint64_t r[UW_NREGS];
	uint32_t valid;           /* bit n: r[n] is known */
};

/* Where a code address is: the module's ELF (the caller keeps it open), key and load bias. */
struct unwind_code {
	struct Elf *elf;
	int fd;                   /* the file elf reads from (for the shared rules); -1: none */
	uint64_t key;             /* same module, same key; 0 is allowed */
	uint64_t bias;            /* runtime address = bias + ELF vaddr */
};

struct unwind_target {
	/* 8 bytes of the target's memory at addr; false when they are not available */
	bool (*read)(void *arg, uint64_t addr, uint64_t *ret_val);
	/* 0 and *ret for an address in a file-backed executable mapping whose ELF could be
	 * read; a negative errno otherwise (-ENOENT: not in any such mapping: JIT code) */
	int (*code)(void *arg, uint64_t pc, struct unwind_code *ret);
	void *arg;
};

enum unwind_end {
	UNWIND_END_ROOT = 0,      /* the CFI marks the outermost frame (_start, clone3) */
	UNWIND_END_UNKNOWN_CODE,  /* a pc in no file-backed mapping (JIT, anonymous memory) */
	UNWIND_END_NO_CFI,        /* a module without CFI for the pc, frame pointer unusable */
	UNWIND_END_STACK,         /* needed stack beyond what was copied */
	UNWIND_END_MAX_DEPTH,     /* more frames than the caller's array */
	UNWIND_END_BAD_FRAME,     /* CFI that does not compute, or a stack that does not grow */
	UNWIND_END__N
};

const char *unwind_end_name(enum unwind_end e);  /* "root", "unknown_code", ... */

struct unwind_result {
	size_t n;                 /* frames written */
	size_t fp_frames;         /* of them, reached by a frame-pointer step */
	enum unwind_end end;
};

struct unwind_stats {
	size_t modules;           /* modules whose tables were opened */
	size_t modules_without_cfi;
	uint64_t cfi_bytes;       /* .eh_frame(_hdr) and .debug_frame of those modules */
	size_t frames_cached, frames_cache_max;
	uint64_t frames_cache_bytes;  /* the decoded frames kept (malloc_usable_size) */
	uint64_t lookups, cache_hits;
	uint64_t modules_decoded;     /* modules whose CFI libdw read here */
	uint64_t modules_from_image;  /* of them, from the shared copy of their .eh_frame */
	uint64_t modules_from_memory; /* of them, with no file to share: read from the target's
				       * memory (the vDSO) */
	bool shared;                  /* rows shared through a cache directory */
	struct uws_stats share;
	uint64_t rows_not_shareable;  /* rows that need a DWARF expression: decoded here */
};

struct unwind_tables;

/* cache_max: decoded frames kept (0: a default of 65536). Returns -ENOMEM. */
int unwind_tables__new(size_t cache_max, struct unwind_tables **ret);
void unwind_tables__free(struct unwind_tables *t);  /* NULL-safe */
void unwind_tables__stats(const struct unwind_tables *t, struct unwind_stats *ret);
/*
 * Shares decoded rows with the other injectors of the node through directory dir
 * (uwshare.h; created 0700). 0, or -errno with why set: the tables work unshared.
 */
int unwind_tables__share(struct unwind_tables *t, const char *dir, char *why, size_t whylen);
const char *unwind_tables__share_dir(const struct unwind_tables *t);  /* NULL: not shared */
/* The key the shared directory files the module open on fd under (its CFI sections and the
 * ELF header fields its rows depend on): 0, or -ENOTSUP when the module is not shared (no
 * CFI, or a header the shared rows cannot describe), -ENOEXEC if fd is not ELF. */
int unwind_module_digest(int fd, uint8_t digest[UWS_DIGEST_LEN]);

/*
 * Walks from regs (the interrupted state: r[UW_RIP] is an exact pc) outward. pcs[0] is
 * that pc, pcs[1..] return addresses (point after the call), as bpf_get_stack() gives
 * them. Writes at most max frames. Returns 0 with *ret filled, or -ENOMEM.
 */
int unwind_stack(struct unwind_tables *t, const struct unwind_target *tgt,
		 const struct unwind_regs *regs, uint64_t *pcs, size_t max,
		 struct unwind_result *ret);

#endif
