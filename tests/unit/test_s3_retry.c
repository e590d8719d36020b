/* SPDX-License-Identifier: MIT */
/*
 * The S3 client's retry policy with a fake clock: which answers are retried and which fail at
 * once, the backoff bounds, the retry loop (scripted tries, recorded sleeps), the messages
 * (what to check, never a secret), configuration from the environment and a secret folder,
 * and the real client against a scripted HTTP server on 127.0.0.1 whose sleeps go to the fake
 * clock, so a 6-try failure takes no wall time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "digest.h"
#include "s3.h"
#include "timeutil.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRETKEY"
#define TOKEN "FwoGZXIvYXdzEXAMPLETOKENSECRET"

/* ---- a fake clock ------------------------------------------------------------------ */

struct fake {
	uint64_t now_ns;
	uint64_t sleeps[64];
	unsigned n_sleeps;
	char notes[16][800];
	unsigned n_notes;
	uint64_t rnd;
	pthread_mutex_t lock;
};

static void fake_sleep(void *ctx, uint64_t ns)
{
	struct fake *f = ctx;

	pthread_mutex_lock(&f->lock);
	if (f->n_sleeps < 64)
		f->sleeps[f->n_sleeps++] = ns;
	f->now_ns += ns;
	pthread_mutex_unlock(&f->lock);
}

static uint64_t fake_random(void *ctx)
{
	struct fake *f = ctx;

	return f->rnd;
}

static time_t fake_now(void *ctx)
{
	struct fake *f = ctx;

	return (time_t)(1700000000 + f->now_ns / NSEC_PER_SEC);
}

static void fake_notify(void *ctx, const char *msg)
{
	struct fake *f = ctx;

	pthread_mutex_lock(&f->lock);
	if (f->n_notes < 16)
		snprintf(f->notes[f->n_notes++], sizeof(f->notes[0]), "%s", msg);
	pthread_mutex_unlock(&f->lock);
}

static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
}

static struct s3_hooks hooks_for(struct fake *f)
{
	return (struct s3_hooks){ fake_sleep, fake_random, fake_now, fake_notify, f };
}

/* ---- classification ---------------------------------------------------------------- */

static struct s3_attempt att(long status, enum s3_net net, const char *code)
{
	struct s3_attempt a = { .status = status, .net = net };

	snprintf(a.code, sizeof(a.code), "%s", code);
	return a;
}

static void test_classify(void **state)
{
	static const struct { long status; enum s3_net net; const char *code;
			      enum s3_verdict v; int err; } cases[] = {
		{ 200, S3_NET_OK, "", S3_DONE, 0 },
		{ 204, S3_NET_OK, "", S3_DONE, 0 },
		{ 200, S3_NET_OK, "InternalError", S3_RETRY, -EIO },  /* 200 + <Error> */
		{ 200, S3_NET_OK, "SomethingElse", S3_FAIL, -EPROTO },
		{ 500, S3_NET_OK, "InternalError", S3_RETRY, -EIO },
		{ 502, S3_NET_OK, "", S3_RETRY, -EIO },
		{ 503, S3_NET_OK, "SlowDown", S3_RETRY, -EBUSY },
		{ 503, S3_NET_OK, "ServiceUnavailable", S3_RETRY, -EBUSY },
		{ 504, S3_NET_OK, "", S3_RETRY, -EIO },
		{ 429, S3_NET_OK, "", S3_RETRY, -EBUSY },
		{ 400, S3_NET_OK, "RequestTimeout", S3_RETRY, -ETIMEDOUT },
		{ 400, S3_NET_OK, "BadDigest", S3_RETRY, -EBADMSG },
		{ 400, S3_NET_OK, "XAmzContentSHA256Mismatch", S3_RETRY, -EBADMSG },
		{ 400, S3_NET_OK, "IncompleteBody", S3_RETRY, -EPROTO },
		{ 400, S3_NET_OK, "InvalidArgument", S3_FAIL, -EPROTO },
		{ 400, S3_NET_OK, "AuthorizationHeaderMalformed", S3_FAIL, -EPROTO },
		{ 403, S3_NET_OK, "SignatureDoesNotMatch", S3_FAIL, -EACCES },
		{ 403, S3_NET_OK, "AccessDenied", S3_FAIL, -EACCES },
		{ 403, S3_NET_OK, "InvalidAccessKeyId", S3_FAIL, -EACCES },
		{ 403, S3_NET_OK, "RequestTimeTooSkewed", S3_FAIL, -EACCES },
		{ 403, S3_NET_OK, "", S3_FAIL, -EACCES },
		{ 404, S3_NET_OK, "NoSuchBucket", S3_FAIL, -ENOENT },
		{ 404, S3_NET_OK, "", S3_FAIL, -ENOENT },
		{ 301, S3_NET_OK, "PermanentRedirect", S3_FAIL, -ENXIO },
		{ 0, S3_NET_CONNECT, "", S3_RETRY, -ECONNREFUSED },
		{ 0, S3_NET_DNS, "", S3_RETRY, -EHOSTUNREACH },
		{ 0, S3_NET_TIMEOUT, "", S3_RETRY, -ETIMEDOUT },
		{ 0, S3_NET_RESET, "", S3_RETRY, -ECONNRESET },
		{ 0, S3_NET_OTHER, "", S3_RETRY, -EIO },
		{ 0, S3_NET_TLS, "", S3_FAIL, -EPROTO },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_attempt a = att(cases[i].status, cases[i].net, cases[i].code);

		if (s3_classify(&a) != cases[i].v)
			fail_msg("case %zu (%ld %s): verdict %d", i, cases[i].status, cases[i].code,
				 s3_classify(&a));
		if (cases[i].v != S3_DONE && s3_attempt_errno(&a) != cases[i].err)
			fail_msg("case %zu (%ld %s): errno %d", i, cases[i].status, cases[i].code,
				 s3_attempt_errno(&a));
	}
}

