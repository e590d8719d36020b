/* SPDX-License-Identifier: MIT */
/*
 * Where CPython keeps what a profiler needs, per interpreter version: the one table of
 * offsets (injector/target/pyoffsets.c). Covered: 3.11, 3.12, 3.13 (default, GIL builds on
 * x86_64). The numbers are offsetof() of the structs in each version's own headers; for
 * 3.13 the target's _Py_DebugOffsets, when present and consistent, take precedence.
 */
#ifndef AIPROF_EBPF_PYOFFSETS_H
#define AIPROF_EBPF_PYOFFSETS_H

#include <stdint.h>
#include <linux/types.h>
#include "bpf/pystack.h"

#define PY_OWNER_NO_SHIM 0xff

struct py_version_offsets {
	uint32_t minor;                     /* 11 for 3.11 */
	/* _PyRuntime -> interpreters -> thread states (read from user space) */
	uint32_t runtime_interpreters_head;
	uint32_t interp_next;
	uint32_t interp_threads_head;
	uint32_t tstate_next;
	uint32_t tstate_interp;
	uint32_t tstate_native_thread_id;
	/* what the BPF walker reads (thread state -> frames) */
	struct py_offsets bpf;
	/* frames whose owner is >= this are the interpreter's own shims (entry frames on the
	 * C stack, 3.12+): not Python functions, and they separate the Python frames of one
	 * C-level _PyEval_EvalFrameDefault call from the next. PY_OWNER_NO_SHIM before 3.12,
	 * where the last frame of each call has is_entry set instead. */
	uint8_t owner_shim_min;
	/* PyCodeObject */
	uint32_t code_filename, code_name, code_qualname, code_firstlineno, code_linetable;
	uint32_t code_adaptive;             /* co_code_adaptive: the bytecode */
	/* PyObject, PyBytesObject, PyASCIIObject / PyCompactUnicodeObject */
	uint32_t ob_type;
	uint32_t bytes_size, bytes_data;
	uint32_t unicode_length, unicode_state;
	uint32_t unicode_ascii_size;        /* sizeof(PyASCIIObject): where ASCII data starts */
	uint32_t unicode_compact_size;      /* sizeof(PyCompactUnicodeObject) */
	/* a thread's `threading` name (py_thread_name()): the Thread object is the first
	 * local of the thread's outermost frame, Thread._bootstrap(self) */
	uint32_t fr_localsplus;             /* _PyInterpreterFrame.localsplus */
	uint32_t type_name, type_basicsize, type_flags;    /* PyTypeObject */
	uint32_t heap_name, heap_cached_keys;  /* PyHeapTypeObject: ht_name, ht_cached_keys */
	/* an instance's attributes: a managed dict pointer at obj - dict_before; 3.11 has
	 * the split values' pointer at obj - values_before, 3.12 tags the dict pointer (odd:
	 * values - 1), 3.13 keeps them inline at obj + tp_basicsize (by minor, below) */
	uint32_t dict_before, values_before;
	uint32_t dict_keys, dict_values;    /* PyDictObject: ma_keys, ma_values */
	uint32_t values_head;               /* PyDictValues: bytes before values[] */
	/* PyDictKeysObject: dk_log2_index_bytes, dk_kind, dk_nentries, dk_indices */
	uint32_t keys_log2_index_bytes, keys_kind, keys_nentries, keys_indices;
	/* the main thread's name: interp->modules (0: not known for this version), a module's
	 * md_dict, an int's size (3.11: ob_size; 3.12+: lv_tag) and digits */
	uint32_t interp_modules, module_dict, long_size, long_digits;
	/* the GIL's last_holder in _PyRuntime (its locked int 8 bytes on); 0: not known (3.12+
	 * keep the GIL in the interpreter) */
	uint32_t runtime_gil_last_holder;
};

/* The row for a PY_VERSION_HEX, or NULL if this version is not covered. */
const struct py_version_offsets *py_offsets_for(uint32_t version_hex);

/* "3.11, 3.12, 3.13": the versions the table covers, for messages. */
const char *py_offsets_covered(void);

#endif
