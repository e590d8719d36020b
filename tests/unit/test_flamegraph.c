/* SPDX-License-Identifier: MIT */
/*
 * injector/artifacts/flamegraph.c: folded-stack parsing, the SVG's escaping, determinism, limits.
 * injector/artifacts/launch_stacks.c: the GPU-launch folded stacks from launches with call stacks
 * (addresses in this program, so they have names) and CUPTI kernel records.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <unistd.h>

#include "injector/analyze/diagnosis.h"
#include "injector/artifacts/flamegraph.h"
#include "injector/artifacts/launch_stacks.h"
#include "injector/artifacts/membuf.h"
#include "tests/unit/synth_profile.h"

static struct fg_tree *parse(const char *s)
{
	struct fg_tree *t = NULL;

	assert_int_equal(fg_tree__parse(s, strlen(s), &t), 0);
	assert_non_null(t);
	return t;
}

static char *svg(const char *folded, const struct fg_opts *o)
{
	struct fg_tree *t = parse(folded);
	struct membuf b = { 0 };

	assert_int_equal(fg_tree__svg(t, o, &b), 0);
	fg_tree__free(t);
	return b.p;
}

static size_t occurrences(const char *h, const char *n)
{
	size_t c = 0;

	for (const char *p = strstr(h, n); p; p = strstr(p + 1, n))
		c++;
	return c;
}

static void test_parse(void **state)
{
	struct fg_tree *t = parse("main;a;b 10\nmain;a;c 5\nmain;d 2.6\n\nno count here\nmain;a;b 1\r\n"
				  "x;y -3\n");
	struct fg_stats st;

	fg_tree__stats(t, &st);
	assert_int_equal(st.total, 19);       /* 10 + 5 + 3 (2.6 rounds up) + 1 */
	assert_int_equal(st.stacks, 4);
	assert_int_equal(st.bad_lines, 2);
	assert_int_equal(st.nodes, 1 + 5);    /* all, main, a, b, c, d */
	assert_int_equal(st.max_depth, 3);
	fg_tree__free(t);
	fg_tree__free(NULL);
}

static void test_escaping(void **state)
{
	struct fg_opts o = { .id = "t<1>\"", .title = "A & B <title>", .unit = "samples" };
	char *s = svg("evil<script>alert(1)</script>;b&c\"d'e 7\n"
		      "bad\xff\xfe utf8;ctl\x01\x02 3\n", &o);

	assert_null(strstr(s, "<script>alert"));
	assert_non_null(strstr(s, "evil&lt;script&gt;alert(1)&lt;/script&gt;"));
	assert_non_null(strstr(s, "b&amp;c&quot;d&#39;e"));
	assert_non_null(strstr(s, "bad?? utf8"));
	assert_non_null(strstr(s, "ctl??"));
	assert_non_null(strstr(s, "A &amp; B &lt;title&gt;"));
	/* the id is reduced to safe characters, our own script appears once */
	assert_non_null(strstr(s, "id=\"fg-t1\""));
	assert_int_equal(occurrences(s, "<script"), 1);
	assert_int_equal(occurrences(s, "]]>"), 1);
	free(s);
}

static void test_deterministic_and_interactive(void **state)
{
	struct fg_opts o = { .id = "cpu", .title = "On-CPU", .unit = "samples" };
	const char *in = "p;zeta 3\np;alpha 5\np;alpha;inner 2\nq 1\n";
	char *a = svg(in, &o), *b = svg("q 1\np;alpha;inner 2\np;alpha 5\np;zeta 3\n", &o);

	assert_string_equal(a, b);    /* input order does not matter */
	/* hover, click-to-zoom, search and reset are wired */
	assert_non_null(strstr(a, "mouseover"));
	assert_non_null(strstr(a, "zoom(g)"));
	assert_non_null(strstr(a, "Search"));
	assert_non_null(strstr(a, "Reset Zoom"));
	assert_non_null(strstr(a, "<title>alpha (7 samples, 63.64%)</title>"));
	/* alpha is left of zeta (name order) */
	assert_true(strstr(a, "data-n=\"alpha\"") < strstr(a, "data-n=\"zeta\""));
	free(a);
	free(b);
}

