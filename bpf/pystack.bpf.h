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
					 __u8 **ret_buf, __u64 *ret_frame)
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
	return true;
}

/* Fills st->py*; leaves them zero (EBPF_PY_ST_NONE) for a thread that is not Python's. */
static __always_inline void py_walk(struct ebpf_stacks *st, __u32 tgid, __u32 tid)
{
	const struct py_offsets *o;
	__u64 frame;
	__u32 i;
	__u8 *buf;

	if (!py_innermost(tgid, tid, &o, &buf, &frame))
		return;
	if (!frame) {
		st->py_status = EBPF_PY_ST_NO_FRAME;
		return;
	}
	st->py_status = EBPF_PY_ST_OK;
	for (i = 0; i < EBPF_PY_MAX; i++) {
		__u64 code, instr, flags;

		if (!frame)
			break;
		if (bpf_probe_read_user(buf, PY_FRAME_READ, (const void *)frame) < 0) {
			st->py_status = EBPF_PY_ST_READ_ERROR;
			break;
		}
		code = py_load64(buf, o->fr_code) & o->code_mask;
		instr = py_load64(buf, o->fr_instr) & EBPF_PY_INSTR_MASK;
		flags = (__u64)py_load8(buf, o->fr_owner) << EBPF_PY_OWNER_SHIFT;
		if (o->fr_is_entry != PY_OFF_NONE)
			flags |= (__u64)(py_load8(buf, o->fr_is_entry) & 1) << EBPF_PY_ENTRY_SHIFT;
		st->py[i].code = code;
		st->py[i].instr_flags = instr | flags;
		frame = py_load64(buf, o->fr_previous);
	}
	st->py_frames = i;
	if (i == EBPF_PY_MAX && frame)
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
	__u64 frame;
	__u32 i;
	__u8 *buf;

	if (!py_innermost(tgid, tid, &o, &buf, &frame))
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