static void test_backoff(void **state)
{
	struct s3_retry_policy p = { 10, 100 * NSEC_PER_MSEC, 5 * NSEC_PER_SEC };
	uint64_t prev_max = 0;

	(void)state;
	for (unsigned n = 1; n <= 10; n++) {
		uint64_t ceil = 100 * NSEC_PER_MSEC << (n - 1);
		uint64_t lo = s3_backoff_ns(&p, n, false, 0);
		uint64_t hi = s3_backoff_ns(&p, n, false, UINT64_MAX);

		if (ceil > p.cap_ns)
			ceil = p.cap_ns;
		/* equal jitter: [c/2, c] */
		assert_true(lo == ceil / 2);
		assert_true(hi >= ceil / 2 && hi <= ceil);
		for (uint64_t r = 1; r < 2000000000ULL; r = r * 7 + 3) {
			uint64_t v = s3_backoff_ns(&p, n, false, r);

			assert_true(v >= ceil / 2 && v <= ceil);
		}
		assert_true(ceil >= prev_max);
		prev_max = ceil;
	}
	/* grows exponentially, then stays at the cap */
	assert_int_equal(s3_backoff_ns(&p, 1, false, 0), 50 * NSEC_PER_MSEC);
	assert_int_equal(s3_backoff_ns(&p, 2, false, 0), 100 * NSEC_PER_MSEC);
	assert_int_equal(s3_backoff_ns(&p, 3, false, 0), 200 * NSEC_PER_MSEC);
	assert_int_equal(s3_backoff_ns(&p, 30, false, 0), 2500 * NSEC_PER_MSEC);
	assert_int_equal(s3_backoff_ns(&p, 1000, false, 0), 2500 * NSEC_PER_MSEC);
	/* throttling waits longer */
	assert_int_equal(s3_backoff_ns(&p, 1, true, 0), 100 * NSEC_PER_MSEC);
	/* jitter really spreads */
	assert_true(s3_backoff_ns(&p, 3, false, 12345) != s3_backoff_ns(&p, 3, false, 54321));
}

/* ---- the retry loop ---------------------------------------------------------------- */

struct script {
	struct s3_attempt tries[16];
	unsigned n, next;
	int local_err_at;      /* 1-based try that returns a local error, 0 = none */
};

static int scripted(void *ctx, struct s3_attempt *a)
{
	struct script *s = ctx;

	s->next++;
	if (s->local_err_at && s->next == (unsigned)s->local_err_at)
		return -EIO;
	assert_true(s->next <= s->n);
	*a = s->tries[s->next - 1];
	return 0;
}