static void test_min_width_and_empty(void **state)
{
	struct fg_opts o = { .id = "w", .unit = "us", .width = 1200 };
	char *s = svg("big 1000000\nsmall 1\n", &o);

	assert_non_null(strstr(s, "data-n=\"big\""));
	assert_null(strstr(s, "data-n=\"small\""));    /* narrower than 0.1 px */
	free(s);
	s = svg("", &o);
	assert_non_null(strstr(s, "no samples"));
	free(s);
}

static void test_depth_limit(void **state)
{
	size_t n = (FG_MAX_DEPTH + 50) * 2 + 16;
	char *in = malloc(n);
	struct fg_tree *t = NULL;
	struct fg_stats st;
	size_t o = 0;

	assert_non_null(in);
	for (int i = 0; i < FG_MAX_DEPTH + 50; i++) {
		in[o++] = 'f';
		in[o++] = ';';
	}
	o--;
	memcpy(in + o, " 4\n", 3);
	o += 3;
	assert_int_equal(fg_tree__parse(in, o, &t), 0);
	fg_tree__stats(t, &st);
	assert_int_equal(st.max_depth, FG_MAX_DEPTH);
	assert_int_equal(st.truncated, 1);
	assert_int_equal(st.total, 4);
	fg_tree__free(t);
	free(in);
}

/* two callers with bodies long enough that +8 is inside them */
__attribute__((noinline)) int caller_one(volatile int *x);
__attribute__((noinline)) int caller_two(volatile int *x);

__attribute__((noinline)) int caller_one(volatile int *x)
{
	for (int i = 0; i < 8; i++)
		*x += i * 3;
	return *x;
}

__attribute__((noinline)) int caller_two(volatile int *x)
{
	for (int i = 0; i < 8; i++)
		*x ^= i * 5;
	return *x;
}

#define T0 (1000ULL * MS)

int main(void);

/*
 * Three launches of k_one from caller_one, one of k_two from caller_two (with Python frames
 * of a process that has no Python: dropped), one of k_two without a stack, and a k_one
 * kernel whose launch was not recorded.
 */
static void synth_launches(struct synth *s)
{
	static const uint64_t dur[6] = { 1000, 2000, 3000, 4000, 5000, 7000 };
	static const uint32_t name[6] = { 1, 1, 1, 2, 2, 1 }, stack[5] = { 10, 10, 10, 11, 0 };
	struct target *t = &s->t[0];
	char text[80];

	synth_init(s, 1, T0, T0 + 1000 * MS);
	t->pid = getpid();
	synth_thread(t, 7, "trainer");
	synth_string(t, 1, "k_one");
	synth_string(t, 2, "k_two");
	snprintf(text, sizeof(text), "%lx,%lx", (unsigned long)((uintptr_t)caller_one + 8),
		 (unsigned long)((uintptr_t)main + 8));
	synth_string(t, 10, text);
	snprintf(text, sizeof(text), "%lx,%lx|dead0:1", (unsigned long)((uintptr_t)caller_two + 8),
		 (unsigned long)((uintptr_t)main + 8));
	synth_string(t, 11, text);
	for (int i = 0; i < 5; i++) {
		synth_launch(t, 7, T0 + (uint64_t)i * MS, 3000, name[i], 64, 32, (uint64_t)i + 1);
		t->store.v[t->store.n - 1].u.launch.stack_id = stack[i];
	}
	for (int i = 0; i < 6; i++)
		synth_gpu_kernel(t, T0 + (uint64_t)i * MS + 5000, dur[i], name[i], 7,
				 i < 5 ? (uint64_t)i + 1 : 99);
}

static void check_line(const char *folded, const char *line)
{
	if (!strstr(folded, line))
		fail_msg("missing \"%s\" in:\n%s", line, folded);
}

