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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_and_variables),
		cmocka_unit_test(test_urls_and_edges),
		cmocka_unit_test(test_no_room_cuts_instead_of_overflowing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
