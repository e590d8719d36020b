/* SPDX-License-Identifier: MIT */
/*
 * injector/artifacts/termlog.c: the termination message the injector leaves for the controller —
 * artifacts read back from a folder or a manifest, credentials redacted, and what is
 * dropped (and said so) when the message would exceed the kubelet's 4096 bytes. Every
 * message is read back with the controller's own parser (common/termination.c).
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/termination.h"
#include "common/utf8.h"
#include "injector/artifacts/termlog.h"

static char dir[PATH_MAX];

static void put(const char *name, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	*state = calloc(2, sizeof(struct termination));
	snprintf(dir, sizeof(dir), "/tmp/aiprof-test-termlog-XXXXXX");
	return *state && mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	free(*state);
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t count(const struct termination *t, const char *key)
{
	for (size_t i = 0; i < t->n_summary; i++)
		if (strcmp(t->summary[i].key, key) == 0)
			return t->summary[i].value;
	return UINT64_MAX;
}

/* Formats, checks the size, parses back with the controller's parser into back. */
static int roundtrip(struct termination *t, struct termination *back)
{
	char buf[TERMINATION_MAX], why[256];
	int n = termlog_fit(t, buf, sizeof(buf));

	assert_true(n > 0);
	assert_true(n < TERMINATION_MAX);
	assert_int_equal(strlen(buf), n);
	if (termination__parse(buf, (size_t)n, back, why, sizeof(why)) != 0)
		fail_msg("the controller refuses the message: %s\n%s", why, buf);
	return n;
}

