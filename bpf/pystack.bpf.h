/* SPDX-License-Identifier: MIT */
/*
 * The Python frame walker, shared by the CPU and off-CPU collectors: from the current
 * thread's PyThreadState to its innermost _PyInterpreterFrame, then up the `previous`
 * chain, recording (code object, instruction pointer, owner) per frame. Nothing is
 * interpreted here: user space resolves code objects to names, files and lines, checks
 * that each really is a code object, and merges the frames into the native stack.
 * One bpf_probe_read_user() per frame (PY_FRAME_READ bytes into a per-CPU buffer).
 */
#ifndef AIPROF_PYSTACK_BPF_H
#define AIPROF_PYSTACK_BPF_H

#include "maps.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[PY_SCRATCH_SIZE]);
} py_scratch SEC(".maps");

static __always_inline __u64 py_load64(const __u8 *buf, __u32 off)
{
	if (off > PY_SCRATCH_SIZE - 8)
		return 0;
	return *(const __u64 *)(buf + off);
}

static __always_inline __u8 py_load8(const __u8 *buf, __u32 off)
{
	if (off > PY_SCRATCH_SIZE - 1)
		return 0;
	return buf[off];
}

static __always_inline __u64 py_read_ptr(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr) < 0)
		return 0;
	return v;
}

/*
 * The current thread's innermost _PyInterpreterFrame (0: none), its process's offsets and the
 * per-CPU buffer a frame is read into; false for a thread that is not Python's.
 */
static __always_inline bool py_innermost(__u32 tgid, __u32 tid, const struct py_offsets **ret_o,
					 __u8 **ret_buf, __u64 *ret_frame, __u64 *ret_tstate)
{
	const struct py_thread *th;
	const struct py_offsets *o;
	__u32 zero = 0;
	__u64 p;

	th = bpf_map_lookup_elem(&py_threads, &tid);
	if (!th || !th->tstate)
		return false;
	o = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!o)
		return false;
	*ret_buf = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!*ret_buf)
		return false;
	if (o->ts_cframe != PY_OFF_NONE) {
		p = py_read_ptr(th->tstate + o->ts_cframe);
		*ret_frame = p ? py_read_ptr(p + o->cframe_current_frame) : 0;
	} else {
		*ret_frame = py_read_ptr(th->tstate + o->ts_current_frame);
	}
	*ret_o = o;
	*ret_tstate = th->tstate;
	return true;
}

/* Whether the thread whose state is tstate holds the GIL now (last_holder and locked, read
 * at o->gil_holder in the current process). */
static __always_inline __u16 py_gil_of(const struct py_offsets *o, __u64 tstate)
{
	struct { __u64 last_holder; __s32 locked; } g;

	if (!o->gil_holder ||
	    bpf_probe_read_user(&g, sizeof(g), (const void *)o->gil_holder) < 0)
		return EBPF_PY_GIL_UNKNOWN;
	return g.locked && g.last_holder == tstate ? EBPF_PY_GIL_HELD : EBPF_PY_GIL_NOT_HELD;
}

struct py_walk_ctx {
	struct ebpf_stacks *st;
	const struct py_offsets *o;
	__u8 *buf;
	__u64 frame;              /* the next frame to read; 0: the walk reached the bottom */
	__u32 n;                  /* frames read */
	bool error;
};