static void test_retry_run(void **state)
{
	struct s3_retry_policy p = { 6, 200 * NSEC_PER_MSEC, 10 * NSEC_PER_SEC };
	struct fake f;
	struct s3_hooks h;
	struct s3_error e;
	struct script s;

	(void)state;
	/* 503 SlowDown, a reset, then success */
	fake_init(&f);
	f.rnd = 7;
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(503, S3_NET_OK, "SlowDown");
	s.tries[1] = att(0, S3_NET_RESET, "");
	s.tries[2] = att(200, S3_NET_OK, "");
	s.n = 3;
	memset(&e, 0, sizeof(e));
	snprintf(e.op, sizeof(e.op), "PUT s3://b/k");
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), 0);
	assert_int_equal(e.attempts, 3);
	assert_int_equal(f.n_sleeps, 2);
	assert_true(f.sleeps[0] >= 200 * NSEC_PER_MSEC && f.sleeps[0] <= 400 * NSEC_PER_MSEC);
	assert_true(f.sleeps[1] >= 200 * NSEC_PER_MSEC && f.sleeps[1] <= 400 * NSEC_PER_MSEC);
	assert_int_equal(f.n_notes, 2);
	assert_non_null(strstr(f.notes[0], "PUT s3://b/k: HTTP 503 SlowDown; retrying in"));
	assert_non_null(strstr(f.notes[0], "(try 2 of 6)"));
	assert_non_null(strstr(f.notes[1], "connection reset"));

	/* 403: at once, no sleep */
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(403, S3_NET_OK, "SignatureDoesNotMatch");
	s.n = 1;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -EACCES);
	assert_int_equal(e.attempts, 1);
	assert_int_equal(f.n_sleeps, 0);
	assert_string_equal(e.last.code, "SignatureDoesNotMatch");

	/* 404 NoSuchBucket: at once */
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(404, S3_NET_OK, "NoSuchBucket");
	s.n = 1;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -ENOENT);
	assert_int_equal(f.n_sleeps, 0);

	/* 500 forever: max_attempts tries, max_attempts - 1 growing sleeps */
	fake_init(&f);
	f.rnd = UINT64_MAX;
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 6; i++)
		s.tries[i] = att(500, S3_NET_OK, "InternalError");
	s.n = 6;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -EIO);
	assert_int_equal(e.attempts, 6);
	assert_int_equal(f.n_sleeps, 5);
	for (unsigned i = 1; i < 5; i++)
		assert_true(f.sleeps[i] >= f.sleeps[i - 1]);
	assert_true(f.sleeps[4] <= 10 * NSEC_PER_SEC);

	/* a TLS failure: at once */
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(0, S3_NET_TLS, "");
	s.n = 1;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -EPROTO);
	assert_int_equal(f.n_sleeps, 0);

	/* corrupted in transit, then fine */
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(400, S3_NET_OK, "BadDigest");
	s.tries[1] = att(200, S3_NET_OK, "");
	s.n = 2;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), 0);
	assert_int_equal(f.n_sleeps, 1);

	/* a local error ends it at once */
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(503, S3_NET_OK, "SlowDown");
	s.n = 2;
	s.local_err_at = 2;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -EIO);
	assert_int_equal(e.local_err, -EIO);
	assert_int_equal(f.n_sleeps, 1);

	/* max_attempts 1: no retry at all */
	p.max_attempts = 1;
	fake_init(&f);
	h = hooks_for(&f);
	memset(&s, 0, sizeof(s));
	s.tries[0] = att(503, S3_NET_OK, "SlowDown");
	s.n = 1;
	assert_int_equal(s3_retry_run(&p, &h, scripted, &s, &e), -EBUSY);
	assert_int_equal(f.n_sleeps, 0);
}

/* ---- messages ---------------------------------------------------------------------- */

static void fake_config(struct s3_config *c)
{
	memset(c, 0, sizeof(*c));
	c->endpoint_url = strdup("http://127.0.0.1:7480");
	assert_int_equal(s3_endpoint__parse(c->endpoint_url, &c->endpoint), 0);
	c->region = strdup("us-east-1");
	c->access_key_id = strdup("AKIDEXAMPLE");
	c->secret_access_key = strdup(SECRET);
	c->session_token = strdup(TOKEN);
	snprintf(c->creds_source, sizeof(c->creds_source), "environment");
}

