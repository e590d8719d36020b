/* SPDX-License-Identifier: MIT */
/*
 * The stack store of the eBPF collectors: frame names and whole stacks interned to small
 * ids, a weight per stack and kind (CPU samples, off-CPU microseconds), the merge of
 * Python frames into native stacks, the folded-stacks writer and the frame tree the
 * timeline's stackFrames table is built from. Pure logic: no BPF, no /proc.
 */
#ifndef AIPROF_EBPF_STACKS_H
#define AIPROF_EBPF_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "blobtab.h"
#include "u64map.h"

enum stack_kind {
	STACK_CPU = 0,            /* weight: samples */
	STACK_OFFCPU = 1,         /* weight: microseconds blocked */
	STACK_WALL = 2,           /* weight: microseconds off a CPU, sampled (--mode wall) */
	STACK_KINDS
};

#define STACK_MAX_FRAMES 256

struct stack_store {
	struct blobtab frames;    /* NUL-terminated names */
	struct blobtab stacks;    /* uint32_t frame ids, root first */
	uint64_t *weight[STACK_KINDS];
	size_t weight_cap;
};

void stack_store__init(struct stack_store *s);
void stack_store__clear(struct stack_store *s);  /* frees everything; s can be reused */

/*
 * Interns a frame name and returns its id (>= 0), or -ENOMEM. Characters that would break
 * the folded format (';', newlines) are replaced; an empty name becomes "[unknown]".
 */
int stack_store__frame(struct stack_store *s, const char *name);
const char *stack_store__frame_name(const struct stack_store *s, uint32_t id);
size_t stack_store__nframes(const struct stack_store *s);

/* Interns a stack (frame ids, root first; n may be 0). Returns its id, or -ENOMEM/-EINVAL. */
int stack_store__stack(struct stack_store *s, const uint32_t *frames, size_t n);
const uint32_t *stack_store__stack_frames(const struct stack_store *s, uint32_t id, size_t *ret_n);
size_t stack_store__nstacks(const struct stack_store *s);

int stack_store__add(struct stack_store *s, uint32_t stack, enum stack_kind kind, uint64_t w);
/* Takes w back from a stack's weight (never below 0). */
void stack_store__sub(struct stack_store *s, uint32_t stack, enum stack_kind kind, uint64_t w);
uint64_t stack_store__weight(const struct stack_store *s, uint32_t stack, enum stack_kind kind);

/*
 * Writes one line per stack with a non-zero weight of this kind, "root;...;leaf weight",
 * in the order stacks were first seen. Returns 0 or -EIO.
 */
int stack_store__write_folded(const struct stack_store *s, enum stack_kind kind, FILE *f);

/*
 * Merging. All inputs innermost frame first:
 *   kernel[nk]            kernel frames (on top of everything else)
 *   native[nn]            user frames; native_eval[i] marks an interpreter-loop frame
 *                         (_PyEval_EvalFrameDefault)
 *   py[np]                Python frames; py_seg_end[i] marks the outermost frame run by
 *                         one C-level call of the interpreter loop
 * Each interpreter-loop frame, innermost first, is replaced by the next segment of Python
 * frames. Segments left over (the native stack was cut short, as it is through an
 * interpreter built without frame pointers) go below the outermost native frame, so the
 * Python frames are always there, in order. root, if not UINT32_MAX, is the outermost frame.
 * Marks of what is not shown, frames of their own, each 1 + its frame id (0: none):
 *   py_cut_at             the index in py of a mark (a frame id like the others there)
 *                         standing for Python frames not kept between the inner and
 *                         the outer ones, plus 1. The outer ones belong
 *                         to the outermost interpreter-loop frames: where the native stack
 *                         has more of those than py has segments, the ones the cut frames
 *                         ran in (and the native frames between them) are left out too.
 *   kernel_cut            below the kernel frames (the kernel stack was cut)
 *   native_cut            right above root (the native stack did not reach its first frame)
 * Writes at most max ids into out, root first, and returns how many.
 */
struct stack_merge_in {
	const uint32_t *kernel;
	size_t nk;
	const uint32_t *native;
	const bool *native_eval;
	size_t nn;
	const uint32_t *py;
	const bool *py_seg_end;
	size_t np;
	uint32_t root;
	size_t py_cut_at;
	uint32_t kernel_cut, native_cut;
};

size_t stack_merge(const struct stack_merge_in *in, uint32_t *out, size_t max);

/*
 * The frame tree for the timeline: a node per distinct (parent node, frame) so that a
 * stack is one node id (its leaf). Node ids start at 1.
 */
struct stack_tree {
	struct u64map edges;      /* (parent << 32 | frame) -> node */
	struct u64map leaf_of;    /* stack id -> leaf node */
	uint32_t *parent, *frame; /* by node id; [0] unused */
	size_t n, cap;
};

void stack_tree__init(struct stack_tree *t);
void stack_tree__clear(struct stack_tree *t);
/* The leaf node of a stack, adding its nodes if needed: > 0, 0 for an empty stack, or
 * -ENOMEM. */
int64_t stack_tree__leaf(struct stack_tree *t, const struct stack_store *s, uint32_t stack);

#endif
