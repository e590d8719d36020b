/* SPDX-License-Identifier: MIT */
/*
 * injector/target/pyframes.c and pyoffsets.c: CPython structures decoded from a fake
 * address space laid out with the 3.11 offsets, and the location table against what
 * CPython 3.11 itself says (co_lines()).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "injector/target/pyframes.h"

/* ---- the location table of a real function, and the ranges co_lines() gave for it ------- */

/* compile() of a 14-line function under CPython 3.11.2: firstlineno 2 */
static const uint8_t linetable[] = {
	0x80, 0x00, 0xd8, 0x08, 0x09, 0x88, 0x41, 0x89, 0x05, 0x80, 0x41, 0xd8, 0x07, 0x08, 0x88,
	0x32, 0x82, 0x76, 0x80, 0x76, 0xd8, 0x0c, 0x25, 0xd0, 0x0c, 0x25, 0x9d, 0x45, 0xa0, 0x21,
	0x99, 0x48, 0x9c, 0x48, 0xd0, 0x0c, 0x25, 0xd1, 0x0c, 0x25, 0xd4, 0x0c, 0x25, 0x88, 0x01,
	0xf5, 0x08, 0x00, 0x10, 0x13, 0x90, 0x31, 0x89, 0x76, 0x8c, 0x76, 0x88, 0x0d, 0xf0, 0x02,
	0x03, 0x05, 0x0e, 0xd8, 0x0c, 0x0d, 0x90, 0x01, 0x89, 0x45, 0x88, 0x01, 0x88, 0x01, 0xf8,
	0xdd, 0x0b, 0x1c, 0xf0, 0x00, 0x01, 0x05, 0x0e, 0xf0, 0x00, 0x01, 0x05, 0x0e, 0xf0, 0x00,
	0x01, 0x05, 0x0e, 0xd8, 0x0c, 0x0d, 0x88, 0x01, 0x88, 0x01, 0x88, 0x01, 0xf0, 0x03, 0x01,
	0x05, 0x0e, 0xf8, 0xf8, 0xf8, 0xe0, 0x0c, 0x0d, 0xd8, 0x0c, 0x0d, 0xf0, 0x03, 0x01, 0x0c,
	0x0f, 0xf0, 0x00, 0x01, 0x05, 0x0f,
};

static const struct { int start, end, line; } lines[] = {  /* line -1: None */
	{ 0, 2, 2 }, { 2, 4, 3 }, { 4, 6, 3 }, { 6, 10, 3 }, { 10, 12, 3 }, { 12, 14, 4 },
	{ 14, 16, 4 }, { 16, 22, 4 }, { 22, 24, 4 }, { 24, 26, 5 }, { 26, 28, 5 }, { 28, 40, 5 },
	{ 40, 42, 5 }, { 42, 46, 5 }, { 46, 56, 5 }, { 56, 58, 5 }, { 58, 62, 5 }, { 62, 72, 5 },
	{ 72, 74, 5 }, { 74, 86, 9 }, { 86, 88, 9 }, { 88, 92, 9 }, { 92, 102, 9 }, { 102, 104, 9 },
	{ 104, 106, 10 }, { 106, 108, 11 }, { 108, 110, 11 }, { 110, 114, 11 }, { 114, 116, 11 },
	{ 116, 118, 11 }, { 118, 120, -1 }, { 120, 132, 12 }, { 132, 134, 12 }, { 134, 136, 12 },
	{ 136, 138, 12 }, { 138, 140, 13 }, { 140, 142, 13 }, { 142, 144, 13 }, { 144, 146, 13 },
	{ 146, 148, 12 }, { 148, 150, -1 }, { 150, 152, -1 }, { 152, 154, -1 }, { 154, 156, 14 },
	{ 156, 158, 15 }, { 158, 160, 14 }, { 160, 162, 14 },
};

static void test_linetable_matches_cpython(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		for (int a = lines[i].start; a < lines[i].end; a += 2)
			assert_int_equal(py_linetable_line(linetable, sizeof(linetable), 2, (uint64_t)a),
					 lines[i].line);
	/* past the end of the table */
	assert_int_equal(py_linetable_line(linetable, sizeof(linetable), 2, 162), -1);
	assert_int_equal(py_linetable_line(linetable, sizeof(linetable), 2, 1u << 30), -1);
}