static void test_describe(void **state)
{
	static const struct { long status; enum s3_net net; const char *code, *want; } cases[] = {
		{ 403, S3_NET_OK, "SignatureDoesNotMatch", "secret access key" },
		{ 403, S3_NET_OK, "InvalidAccessKeyId", "does not know this access key id" },
		{ 403, S3_NET_OK, "AccessDenied", "not allowed to write to bucket 'bkt'" },
		{ 403, S3_NET_OK, "RequestTimeTooSkewed", "clock" },
		{ 403, S3_NET_OK, "ExpiredToken", "session token" },
		{ 403, S3_NET_OK, "", "access denied" },
		{ 404, S3_NET_OK, "NoSuchBucket", "bucket 'bkt' does not exist at http://127.0.0.1:7480" },
		{ 404, S3_NET_OK, "", "check the bucket name 'bkt'" },
		{ 301, S3_NET_OK, "PermanentRedirect", "another region" },
		{ 400, S3_NET_OK, "AuthorizationHeaderMalformed", "region" },
		{ 400, S3_NET_OK, "BadDigest", "alters data" },
		{ 503, S3_NET_OK, "SlowDown", "throttling" },
		{ 500, S3_NET_OK, "InternalError", "kept failing" },
		{ 0, S3_NET_CONNECT, "", "check the endpoint URL http://127.0.0.1:7480" },
		{ 0, S3_NET_TIMEOUT, "", "--stall-timeout" },
		{ 0, S3_NET_RESET, "", "network path" },
		{ 0, S3_NET_TLS, "", "CA bundle" },
	};
	struct s3_config c;
	char buf[1024];

	(void)state;
	fake_config(&c);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_error e = { .last = att(cases[i].status, cases[i].net, cases[i].code),
				      .attempts = 3 };

		snprintf(e.op, sizeof(e.op), "PUT s3://bkt/key\n");
		snprintf(e.bucket, sizeof(e.bucket), "bkt");
		/* a server message could echo anything: it is printed, but not the secret */
		snprintf(e.last.detail, sizeof(e.last.detail), "message from the server");
		s3_error__describe(&e, &c, buf, sizeof(buf));
		if (!strstr(buf, cases[i].want))
			fail_msg("case %zu: '%s' lacks '%s'", i, buf, cases[i].want);
		assert_null(strstr(buf, SECRET));
		assert_null(strstr(buf, TOKEN));
		assert_null(strchr(buf, '\n'));  /* control characters are replaced */
		if (cases[i].net == S3_NET_OK && cases[i].status != 403 && cases[i].status != 404 &&
		    cases[i].status != 301 && strcmp(cases[i].code, "AuthorizationHeaderMalformed"))
			assert_non_null(strstr(buf, "after 3 tries"));
	}
	s3_config__clear(&c);
}

/* ---- configuration ----------------------------------------------------------------- */

static void clear_env(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
		"AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE",
		"AIPROF_S3_SECRET_DIR", "AIPROF_S3_ADDRESSING",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

static void write_file(const char *dir, const char *name, const char *content)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

static void test_config(void **state)
{
	struct s3_config c;
	struct s3_settings s = { 0 };
	char msg[512], dir[] = "/tmp/aiprof-s3cfg-XXXXXX";

	(void)state;
	clear_env();
	/* nothing: says which variables to set */
	assert_int_equal(s3_config__load(&c, NULL, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "AWS_ACCESS_KEY_ID"));
	assert_null(c.region);

	/* environment */
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
	assert_int_equal(s3_config__load(&c, NULL, msg, sizeof(msg)), 0);
	assert_string_equal(c.region, "eu-west-1");
	assert_string_equal(c.endpoint.host, "s3.eu-west-1.amazonaws.com");
	assert_true(c.endpoint.https);
	assert_string_equal(c.endpoint_url, "");
	assert_null(c.session_token);
	assert_int_equal(s3_config__addressing_for(&c, "my-bucket"), S3_ADDRESSING_VIRTUAL);
	assert_int_equal(s3_config__addressing_for(&c, "my.bucket"), S3_ADDRESSING_PATH);
	assert_int_equal(s3_config__addressing_for(&c, "My_Bucket"), S3_ADDRESSING_PATH);
	s3_config__clear(&c);

	setenv("AWS_REGION", "us-west-2", 1);
	setenv("AWS_ENDPOINT_URL", "http://ignored:1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:7480", 1);
	setenv("AWS_SESSION_TOKEN", TOKEN, 1);
	assert_int_equal(s3_config__load(&c, NULL, msg, sizeof(msg)), 0);
	assert_string_equal(c.region, "us-west-2");
	assert_string_equal(c.endpoint.host_header, "127.0.0.1:7480");
	assert_string_equal(c.session_token, TOKEN);
	assert_int_equal(s3_config__addressing_for(&c, "my-bucket"), S3_ADDRESSING_PATH);
	s3_config__clear(&c);

	setenv("AIPROF_S3_ADDRESSING", "virtual", 1);
	unsetenv("AWS_ENDPOINT_URL_S3");
	assert_int_equal(s3_config__load(&c, NULL, msg, sizeof(msg)), 0);
	assert_string_equal(c.endpoint.host, "ignored");
	assert_int_equal(s3_config__addressing_for(&c, "b.c"), S3_ADDRESSING_VIRTUAL);
	s3_config__clear(&c);
	setenv("AIPROF_S3_ADDRESSING", "sideways", 1);
	assert_int_equal(s3_config__load(&c, NULL, msg, sizeof(msg)), -EINVAL);
	unsetenv("AIPROF_S3_ADDRESSING");

	/* flags win */
	s.endpoint_url = "https://minio.example:9000";
	s.region = "ap-south-1";
	s.addressing = S3_ADDRESSING_PATH;
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), 0);
	assert_string_equal(c.region, "ap-south-1");
	assert_string_equal(c.endpoint.host_header, "minio.example:9000");
	assert_int_equal(s3_config__addressing_for(&c, "my-bucket"), S3_ADDRESSING_PATH);
	s3_config__clear(&c);

	/* bad values, with messages that name them */
	s.endpoint_url = "https://user:pw@host";
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "endpoint URL"));
	assert_null(strstr(msg, "pw@"));    /* a password in a URL is not echoed */
	s.endpoint_url = "https://s3.example.com/path";
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "https://s3.example.com/path"));
	s.endpoint_url = NULL;
	s.region = "us east";
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	s.region = NULL;
	s.ca_bundle = "/nonexistent/ca.pem";
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "/nonexistent/ca.pem"));
	s.ca_bundle = NULL;
	setenv("AWS_SECRET_ACCESS_KEY", "has space", 1);
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	assert_null(strstr(msg, "has space"));

	/* the secret folder wins over the environment; trailing newlines are trimmed */
	assert_non_null(mkdtemp(dir));
	s.secret_dir = dir;
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "AWS_ACCESS_KEY_ID"));
	write_file(dir, "AWS_ACCESS_KEY_ID", "AKIDFILE\n");
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "AWS_SECRET_ACCESS_KEY"));
	write_file(dir, "secret_access_key", "");
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "empty"));
	write_file(dir, "secret_access_key", SECRET "\r\n");
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), 0);
	assert_string_equal(c.access_key_id, "AKIDFILE");
	assert_string_equal(c.secret_access_key, SECRET);
	assert_null(c.session_token);    /* not taken from the environment */
	assert_non_null(strstr(c.creds_source, dir));
	s3_config__clear(&c);
	write_file(dir, "AWS_SESSION_TOKEN", TOKEN "\n");
	write_file(dir, "AWS_SECRET_ACCESS_KEY", "two\nlines\n");
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
	assert_null(strstr(msg, "two"));
	{
		char big[4097];

		memset(big, 'k', 4096);         /* 4 KiB and no newline: one byte too many */
		big[4096] = '\0';
		write_file(dir, "AWS_SECRET_ACCESS_KEY", big);
		assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -EINVAL);
		assert_non_null(strstr(msg, "too large (over 4 KiB)"));
	}
	write_file(dir, "AWS_SECRET_ACCESS_KEY", SECRET);
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), 0);
	assert_string_equal(c.session_token, TOKEN);
	s3_config__clear(&c);
	s3_config__clear(NULL);

	setenv("AIPROF_S3_SECRET_DIR", "/nonexistent-secret-dir", 1);
	s.secret_dir = NULL;
	assert_int_equal(s3_config__load(&c, &s, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "/nonexistent-secret-dir"));

	{
		char p[600];
		const char *names[] = { "AWS_ACCESS_KEY_ID", "secret_access_key",
					"AWS_SESSION_TOKEN", "AWS_SECRET_ACCESS_KEY" };

		for (size_t i = 0; i < 4; i++) {
			snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
			unlink(p);
		}
		rmdir(dir);
	}
	clear_env();
}

