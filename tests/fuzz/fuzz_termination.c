/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the injector's termination message as the controller reads it back
 * from a container's terminated state: what passes into a session's status must be clean.
 * FUZZ_SOURCES: common/termination.c
 * FUZZ_LIBS: -ljansson
 * FUZZ_ARGS: -max_len=5000
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common/termination.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_clean(const char *s, size_t max)
{
	size_t n = strlen(s);

	CHECK(n < max);
	for (size_t i = 0; i < n; i++)
		CHECK((unsigned char)s[i] >= 0x20 && s[i] != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct termination t, t2;
	static char buf[TERMINATION_MAX];
	char why[200];
	int n;

	if (termination__parse((const char *)data, size, &t, why, sizeof(why)) < 0) {
		CHECK(t.n_artifacts == 0 && t.n_findings == 0 && t.n_summary == 0);
		return 0;
	}
	CHECK(t.n_artifacts <= TERM_MAX_ARTIFACTS && t.n_findings <= TERM_MAX_FINDINGS &&
	      t.n_summary <= TERM_MAX_SUMMARY);
	for (size_t i = 0; i < t.n_artifacts; i++) {
		const struct term_artifact *a = &t.artifacts[i];

		check_clean(a->name, sizeof(a->name));
		CHECK(a->name[0] && a->name[0] != '/' && !strstr(a->name, ".."));
		check_clean(a->url, sizeof(a->url));
		/* no url: an artifact left in a local folder (aiprof profile -o DIR) */
		CHECK(!a->url[0] || !strncmp(a->url, "s3://", 5) || !strncmp(a->url, "https://", 8) ||
		      !strncmp(a->url, "http://", 7));
		CHECK(!strpbrk(a->url, " \"\\<>"));
		CHECK(a->sha256[0] == 0 || strlen(a->sha256) == 64);
	}
	for (size_t i = 0; i < t.n_findings; i++) {
		check_clean(t.findings[i].category, sizeof(t.findings[i].category));
		CHECK(!strcmp(t.findings[i].severity, "Info") || !strcmp(t.findings[i].severity, "Warning") ||
		      !strcmp(t.findings[i].severity, "Critical"));
	}
	check_clean(t.error, sizeof(t.error));
	/* what parsed, formats and parses back the same (when it fits) */
	n = termination__format(&t, buf, sizeof(buf));
	if (n >= 0) {
		CHECK(termination__parse(buf, (size_t)n, &t2, why, sizeof(why)) == 0);
		CHECK(t2.n_artifacts == t.n_artifacts && t2.n_findings == t.n_findings &&
		      t2.n_summary == t.n_summary && !strcmp(t2.error, t.error));
	}
	return 0;
}