static void test_linetable_corrupt(void **state)
{
	static const uint8_t not_entry[] = { 0x00, 0x80 };
	static const uint8_t cut_varint[] = { 0xe8, 0x41 };  /* no-column form, varint never ends */
	static const uint8_t neg[] = { 0xe8, 0x07 };         /* 3 lines before firstlineno 1 */

	(void)state;
	assert_int_equal(py_linetable_line(NULL, 0, 1, 0), -1);
	assert_int_equal(py_linetable_line(not_entry, sizeof(not_entry), 1, 0), -1);
	assert_int_equal(py_linetable_line(cut_varint, sizeof(cut_varint), 1, 0), -1);
	assert_int_equal(py_linetable_line(neg, sizeof(neg), 1, 0), -1);
}

/* ---- a fake address space --------------------------------------------------------------- */

#define BASE 0x10000ULL
#define SIZE 0x4000

struct fake {
	uint8_t mem[SIZE];
	int reads;
};

static int fake_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct fake *f = ctx;

	f->reads++;
	if (addr < BASE || addr - BASE > SIZE || len > SIZE - (addr - BASE))
		return -EFAULT;
	memcpy(buf, f->mem + (addr - BASE), len);
	return 0;
}

static void put64(struct fake *f, uint64_t addr, uint64_t v)
{
	memcpy(f->mem + (addr - BASE), &v, sizeof(v));
}

static void put32(struct fake *f, uint64_t addr, uint32_t v)
{
	memcpy(f->mem + (addr - BASE), &v, sizeof(v));
}

/* a compact str at addr: kind 1 (ascii or latin-1), 2 or 4 */
static void put_str(struct fake *f, const struct py_version_offsets *o, uint64_t addr,
		    const void *chars, size_t n, unsigned kind, bool ascii)
{
	uint32_t state = (kind << 2) | (1u << 5) | ((ascii ? 1u : 0u) << 6);
	uint64_t data = addr + (ascii ? o->unicode_ascii_size : o->unicode_compact_size);

	put64(f, addr + o->unicode_length, n);
	put32(f, addr + o->unicode_state, state);
	memcpy(f->mem + (data - BASE), chars, n * kind);
}

enum {
	CODE_TYPE = 0x999000,
	CODE = BASE + 0x100, NAME = BASE + 0x400, QUAL = BASE + 0x500, FILE_ = BASE + 0x600,
	TABLE = BASE + 0x700, LATIN = BASE + 0x900, UCS2 = BASE + 0xa00, UCS4 = BASE + 0xb00,
	RUNTIME = BASE + 0x1000, INTERP = BASE + 0x1100, TS1 = BASE + 0x1400, TS2 = BASE + 0x1600,
	TS3 = BASE + 0x1800,
};

static struct fake *make_fake(const struct py_version_offsets *o)
{
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	put64(f, CODE + o->ob_type, CODE_TYPE);
	put64(f, CODE + o->code_name, NAME);
	put64(f, CODE + o->code_qualname, QUAL);
	put64(f, CODE + o->code_filename, FILE_);
	put32(f, CODE + o->code_firstlineno, 2);
	put64(f, CODE + o->code_linetable, TABLE);
	put_str(f, o, NAME, "step", 4, 1, true);
	put_str(f, o, QUAL, "Trainer.step", 12, 1, true);
	put_str(f, o, FILE_, "/srv/train.py", 13, 1, true);
	put64(f, TABLE + o->bytes_size, sizeof(linetable));
	memcpy(f->mem + (TABLE + o->bytes_data - BASE), linetable, sizeof(linetable));
	/* runtime -> interp -> TS1 -> TS2 -> TS3 (TS2 claims another interpreter) */
	put64(f, RUNTIME + o->runtime_interpreters_head, INTERP);
	put64(f, INTERP + o->interp_threads_head, TS1);
	put64(f, INTERP + o->interp_next, 0);
	put64(f, TS1 + o->tstate_interp, INTERP);
	put64(f, TS1 + o->tstate_native_thread_id, 4242);
	put64(f, TS1 + o->tstate_next, TS2);
	put64(f, TS2 + o->tstate_interp, 0xdead0000);
	put64(f, TS2 + o->tstate_native_thread_id, 4243);
	put64(f, TS2 + o->tstate_next, TS3);
	put64(f, TS3 + o->tstate_interp, INTERP);
	put64(f, TS3 + o->tstate_native_thread_id, 4244);
	put64(f, TS3 + o->tstate_next, TS3);  /* a cycle: must end anyway */
	return f;
}