/* ---- the real client against a scripted server -------------------------------------- */

enum reply { RP_OK, RP_503, RP_500, RP_403, RP_404, RP_RESET, RP_BADDIGEST };

struct server {
	int lfd;
	unsigned port;
	enum reply script[16];
	unsigned n, served;
	char last_head[8192];
	size_t last_body_len;
	char last_body_sha[65];
	pthread_t tid;
};

static ssize_t read_head(int fd, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(fd, buf + n, 1);

		if (r <= 0)
			return -1;
		n++;
		buf[n] = '\0';
		if (n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0)
			return (ssize_t)n;
	}
	return -1;
}

static void reply(int fd, int status, const char *reason, const char *code, bool close_conn)
{
	char body[256] = "", out[1024];
	int n;

	if (code)
		snprintf(body, sizeof(body), "<?xml version=\"1.0\"?><Error><Code>%s</Code>"
			 "<Message>scripted</Message></Error>", code);
	n = snprintf(out, sizeof(out), "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\n%s%s\r\n%s",
		     status, reason, strlen(body), status == 200 ? "ETag: \"abc\"\r\n" : "",
		     close_conn ? "Connection: close\r\n" : "", body);
	assert_int_equal(write(fd, out, (size_t)n), n);
}

static void *serve(void *arg)
{
	struct server *s = arg;

	for (;;) {
		int fd = accept(s->lfd, NULL, NULL);

		if (fd < 0)
			return NULL;
		for (;;) {
			char head[8192], *cl;
			size_t len = 0;
			uint8_t d[32];
			enum reply what;

			if (read_head(fd, head, sizeof(head)) < 0)
				break;
			cl = strcasestr(head, "\r\ncontent-length:");
			if (cl)
				len = strtoul(cl + 17, NULL, 10);
			what = s->served < s->n ? s->script[s->served] : RP_OK;
			s->served++;
			if (strcasestr(head, "\r\nexpect: 100-continue") && what != RP_403 &&
			    what != RP_404)
				assert_int_equal(write(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25), 25);
			if (what == RP_RESET) {
				struct linger lg = { 1, 0 };

				setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
				break;
			}
			{
				char *body = malloc(len + 1);
				size_t got = 0;

				while (got < len) {
					ssize_t r = read(fd, body + got, len - got);

					if (r <= 0)
						break;
					got += (size_t)r;
				}
				sha256(body, got, d);
				hex_encode(d, 32, s->last_body_sha);
				s->last_body_len = got;
				free(body);
			}
			snprintf(s->last_head, sizeof(s->last_head), "%s", head);
			switch (what) {
			case RP_OK: reply(fd, 200, "OK", NULL, false); break;
			case RP_503: reply(fd, 503, "Slow Down", "SlowDown", false); break;
			case RP_500: reply(fd, 500, "Internal", "InternalError", false); break;
			case RP_403: reply(fd, 403, "Forbidden", "SignatureDoesNotMatch", true); break;
			case RP_404: reply(fd, 404, "Not Found", "NoSuchBucket", true); break;
			case RP_BADDIGEST: reply(fd, 400, "Bad Request", "BadDigest", false); break;
			default: break;
			}
			if (what == RP_403 || what == RP_404)
				break;
		}
		close(fd);
	}
}

