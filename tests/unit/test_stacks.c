/* SPDX-License-Identifier: MIT */
/*
 * injector/collect/ebpf_stacks.c and common/u64map.c: interning, the merge of Python frames into native
 * stacks, the folded format and the frame tree of the timeline.
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
#include "injector/collect/ebpf_stacks.h"

static void test_u64map(void **state)
{
	struct u64map m = { 0 };
	uint64_t v, k, sum = 0;
	size_t pos = 0, n = 0;

	(void)state;
	assert_false(u64map_get(&m, 0, &v));
	for (uint64_t i = 0; i < 10000; i++)
		assert_int_equal(u64map_put(&m, i * 7919, i), 0);
	assert_int_equal(m.n, 10000);
	assert_true(u64map_get(&m, 0, &v) && v == 0);
	assert_true(u64map_get(&m, 9999 * 7919, &v) && v == 9999);
	assert_false(u64map_get(&m, 3, &v));
	assert_int_equal(u64map_put(&m, 7919, 42), 0);  /* replace */
	assert_true(u64map_get(&m, 7919, &v) && v == 42);
	assert_int_equal(m.n, 10000);
	while (u64map_next(&m, &pos, &k, &v)) {
		n++;
		sum += v;
	}
	assert_int_equal(n, 10000);
	assert_int_equal(sum, 9999ULL * 10000 / 2 - 1 + 42);
	assert_true(u64_hash2(1, 2) != u64_hash2(2, 1));
	u64map_clear(&m);
	assert_false(u64map_get(&m, 0, &v));
}

static void test_frames_and_stacks(void **state)
{
	struct stack_store s;
	uint32_t a[3], b[2];
	size_t n;
	int id1, id2;

	(void)state;
	stack_store__init(&s);
	a[0] = (uint32_t)stack_store__frame(&s, "main");
	a[1] = (uint32_t)stack_store__frame(&s, "work;more\nlines");
	a[2] = (uint32_t)stack_store__frame(&s, "");
	assert_int_equal(stack_store__frame(&s, "main"), (int)a[0]);
	assert_string_equal(stack_store__frame_name(&s, a[1]), "work:more lines");
	assert_string_equal(stack_store__frame_name(&s, a[2]), "[unknown]");
	assert_int_equal(stack_store__frame(&s, "[unknown]"), (int)a[2]);
	assert_string_equal(stack_store__frame_name(&s, 12345), "[unknown]");
	assert_int_equal(stack_store__nframes(&s), 3);

	id1 = stack_store__stack(&s, a, 3);
	b[0] = a[0];
	b[1] = a[1];
	id2 = stack_store__stack(&s, b, 2);
	assert_true(id1 >= 0 && id2 >= 0 && id1 != id2);
	assert_int_equal(stack_store__stack(&s, a, 3), id1);
	assert_int_equal(stack_store__stack_frames(&s, (uint32_t)id2, &n)[1], a[1]);
	assert_int_equal(n, 2);
	assert_int_equal(stack_store__stack(&s, a, STACK_MAX_FRAMES + 1), -EINVAL);
	assert_int_equal(stack_store__nstacks(&s), 2);

	/* many frames: the tables grow */
	for (int i = 0; i < 5000; i++) {
		char nm[32];

		snprintf(nm, sizeof(nm), "f%d", i);
		assert_true(stack_store__frame(&s, nm) >= 0);
	}
	assert_string_equal(stack_store__frame_name(&s, a[1]), "work:more lines");
	stack_store__clear(&s);
}