static void test_offsets_table(void **state)
{
	(void)state;
	assert_non_null(py_offsets_for(0x030b02f0));  /* 3.11.2 final */
	assert_int_equal(py_offsets_for(0x030b07f0)->minor, 11);
	assert_int_equal(py_offsets_for(0x030c01f0)->minor, 12);
	assert_int_equal(py_offsets_for(0x030d00f0)->minor, 13);
	assert_null(py_offsets_for(0x030a0df0));       /* 3.10: no Py_Version, other frames */
	assert_null(py_offsets_for(0x030e00f0));       /* not covered yet */
	assert_null(py_offsets_for(0x020712f0));
	for (unsigned m = 11; m <= 13; m++) {
		const struct py_version_offsets *o = py_offsets_for(0x03000000u | m << 16);

		/* what the BPF walker reads must lie in the bytes it reads per frame */
		assert_true(o->bpf.fr_code + 8 <= PY_FRAME_READ);
		assert_true(o->bpf.fr_previous + 8 <= PY_FRAME_READ);
		assert_true(o->bpf.fr_instr + 8 <= PY_FRAME_READ);
		assert_true(o->bpf.fr_owner < PY_FRAME_READ);
		assert_true(o->bpf.fr_is_entry == PY_OFF_NONE || o->bpf.fr_is_entry < PY_FRAME_READ);
		assert_true((o->bpf.ts_cframe == PY_OFF_NONE) != (o->bpf.ts_current_frame == PY_OFF_NONE));
		assert_true(m == 11 ? o->owner_shim_min == PY_OWNER_NO_SHIM : o->owner_shim_min == 3);
	}
	assert_non_null(strstr(py_offsets_covered(), "3.11"));
}

static void test_read_code(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);
	struct fake *f = make_fake(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	struct py_code c;
	char buf[256];

	(void)state;
	assert_int_equal(py_read_code(&r, o, CODE_TYPE, CODE, &c), 0);
	assert_string_equal(c.qualname, "Trainer.step");
	assert_string_equal(c.filename, "/srv/train.py");
	assert_int_equal(c.firstlineno, 2);
	assert_int_equal(c.linetable_len, sizeof(linetable));
	assert_int_equal(c.bytecode, CODE + o->code_adaptive);
	py_format_frame(&c, py_linetable_line(c.linetable, c.linetable_len, c.firstlineno, 24),
			false, buf, sizeof(buf));
	assert_string_equal(buf, "Trainer.step (/srv/train.py:5)");
	py_format_frame(&c, -1, false, buf, sizeof(buf));
	assert_string_equal(buf, "Trainer.step (/srv/train.py)");
	/* the function's own name, as most Python profilers print it */
	py_format_frame(&c, 5, true, buf, sizeof(buf));
	assert_string_equal(buf, "step (/srv/train.py:5)");
	assert_string_equal(py_short_name("f.<locals>.<listcomp>"), "<listcomp>");
	assert_string_equal(py_short_name("<module>"), "<module>");
	assert_string_equal(py_short_name("odd."), "odd.");
	py_code__clear(&c);

	/* not a code object: another type, a wild pointer, NULL */
	assert_int_equal(py_read_code(&r, o, CODE_TYPE + 8, CODE, &c), -EINVAL);
	assert_int_equal(py_read_code(&r, o, CODE_TYPE, 0x7777777777ULL, &c), -EFAULT);
	assert_int_equal(py_read_code(&r, o, CODE_TYPE, 0, &c), -EFAULT);
	assert_null(c.linetable);

	/* no qualname: falls back to co_name; a broken line table is just no lines */
	put64(f, CODE + o->code_qualname, 0);
	put64(f, TABLE + o->bytes_size, 1u << 30);
	assert_int_equal(py_read_code(&r, o, CODE_TYPE, CODE, &c), 0);
	assert_string_equal(c.qualname, "step");
	assert_null(c.linetable);
	py_code__clear(&c);
	free(f);
}

