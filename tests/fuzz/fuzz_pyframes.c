/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what aiprof reads out of a Python target's memory: thread lists,
 * code objects, strings and location tables, all through the reader interface, from an
 * address space that is the fuzzer's input. Whatever the bytes, no crash, no hang, no
 * out-of-bounds read.
 * Frames of the threads found are walked as the BPF walker would, and their `threading`
 * names read.
 * Input: byte 0 picks the CPython version row, bytes 1..8 the runtime address, 9..16 a
 * code object address, 17..24 the address of PyCode_Type; the rest is memory at BASE.
 * FUZZ_SOURCES: injector/target/pyframes.c injector/target/pyoffsets.c
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "injector/target/pyframes.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)
#define BASE 0x100000ULL

struct image {
	const uint8_t *p;
	size_t n;
};

static int image_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	const struct image *im = ctx;

	if (addr < BASE || addr - BASE > im->n || len > im->n - (addr - BASE))
		return -EFAULT;
	memcpy(buf, im->p + (addr - BASE), len);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t versions[] = { 0x030b02f0, 0x030c01f0, 0x030d00f0 };
	const struct py_version_offsets *o;
	struct py_tstate ts[16];
	struct image im;
	struct py_reader r = { .read = image_read, .ctx = &im };
	struct py_code c;
	uint64_t runtime, code, code_type;
	char buf[64];
	size_t n = 0;

	if (size < 25)
		return 0;
	o = py_offsets_for(versions[data[0] % 3]);
	CHECK(o != NULL);
	memcpy(&runtime, data + 1, 8);
	memcpy(&code, data + 9, 8);
	memcpy(&code_type, data + 17, 8);
	/* keep the addresses mostly inside the image so that the decoders get far */
	runtime = BASE + runtime % (size + 64);
	code = BASE + code % (size + 64);
	im.p = data + 25;
	im.n = size - 25;

	if (py_list_threads(&r, o, runtime, ts, 16, &n) == 0)
		CHECK(n <= 16);
	for (size_t i = 0; i < n; i++) {
		struct ebpf_py_frame fr[8];
		uint32_t st, cut;

		CHECK(py_walk_frames(&r, o, ts[i].tstate, fr, 8, 4, &cut, &st) <= 8);
		/* the thread's `threading` name: frames, a Thread, its type, keys, values */
		if (py_thread_name(&r, o, code_type, ts[i].tstate, buf, sizeof(buf)) == 0)
			CHECK(strlen(buf) < sizeof(buf));
	}
	{
		uint64_t tid;

		/* the main thread's: sys.modules, a module's dict, an int */
		if (py_main_thread(&r, o, runtime, &tid, buf, sizeof(buf)) == 0)
			CHECK(strlen(buf) < sizeof(buf));
	}
	/* the code object's address as a thread state too: more of the name's path reached */
	if (py_thread_name(&r, o, code_type, code, buf, sizeof(buf)) == 0)
		CHECK(strlen(buf) < sizeof(buf));
	if (py_read_code(&r, o, code_type, code, &c) == 0) {
		CHECK(strlen(c.qualname) < sizeof(c.qualname));
		CHECK(strlen(c.filename) < sizeof(c.filename));
		CHECK(c.linetable_len <= PY_LINETABLE_MAX);
		for (uint64_t a = 0; a < 64; a += 2)
			(void)py_linetable_line(c.linetable, c.linetable_len, c.firstlineno, a);
		py_format_frame(&c, 1, data[0] & 1, buf, sizeof(buf));
		py_code__clear(&c);
	}
	if (py_read_str(&r, o, code, buf, sizeof(buf)) == 0)
		CHECK(strlen(buf) < sizeof(buf));
	/* the whole input as a location table, looked up at addresses across and past it */
	for (uint64_t a = 0; a < 2 * size; a += 2 + 2 * (size / 64))
		(void)py_linetable_line(data, size, (int)data[0], a);
	return 0;
}
