/* SPDX-License-Identifier: MIT */
/* common/s3url.c (s3:// locations, endpoint URLs) and common/s3xml.c (S3's answers). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "s3url.h"
#include "s3xml.h"

static void check_loc(const char *url, const char *bucket, const char *prefix)
{
	struct s3_location l = { 0 };
	int r = s3_location__parse(url, &l);

	if (r != 0)
		fail_msg("%s: %d", url, r);
	assert_string_equal(l.bucket, bucket);
	assert_string_equal(l.prefix, prefix);
	s3_location__clear(&l);
}

static void check_bad_loc(const char *url)
{
	struct s3_location l = { (char *)"untouched", NULL };

	if (s3_location__parse(url, &l) != -EINVAL)
		fail_msg("accepted %s", url ? url : "(null)");
	assert_string_equal(l.bucket, "untouched");
}

static void test_location(void **state)
{
	(void)state;
	check_loc("s3://bucket", "bucket", "");
	check_loc("s3://bucket/", "bucket", "");
	check_loc("s3://bucket/team-a", "bucket", "team-a");
	check_loc("s3://bucket/team-a/", "bucket", "team-a");
	check_loc("s3://bucket/team-a/run 1///", "bucket", "team-a/run 1");
	check_loc("S3://my.bucket_1/a/b/c", "my.bucket_1", "a/b/c");
	check_loc("s3://abc/\xe6\x97\xa5\xe6\x9c\xac/x", "abc", "\xe6\x97\xa5\xe6\x9c\xac/x");
	check_loc("s3://Bucket-UPPER/x", "Bucket-UPPER", "x");   /* Ceph/MinIO relaxed names */

	check_bad_loc(NULL);
	check_bad_loc("");
	check_bad_loc("s3://");
	check_bad_loc("s3:///prefix");
	check_bad_loc("s3://ab");                 /* too short */
	check_bad_loc("s3://-bucket/x");
	check_bad_loc("s3://bucket-/x");
	check_bad_loc("s3://buc ket/x");
	check_bad_loc("s3://bucket:9000/x");
	check_bad_loc("s3://user@bucket/x");
	check_bad_loc("s3://bucket//x");          /* empty segment */
	check_bad_loc("s3://bucket/a//b");
	check_bad_loc("s3://bucket/a/./b");
	check_bad_loc("s3://bucket/a/../b");
	check_bad_loc("s3://bucket/..");
	check_bad_loc("s3://bucket/a\nb");
	check_bad_loc("s3://bucket/a\tb");
	check_bad_loc("http://bucket/x");
	check_bad_loc("file:///tmp/x");
	check_bad_loc("/tmp/x");
	{
		char big[1200] = "s3://bucket/";

		memset(big + 12, 'a', 900);
		big[912] = '\0';
		check_bad_loc(big);
	}
	assert_true(s3url_is_s3("s3://b"));
	assert_true(s3url_is_s3("S3://b"));
	assert_false(s3url_is_s3("s3:/b"));
	assert_false(s3url_is_s3("./out"));
	assert_false(s3url_is_s3(NULL));
}

static void check_ep(const char *url, bool https, const char *host, unsigned port,
		     const char *host_header)
{
	struct s3_endpoint e = { 0 };
	int r = s3_endpoint__parse(url, &e);

	if (r != 0)
		fail_msg("%s: %d", url, r);
	assert_int_equal(e.https, https);
	assert_string_equal(e.host, host);
	assert_int_equal(e.port, port);
	assert_string_equal(e.host_header, host_header);
	s3_endpoint__clear(&e);
}

static void check_bad_ep(const char *url)
{
	struct s3_endpoint e = { 0 };

	if (s3_endpoint__parse(url, &e) != -EINVAL)
		fail_msg("accepted %s", url ? url : "(null)");
	assert_null(e.host);
}

