/* SPDX-License-Identifier: MIT */
/*
 * common/utf8.c: what jansson and the API server take (no overlong forms, no surrogates,
 * nothing past U+10FFFF), cuts that never split a character, and text from a target made
 * valid with its length kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include "common/utf8.h"

static bool jansson_takes(const char *s)
{
	json_t *j = json_string(s);
	bool ok = j != NULL;

	json_decref(j);
	return ok;
}

static void test_valid(void **state)
{
	static const char *const good[] = { "", "ascii", "\xc2\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
					    "\xf4\x8f\xbf\xbf", "\xef\xbf\xbf", "a\xe8\xa8\x93z" };
	static const char *const bad[] = { "\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf",
					   "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80",
					   "\xf5\x80\x80\x80", "\xff", "\xe2\x82", "\xf0\x9f\x98",
					   "\xc2", "a\xe2\x28\xa1" };

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_true(utf8_valid(good[i], strlen(good[i])));
		assert_true(jansson_takes(good[i]));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(utf8_valid(bad[i], strlen(bad[i])));
		assert_false(jansson_takes(bad[i]));
	}
}

static void test_cut(void **state)
{
	const char *s = "ab\xe2\x82\xac\xf0\x9f\x98\x80z";   /* a b € 😀 z: 10 bytes */

	(void)state;
	assert_int_equal(utf8_cut(s, 10, 100), 10);
	assert_int_equal(utf8_cut(s, 10, 2), 2);
	assert_int_equal(utf8_cut(s, 10, 3), 2);
	assert_int_equal(utf8_cut(s, 10, 4), 2);
	assert_int_equal(utf8_cut(s, 10, 5), 5);
	assert_int_equal(utf8_cut(s, 10, 6), 5);
	assert_int_equal(utf8_cut(s, 10, 8), 5);
	assert_int_equal(utf8_cut(s, 10, 9), 9);
	assert_int_equal(utf8_cut(s, 10, 0), 0);
	assert_int_equal(utf8_cut("\x80\x80\x80\x80\x80", 5, 4), 4);   /* not UTF-8: as asked */
}

static void test_fix(void **state)
{
	char a[] = "py\xfftrain\xc0\xaf.py \xed\xa0\x80!", b[16], c[] = "ok \xe2\x82";

	(void)state;
	assert_int_equal(utf8_fix(a, sizeof(a)), strlen("py?train?\?.py ?\?\?!"));
	assert_string_equal(a, "py?train?\?.py ?\?\?!");
	/* cut to fit: the character the bound splits goes whole */
	snprintf(b, sizeof(b), "%s", "abcdefghijkl\xe2\x82\xac");
	assert_int_equal(utf8_fix(b, 14), 12);
	assert_string_equal(b, "abcdefghijkl");
	/* a text that ends inside a character (a cut made before): that character goes */
	assert_int_equal(utf8_fix(c, sizeof(c)), 3);
	assert_string_equal(c, "ok ");
	assert_true(jansson_takes(a) && jansson_takes(b) && jansson_takes(c));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_cut),
		cmocka_unit_test(test_fix),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