static void test_folded(void **state)
{
	struct stack_store s;
	uint32_t f[3];
	char *buf = NULL;
	size_t len = 0;
	FILE *mf;
	int x, y, empty;

	(void)state;
	stack_store__init(&s);
	f[0] = (uint32_t)stack_store__frame(&s, "proc-1");
	f[1] = (uint32_t)stack_store__frame(&s, "main");
	f[2] = (uint32_t)stack_store__frame(&s, "hot_a");
	x = stack_store__stack(&s, f, 3);
	y = stack_store__stack(&s, f, 2);
	empty = stack_store__stack(&s, f, 0);
	assert_int_equal(stack_store__add(&s, (uint32_t)x, STACK_CPU, 3), 0);
	assert_int_equal(stack_store__add(&s, (uint32_t)x, STACK_CPU, 1), 0);
	assert_int_equal(stack_store__add(&s, (uint32_t)y, STACK_OFFCPU, 1500), 0);
	assert_int_equal(stack_store__add(&s, (uint32_t)empty, STACK_CPU, 1), 0);
	assert_int_equal(stack_store__add(&s, 999, STACK_CPU, 1), -EINVAL);
	assert_int_equal(stack_store__weight(&s, (uint32_t)x, STACK_CPU), 4);
	assert_int_equal(stack_store__weight(&s, (uint32_t)y, STACK_CPU), 0);

	mf = open_memstream(&buf, &len);
	assert_int_equal(stack_store__write_folded(&s, STACK_CPU, mf), 0);
	fclose(mf);
	assert_string_equal(buf, "proc-1;main;hot_a 4\n");
	free(buf);
	buf = NULL;
	mf = open_memstream(&buf, &len);
	assert_int_equal(stack_store__write_folded(&s, STACK_OFFCPU, mf), 0);
	fclose(mf);
	assert_string_equal(buf, "proc-1;main 1500\n");
	free(buf);
	stack_store__clear(&s);
}

/* ids for readability: frames are just numbers to the merge */
enum { ROOT = 100, MAIN = 1, EVAL = 2, CALL = 3, LEAF = 4, K1 = 50, K2 = 51, PYA = 10, PYB = 11,
       PYC = 12, PYD = 13 };

static void expect(const uint32_t *got, size_t n, const uint32_t *want, size_t wn)
{
	assert_int_equal(n, wn);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(got[i], want[i]);
}

static void test_merge_native_only(void **state)
{
	const uint32_t kernel[] = { K1, K2 }, native[] = { LEAF, CALL, MAIN };
	const uint32_t want[] = { ROOT, MAIN, CALL, LEAF, K2, K1 };
	struct stack_merge_in in = { .kernel = kernel, .nk = 2, .native = native, .nn = 3,
				     .root = ROOT };
	uint32_t out[STACK_MAX_FRAMES];

	(void)state;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want, 6);
	in.root = UINT32_MAX;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want + 1, 5);
	/* out too small: the innermost frames go */
	in.root = ROOT;
	expect(out, stack_merge(&in, out, 3), want, 3);
}

static void test_merge_interleaves_at_eval_frames(void **state)
{
	/* native: LEAF <- EVAL <- CALL <- EVAL <- MAIN (innermost first)
	 * python: PYA, PYB | PYC, PYD   (PYB ends the first C-level call, PYD the second) */
	const uint32_t native[] = { LEAF, EVAL, CALL, EVAL, MAIN };
	const bool eval[] = { false, true, false, true, false };
	const uint32_t py[] = { PYA, PYB, PYC, PYD };
	const bool seg_end[] = { false, true, false, true };
	const uint32_t want[] = { ROOT, MAIN, PYD, PYC, CALL, PYB, PYA, LEAF };
	struct stack_merge_in in = { .native = native, .native_eval = eval, .nn = 5, .py = py,
				     .py_seg_end = seg_end, .np = 4, .root = ROOT };
	uint32_t out[STACK_MAX_FRAMES];

	(void)state;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want, 8);
}

static void test_merge_truncated_native(void **state)
{
	/* no frame pointers in the interpreter: only the leaf survives; every Python frame
	 * still shows, in order, below it */
	const uint32_t native[] = { LEAF };
	const bool eval[] = { false };
	const uint32_t py[] = { PYA, PYB, PYC };
	const bool seg_end[] = { false, false, true };
	const uint32_t want[] = { ROOT, PYC, PYB, PYA, LEAF };
	struct stack_merge_in in = { .native = native, .native_eval = eval, .nn = 1, .py = py,
				     .py_seg_end = seg_end, .np = 3, .root = ROOT };
	uint32_t out[STACK_MAX_FRAMES];

	(void)state;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want, 5);
	/* the leaf is the interpreter loop itself: it becomes the first segment */
	{
		const uint32_t native2[] = { EVAL };
		const bool eval2[] = { true };
		const uint32_t want2[] = { ROOT, PYC, PYB, PYA };

		in.native = native2;
		in.native_eval = eval2;
		expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want2, 4);
	}
}

static void test_merge_more_eval_than_segments(void **state)
{
	const uint32_t native[] = { EVAL, CALL, EVAL, MAIN };
	const bool eval[] = { true, false, true, false };
	const uint32_t py[] = { PYA };
	const bool seg_end[] = { true };
	const uint32_t want[] = { ROOT, MAIN, EVAL, CALL, PYA };
	struct stack_merge_in in = { .native = native, .native_eval = eval, .nn = 4, .py = py,
				     .py_seg_end = seg_end, .np = 1, .root = ROOT };
	uint32_t out[STACK_MAX_FRAMES];

	(void)state;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want, 5);
}

