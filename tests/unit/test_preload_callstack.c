/* SPDX-License-Identifier: MIT */
/*
 * Call stacks at launches (injector/preload/callstack.c), with libaiprof.so loaded into
 * this process: the stack string names the real callers innermost first and goes out
 * before the launch that uses it; a call site reuses its stack and sends it once per
 * session, another path gets another one; `no-launch-stacks` records none; a launch from
 * a stack the walker does not know (a coroutine's) is recorded without one, no crash.
 * With the process's libgcc_s loaded (as in any C++ program) new call sites are unwound
 * by CFI: whole through code built without frame pointers (libfixture_nofp.so), where
 * the frame-pointer walk (--unwind fp) stops.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <ucontext.h>

#include "preload/fixture.h"
#include "preload/harness.h"

#define MAXEV 8192

static void *g_lib, *g_gcc;
static struct aiprof_ring_hdr *g_h;
static struct aiprof_event g_ev[MAXEV];
static const char g_kernel;                    /* stands for a host stub */
static void *volatile g_ra_inner, *volatile g_ra_outer;

static int group_setup(void **state)
{
	/* the unwinder C++ programs have loaded (libstdc++ needs it) */
	g_gcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
	g_lib = h_load_lib();
	g_h = g_lib ? h_ring() : NULL;
	return g_h && g_gcc ? 0 : -1;
}

static int test_setup(void **state)
{
	h_drain(g_h, g_ev, MAXEV, true);
	return h_enable(g_h, AIPROF_COLLECT_CUDA);
}

static int test_teardown(void **state)
{
	return h_disable(g_h);
}

