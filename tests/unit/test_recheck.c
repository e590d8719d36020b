/* SPDX-License-Identifier: MIT */
/*
 * common/recheck.c: the cost bound on a POSIX ERE before regcomp() builds it. Patterns people
 * write for process.match pass; nested bounded repeats, repeats nested more than four deep,
 * deep groups and back-references are refused; and what passes compiles into a bounded
 * amount of memory (regcomp's allocations, counted by mallinfo2 in the plain build; ASan's
 * allocator does not report them).
 */
#include <errno.h>
#include <malloc.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "recheck.h"

static void expect_ok(const char *re)
{
	char why[256] = "";
	int r = recheck(re, why, sizeof(why));

	if (r != 0)
		fail_msg("'%s' refused (%d): %s", re, r, why);
}

static void expect_refused(const char *re, int err, const char *says)
{
	char why[256] = "";
	int r = recheck(re, why, sizeof(why));

	if (r != err || !strstr(why, says))
		fail_msg("'%s': r=%d why='%s' (wanted %d saying '%s')", re, r, why, err, says);
}

static void test_everyday_patterns(void **state)
{
	(void)state;
	expect_ok("python.*train");
	expect_ok("^python3? .*(train|finetune)\\.py( |$)");
	expect_ok("torchrun --nproc[_-]per[_-]node[= ][0-9]+");
	expect_ok("[[:alnum:]_]+\\.py");
	expect_ok("[]a]{3}");               /* ']' first in a list is a member */
	expect_ok("[[:alpha:]]{2,8}");
	expect_ok("a{,5}b{2,}c{3}");
	expect_ok("rank-[0-9]{1,4}");
	expect_ok("a{");                    /* no interval: regcomp() decides */
	expect_ok("(a|b))");                /* an unmatched ')' at the top: regcomp() decides */
	expect_ok("[[:alpha:");             /* unterminated: regcomp() refuses it later */
	expect_ok("x{4000}");
}

static void test_expanding_patterns(void **state)
{
	(void)state;
	/* the pattern: 5 GB and 18 s of regcomp() before this check */
	expect_refused("((a{1,32767}){1,32767}){1,32767}", -E2BIG, "4096 nodes");
	expect_refused("(a|b|c){1,1000}", -E2BIG, "bounded repeats");
	expect_refused("((a|b|c|d){1,30}){1,30}", -E2BIG, "smaller counts");
	expect_refused("x{5000}", -E2BIG, "nodes");
	expect_refused("x{99999999999999999999999}", -E2BIG, "nodes");
	expect_refused("((x+)+){2000}", -E2BIG, "nodes");
	expect_refused("((a{100}){100}){,100}", -E2BIG, "nodes");
}

static void test_depth_and_backrefs(void **state)
{
	char deep[80] = "";

	(void)state;
	for (int i = 0; i < 33; i++)
		strcat(deep, "(");
	strcat(deep, "a");
	expect_refused(deep, -ELOOP, "nested more than 32");
	/* nullable repeats in repeats: 275 ms at 14 levels, fourfold each */
	expect_refused("a?+?+?+?+?+?+?+", -ELOOP, "repeats are nested");
	expect_refused("((((x?){1,8}){1,8}){1,8}){1,8}", -ELOOP, "match the empty string");
	expect_ok("(((.?)*)*)*");
	expect_refused("(a)\\1", -EINVAL, "back-references");
	expect_refused("(a)(b)\\2", -EINVAL, "back-references");
	expect_ok("a\\.b\\+c\\{");
}

/*
 * Bounded repeats over what can match empty: their copies nest, and glibc's epsilon closures
 * over them grow exponentially ("a*{1,3}{,9}+", found by fuzz_recheck, ran for minutes;
 * "((a|b?){1,6}c?){1,6}+" for more than 10 s) with few nodes. Repeats over such a
 * subexpression grow with the cube of its size, so that is bounded too ("(a?|b?|...)++" with
 * 150 branches: 1.5 s).
 */
static void test_repeats_over_empty(void **state)
{
	char wide[1024] = "(";

	(void)state;
	expect_refused("a*{1,3}{,9}+", -ELOOP, "match the empty string");
	expect_refused("((a|b?){1,6}c?){1,6}+", -ELOOP, "match the empty string");
	expect_refused("(a?b?c?d?e?f?g?h?){,30}+", -ELOOP, "write it without the {m,n}");
	expect_refused("a{,5}{,5}{,5}+", -ELOOP, "match the empty string");
	expect_refused("(a|){2,3}", -ELOOP, "match the empty string");
	expect_refused("(^){2}", -ELOOP, "match the empty string");
	expect_refused("(\\<){2}", -ELOOP, "match the empty string");
	/* one copy, or {1,}, is what '?', '*' and '+' make: allowed as they are */
	expect_ok("(a?){0,1}");
	expect_ok("(a?){1,}");
	expect_ok("(a?){,}");
	expect_ok("(a?){1}");
	/* over something that cannot match empty, bounded repeats stay as they were */
	expect_ok("(ab?c?d?e?f?g?h?){1,30}+");
	expect_ok("( --[a-z-]+(=[^ ]*)?){1,8}");
	expect_ok("(x|y){2,5}{1,3}");
	for (int i = 0; i < 150; i++)
		strcat(wide, i ? "|a?" : "a?");
	strcat(wide, ")++");
	expect_refused(wide, -E2BIG, "match the empty string is larger than 256 nodes");
	expect_ok("(a?|b?|c?|d?|e?|f?|g?|h?)++");
}

/* What passes costs regcomp() little memory: the largest patterns the check lets through. */
static void test_accepted_compile_small(void **state)
{
	static const char *const worst[] = {
		"(.{1,63}){1,63}", "([[:alnum:]_]{1,64}\\.){1,60}py", "x{4090}",
		"((a|b){1,31}){1,31}", "(((.{1,15}){1,15}){1,15})", "(((x){1,8}){1,8}){1,8}",
		"(((a?|b?|c?|d?|e?|f?|g?|h?)+)+)+",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(worst) / sizeof(worst[0]); i++) {
		struct mallinfo2 before, after;
		regex_t re;

		expect_ok(worst[i]);
		before = mallinfo2();
		assert_int_equal(regcomp(&re, worst[i], REG_EXTENDED | REG_NOSUB), 0);
		after = mallinfo2();
		if (after.uordblks > before.uordblks + (32u << 20))
			fail_msg("'%s' took %zu bytes to compile", worst[i],
				 after.uordblks - before.uordblks);
		regfree(&re);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_everyday_patterns),
		cmocka_unit_test(test_expanding_patterns),
		cmocka_unit_test(test_depth_and_backrefs),
		cmocka_unit_test(test_repeats_over_empty),
		cmocka_unit_test(test_accepted_compile_small),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