static void test_endpoint(void **state)
{
	(void)state;
	check_ep("https://s3.example.com", true, "s3.example.com", 443, "s3.example.com");
	check_ep("https://s3.example.com/", true, "s3.example.com", 443, "s3.example.com");
	check_ep("HTTPS://S3.Example.COM:443", true, "s3.example.com", 443, "s3.example.com");
	check_ep("http://127.0.0.1:7480", false, "127.0.0.1", 7480, "127.0.0.1:7480");
	check_ep("http://localhost", false, "localhost", 80, "localhost");
	check_ep("https://minio:80", true, "minio", 80, "minio:80");
	check_ep("http://[::1]:9000", false, "[::1]", 9000, "[::1]:9000");
	check_ep("https://[2001:db8::1]", true, "[2001:db8::1]", 443, "[2001:db8::1]");
	check_ep("https://s3.us-east-1.amazonaws.com", true, "s3.us-east-1.amazonaws.com", 443,
		 "s3.us-east-1.amazonaws.com");

	check_bad_ep(NULL);
	check_bad_ep("");
	check_bad_ep("s3.example.com");
	check_bad_ep("ftp://s3.example.com");
	check_bad_ep("https://");
	check_bad_ep("https://user:pass@s3.example.com");   /* no credentials in URLs */
	check_bad_ep("https://s3.example.com/base/path");
	check_bad_ep("https://s3.example.com?x=1");
	check_bad_ep("https://s3.example.com#frag");
	check_bad_ep("https://s3.example.com:");
	check_bad_ep("https://s3.example.com:0");
	check_bad_ep("https://s3.example.com:65536");
	check_bad_ep("https://s3.example.com:123456");
	check_bad_ep("https://s3.example.com:80a");
	check_bad_ep("https://s3 .example.com");
	check_bad_ep("https://-s3.example.com");
	check_bad_ep("https://s3..example.com");
	check_bad_ep("https://[::1");
	check_bad_ep("https://[zz::1]");
	check_bad_ep("https://[::1]x");
	check_bad_ep("https://[]");
}

static void test_dns_and_literals(void **state)
{
	(void)state;
	assert_true(s3_bucket_dns_compatible("my-bucket"));
	assert_true(s3_bucket_dns_compatible("my.bucket.1"));
	assert_false(s3_bucket_dns_compatible("My-Bucket"));
	assert_false(s3_bucket_dns_compatible("my_bucket"));
	assert_false(s3_bucket_dns_compatible("ab"));
	assert_false(s3_bucket_dns_compatible("192.168.1.1"));
	assert_false(s3_bucket_dns_compatible("a..b"));
	assert_false(s3_bucket_dns_compatible("a.-b"));
	assert_false(s3_bucket_dns_compatible("-ab"));
	assert_true(s3_host_is_literal("127.0.0.1"));
	assert_true(s3_host_is_literal("[::1]"));
	assert_true(s3_host_is_literal("localhost"));
	assert_false(s3_host_is_literal("s3.example.com"));
	assert_false(s3_host_is_literal("1.2.3"));
	assert_false(s3_host_is_literal("1.2.3.256"));
}

static void test_xml(void **state)
{
	static const char err[] =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<Error><Code>NoSuchBucket</Code><Message>The bucket &quot;x&quot; &amp; &#65;&#x42;"
		" \x01 &bogus; &#12345;</Message><BucketName>x</BucketName><Empty/>"
		"<Nested><Inner>1</Inner></Nested></Error>";
	static const char ok[] =
		"<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Bucket>b</Bucket><Key>k</Key><UploadId>2~abc-DEF_ghi</UploadId>"
		"</InitiateMultipartUploadResult>";
	char out[128], small[4];

	(void)state;
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Code", out, sizeof(out)), 0);
	assert_string_equal(out, "NoSuchBucket");
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Message", out, sizeof(out)), 0);
	assert_string_equal(out, "The bucket \"x\" & AB ? &bogus; ?");
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Empty", out, sizeof(out)), 0);
	assert_string_equal(out, "");
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Nested", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Missing", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Code", small, sizeof(small)), -ENOBUFS);
	assert_string_equal(small, "NoS");
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "", out, sizeof(out)), -EINVAL);
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "a b", out, sizeof(out)), -EINVAL);
	assert_int_equal(s3xml_text(err, sizeof(err) - 1, "Code", out, 0), -EINVAL);
	/* truncated documents */
	assert_int_equal(s3xml_text(err, 60, "Code", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text("<Code>abc", 9, "Code", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text("<Code", 5, "Code", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text("<Code attr='1'", 14, "Code", out, sizeof(out)), -ENOENT);
	assert_int_equal(s3xml_text(NULL, 0, "Code", out, sizeof(out)), -ENOENT);
	/* <CodeX> is not <Code> */
	assert_int_equal(s3xml_text("<CodeX>1</CodeX><Code>2</Code>", 30, "Code", out,
				    sizeof(out)), 0);
	assert_string_equal(out, "2");

	assert_int_equal(s3xml_text(ok, sizeof(ok) - 1, "UploadId", out, sizeof(out)), 0);
	assert_string_equal(out, "2~abc-DEF_ghi");
	assert_true(s3xml_is_error(err, sizeof(err) - 1));
	assert_false(s3xml_is_error(ok, sizeof(ok) - 1));
	assert_true(s3xml_is_error("\n\n<Error>\n", 10));
	assert_false(s3xml_is_error("<Errors>", 8));
	assert_false(s3xml_is_error("<?xml", 5));
	assert_false(s3xml_is_error(NULL, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_location),
		cmocka_unit_test(test_endpoint),
		cmocka_unit_test(test_dns_and_literals),
		cmocka_unit_test(test_xml),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