static void server_start(struct server *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->lfd >= 0);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->lfd, 8), 0);
	assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&s->tid, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	close(s->lfd);
	pthread_join(s->tid, NULL);
}

static void client_config(struct s3_config *c, unsigned port)
{
	char url[64];

	memset(c, 0, sizeof(*c));
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
	c->endpoint_url = strdup(url);
	assert_int_equal(s3_endpoint__parse(url, &c->endpoint), 0);
	c->region = strdup("us-east-1");
	c->access_key_id = strdup("AKIDEXAMPLE");
	c->secret_access_key = strdup(SECRET);
	snprintf(c->creds_source, sizeof(c->creds_source), "environment");
}

static void test_client_retries(void **state)
{
	struct server srv = { .script = { RP_503, RP_RESET, RP_500, RP_BADDIGEST, RP_OK }, .n = 5 };
	struct s3_client_opts o;
	struct s3_config c;
	struct s3_error e;
	struct fake f;
	struct s3_hooks h;
	struct s3_client *cl;
	struct s3_object_meta m = { "application/json", NULL };
	char body[3000], want_sha[65], buf[1024];
	uint8_t d[32];
	uint64_t t0;

	(void)state;
	memset(body, 'x', sizeof(body));
	sha256(body, sizeof(body), d);
	hex_encode(d, 32, want_sha);
	server_start(&srv);
	client_config(&c, srv.port);
	fake_init(&f);
	f.rnd = 3;
	h = hooks_for(&f);
	s3_client_opts__defaults(&o);
	cl = s3_client__new(&c, &o, &h);
	assert_non_null(cl);

	t0 = now_monotonic_ns();
	assert_int_equal(s3_client__put_buffer(cl, "bkt", "dir/a b.json", body, sizeof(body), &m,
					       &e), 0);
	/* four failures, four sleeps on the fake clock, none in real time */
	assert_int_equal(e.attempts, 5);
	assert_int_equal(srv.served, 5);
	assert_int_equal(f.n_sleeps, 4);
	assert_int_equal(f.n_notes, 4);
	assert_true(now_monotonic_ns() - t0 < 5 * NSEC_PER_SEC);
	assert_non_null(strstr(f.notes[0], "SlowDown"));
	assert_non_null(strstr(f.notes[1], "connection reset"));
	assert_non_null(strstr(f.notes[3], "BadDigest"));
	for (unsigned i = 0; i < f.n_notes; i++)
		assert_null(strstr(f.notes[i], SECRET));
	/* what the server got: the body, its real SHA-256, a signature over it */
	assert_int_equal(srv.last_body_len, sizeof(body));
	assert_string_equal(srv.last_body_sha, want_sha);
	assert_non_null(strstr(srv.last_head, "PUT /bkt/dir/a%20b.json HTTP/1.1\r\n"));
	snprintf(buf, sizeof(buf), "x-amz-content-sha256: %s\r\n", want_sha);
	assert_non_null(strcasestr(srv.last_head, buf));
	assert_non_null(strcasestr(srv.last_head, "\r\nContent-MD5: "));
	assert_non_null(strcasestr(srv.last_head, "\r\nContent-Type: application/json\r\n"));
	assert_non_null(strstr(srv.last_head, "Authorization: AWS4-HMAC-SHA256 Credential="
				"AKIDEXAMPLE/20231114/us-east-1/s3/aws4_request, SignedHeaders="
				"content-md5;content-type;host;x-amz-content-sha256;x-amz-date, "
				"Signature="));
	assert_null(strstr(srv.last_head, SECRET));

	/* 403: one request, no sleep, a message about the secret key */
	srv.script[0] = RP_403;
	srv.n = srv.served + 1;
	memmove(srv.script + srv.served, srv.script, sizeof(srv.script[0]));
	fake_init(&f);
	assert_int_equal(s3_client__put_buffer(cl, "bkt", "k", body, sizeof(body), &m, &e),
			 -EACCES);
	assert_int_equal(e.attempts, 1);
	assert_int_equal(f.n_sleeps, 0);
	s3_error__describe(&e, &c, buf, sizeof(buf));
	assert_non_null(strstr(buf, "SignatureDoesNotMatch"));
	assert_non_null(strstr(buf, "secret access key"));
	assert_null(strstr(buf, SECRET));

	/* 404 NoSuchBucket: at once */
	srv.script[srv.served] = RP_404;
	srv.n = srv.served + 1;
	fake_init(&f);
	assert_int_equal(s3_client__put_buffer(cl, "nobucket", "k", body, 10, &m, &e), -ENOENT);
	assert_int_equal(f.n_sleeps, 0);
	s3_error__describe(&e, &c, buf, sizeof(buf));
	assert_non_null(strstr(buf, "bucket 'nobucket' does not exist"));

	/* nothing listening: connection refused, retried max_attempts times on the fake clock */
	s3_client__free(cl);
	server_stop(&srv);
	o.retry.max_attempts = 3;
	fake_init(&f);
	cl = s3_client__new(&c, &o, &h);
	assert_int_equal(s3_client__put_buffer(cl, "bkt", "k", body, 10, &m, &e), -ECONNREFUSED);
	assert_int_equal(e.attempts, 3);
	assert_int_equal(f.n_sleeps, 2);
	s3_client__free(cl);
	s3_config__clear(&c);
}

