/* SPDX-License-Identifier: MIT */
/*
 * Where the BPF Python walker finds things in a CPython interpreter. User space fills one
 * struct py_offsets per target process (map py_procs, keyed by tgid) from its table of
 * offsets per CPython version (injector/target/pyoffsets.c), and one struct py_thread per
 * Python thread (map py_threads, keyed by host tid) from the interpreter's thread list.
 *
 * Include after <linux/types.h> (user space) or vmlinux.h (BPF).
 */
#ifndef AIPROF_BPF_PYSTACK_H
#define AIPROF_BPF_PYSTACK_H

#define PY_OFF_NONE 0xffffu
#define PY_FRAME_READ 80          /* bytes of a _PyInterpreterFrame read per frame */
#define PY_SCRATCH_SIZE 128       /* size of the per-CPU buffer a frame is read into */

struct py_offsets {
	/* PyThreadState -> the innermost _PyInterpreterFrame: either
	 * tstate->cframe->current_frame (3.11, 3.12) or tstate->current_frame (3.13+) */
	__u16 ts_cframe;              /* PY_OFF_NONE when there is no _PyCFrame */
	__u16 cframe_current_frame;
	__u16 ts_current_frame;       /* PY_OFF_NONE when reached through cframe */
	/* _PyInterpreterFrame, all < PY_FRAME_READ */
	__u16 fr_code;                /* f_code / f_executable */
	__u16 fr_previous;
	__u16 fr_instr;               /* prev_instr / instr_ptr */
	__u16 fr_owner;
	__u16 fr_is_entry;            /* PY_OFF_NONE after 3.11 */
	__u64 code_mask;              /* applied to fr_code's value (tag bits of a stack ref) */
	__u64 gil_holder;             /* the address of the GIL's last_holder (a PyThreadState *)
				       * in the target, its `locked` int 8 bytes on; 0: not
				       * known for this version (no GIL flag) */
};

struct py_thread {
	__u64 tstate;                 /* PyThreadState * in the target */
};

_Static_assert(sizeof(struct py_offsets) == 32, "py_offsets layout");

#endif
