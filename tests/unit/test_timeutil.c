/* SPDX-License-Identifier: MIT */
/*
 * common/timeutil.c: parse_duration_ns, the one duration grammar of the CLI, the controller
 * and the CRDs' duration fields (compound "1h30m", exact to the nanosecond).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "timeutil.h"

static void expect_ns(const char *s, uint64_t want)
{
	uint64_t got = 12345;
	int r = parse_duration_ns(s, &got);

	if (r != 0 || got != want)
		fail_msg("'%s': r=%d, %llu ns (wanted %llu)", s, r, (unsigned long long)got,
			 (unsigned long long)want);
}

static void expect_err(const char *s, int err)
{
	uint64_t got = 12345;
	int r = parse_duration_ns(s, &got);

	if (r != err || got != 12345)
		fail_msg("'%s': r=%d, %llu ns (wanted error %d, nothing stored)", s, r,
			 (unsigned long long)got, err);
}

static void test_single_units(void **state)
{
	(void)state;
	expect_ns("5s", 5000000000ULL);
	expect_ns("500ms", 500000000ULL);
	expect_ns("2m", 120000000000ULL);
	expect_ns("1h", 3600000000000ULL);
	expect_ns("250us", 250000ULL);
	expect_ns("7ns", 7ULL);
	expect_ns("30", 30000000000ULL);       /* a bare number is seconds */
	expect_ns("0s", 0);
	expect_ns("24h", 86400000000000ULL);
}

static void test_compound(void **state)
{
	(void)state;
	expect_ns("1h30m", 5400000000000ULL);
	expect_ns("1m30s", 90000000000ULL);
	expect_ns("2m0.5s", 120500000000ULL);
	expect_ns("1h1m1s1ms1us1ns", 3661001001001ULL);
	expect_ns("1s1s", 2000000000ULL);      /* Go's time.ParseDuration adds them too */
}

static void test_fractions_exact(void **state)
{
	(void)state;
	expect_ns("1.5ms", 1500000ULL);
	expect_ns("0.1s", 100000000ULL);       /* not 99999999 from a double */
	expect_ns("0.3s", 300000000ULL);
	expect_ns("1.000000001s", 1000000001ULL);
	expect_ns("2.5h", 9000000000000ULL);
	expect_ns("0.0000000001s", 0);         /* below a nanosecond: cut */
	expect_ns(".5s", 500000000ULL);
	expect_ns("1.s", 1000000000ULL);
	expect_ns("0.333333333333333333333333h", 1199999999999ULL);
}

static void test_malformed(void **state)
{
	(void)state;
	expect_err("", -EINVAL);
	expect_err("s", -EINVAL);
	expect_err(".s", -EINVAL);
	expect_err("-5s", -EINVAL);
	expect_err("+5s", -EINVAL);
	expect_err(" 5s", -EINVAL);
	expect_err("5s ", -EINVAL);
	expect_err("5 s", -EINVAL);
	expect_err("1h30", -EINVAL);           /* a bare number only on its own */
	expect_err("5d", -EINVAL);
	expect_err("5S", -EINVAL);
	expect_err("1e3s", -EINVAL);
	expect_err("0x10s", -EINVAL);
	expect_err("inf", -EINVAL);
	expect_err("nan", -EINVAL);
	expect_err("1.5.5s", -EINVAL);
	expect_err("soon", -EINVAL);
	expect_err(NULL, -EINVAL);
}

static void test_range(void **state)
{
	(void)state;
	expect_ns("18446744073709551615ns", UINT64_MAX);
	expect_err("18446744073709551616ns", -ERANGE);
	expect_err("5124096h", -ERANGE);       /* past UINT64_MAX ns */
	expect_err("99999999999999999999999999999s", -ERANGE);
	expect_err("5124095h5124095h", -ERANGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_units),
		cmocka_unit_test(test_compound),
		cmocka_unit_test(test_fractions_exact),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