/* Python frames cut from the middle: the mark between the inner and the outer ones, the
 * outer ones in the outermost interpreter-loop frames, the loop frames (and the native
 * frames) the cut frames ran in left out; the kernel and native marks where they belong */
static void test_merge_marks_cuts(void **state)
{
	enum { MARK = 60, KCUT = 61, NCUT = 62 };
	/* native: LEAF <- EVAL <- CALL <- EVAL <- CALL <- EVAL <- CALL <- EVAL <- MAIN
	 * python: PYA | PYB, MARK, PYC | PYD  (segments: 3, loop frames: 4) */
	const uint32_t kernel[] = { K1 };
	const uint32_t native[] = { LEAF, EVAL, CALL, EVAL, CALL, EVAL, CALL, EVAL, MAIN };
	const bool eval[] = { false, true, false, true, false, true, false, true, false };
	const uint32_t py[] = { PYA, PYB, MARK, PYC, PYD };
	const bool seg_end[] = { true, false, false, true, true };
	const uint32_t want[] = { ROOT, NCUT, MAIN, PYD, CALL, PYC, MARK, PYB, CALL, PYA, LEAF,
				  KCUT, K1 };
	struct stack_merge_in in = { .kernel = kernel, .nk = 1, .native = native,
				     .native_eval = eval, .nn = 9, .py = py, .py_seg_end = seg_end,
				     .np = 5, .root = ROOT, .py_cut_at = 3, .kernel_cut = KCUT + 1,
				     .native_cut = NCUT + 1 };
	uint32_t out[STACK_MAX_FRAMES];

	(void)state;
	expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want, 13);
	/* as many loop frames as segments: nothing of the native stack left out */
	{
		const uint32_t native2[] = { LEAF, EVAL, CALL, EVAL, CALL, EVAL, MAIN };
		const uint32_t want2[] = { ROOT, MAIN, PYD, CALL, PYC, MARK, PYB, CALL, PYA, LEAF };

		in.native = native2;
		in.nn = 7;
		in.nk = 0;
		in.native_cut = 0;
		expect(out, stack_merge(&in, out, STACK_MAX_FRAMES), want2, 10);
	}
}

static void test_tree(void **state)
{
	struct stack_store s;
	struct stack_tree t;
	uint32_t f[4];
	int a, b, c;
	int64_t la, lb, lc;

	(void)state;
	stack_store__init(&s);
	stack_tree__init(&t);
	f[0] = (uint32_t)stack_store__frame(&s, "p");
	f[1] = (uint32_t)stack_store__frame(&s, "main");
	f[2] = (uint32_t)stack_store__frame(&s, "a");
	f[3] = (uint32_t)stack_store__frame(&s, "b");
	a = stack_store__stack(&s, f, 3);           /* p;main;a */
	f[2] = f[3];
	b = stack_store__stack(&s, f, 3);           /* p;main;b */
	c = stack_store__stack(&s, f, 0);
	la = stack_tree__leaf(&t, &s, (uint32_t)a);
	lb = stack_tree__leaf(&t, &s, (uint32_t)b);
	lc = stack_tree__leaf(&t, &s, (uint32_t)c);
	assert_int_equal(t.n, 4);                   /* p, main, a, b */
	assert_true(la > 0 && lb > 0 && la != lb);
	assert_int_equal(lc, 0);
	assert_int_equal(t.parent[la], t.parent[lb]);
	assert_string_equal(stack_store__frame_name(&s, t.frame[t.parent[la]]), "main");
	assert_int_equal(t.parent[t.parent[t.parent[la]]], 0);
	assert_int_equal(stack_tree__leaf(&t, &s, (uint32_t)a), la);
	stack_tree__clear(&t);
	stack_store__clear(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64map),
		cmocka_unit_test(test_frames_and_stacks),
		cmocka_unit_test(test_folded),
		cmocka_unit_test(test_merge_native_only),
		cmocka_unit_test(test_merge_interleaves_at_eval_frames),
		cmocka_unit_test(test_merge_truncated_native),
		cmocka_unit_test(test_merge_more_eval_than_segments),
		cmocka_unit_test(test_merge_marks_cuts),
		cmocka_unit_test(test_tree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