__attribute__((noinline)) static void inner_fn(int n)
{
	g_ra_inner = __builtin_return_address(0);
	for (int i = 0; i < n; i++)
		caller_launch(&g_kernel, 1, 32);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void outer_fn(int n)
{
	g_ra_outer = __builtin_return_address(0);
	inner_fn(n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void other_fn(int n)
{
	inner_fn(n);
	__asm__ volatile("" ::: "memory");
}

/* The string `id` from the drained events (chunks reassembled); *ret_first: index of its
 * first chunk; returns how many times its first chunk was sent. */
static int string_of(size_t n, uint32_t id, char *buf, size_t len, size_t *ret_first)
{
	int sent = 0;

	memset(buf, 0, len);
	for (size_t i = 0; i < n && i < MAXEV; i++) {
		const struct aiprof_ev_str *s = &g_ev[i].u.str;
		size_t c;

		if (g_ev[i].type != AIPROF_EV_STRING || s->id != id)
			continue;
		if (s->offset == 0 && sent++ == 0 && ret_first)
			*ret_first = i;
		c = s->total - s->offset < AIPROF_STR_CHUNK ? s->total - s->offset : AIPROF_STR_CHUNK;
		if (s->offset + c < len)
			memcpy(buf + s->offset, s->s, c);
	}
	return sent;
}

/* "hex,hex,..." -> addresses; returns how many */
static size_t parse(const char *s, uintptr_t *out, size_t max)
{
	size_t n = 0;

	if (*s == '@')
		s++;
	while (*s && *s != '|' && n < max) {
		char *end;

		out[n++] = (uintptr_t)strtoull(s, &end, 16);
		assert_true(end != s);
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

static void launches(size_t n, size_t *idx, size_t max, size_t *ret_n)
{
	size_t k = 0;

	for (size_t i = 0; i < n && i < MAXEV; i++)
		if (g_ev[i].type == AIPROF_EV_CUDA_LAUNCH && k < max)
			idx[k++] = i;
	*ret_n = k;
}

static void test_stack_names_callers_in_order(void **state)
{
	char text[4096];
	uintptr_t pc[64];
	size_t n, first = SIZE_MAX, idx[4], nl, np, at_inner = SIZE_MAX, at_outer = SIZE_MAX;
	uint32_t id;

	outer_fn(1);
	n = h_drain(g_h, g_ev, MAXEV, true);
	launches(n, idx, 4, &nl);
	assert_int_equal(nl, 1);
	id = g_ev[idx[0]].u.launch.stack_id;
	assert_true(id != 0);
	assert_int_equal(string_of(n, id, text, sizeof(text), &first), 1);
	assert_true(first < idx[0]);                /* the string goes out first */
	np = parse(text, pc, 64);
	assert_true(np >= 3);
	for (size_t i = 0; i < np; i++) {
		assert_false(h_same_module((void *)pc[i], dlsym(g_lib, "aiprof_preload_build")));
		if (pc[i] == (uintptr_t)g_ra_inner && at_inner == SIZE_MAX)
			at_inner = i;
		if (pc[i] == (uintptr_t)g_ra_outer && at_outer == SIZE_MAX)
			at_outer = i;
	}
	/* innermost first: [caller_launch,] inner_fn, then inner_fn's return into outer_fn
	 * and outer_fn's into this test */
	assert_true(at_inner != SIZE_MAX && at_outer != SIZE_MAX);
	assert_int_equal(at_outer, at_inner + 1);
	assert_true(at_inner == 1 || at_inner == 2);
}

/* The launch's stack from nofp_outer(): where its two return addresses are (SIZE_MAX: not
 * in it), how many frames it has, and whether it was unwound by CFI. */
static void nofp_stack(uint32_t collectors, size_t *at_inner, size_t *at_outer, size_t *ret_n,
		       bool *ret_cfi)
{
	char text[4096];
	uintptr_t pc[64];
	size_t n, idx[4], nl;

	assert_int_equal(h_enable(g_h, collectors), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	nofp_outer(&g_kernel, 1);
	n = h_drain(g_h, g_ev, MAXEV, true);
	launches(n, idx, 4, &nl);
	assert_int_equal(nl, 1);
	assert_int_equal(string_of(n, g_ev[idx[0]].u.launch.stack_id, text, sizeof(text), NULL), 1);
	*ret_cfi = text[0] == '@';
	*ret_n = parse(text, pc, 64);
	*at_inner = *at_outer = SIZE_MAX;
	for (size_t i = 0; i < *ret_n; i++) {
		if (pc[i] == (uintptr_t)nofp_ra_inner && *at_inner == SIZE_MAX)
			*at_inner = i;
		if (pc[i] == (uintptr_t)nofp_ra_outer && *at_outer == SIZE_MAX)
			*at_outer = i;
	}
}

static void test_cfi_through_code_without_frame_pointers(void **state)
{
	size_t at_inner, at_outer, n;
	bool cfi;

	nofp_stack(AIPROF_COLLECT_CUDA, &at_inner, &at_outer, &n, &cfi);
	assert_true(cfi);
	/* caller_launch, nofp_inner's return into nofp_outer, nofp_outer's into this test,
	 * and on to main and the C library's start */
	assert_int_equal(at_inner, 2);
	assert_int_equal(at_outer, 3);
	assert_true(n >= at_outer + 3);
}

static void test_fp_walk_stops_at_code_without_frame_pointers(void **state)
{
	size_t at_inner, at_outer, n;
	bool cfi;

	nofp_stack(AIPROF_COLLECT_CUDA | AIPROF_COLLECT_FP_STACKS, &at_inner, &at_outer, &n, &cfi);
	assert_false(cfi);
	/* caller_launch's frame leads to nofp_inner; its %rbp is no frame: the walk ends */
	assert_int_equal(at_inner, SIZE_MAX);
	assert_int_equal(at_outer, SIZE_MAX);
	assert_true(n >= 1 && n <= 2);
}

static void test_call_site_reuse_and_paths(void **state)
{
	char text[4096];
	size_t n, idx[256], nl;
	uint32_t a, b;

	outer_fn(100);
	other_fn(100);
	n = h_drain(g_h, g_ev, MAXEV, true);
	launches(n, idx, 256, &nl);
	assert_int_equal(nl, 200);
	a = g_ev[idx[0]].u.launch.stack_id;
	b = g_ev[idx[100]].u.launch.stack_id;
	assert_true(a && b && a != b);
	for (size_t i = 0; i < 200; i++)
		assert_int_equal(g_ev[idx[i]].u.launch.stack_id, i < 100 ? a : b);
	assert_int_equal(string_of(n, a, text, sizeof(text), NULL), 1);
	assert_int_equal(string_of(n, b, text, sizeof(text), NULL), 1);

}

/* Each session gets the string again, under the same id. */
static void test_new_session_resends(void **state)
{
	char text[4096];
	size_t n, idx[8], nl;
	uint32_t ids[2];

	for (int round = 0; round < 2; round++) {
		assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
		h_drain(g_h, g_ev, MAXEV, true);
		outer_fn(3);
		n = h_drain(g_h, g_ev, MAXEV, true);
		launches(n, idx, 8, &nl);
		assert_int_equal(nl, 3);
		ids[round] = g_ev[idx[0]].u.launch.stack_id;
		assert_true(ids[round] != 0);
		assert_int_equal(g_ev[idx[2]].u.launch.stack_id, ids[round]);
		assert_int_equal(string_of(n, ids[round], text, sizeof(text), NULL), 1);
	}
	assert_int_equal(ids[0], ids[1]);
}

static void test_no_launch_stacks(void **state)
{
	size_t n, idx[8], nl;

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA | AIPROF_COLLECT_NO_STACKS), 0);
	h_drain(g_h, g_ev, MAXEV, true);
	outer_fn(2);
	n = h_drain(g_h, g_ev, MAXEV, true);
	launches(n, idx, 8, &nl);
	assert_int_equal(nl, 2);
	assert_int_equal(g_ev[idx[0]].u.launch.stack_id, 0);
	assert_int_equal(g_ev[idx[1]].u.launch.stack_id, 0);
}

static ucontext_t g_main_ctx, g_co_ctx;

static void coroutine(void)
{
	outer_fn(1);
}

/* On a stack of its own (a coroutine's, a green thread's): outside the thread's stack,
 * so the walk stops at once. The launch is still recorded. */
static void test_foreign_stack(void **state)
{
	size_t size = 256 << 10, n, idx[4], nl;
	void *stack = malloc(size);

	assert_non_null(stack);
	assert_int_equal(getcontext(&g_co_ctx), 0);
	g_co_ctx.uc_stack.ss_sp = stack;
	g_co_ctx.uc_stack.ss_size = size;
	g_co_ctx.uc_link = &g_main_ctx;
	makecontext(&g_co_ctx, coroutine, 0);
	assert_int_equal(swapcontext(&g_main_ctx, &g_co_ctx), 0);
	n = h_drain(g_h, g_ev, MAXEV, true);
	launches(n, idx, 4, &nl);
	assert_int_equal(nl, 1);
	assert_int_equal(g_ev[idx[0]].u.launch.stack_id, 0);
	free(stack);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stack_names_callers_in_order, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_call_site_reuse_and_paths, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_new_session_resends, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_cfi_through_code_without_frame_pointers,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_fp_walk_stops_at_code_without_frame_pointers,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_no_launch_stacks, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_foreign_stack, test_setup, test_teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
