/* SPDX-License-Identifier: MIT */
/* common/redact.c: secrets out of a target's command line, the rest kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "common/redact.h"

static void check(const char *in, const char *want)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", in);
	redact_cmdline(buf, sizeof(buf));
	if (strcmp(buf, want) != 0)
		fail_msg("'%s'\n got '%s'\nwant '%s'", in, buf, want);
}

static void test_options_and_variables(void **state)
{
	(void)state;
	check("python train.py --lr=0.1 --password=hunter2 --epochs 3",
	      "python train.py --lr=0.1 --password=[redacted] --epochs 3");
	check("python train.py --api-key sk-123 --batch 8", "python train.py --api-key [redacted] --batch 8");
	check("run -token=abc HF_TOKEN=hf_xyz AWS_SECRET_ACCESS_KEY=s3cr3t PATH=/bin",
	      "run -token=[redacted] HF_TOKEN=[redacted] AWS_SECRET_ACCESS_KEY=[redacted] PATH=/bin");
	check("torchrun --nproc 8 train.py --db-passwd=x --client_secret=y --credentials c.json",
	      "torchrun --nproc 8 train.py --db-passwd=[redacted] --client_secret=[redacted] --credentials [redacted]");
	check("trainer --ranks 2 --run-seconds 300", "trainer --ranks 2 --run-seconds 300");
}

static void test_urls_and_edges(void **state)
{
	(void)state;
	check("sync s3://bucket/x https://bob:pa55@host:8443/path --dry-run",
	      "sync s3://bucket/x https://bob:[redacted]@host:8443/path --dry-run");
	check("curl https://host/a@b", "curl https://host/a@b");
	check("--password", "--password");
	check("", "");
	check("  a   --token=  b", "  a   --token=[redacted]  b");
}

static void test_no_room_cuts_instead_of_overflowing(void **state)
{
	char buf[16] = "x --key=abcdef";

	(void)state;
	redact_cmdline(buf, sizeof(buf));
	assert_true(strlen(buf) < sizeof(buf));
	assert_null(strstr(buf, "abcdef"));
	/* a URL's password in a buffer with no room for the mark (found by fuzz_redact: the
	 * scan went on past the cut text) */
	char url[20] = "a https://u:p@h/xyz";
	redact_cmdline(url, sizeof(url));
	assert_true(strlen(url) < sizeof(url));
	assert_null(strstr(url, ":p@"));
}


/* The arguments as /proc/PID/cmdline has them (NUL-separated), joined and redacted. */
static void check_argv(const char *argv, size_t len, const char *want)
{
	char out[512];
	size_t n = redact_argv(argv, len, out, sizeof(out));

	assert_int_equal(n, strlen(out));
	if (strcmp(out, want) != 0)
		fail_msg("got  '%s'\nwant '%s'", out, want);
}

#define ARGV(lit) lit, sizeof(lit)       /* a literal with its final NUL, as the kernel's */

static void test_values_with_spaces(void **state)
{
	(void)state;
	check_argv(ARGV("python\0train.py\0--password\0correct horse battery\0--lr\0001"),
		   "python train.py --password [redacted] --lr 1");
	check_argv(ARGV("run\0--api-key=sk live 123\0HF_TOKEN=a b\0--name\0my run"),
		   "run --api-key=[redacted] HF_TOKEN=[redacted] --name my run");
}

static void test_short_p_and_json(void **state)
{
	(void)state;
	check("mysql -uroot -pS3CRET -h db", "mysql -uroot -p[redacted] -h db");
	check("serve -p 8080", "serve -p 8080");          /* a port as often as a password */
	check_argv(ARGV("train\0--config={\"lr\": 0.1, \"api_key\": \"sk 9\", \"wandb\": {\"token\":42}}"),
		   "train --config={\"lr\": 0.1, \"api_key\": \"[redacted]\", \"wandb\": "
		   "{\"token\":[redacted]}}");
	check_argv(ARGV("t\0--cfg\0{\"db_password\":\"a\\\"b\",\"user\":\"bob\"}"),
		   "t --cfg {\"db_password\":\"[redacted]\",\"user\":\"bob\"}");
	/* redacted text stays as it is */
	check("x --config={\"token\":[redacted]} -p[redacted]",
	      "x --config={\"token\":[redacted]} -p[redacted]");
}

static void test_argv_cut(void **state)
{
	char out[24];

	(void)state;
	assert_true(redact_argv(ARGV("prog\0--token\0aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), out,
				sizeof(out)) < sizeof(out));
	assert_null(strstr(out, "aaaa"));
	assert_int_equal(redact_argv("", 0, out, sizeof(out)), 0);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_and_variables),
		cmocka_unit_test(test_urls_and_edges),
		cmocka_unit_test(test_no_room_cuts_instead_of_overflowing),
		cmocka_unit_test(test_values_with_spaces),
		cmocka_unit_test(test_short_p_and_json),
		cmocka_unit_test(test_argv_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