/* bpf_loop's step: frame i into its slot (the inner ones, then the ring of outer ones) */
static int py_walk_step(__u32 i, void *arg)
{
	struct py_walk_ctx *c = arg;
	const struct py_offsets *o = c->o;
	struct ebpf_py_frame *f;
	__u64 flags;
	__u32 slot;

	if (!c->frame)
		return 1;
	if (bpf_probe_read_user(c->buf, PY_FRAME_READ, (const void *)c->frame) < 0) {
		c->error = true;
		return 1;
	}
	slot = i < EBPF_PY_INNER ? i : EBPF_PY_INNER + ((i - EBPF_PY_INNER) & (EBPF_PY_OUTER - 1));
	barrier_var(slot);        /* the bound below for the verifier, which the compiler drops */
	if (slot >= EBPF_PY_MAX)
		return 1;
	f = &c->st->py[slot];
	flags = (__u64)py_load8(c->buf, o->fr_owner) << EBPF_PY_OWNER_SHIFT;
	if (o->fr_is_entry != PY_OFF_NONE)
		flags |= (__u64)(py_load8(c->buf, o->fr_is_entry) & 1) << EBPF_PY_ENTRY_SHIFT;
	f->code = py_load64(c->buf, o->fr_code) & o->code_mask;
	f->instr_flags = (py_load64(c->buf, o->fr_instr) & EBPF_PY_INSTR_MASK) | flags;
	c->frame = py_load64(c->buf, o->fr_previous);
	c->n = i + 1;
	return 0;
}

/*
 * Fills st->py*; leaves them zero (EBPF_PY_ST_NONE) for a thread that is not Python's. Walks
 * up to EBPF_PY_WALK_MAX frames and keeps the innermost and the outermost ones (a flame
 * graph needs its root); the count of those between is py_cut. A kernel without bpf_loop
 * (before 5.17) walks EBPF_PY_MAX frames, and a deeper stack is EBPF_PY_ST_TRUNCATED.
 */
static __always_inline void py_walk(struct ebpf_stacks *st, __u32 tgid, __u32 tid)
{
	struct py_walk_ctx c = { .st = st };
	__u64 tstate;
	__u32 i;

	if (!py_innermost(tgid, tid, &c.o, &c.buf, &c.frame, &tstate))
		return;
	st->py_gil = py_gil_of(c.o, tstate);
	if (!c.frame) {
		st->py_status = EBPF_PY_ST_NO_FRAME;
		return;
	}
	st->py_status = EBPF_PY_ST_OK;
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_loop)) {
		bpf_loop(EBPF_PY_WALK_MAX, py_walk_step, &c, 0);
	} else {
		for (i = 0; i < EBPF_PY_MAX; i++)
			if (py_walk_step(i, &c))
				break;
	}
	if (c.n > EBPF_PY_MAX) {
		st->py_frames = EBPF_PY_MAX;
		st->py_cut = c.n - EBPF_PY_MAX;
	} else {
		st->py_frames = c.n;
	}
	if (c.error)
		st->py_status = EBPF_PY_ST_READ_ERROR;
	else if (c.frame)
		st->py_status = EBPF_PY_ST_TRUNCATED;
}

#define PY_SITE_FRAMES 3          /* innermost Python frames that name a wait's site */

/*
 * k mixed with the code objects and instruction pointers of the current thread's innermost
 * PY_SITE_FRAMES Python frames (a thread that is not Python's, or no frame: k unchanged).
 * Read in the thread's own context (its user memory), a read per frame: what tells two waits
 * apart that the native registers do not (Python 3.11 calls Python functions without a C
 * frame, so one C call site serves them all).
 */
static __always_inline __u64 py_site_key(__u64 k, __u32 tgid, __u32 tid)
{
	const struct py_offsets *o;
	__u64 frame, tstate;
	__u32 i;
	__u8 *buf;

	if (!py_innermost(tgid, tid, &o, &buf, &frame, &tstate))
		return k;
	for (i = 0; i < PY_SITE_FRAMES && frame; i++) {
		if (bpf_probe_read_user(buf, PY_FRAME_READ, (const void *)frame) < 0)
			return site_mix(k, 1);   /* unreadable: a key of its own */
		k = site_mix(k, py_load64(buf, o->fr_code) & o->code_mask);
		k = site_mix(k, py_load64(buf, o->fr_instr) & EBPF_PY_INSTR_MASK);
		frame = py_load64(buf, o->fr_previous);
	}
	return k;
}

#endif