static void test_read_str_kinds(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030c01f0);
	struct fake *f = make_fake(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	static const uint8_t latin[] = { 'c', 0xe9, 'l', 'e', 'b', 'r', 0xe9 };  /* "célebré" */
	static const uint16_t ucs2[] = { 0x65e5, 0x672c, 0xd800 };             /* 日本 + lone surrogate */
	static const uint32_t ucs4[] = { 0x1f600, 'x' };
	char buf[64];

	(void)state;
	put_str(f, o, LATIN, latin, sizeof(latin), 1, false);
	assert_int_equal(py_read_str(&r, o, LATIN, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "c\xc3\xa9lebr\xc3\xa9");
	put_str(f, o, UCS2, ucs2, 3, 2, false);
	assert_int_equal(py_read_str(&r, o, UCS2, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "\xe6\x97\xa5\xe6\x9c\xac\xef\xbf\xbd");
	put_str(f, o, UCS4, ucs4, 2, 4, false);
	assert_int_equal(py_read_str(&r, o, UCS4, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "\xf0\x9f\x98\x80x");
	/* truncation keeps whole characters */
	assert_int_equal(py_read_str(&r, o, UCS2, buf, 5), 0);
	assert_string_equal(buf, "\xe6\x97\xa5");
	/* not compact, or a bad kind */
	put32(f, UCS4 + o->unicode_state, 4u << 2);
	assert_int_equal(py_read_str(&r, o, UCS4, buf, sizeof(buf)), -EINVAL);
	put32(f, UCS4 + o->unicode_state, (3u << 2) | (1u << 5));
	assert_int_equal(py_read_str(&r, o, UCS4, buf, sizeof(buf)), -EINVAL);
	/* ascii flag with a wider kind is not a valid str */
	put32(f, UCS4 + o->unicode_state, (2u << 2) | (1u << 5) | (1u << 6));
	assert_int_equal(py_read_str(&r, o, UCS4, buf, sizeof(buf)), -EINVAL);
	free(f);
}

static void test_list_threads(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);
	struct fake *f = make_fake(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	struct py_tstate ts[8];
	size_t n = 99;

	(void)state;
	assert_int_equal(py_list_threads(&r, o, RUNTIME, ts, 8, &n), 0);
	assert_int_equal(n, 2);  /* TS2 points at another interpreter: a torn read, skipped */
	assert_int_equal(ts[0].tstate, TS1);
	assert_int_equal(ts[0].native_tid, 4242);
	assert_int_equal(ts[1].tstate, TS3);
	assert_int_equal(ts[1].native_tid, 4244);
	assert_int_equal(py_list_threads(&r, o, RUNTIME, ts, 1, &n), 0);
	assert_int_equal(n, 1);
	/* unreadable runtime */
	assert_int_equal(py_list_threads(&r, o, 0x5, ts, 8, &n), -EFAULT);
	assert_int_equal(n, 0);
	free(f);
}

/* A thread state freed under the walk: its reads fail `fails` times */
struct flaky {
	struct fake *f;
	uint64_t bad;
	int fails;
};

static int flaky_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct flaky *k = ctx;

	if (k->fails > 0 && addr >= k->bad && addr < k->bad + 0x100) {
		k->fails--;
		return -EFAULT;
	}
	return fake_read(k->f, addr, buf, len);
}

/* A list torn by a thread that ended under the walk is walked again; one torn every time
 * gives what was read and -EAGAIN (its caller then takes nothing away) */
static void test_list_threads_torn(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);
	struct flaky k = { .f = make_fake(o), .bad = TS3, .fails = 2 };
	struct py_reader r = { .read = flaky_read, .ctx = &k };
	struct py_tstate ts[8];
	size_t n = 99;

	(void)state;
	assert_int_equal(py_list_threads(&r, o, RUNTIME, ts, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(ts[1].tstate, TS3);
	k.fails = 1000;
	assert_int_equal(py_list_threads(&r, o, RUNTIME, ts, 8, &n), -EAGAIN);
	assert_int_equal(n, 1);
	assert_int_equal(ts[0].tstate, TS1);
	free(k.f);
}

/* frames as the BPF walker reads them, from user space (a thread asleep at the end) */
static void test_walk_frames(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);  /* via _PyCFrame */
	struct fake *f = make_fake(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	struct ebpf_py_frame out[4];
	const uint64_t cframe = BASE + 0x2000, fr1 = BASE + 0x2100, fr2 = BASE + 0x2200;
	uint32_t st, cut;
	size_t n;

	(void)state;
	put64(f, TS1 + o->bpf.ts_cframe, cframe);
	put64(f, cframe + o->bpf.cframe_current_frame, fr1);
	put64(f, fr1 + o->bpf.fr_code, CODE);
	put64(f, fr1 + o->bpf.fr_instr, CODE + o->code_adaptive + 24);
	put64(f, fr1 + o->bpf.fr_previous, fr2);
	put64(f, fr2 + o->bpf.fr_code, CODE);
	put64(f, fr2 + o->bpf.fr_instr, CODE + o->code_adaptive);
	f->mem[fr2 + o->bpf.fr_is_entry - BASE] = 1;
	f->mem[fr2 + o->bpf.fr_owner - BASE] = 1;
	put64(f, fr2 + o->bpf.fr_previous, 0);
	n = py_walk_frames(&r, o, TS1, out, 4, 0, &cut, &st);
	assert_int_equal(n, 2);
	assert_int_equal(st, EBPF_PY_ST_OK);
	assert_int_equal(out[0].code, CODE);
	assert_int_equal(out[0].instr_flags & EBPF_PY_INSTR_MASK, CODE + o->code_adaptive + 24);
	assert_int_equal(out[0].instr_flags >> EBPF_PY_ENTRY_SHIFT, 0);
	assert_int_equal((out[1].instr_flags >> EBPF_PY_ENTRY_SHIFT) & 1, 1);
	assert_int_equal((out[1].instr_flags >> EBPF_PY_OWNER_SHIFT) & 0xff, 1);
	/* a chain that loops stops at max and says so */
	put64(f, fr2 + o->bpf.fr_previous, fr1);
	n = py_walk_frames(&r, o, TS1, out, 4, 0, &cut, &st);
	assert_int_equal(n, 4);
	assert_int_equal(st, EBPF_PY_ST_TRUNCATED);
	/* a frame pointer into nowhere */
	put64(f, fr1 + o->bpf.fr_previous, 0x5000);
	n = py_walk_frames(&r, o, TS1, out, 4, 0, &cut, &st);
	assert_int_equal(n, 1);
	assert_int_equal(st, EBPF_PY_ST_READ_ERROR);
	/* a thread outside Python */
	put64(f, cframe + o->bpf.cframe_current_frame, 0);
	assert_int_equal(py_walk_frames(&r, o, TS1, out, 4, 0, &cut, &st), 0);
	assert_int_equal(st, EBPF_PY_ST_NO_FRAME);
	free(f);
}

/* A chain of 11 frames into 6 slots with 2 outer ones: the 4 innermost in order, the 2
 * outermost (the root's side) in their ring, the 5 between counted; a chain that loops
 * stops at EBPF_PY_WALK_MAX frames and says so */
static void test_walk_frames_keeps_the_outer_ones(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);
	struct fake *f = make_fake(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	struct ebpf_py_frame out[6];
	const uint64_t cframe = BASE + 0x2000;
	uint32_t st, cut;
	size_t n, ring;

	(void)state;
	put64(f, TS1 + o->bpf.ts_cframe, cframe);
	put64(f, cframe + o->bpf.cframe_current_frame, BASE + 0x2100);
	for (uint64_t i = 0; i < 11; i++) {
		uint64_t fr = BASE + 0x2100 + i * 0x80;

		put64(f, fr + o->bpf.fr_code, CODE + i);
		put64(f, fr + o->bpf.fr_instr, CODE + o->code_adaptive);
		put64(f, fr + o->bpf.fr_previous, i < 10 ? fr + 0x80 : 0);
	}
	n = py_walk_frames(&r, o, TS1, out, 6, 2, &cut, &st);
	assert_int_equal(n, 6);
	assert_int_equal(cut, 5);
	assert_int_equal(st, EBPF_PY_ST_OK);
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(out[i].code, CODE + i);
	ring = 4 + cut % 2;   /* the innermost of the outer ones */
	assert_int_equal(out[ring].code, CODE + 9);
	assert_int_equal(out[4 + (cut + 1) % 2].code, CODE + 10);
	/* without outer slots: cut at 6, TRUNCATED */
	n = py_walk_frames(&r, o, TS1, out, 6, 0, &cut, &st);
	assert_int_equal(n, 6);
	assert_int_equal(cut, 0);
	assert_int_equal(st, EBPF_PY_ST_TRUNCATED);
	/* a loop: walked to the bound */
	put64(f, BASE + 0x2100 + 10 * 0x80 + o->bpf.fr_previous, BASE + 0x2100);
	n = py_walk_frames(&r, o, TS1, out, 6, 2, &cut, &st);
	assert_int_equal(n, 6);
	assert_int_equal(cut, EBPF_PY_WALK_MAX - 6);
	assert_int_equal(st, EBPF_PY_ST_TRUNCATED);
	free(f);
}


/* ---- a thread's `threading` name ------------------------------------------------------- */

enum {
	STR_TYPE = BASE + 0x3f00, INT_TYPE = BASE + 0x3e40,
	BOOT = BASE + 0x2800, BNAME = BASE + 0x2a00, BQUAL = BASE + 0x2a80, BFILE = BASE + 0x2b00,
	TYPE = BASE + 0x2c00, TPNAME = BASE + 0x3000, HTNAME = BASE + 0x3040, SELF = BASE + 0x3100,
	KEYS = BASE + 0x3200, VALUES = BASE + 0x3300, K0 = BASE + 0x3400, K1 = BASE + 0x3480,
	K2 = BASE + 0x3500, TNAME = BASE + 0x3580, FR1 = BASE + 0x3700, FR2 = BASE + 0x3780,
	DICT = BASE + 0x3900, KEYS2 = BASE + 0x3a00, BASICSIZE = 16,
};

static void put_ascii(struct fake *f, const struct py_version_offsets *o, uint64_t addr,
		      const char *s)
{
	put_str(f, o, addr, s, strlen(s), 1, true);
	put64(f, addr + o->ob_type, STR_TYPE);
	/* the str and int types, by their tp_name */
	put64(f, STR_TYPE + o->type_name, STR_TYPE + 0x40);
	memcpy(f->mem + (STR_TYPE + 0x40 - BASE), "str", 4);
	put64(f, INT_TYPE + o->type_name, INT_TYPE + 0x40);
	memcpy(f->mem + (INT_TYPE + 0x40 - BASE), "int", 4);
}

/* a combined dict at d with one entry, key (a str at k) -> value; its keys at keys */
static void put_dict1(struct fake *f, const struct py_version_offsets *o, uint64_t d,
		      uint64_t keys, uint64_t k, const char *key, uint64_t value)
{
	put64(f, d + o->dict_keys, keys);
	put64(f, d + o->dict_values, 0);
	f->mem[keys + o->keys_log2_index_bytes - BASE] = 3;
	f->mem[keys + o->keys_kind - BASE] = 1;
	put64(f, keys + o->keys_nentries, 1);
	put64(f, keys + o->keys_indices + 8, k);
	put64(f, keys + o->keys_indices + 16, value);
	put_ascii(f, o, k, key);
}

/* a thread (TS1) in Trainer.step, called from Thread._bootstrap(self) whose self is an
 * instance of a Thread subclass "Worker" with _name "loader-0" in its split values, laid
 * out as version o keeps them */
static struct fake *make_thread(const struct py_version_offsets *o)
{
	struct fake *f = make_fake(o);
	const uint64_t cframe = BASE + 0x2000;
	uint64_t flags = (1u << 9) | (1u << 4) | (o->minor >= 13 ? 1u << 2 : 0);

	put64(f, NAME + o->ob_type, STR_TYPE);
	/* frames: TS1 -> FR1 (Trainer.step) -> FR2 (Thread._bootstrap) */
	if (o->bpf.ts_cframe != PY_OFF_NONE) {
		put64(f, TS1 + o->bpf.ts_cframe, cframe);
		put64(f, cframe + o->bpf.cframe_current_frame, FR1);
	} else {
		put64(f, TS1 + o->bpf.ts_current_frame, FR1);
	}
	put64(f, FR1 + o->bpf.fr_code, CODE);
	put64(f, FR1 + o->bpf.fr_previous, FR2);
	put64(f, FR2 + o->bpf.fr_code, BOOT);
	put64(f, FR2 + o->bpf.fr_previous, 0);
	put64(f, FR2 + o->fr_localsplus, SELF);
	put64(f, BOOT + o->ob_type, CODE_TYPE);
	put64(f, BOOT + o->code_name, BNAME);
	put64(f, BOOT + o->code_qualname, BQUAL);
	put64(f, BOOT + o->code_filename, BFILE);
	put64(f, BOOT + o->code_linetable, TABLE);
	put_ascii(f, o, BNAME, "_bootstrap");
	put_ascii(f, o, BQUAL, "Thread._bootstrap");
	put_ascii(f, o, BFILE, "/usr/lib/python3/threading.py");
	/* the type, a heap type whose ht_name is its tp_name */
	put64(f, TYPE + o->type_flags, flags);
	put64(f, TYPE + o->type_basicsize, BASICSIZE);
	put64(f, TYPE + o->type_name, TPNAME);
	memcpy(f->mem + (TPNAME - BASE), "Worker", 7);
	put64(f, TYPE + o->heap_name, HTNAME);
	put_ascii(f, o, HTNAME, "Worker");
	put64(f, TYPE + o->heap_cached_keys, KEYS);
	/* split keys: _target, _name, _args */
	f->mem[KEYS + o->keys_log2_index_bytes - BASE] = 3;
	f->mem[KEYS + o->keys_kind - BASE] = 2;
	put64(f, KEYS + o->keys_nentries, 3);
	put64(f, KEYS + o->keys_indices + 8 + 0 * 16, K0);
	put64(f, KEYS + o->keys_indices + 8 + 1 * 16, K1);
	put64(f, KEYS + o->keys_indices + 8 + 2 * 16, K2);
	put_ascii(f, o, K0, "_target");
	put_ascii(f, o, K1, "_name");
	put_ascii(f, o, K2, "_args");
	put_ascii(f, o, TNAME, "loader-0");
	/* the instance and its values */
	put64(f, SELF + o->ob_type, TYPE);
	if (o->minor == 11) {
		put64(f, SELF - o->values_before, VALUES);
		put64(f, VALUES + 8, TNAME);
	} else if (o->minor == 12) {
		put64(f, SELF - o->dict_before, VALUES - 1);
		put64(f, VALUES + 8, TNAME);
	} else {
		f->mem[SELF + BASICSIZE + 3 - BASE] = 1;        /* valid */
		put64(f, SELF + BASICSIZE + o->values_head + 8, TNAME);
	}
	return f;
}

static void test_thread_name_every_version(void **state)
{
	static const uint32_t versions[] = { 0x030b02f0, 0x030c01f0, 0x030d00f0 };
	char name[64];

	(void)state;
	for (size_t v = 0; v < 3; v++) {
		const struct py_version_offsets *o = py_offsets_for(versions[v]);
		struct fake *f = make_thread(o);
		struct py_reader r = { .read = fake_read, .ctx = f };

		assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), 0);
		assert_string_equal(name, "loader-0");
		/* the dict made (an __dict__ looked at): read from it, a combined table */
		memset(f->mem + (SELF - o->values_before - o->dict_before - BASE), 0,
		       o->values_before + o->dict_before);
		if (o->minor >= 13)
			f->mem[SELF + BASICSIZE + 3 - BASE] = 0;
		put64(f, SELF - o->dict_before, DICT);
		put64(f, DICT + o->dict_keys, KEYS2);
		put64(f, DICT + o->dict_values, 0);
		f->mem[KEYS2 + o->keys_log2_index_bytes - BASE] = 3;
		f->mem[KEYS2 + o->keys_kind - BASE] = 1;
		put64(f, KEYS2 + o->keys_nentries, 2);
		put64(f, KEYS2 + o->keys_indices + 8, K0);
		put64(f, KEYS2 + o->keys_indices + 8 + 16, K1);
		put64(f, KEYS2 + o->keys_indices + 8 + 24, TNAME);
		assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), 0);
		assert_string_equal(name, "loader-0");
		/* a _name that is not a str: no name */
		put64(f, TNAME + o->ob_type, CODE_TYPE);
		assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -EINVAL);
		assert_string_equal(name, "");
		free(f);
	}
}