static void test_launch_stacks(void **state)
{
	struct launch_stacks_stats st, cnt;
	struct membuf out = { 0 };
	struct synth s;
	char line[200];
	int pid = (int)getpid();

	synth_launches(&s);
	assert_int_equal(diagnosis__new(&s.p, &s.p.diag), 0);
	assert_int_equal(launch_stacks_folded(&s.p, &out, &st), 0);
	membuf_put(&out, "", 1);
	/* GPU ns per (stack, kernel); the unrecorded launch's kernel on its own */
	snprintf(line, sizeof(line), "trainer-%d;main;caller_one;cuLaunchKernel;k_one 6000\n", pid);
	check_line(out.p, line);
	snprintf(line, sizeof(line), "trainer-%d;main;caller_two;cuLaunchKernel;k_two 4000\n", pid);
	check_line(out.p, line);
	snprintf(line, sizeof(line), "trainer-%d;[no call stack];cuLaunchKernel;k_two 5000\n", pid);
	check_line(out.p, line);
	snprintf(line, sizeof(line), "trainer-%d;[launch not recorded];k_one 7000\n", pid);
	check_line(out.p, line);
	assert_true(st.by_gpu_time);
	assert_int_equal(st.total, 22000);
	assert_int_equal(st.launches, 5);
	assert_int_equal(st.launches_with_stack, 4);
	assert_int_equal(st.kernels, 6);
	assert_int_equal(st.kernels_without_launch, 1);
	launch_stacks_count(&s.p, &cnt);
	assert_int_equal(cnt.total, st.total);
	assert_int_equal(cnt.launches, st.launches);
	assert_int_equal(cnt.launches_with_stack, st.launches_with_stack);
	assert_int_equal(cnt.kernels, st.kernels);
	membuf_free(&out);

	/* no GPU timing: one per launch, the kernel named by the launch */
	diagnosis__free(s.p.diag);
	s.p.diag = NULL;
	memset(&out, 0, sizeof(out));
	assert_int_equal(launch_stacks_folded(&s.p, &out, &st), 0);
	membuf_put(&out, "", 1);
	snprintf(line, sizeof(line), "trainer-%d;main;caller_one;cuLaunchKernel;k_one 3\n", pid);
	check_line(out.p, line);
	snprintf(line, sizeof(line), "trainer-%d;[no call stack];cuLaunchKernel;k_two 1\n", pid);
	check_line(out.p, line);
	assert_null(strstr(out.p, "[launch not recorded]"));
	assert_false(st.by_gpu_time);
	assert_int_equal(st.total, 5);
	membuf_free(&out);
	synth_free_all(&s);
}

static void test_launch_stack_parse(void **state)
{
	uint64_t pc[4], py[4][2];
	size_t n, npy;

	launch_stack_parse("7f01,4010,55|abc:1000000000002,def:3", pc, 4, &n, py, 4, &npy);
	assert_int_equal(n, 3);
	assert_int_equal(pc[0], 0x7f01);
	assert_int_equal(pc[2], 0x55);
	assert_int_equal(npy, 2);
	assert_int_equal(py[0][0], 0xabc);
	assert_int_equal(py[0][1], 0x1000000000002ULL);
	assert_int_equal(py[1][1], 3);
	/* more frames than kept: the outermost are dropped, the Python ones still read */
	launch_stack_parse("1,2,3,4,5,6|7:8", pc, 2, &n, py, 4, &npy);
	assert_int_equal(n, 2);
	assert_int_equal(npy, 1);
	/* a string cut short or garbled keeps what came before */
	launch_stack_parse("10,2x,30", pc, 4, &n, py, 4, &npy);
	assert_int_equal(n, 1);
	assert_int_equal(npy, 0);
	launch_stack_parse(NULL, pc, 4, &n, py, 4, &npy);
	assert_int_equal(n + npy, 0);
	/* unwound by CFI: the same addresses after the mark, once */
	launch_stack_parse("@7f01,4010|abc:1", pc, 4, &n, py, 4, &npy);
	assert_int_equal(n, 2);
	assert_int_equal(pc[1], 0x4010);
	assert_int_equal(npy, 1);
	launch_stack_parse("@@7f01", pc, 4, &n, py, 4, &npy);
	assert_int_equal(n + npy, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_deterministic_and_interactive),
		cmocka_unit_test(test_min_width_and_empty),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_launch_stacks),
		cmocka_unit_test(test_launch_stack_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