/* A scripted multipart server: UploadId on create, ETags on parts (part 2's first try gets
 * 503 SlowDown), NoSuchUpload on completion (as if an earlier completion's answer was lost),
 * and a HEAD that shows the object with the size and x-amz-meta-sha256 of the create. */
struct mp_server {
	int lfd;
	unsigned port;
	pthread_t tid;
	char meta_sha[65];
	uint64_t size;
	unsigned parts, part2_tries, completes, heads, aborts;
	char complete_body[4096];
	pthread_mutex_t lock;
};

static void mp_reply(int fd, const char *status, const char *headers, const char *body)
{
	char out[2048];
	int n = snprintf(out, sizeof(out), "HTTP/1.1 %s\r\nContent-Length: %zu\r\n%s\r\n%s",
			 status, strlen(body), headers, body);

	assert_int_equal(write(fd, out, (size_t)n), n);
}

static void *mp_conn(void *arg)
{
	struct mp_server *s = ((void **)arg)[0];
	int fd = (int)(intptr_t)((void **)arg)[1];

	free(arg);
	for (;;) {
		char head[8192], *cl, *p, hdr[256];
		size_t len = 0, got = 0;
		char *body;

		if (read_head(fd, head, sizeof(head)) < 0)
			break;
		cl = strcasestr(head, "\r\ncontent-length:");
		if (cl)
			len = strtoul(cl + 17, NULL, 10);
		if (strcasestr(head, "\r\nexpect: 100-continue"))
			assert_int_equal(write(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25), 25);
		body = malloc(len + 1);
		while (got < len) {
			ssize_t r = read(fd, body + got, len - got);

			if (r <= 0)
				break;
			got += (size_t)r;
		}
		body[got] = '\0';
		pthread_mutex_lock(&s->lock);
		if (!strncmp(head, "POST ", 5) && strstr(head, "?uploads ")) {
			p = strcasestr(head, "\r\nx-amz-meta-sha256: ");
			if (p)
				snprintf(s->meta_sha, sizeof(s->meta_sha), "%.64s", p + 21);
			mp_reply(fd, "200 OK", "", "<InitiateMultipartUploadResult><UploadId>up~1"
				 "</UploadId></InitiateMultipartUploadResult>");
		} else if (!strncmp(head, "PUT ", 4) && strstr(head, "partNumber=2&") &&
			   s->part2_tries++ == 0) {
			mp_reply(fd, "503 Slow Down", "", "<Error><Code>SlowDown</Code></Error>");
		} else if (!strncmp(head, "PUT ", 4) && strstr(head, "partNumber=")) {
			s->parts++;
			s->size += got;
			p = strstr(head, "partNumber=");
			snprintf(hdr, sizeof(hdr), "ETag: \"etag-%lu\"\r\n", strtoul(p + 11, NULL, 10));
			mp_reply(fd, "200 OK", hdr, "");
		} else if (!strncmp(head, "POST ", 5) && strstr(head, "uploadId=up~1")) {
			s->completes++;
			snprintf(s->complete_body, sizeof(s->complete_body), "%s", body);
			mp_reply(fd, "404 Not Found", "", "<Error><Code>NoSuchUpload</Code></Error>");
		} else if (!strncmp(head, "HEAD ", 5)) {
			s->heads++;
			snprintf(hdr, sizeof(hdr), "x-amz-meta-sha256: %s\r\n", s->meta_sha);
			/* a HEAD answer: the object's length, no body */
			{
				char out[512];
				int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: "
						 "%lu\r\n%s\r\n", (unsigned long)s->size, hdr);

				assert_int_equal(write(fd, out, (size_t)n), n);
			}
		} else if (!strncmp(head, "DELETE ", 7)) {
			s->aborts++;
			mp_reply(fd, "204 No Content", "", "");
		} else {
			mp_reply(fd, "400 Bad Request", "", "<Error><Code>Unexpected</Code></Error>");
		}
		pthread_mutex_unlock(&s->lock);
		free(body);
	}
	close(fd);
	return NULL;
}