static void test_thread_name_refuses_what_is_not_a_thread(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030c01f0);
	struct fake *f = make_thread(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	char name[64];

	(void)state;
	/* an entry shim outermost (3.12+) is not the thread's first Python frame */
	put64(f, FR2 + o->bpf.fr_previous, BASE + 0x3800);
	f->mem[BASE + 0x3800 + o->bpf.fr_owner - BASE] = o->owner_shim_min;
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), 0);
	assert_string_equal(name, "loader-0");
	/* a type whose ht_name is not its tp_name: the heap offsets are not trusted */
	put_ascii(f, o, HTNAME, "Other");
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put_ascii(f, o, HTNAME, "Worker");
	/* tp_name pointing at ht_name's own ASCII data, as CPython sets it: no text compared */
	put64(f, TYPE + o->type_name, HTNAME + o->unicode_ascii_size);
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), 0);
	put_str(f, o, HTNAME, "Worker", 6, 1, false);      /* not ASCII: then not its data */
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put64(f, TYPE + o->type_name, TPNAME);
	put_ascii(f, o, HTNAME, "Worker");
	/* a frame's code that is no code object */
	put64(f, BOOT + o->ob_type, STR_TYPE);
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put64(f, BOOT + o->ob_type, CODE_TYPE);
	/* no _name among the keys */
	put_ascii(f, o, K1, "_nome");
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put_ascii(f, o, K1, "_name");
	/* the outermost frame is some other function (the main thread's <module>) */
	put_ascii(f, o, BQUAL, "Thread._bootstrap_inner");
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put_ascii(f, o, BQUAL, "Thread._bootstrap");
	put_ascii(f, o, BFILE, "/srv/mythreading.pyc");
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	put_ascii(f, o, BFILE, "/usr/lib/python3/threading.py");
	/* a frame chain that loops is no thread's whole stack */
	put64(f, FR2 + o->bpf.fr_previous, FR1);
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -E2BIG);
	/* no frame at all (not started yet) */
	put64(f, BASE + 0x2000 + o->bpf.cframe_current_frame, 0);
	assert_int_equal(py_thread_name(&r, o, CODE_TYPE, TS1, name, sizeof(name)), -ENOENT);
	free(f);
}


