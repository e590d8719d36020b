/* SPDX-License-Identifier: MIT */
/* injector/flamegraph.c: folded-stack parsing, the SVG's escaping, determinism, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "injector/flamegraph.h"
#include "injector/membuf.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_deterministic_and_interactive),
		cmocka_unit_test(test_min_width_and_empty),
		cmocka_unit_test(test_depth_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