static void *mp_serve(void *arg)
{
	struct mp_server *s = arg;

	for (;;) {
		int fd = accept(s->lfd, NULL, NULL);
		void **a;
		pthread_t t;

		if (fd < 0)
			return NULL;
		a = malloc(2 * sizeof(*a));
		a[0] = s;
		a[1] = (void *)(intptr_t)fd;
		assert_int_equal(pthread_create(&t, NULL, mp_conn, a), 0);
		pthread_detach(t);
	}
}

static void test_client_multipart(void **state)
{
	struct mp_server srv = { 0 };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct s3_client_opts o;
	struct s3_put_stats st;
	struct s3_config c;
	struct s3_error e;
	struct fake f;
	struct s3_hooks h;
	struct s3_client *cl;
	char path[] = "/tmp/aiprof-s3mp-XXXXXX", sha[65];
	const uint64_t size = 11 * (1ULL << 20) + 7;   /* 3 parts of 5 MiB */
	struct s3_object_meta m = { NULL, sha };
	uint8_t *buf = malloc(size), d[32];
	int fd;

	(void)state;
	for (uint64_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	sha256(buf, size, d);
	hex_encode(d, 32, sha);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, size), (ssize_t)size);
	free(buf);

	pthread_mutex_init(&srv.lock, NULL);
	srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(srv.lfd, 16), 0);
	assert_int_equal(getsockname(srv.lfd, (struct sockaddr *)&a, &alen), 0);
	srv.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&srv.tid, NULL, mp_serve, &srv), 0);

	client_config(&c, srv.port);
	fake_init(&f);
	h = hooks_for(&f);
	s3_client_opts__defaults(&o);
	o.part_size = 5ULL << 20;
	o.multipart_threshold = 5ULL << 20;
	o.parallel = 3;
	cl = s3_client__new(&c, &o, &h);
	assert_non_null(cl);
	assert_int_equal(s3_client__put_file(cl, "bkt", "big.bin", fd, size, &m, &st, &e), 0);
	assert_int_equal(st.parts, 3);
	assert_int_equal(st.retries, 1);              /* part 2's SlowDown */
	assert_int_equal(f.n_sleeps, 1);
	assert_int_equal(srv.parts, 3);
	assert_int_equal(srv.size, size);
	assert_string_equal(srv.meta_sha, sha);
	assert_int_equal(srv.completes, 1);
	assert_int_equal(srv.heads, 1);               /* NoSuchUpload: checked, it is there */
	assert_int_equal(srv.aborts, 0);
	assert_non_null(strstr(srv.complete_body, "<Part><PartNumber>1</PartNumber><ETag>&quot;"
				"etag-1&quot;</ETag></Part><Part><PartNumber>2</PartNumber>"));
	assert_non_null(strstr(srv.complete_body, "<PartNumber>3</PartNumber>"));

	/* the file changed size under us: refused, and the multipart upload aborted */
	assert_int_equal(s3_client__put_file(cl, "bkt", "big.bin", fd, size + 1, &m, &st, &e),
			 -ESTALE);
	assert_int_equal(srv.aborts, 1);

	s3_client__free(cl);
	s3_config__clear(&c);
	shutdown(srv.lfd, SHUT_RDWR);
	close(srv.lfd);
	pthread_join(srv.tid, NULL);
	close(fd);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_retry_run),
		cmocka_unit_test(test_describe),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_client_retries),
		cmocka_unit_test(test_client_multipart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