static void test_local_artifacts(void **state)
{
	struct termination *t = *state, *back = t + 1;
	char sub[PATH_MAX + 8];

	put("summary.json", "abc");
	put(".hidden", "x");
	snprintf(sub, sizeof(sub), "%s/flame", dir);
	mkdir(sub, 0755);
	put("flame/graph.svg", "");
	assert_int_equal(termlog_local_artifacts(t, dir), 2);
	termlog_count(t, "processes", 2);
	termlog_count(t, "processes", 3);  /* replaced, not added */
	assert_int_equal(termlog_finding(t, "SyncCheckpoint", "warning"), 0);
	roundtrip(t, back);
	assert_int_equal(back->n_artifacts, 2);
	assert_string_equal(back->artifacts[0].name, "flame/graph.svg");  /* sorted */
	assert_int_equal(back->artifacts[0].size, 0);
	assert_string_equal(back->artifacts[0].sha256,
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_string_equal(back->artifacts[1].name, "summary.json");
	assert_int_equal(back->artifacts[1].size, 3);
	assert_string_equal(back->artifacts[1].sha256,
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_string_equal(back->artifacts[1].url, "");  /* stayed on the node */
	assert_int_equal(back->n_summary, 1);
	assert_int_equal(count(back, "processes"), 3);
	assert_int_equal(back->n_findings, 1);
	assert_string_equal(back->findings[0].severity, "Warning");
	assert_int_equal(termlog_local_artifacts(t, "/nonexistent/folder"), -ENOENT);
}

static void test_uploaded_artifacts(void **state)
{
	struct termination *t = *state, *back = t + 1;
	static const char manifest[] =
		"{\"schema\":\"aiprof.manifest/v1\",\"location\":\"s3://bkt/ns/s/pod/\","
		"\"artifacts\":[{\"name\":\"summary.json\",\"key\":\"ns/s/pod/summary.json\","
		"\"url\":\"s3://bkt/ns/s/pod/summary.json\",\"size\":3,\"sha256\":"
		"\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}]}\n";

	assert_int_equal(termlog_uploaded_artifacts(t, dir), -ENOENT);
	put("manifest.json", "[]");
	assert_int_equal(termlog_uploaded_artifacts(t, dir), -EBADMSG);
	put("manifest.json", manifest);
	assert_int_equal(termlog_uploaded_artifacts(t, dir), 2);
	roundtrip(t, back);
	assert_int_equal(back->n_artifacts, 2);
	assert_string_equal(back->artifacts[0].name, "manifest.json");
	assert_string_equal(back->artifacts[0].url, "s3://bkt/ns/s/pod/manifest.json");
	assert_int_equal(back->artifacts[0].size, sizeof(manifest) - 1);
	assert_string_equal(back->artifacts[1].url, "s3://bkt/ns/s/pod/summary.json");
	assert_int_equal(back->artifacts[1].size, 3);
}

static void test_too_big(void **state)
{
	struct termination *t = *state, *back = t + 1;
	char url[TERM_URL_MAX];

	/* 24 findings and 24 artifacts with long URLs: ~25 KB as they are */
	for (size_t i = 0; i < TERM_MAX_FINDINGS; i++)
		assert_int_equal(termlog_finding(t, "DataLoaderStall", "critical"), 0);
	assert_int_equal(termlog_finding(t, "One", "info"), -E2BIG);
	memset(url, 'k', sizeof(url));
	memcpy(url, "s3://b/", 7);
	url[1000] = 0;
	for (size_t i = 0; i < TERM_MAX_ARTIFACTS; i++) {
		struct term_artifact *a = &t->artifacts[t->n_artifacts++];

		snprintf(a->name, sizeof(a->name), i == 0 ? "manifest.json" : "a%zu.svg", i);
		snprintf(a->url, sizeof(a->url), "%s", url);
		memset(a->sha256, 'a', 64);
	}
	termlog_count(t, "events", 1234);
	snprintf(t->error, sizeof(t->error), "the upload failed: check the bucket");
	roundtrip(t, back);
	/* the artifacts went first, from the last, but the manifest (it lists them all); the
	 * findings stay */
	assert_int_equal(back->n_findings, TERM_MAX_FINDINGS);
	assert_true(back->n_artifacts >= 1 && back->n_artifacts < TERM_MAX_ARTIFACTS);
	assert_string_equal(back->artifacts[0].name, "manifest.json");
	for (size_t i = 1; i < back->n_artifacts; i++) {
		char want[16];

		snprintf(want, sizeof(want), "a%zu.svg", i);
		assert_string_equal(back->artifacts[i].name, want);
	}
	assert_int_equal(count(back, "artifacts_omitted"), TERM_MAX_ARTIFACTS - back->n_artifacts);
	assert_int_equal(count(back, "findings_omitted"), UINT64_MAX);
	assert_int_equal(count(back, "events"), 1234);
	assert_string_equal(back->error, "the upload failed: check the bucket");

	/* long findings and long URLs: the artifacts go but the manifest, the findings stay */
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < TERM_MAX_FINDINGS; i++)
		termlog_finding(t, "GpuMemoryGrowthxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
				"critical");
	for (size_t i = 0; i < 3; i++) {
		struct term_artifact *a = &t->artifacts[t->n_artifacts++];

		snprintf(a->name, sizeof(a->name), i == 0 ? "manifest.json" : "f%zu", i);
		snprintf(a->url, sizeof(a->url), "%s", url);
		memset(a->sha256, 'a', 64);
	}
	termlog_count(t, "artifacts_omitted", 5);     /* five were left out already */
	roundtrip(t, back);
	assert_int_equal(back->n_findings, TERM_MAX_FINDINGS);
	assert_int_equal(back->n_artifacts, 1);
	assert_string_equal(back->artifacts[0].name, "manifest.json");
	assert_int_equal(count(back, "artifacts_omitted"), 5 + 2);

	/* and a long error text on top: the findings go too, the manifest stays */
	memset(t->error, 'e', TERM_ERROR_MAX - 1);
	t->error[TERM_ERROR_MAX - 1] = 0;
	memset(url + 7, 'k', sizeof(url) - 8);
	url[sizeof(url) - 1] = 0;
	snprintf(t->artifacts[0].url, sizeof(t->artifacts[0].url), "%s", url);
	t->n_artifacts = 3;
	t->n_findings = 0;
	for (size_t i = 0; i < TERM_MAX_FINDINGS; i++)      /* the longest categories */
		termlog_finding(t, "GpuMemoryGrowthxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
				"critical");
	roundtrip(t, back);
	assert_int_equal(back->n_findings, 0);
	assert_int_equal(count(back, "findings_omitted"), TERM_MAX_FINDINGS);
	assert_int_equal(back->n_artifacts, 1);
	assert_string_equal(back->artifacts[0].name, "manifest.json");
	assert_int_equal(strlen(back->error), TERM_ERROR_MAX - 1);
}


/*
 * The error quotes a target: its argv has bytes that are not UTF-8, and a long name of
 * multi-byte characters is cut at the byte bound (inside a character), then shortened
 * again to fit the message beside long artifact URLs. The message is still one jansson
 * takes, the reason and the artifact list intact, the bad bytes shown as '?'.
 */
static void test_error_not_utf8(void **state)
{
	struct termination *t = *state, *back = t + 1;
	char name[3 * 400 + 1], text[TERM_ERROR_MAX];
	size_t n = 0;

	for (int i = 0; i < 400; i++, n += 3)
		memcpy(name + n, "\xe8\xa8\x93", 3);             /* U+8A13, three bytes each */
	name[n] = 0;
	snprintf(text, sizeof(text), "cannot attach to pid 42 (python3 tr\xff\xc0"
		 "ain.py --run \xed\xa0\x80): %s", name);
	memcpy(t->error, text, sizeof(text));
	assert_int_equal(strlen(t->error), TERM_ERROR_MAX - 1);   /* cut inside a character */
	for (size_t i = 0; i < 3; i++) {
		struct term_artifact *a = &t->artifacts[t->n_artifacts++];

		snprintf(a->name, sizeof(a->name), i == 0 ? "manifest.json" : "f%zu.svg", i);
		snprintf(a->url, sizeof(a->url), i == 0 ? "s3://bucket/manifest.json" :
			 "s3://bucket/f%zu.svg", i);
		memset(a->sha256, 'a', 64);
	}
	roundtrip(t, back);
	assert_int_equal(back->n_artifacts, 3);
	assert_string_equal(back->artifacts[2].url, "s3://bucket/f2.svg");
	assert_true(utf8_valid(back->error, strlen(back->error)));
	assert_non_null(strstr(back->error, "cannot attach to pid 42 (python3 tr?\?ain.py --run ?\?\?): "
				"\xe8\xa8\x93\xe8\xa8\x93"));
	assert_int_equal(strlen(strstr(back->error, "\xe8\xa8\x93")) % 3, 0);

	/* a message bound so small the error has to be shortened too: at a boundary */
	snprintf(text, sizeof(text), "cannot attach: %s", name);
	memcpy(t->error, text, sizeof(text));
	{
		char buf[400], why[256];
		int len = termlog_fit(t, buf, sizeof(buf));

		assert_true(len > 0 && len < (int)sizeof(buf));
		if (termination__parse(buf, (size_t)len, back, why, sizeof(why)) != 0)
			fail_msg("the controller refuses the message: %s\n%s", why, buf);
	}
	assert_true(strlen(back->error) < 400);
	assert_true(utf8_valid(back->error, strlen(back->error)));
	assert_non_null(strstr(back->error, "cannot attach: \xe8\xa8\x93"));
	assert_int_equal(strcmp(back->error + strlen(back->error) - 3, "..."), 0);
	assert_int_equal((strlen(back->error) - strlen("cannot attach: ...")) % 3, 0);
}

static void test_redact(void **state)
{
	struct termination *t = *state, *back = t + 1;
	char path[PATH_MAX + 32];
	FILE *f;

	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	snprintf(path, sizeof(path), "%s/AWS_SESSION_TOKEN", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("FwoGZXIvYXdzEJr\n", f);
	fclose(f);
	setenv("AIPROF_S3_SECRET_DIR", dir, 1);
	snprintf(t->error, sizeof(t->error), "403 for AKIDEXAMPLE with wJalrXUtnFEMI/K7MDENG "
		 "and FwoGZXIvYXdzEJr, again wJalrXUtnFEMI/K7MDENG");
	snprintf(path, sizeof(path), "%s/term", dir);
	assert_int_equal(termlog_write(path, t), 0);
	{
		char buf[TERMINATION_MAX + 1], why[128];
		size_t n;

		f = fopen(path, "r");
		assert_non_null(f);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		assert_int_equal(termination__parse(buf, n, back, why, sizeof(why)), 0);
	}
	assert_string_equal(back->error, "403 for [redacted] with [redacted] and [redacted], "
			    "again [redacted]");
	/* a credential that is a part of the mark does not loop */
	setenv("AWS_SECRET_ACCESS_KEY", "dact", 1);
	snprintf(t->error, sizeof(t->error), "redacted dact");
	termlog_redact(t->error, sizeof(t->error));
	assert_string_equal(t->error, "re[redacted]ed [redacted]");
	/* no room for the mark: the text is cut there */
	snprintf(t->error, 12, "xxxxx dact");
	termlog_redact(t->error, 12);
	assert_string_equal(t->error, "xxxxx ");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AIPROF_S3_SECRET_DIR");
	assert_int_equal(termlog_write("/nonexistent/dir/term", t), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_local_artifacts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_uploaded_artifacts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_not_utf8, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