/* threading._main_thread from _PyRuntime: sys.modules["threading"]._main_thread, its
 * _native_id and _name (3.11, the one version whose interp->modules the table has) */
static void test_main_thread_name(void **state)
{
	const struct py_version_offsets *o = py_offsets_for(0x030b02f0);
	struct fake *f = make_thread(o);
	struct py_reader r = { .read = fake_read, .ctx = f };
	const uint64_t mods = BASE + 0x3b00, mkeys = BASE + 0x3b40, mk = BASE + 0x3c00,
		       mod = BASE + 0x3c80, md = BASE + 0x3cc0, mdkeys = BASE + 0x3d00,
		       mdk = BASE + 0x3d80, id = BASE + 0x3e00;
	uint64_t tid = 0;
	char name[64];

	(void)state;
	put64(f, INTERP + o->interp_modules, mods);
	put_dict1(f, o, mods, mkeys, mk, "threading", mod);
	put64(f, mod + o->module_dict, md);
	put_dict1(f, o, md, mdkeys, mdk, "_main_thread", SELF);
	put_ascii(f, o, K2, "_native_id");
	put64(f, VALUES + 16, id);
	put64(f, id + o->ob_type, INT_TYPE);
	put64(f, id + o->long_size, 1);
	put32(f, id + o->long_digits, 4242);
	assert_int_equal(py_main_thread(&r, o, RUNTIME, &tid, name, sizeof(name)), 0);
	assert_int_equal(tid, 4242);
	assert_string_equal(name, "loader-0");
	/* a _native_id that is not an int (None before the thread ran) */
	put64(f, id + o->ob_type, STR_TYPE);
	assert_int_equal(py_main_thread(&r, o, RUNTIME, &tid, name, sizeof(name)), -EINVAL);
	put64(f, id + o->ob_type, INT_TYPE);
	/* threading not imported */
	put_ascii(f, o, mk, "threadinf");
	assert_int_equal(py_main_thread(&r, o, RUNTIME, &tid, name, sizeof(name)), -ENOENT);
	/* a version whose interp->modules is not known */
	assert_int_equal(py_main_thread(&r, py_offsets_for(0x030c01f0), RUNTIME, &tid, name,
					sizeof(name)), -ENOTSUP);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linetable_matches_cpython),
		cmocka_unit_test(test_linetable_corrupt),
		cmocka_unit_test(test_offsets_table),
		cmocka_unit_test(test_read_code),
		cmocka_unit_test(test_read_str_kinds),
		cmocka_unit_test(test_list_threads),
		cmocka_unit_test(test_list_threads_torn),
		cmocka_unit_test(test_walk_frames),
		cmocka_unit_test(test_walk_frames_keeps_the_outer_ones),
		cmocka_unit_test(test_thread_name_every_version),
		cmocka_unit_test(test_thread_name_refuses_what_is_not_a_thread),
		cmocka_unit_test(test_main_thread_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
