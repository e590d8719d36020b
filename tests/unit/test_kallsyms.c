/* SPDX-License-Identifier: MIT */
/* injector/collect/ebpf_kallsyms.c: parsing /proc/kallsyms and looking kernel addresses up. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "injector/collect/ebpf_kallsyms.h"

static const char sample[] =
	"0000000000000000 A fixed_percpu_data\n"
	"ffffffff81000000 T _stext\n"
	"ffffffff81000100 t __pfx_do_thing\n"
	"ffffffff81000110 t do_thing\n"
	"ffffffff81000200 D some_data\n"
	"ffffffff81000300 W weak_fn\n"
	"ffffffff821f84a0 T __sched_text_start\n"
	"ffffffff821f84b0 T __schedule\n"
	"ffffffff821f9000 T schedule\n"
	"ffffffff82200fb7 T __sched_text_end\n"
	"ffffffff82201000 T after_sched\n"
	"this is not a symbol line\n"
	"ffffffffzz000000 T bad_hex\n"
	"ffffffff81000500\n"
	"ffffffff81000600 T\n"
	"ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n"
	"ffffffffc0400000 t ext4_fn\t[ext4]\n"
	"ffffffffc0500000 t bpf_prog_abc_handler\t[bpf]";  /* no final newline */

static void test_parse_and_find(void **state)
{
	struct ksyms *ks = NULL;
	const struct ksym *s;

	(void)state;
	assert_int_equal(ksyms__parse(sample, strlen(sample), &ks), 0);
	/* code symbols only: no A/D entries, no malformed lines, no zero address */
	assert_int_equal(ksyms__count(ks), 12);

	s = ksyms__find(ks, 0xffffffff81000110ULL);
	assert_non_null(s);
	assert_string_equal(s->name, "do_thing");
	assert_null(s->module);
	s = ksyms__find(ks, 0xffffffff81000150ULL);
	assert_string_equal(s->name, "do_thing");
	/* data symbols are not code: the address belongs to the code symbol before it */
	s = ksyms__find(ks, 0xffffffff81000250ULL);
	assert_string_equal(s->name, "do_thing");
	s = ksyms__find(ks, 0xffffffff81000300ULL);
	assert_string_equal(s->name, "weak_fn");
	s = ksyms__find(ks, 0xffffffffc0400010ULL);
	assert_string_equal(s->name, "ext4_fn");
	assert_string_equal(s->module, "ext4");
	s = ksyms__find(ks, 0xffffffffc0201000ULL);
	assert_string_equal(s->module, "__builtin__ftrace");

	assert_null(ksyms__find(ks, 0xffffffff80000000ULL));      /* below the first */
	assert_null(ksyms__find(ks, 0xffffffffc0500000ULL + (2u << 20)));  /* far past the last */
	assert_non_null(ksyms__find(ks, 0xffffffffc0500010ULL));

	assert_true(ksyms__in_sched_text(ks, 0xffffffff821f84b5ULL));
	assert_true(ksyms__in_sched_text(ks, 0xffffffff821f9010ULL));
	assert_false(ksyms__in_sched_text(ks, 0xffffffff82201000ULL));
	assert_false(ksyms__in_sched_text(ks, 0xffffffff81000110ULL));
	ksyms__free(ks);
}

static void test_restricted_and_empty(void **state)
{
	static const char restricted[] =
		"0000000000000000 T _stext\n0000000000000000 T do_thing\n";
	struct ksyms *ks = NULL;

	(void)state;
	assert_int_equal(ksyms__parse(restricted, strlen(restricted), &ks), -ENOENT);
	assert_null(ks);
	assert_int_equal(ksyms__parse("", 0, &ks), -ENOENT);
	assert_int_equal(ksyms__parse(NULL, 5, &ks), -EINVAL);
	assert_null(ksyms__find(NULL, 1));
	assert_false(ksyms__in_sched_text(NULL, 1));
	ksyms__free(NULL);
}

static void test_no_sched_markers(void **state)
{
	static const char t[] = "ffffffff81000000 T a\nffffffff81000100 T b\n";
	struct ksyms *ks = NULL;

	(void)state;
	assert_int_equal(ksyms__parse(t, strlen(t), &ks), 0);
	assert_false(ksyms__in_sched_text(ks, 0xffffffff81000050ULL));
	ksyms__free(ks);
}

static void test_aliases_prefer_real_name(void **state)
{
	static const char t[] =
		"ffffffff81000100 t __pfx_b\nffffffff81000100 T a_alias\nffffffff81000110 T b\n";
	struct ksyms *ks = NULL;

	(void)state;
	assert_int_equal(ksyms__parse(t, strlen(t), &ks), 0);
	assert_string_equal(ksyms__find(ks, 0xffffffff81000100ULL)->name, "a_alias");
	ksyms__free(ks);
}

static void test_real_kallsyms(void **state)
{
	struct ksyms *ks = NULL;
	int r;

	(void)state;
	if (geteuid() != 0) {
		skip();
		return;
	}
	r = ksyms__load(NULL, &ks);
	if (r == -ENOENT || r == -EACCES) {
		skip();  /* kptr_restrict */
		return;
	}
	assert_int_equal(r, 0);
	assert_true(ksyms__count(ks) > 1000);
	ksyms__free(ks);
	assert_int_equal(ksyms__load("/nonexistent/kallsyms", &ks), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_and_find),
		cmocka_unit_test(test_restricted_and_empty),
		cmocka_unit_test(test_no_sched_markers),
		cmocka_unit_test(test_aliases_prefer_real_name),
		cmocka_unit_test(test_real_kallsyms),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
