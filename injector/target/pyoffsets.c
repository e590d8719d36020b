/* SPDX-License-Identifier: MIT */
/*
 * The CPython offsets, one row per minor version. Taken from offsetof() on the structs of
 * each version's headers (Include/cpython/pystate.h, code.h, unicodeobject.h, object.h and
 * the internal pycore_frame.h, pycore_interp.h, pycore_runtime.h, pycore_dict.h,
 * pycore_object.h), checked against running interpreters 3.11.2 (Debian 12), 3.11.7,
 * 3.12.1 and 3.13.0 by tests/integration/test_ebpf.py; those for thread names (from
 * fr_localsplus on) against 3.11.2 only (tests/integration/test_pythreadnames.py), 3.12's
 * and 3.13's from their headers. Everything read through them is validated before use (a
 * code object must have PyCode_Type as its type, a type's ht_name must be its tp_name), so
 * a wrong row yields missing Python frames or names, never wrong ones.
 */
#include <stddef.h>

#include "pyoffsets.h"

static const struct py_version_offsets rows[] = {
	{
		.minor = 11,
		.runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 16,
		.tstate_next = 8, .tstate_interp = 16, .tstate_native_thread_id = 160,
		.bpf = {
			.ts_cframe = 56, .cframe_current_frame = 8, .ts_current_frame = PY_OFF_NONE,
			.fr_code = 32, .fr_previous = 48, .fr_instr = 56, .fr_owner = 69,
			.fr_is_entry = 68, .code_mask = ~0ULL,
		},
		.owner_shim_min = PY_OWNER_NO_SHIM,
		.code_filename = 112, .code_name = 120, .code_qualname = 128,
		.code_firstlineno = 72, .code_linetable = 136, .code_adaptive = 184,
		.ob_type = 8, .bytes_size = 16, .bytes_data = 32,
		.unicode_length = 16, .unicode_state = 32,
		.unicode_ascii_size = 48, .unicode_compact_size = 72,
		.fr_localsplus = 72,
		.type_name = 24, .type_basicsize = 32, .type_flags = 168,
		.dict_keys = 32, .dict_values = 40,
		.keys_log2_index_bytes = 9, .keys_kind = 10, .keys_nentries = 24, .keys_indices = 32,
		.heap_name = 848, .heap_cached_keys = 872,
		.dict_before = 24, .values_before = 32, .values_head = 0,
		.interp_modules = 888, .module_dict = 16, .long_size = 16, .long_digits = 24,
		.runtime_gil_last_holder = 368,   /* ceval.gil.last_holder, .locked at 376 */
	},
	{
		.minor = 12,
		.runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 72,
		.tstate_next = 8, .tstate_interp = 16, .tstate_native_thread_id = 144,
		.bpf = {
			.ts_cframe = 56, .cframe_current_frame = 0, .ts_current_frame = PY_OFF_NONE,
			.fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70,
			.fr_is_entry = PY_OFF_NONE, .code_mask = ~0ULL,
		},
		.owner_shim_min = 3,  /* FRAME_OWNED_BY_CSTACK */
		.code_filename = 112, .code_name = 120, .code_qualname = 128,
		.code_firstlineno = 68, .code_linetable = 136, .code_adaptive = 192,
		.ob_type = 8, .bytes_size = 16, .bytes_data = 32,
		.unicode_length = 16, .unicode_state = 32,
		.unicode_ascii_size = 40, .unicode_compact_size = 56,
		.fr_localsplus = 72,
		.type_name = 24, .type_basicsize = 32, .type_flags = 168,
		.dict_keys = 32, .dict_values = 40,
		.keys_log2_index_bytes = 9, .keys_kind = 10, .keys_nentries = 24, .keys_indices = 32,
		.heap_name = 856, .heap_cached_keys = 880,
		.dict_before = 24, .values_before = 0, .values_head = 0,
		.interp_modules = 0, .module_dict = 16, .long_size = 16, .long_digits = 24,
	},
	{
		.minor = 13,
		.runtime_interpreters_head = 632, .interp_next = 7264, .interp_threads_head = 7344,
		.tstate_next = 8, .tstate_interp = 16, .tstate_native_thread_id = 160,
		.bpf = {
			.ts_cframe = PY_OFF_NONE, .cframe_current_frame = 0, .ts_current_frame = 72,
			.fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70,
			.fr_is_entry = PY_OFF_NONE, .code_mask = ~0ULL,
		},
		.owner_shim_min = 3,  /* FRAME_OWNED_BY_CSTACK */
		.code_filename = 112, .code_name = 120, .code_qualname = 128,
		.code_firstlineno = 68, .code_linetable = 136, .code_adaptive = 200,
		.ob_type = 8, .bytes_size = 16, .bytes_data = 32,
		.unicode_length = 16, .unicode_state = 32,
		.unicode_ascii_size = 40, .unicode_compact_size = 56,
		.fr_localsplus = 72,
		.type_name = 24, .type_basicsize = 32, .type_flags = 168,
		.dict_keys = 32, .dict_values = 40,
		.keys_log2_index_bytes = 9, .keys_kind = 10, .keys_nentries = 24, .keys_indices = 32,
		.heap_name = 856, .heap_cached_keys = 880,
		.dict_before = 24, .values_before = 0, .values_head = 8,
		.interp_modules = 0, .module_dict = 16, .long_size = 16, .long_digits = 24,
	},
};

const struct py_version_offsets *py_offsets_for(uint32_t version_hex)
{
	if ((version_hex >> 24) != 3)
		return NULL;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].minor == ((version_hex >> 16) & 0xff))
			return &rows[i];
	return NULL;
}

const char *py_offsets_covered(void)
{
	return "3.11, 3.12, 3.13";
}
