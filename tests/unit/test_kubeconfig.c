/* SPDX-License-Identifier: MIT */
/* controller/kubeconfig.c, controller/yamljson.c, controller/b64.c. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sys/stat.h>
#include "controller/b64.h"
#include "controller/kubeconfig.h"
#include "controller/yamljson.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/aiprof-kc-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	(void)state;
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_file(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *path_of(const char *name)
{
	static char path[4][256];
	static int i;

	i = (i + 1) % 4;
	snprintf(path[i], sizeof(path[i]), "%s/%s", dir, name);
	return path[i];
}

/* ---- YAML ---------------------------------------------------------------------------- */

static void test_yaml_basic(void **state)
{
	static const char y[] =
		"apiVersion: v1\n"
		"kind: Config\n"
		"flags: {a: true, b: no, c: 'true', d: ~, e: , n: 42}\n"
		"list:\n- one\n- \"two\"\n- [x, y]\n"
		"block: |\n  line1\n  line2\n"
		"---\nsecond: document\n";
	json_t *j = NULL;
	char msg[200];

	(void)state;
	assert_int_equal(yaml_to_json(y, sizeof(y) - 1, &j, msg, sizeof(msg)), 0);
	assert_string_equal(json_string_value(json_object_get(j, "kind")), "Config");
	assert_true(json_is_true(json_object_get(json_object_get(j, "flags"), "a")));
	assert_true(json_is_false(json_object_get(json_object_get(j, "flags"), "b")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "flags"), "c")),
			    "true");         /* quoted: a string */
	assert_true(json_is_null(json_object_get(json_object_get(j, "flags"), "d")));
	assert_true(json_is_null(json_object_get(json_object_get(j, "flags"), "e")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "flags"), "n")),
			    "42");
	assert_int_equal(json_array_size(json_object_get(j, "list")), 3);
	assert_string_equal(json_string_value(json_object_get(j, "block")), "line1\nline2\n");
	assert_null(json_object_get(j, "second"));   /* only the first document */
	assert_true(json_truthy(json_object_get(json_object_get(j, "flags"), "c")));
	json_decref(j);

	assert_int_equal(yaml_to_json("", 0, &j, NULL, 0), 0);
	assert_true(json_is_null(j));
	json_decref(j);
}

static void test_yaml_refusals(void **state)
{
	static const char alias[] = "a: &x [1, 2]\nb: *x\n";
	static const char merge[] = "a: {x: 1}\nb:\n  <<: {y: 2}\n";
	static const char ckey[] = "? [a, b]\n: value\n";
	static const char bad[] = "a: [1, 2\nb: }\n";
	char deep[400], msg[200];
	json_t *j = NULL;
	size_t n = 0;

	(void)state;
	assert_int_equal(yaml_to_json(alias, sizeof(alias) - 1, &j, msg, sizeof(msg)), -ENOTSUP);
	assert_non_null(strstr(msg, "alias"));
	assert_int_equal(yaml_to_json(merge, sizeof(merge) - 1, &j, msg, sizeof(msg)), -ENOTSUP);
	assert_int_equal(yaml_to_json(ckey, sizeof(ckey) - 1, &j, msg, sizeof(msg)), -ENOTSUP);
	assert_int_equal(yaml_to_json(bad, sizeof(bad) - 1, &j, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "line"));
	for (int i = 0; i < 100; i++)
		deep[n++] = '[';
	deep[n] = '\0';
	assert_int_equal(yaml_to_json(deep, n, &j, msg, sizeof(msg)), -E2BIG);
	assert_null(NULL);
}

static void test_b64(void **state)
{
	uint8_t *out = NULL;
	size_t n = 0;

	(void)state;
	assert_int_equal(b64_decode("aGVsbG8=", 8, &out, &n), 0);
	assert_int_equal(n, 5);
	assert_memory_equal(out, "hello", 5);
	free(out);
	assert_int_equal(b64_decode("aGVs\nbG8=\n", 10, &out, &n), 0);   /* line breaks */
	assert_int_equal(n, 5);
	assert_memory_equal(out, "hello", 6);       /* NUL-terminated past the data */
	free(out);
	assert_int_equal(b64_decode(" Zm9v\tYg==", 10, &out, &n), 0);
	assert_int_equal(n, 4);
	assert_memory_equal(out, "foob", 4);
	free(out);
	assert_int_equal(b64_decode("", 0, &out, &n), 0);
	assert_int_equal(n, 0);
	free(out);
	out = (uint8_t *)"untouched";
	assert_int_equal(b64_decode("a$==", 4, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("a===", 4, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("aGVsbG8=x", 9, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("a", 1, &out, &n), -EINVAL);
	/* padding is required, as Kubernetes (Go's base64.StdEncoding) requires it */
	assert_int_equal(b64_decode("aGVsbG8", 7, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("aGVsbG8==", 9, &out, &n), -EINVAL);
	/* data after the padding; EVP_DecodeBlock would take these */
	assert_int_equal(b64_decode("Zm9vYg==Zm9v", 12, &out, &n), -EINVAL);
	/* '-' ends the data for OpenSSL's PEM decoder ("-----END"): refused, not truncated */
	assert_int_equal(b64_decode("Zm9v-", 5, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("-Zm9v", 5, &out, &n), -EINVAL);
	assert_int_equal(b64_decode("Zm9v-YmFy", 9, &out, &n), -EINVAL);
	assert_string_equal((char *)out, "untouched");
}

/* ---- kubeconfig ------------------------------------------------------------------------ */

/* "-----BEGIN CERTIFICATE-----\nCA\n" and a key, base64'd (the contents are never parsed here) */
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCg=="
#define KEY_B64 "S0VZCg=="

static const char kubeconfig[] =
	"apiVersion: v1\n"
	"kind: Config\n"
	"current-context: dev\n"
	"clusters:\n"
	"- name: kind\n"
	"  cluster:\n"
	"    server: https://127.0.0.1:6443/\n"
	"    certificate-authority-data: " CA_B64 "\n"
	"- name: lab\n"
	"  cluster:\n"
	"    server: https://lab.example:443\n"
	"    certificate-authority: certs/ca.pem\n"
	"    tls-server-name: kubernetes.default\n"
	"- name: loose\n"
	"  cluster: {server: 'https://10.0.0.1', insecure-skip-tls-verify: true}\n"
	"users:\n"
	"- name: admin\n"
	"  user:\n"
	"    client-certificate-data: " CA_B64 "\n"
	"    client-key-data: " KEY_B64 "\n"
	"- name: robot\n"
	"  user:\n"
	"    tokenFile: robot.token\n"
	"- name: plain\n"
	"  user: {token: s3cr3t-t0ken}\n"
	"- name: cloud\n"
	"  user:\n"
	"    exec: {command: gke-gcloud-auth-plugin, apiVersion: client.authentication.k8s.io/v1}\n"
	"- name: halfcert\n"
	"  user: {client-certificate: /etc/a.crt}\n"
	"contexts:\n"
	"- name: dev\n"
	"  context: {cluster: kind, user: admin, namespace: team-a}\n"
	"- name: lab\n"
	"  context: {cluster: lab, user: robot}\n"
	"- name: loose\n"
	"  context: {cluster: loose, user: plain}\n"
	"- name: cloud\n"
	"  context: {cluster: kind, user: cloud}\n"
	"- name: half\n"
	"  context: {cluster: kind, user: halfcert}\n"
	"- name: nocluster\n"
	"  context: {cluster: missing, user: plain}\n";

static void test_kubeconfig_current(void **state)
{
	struct kube_config *c = NULL;
	char msg[300];

	(void)state;
	write_file("config", kubeconfig);
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), NULL, &c, msg,
						      sizeof(msg)), 0);
	assert_string_equal(c->server, "https://127.0.0.1:6443");   /* trailing '/' dropped */
	assert_string_equal(c->namespace, "team-a");
	assert_non_null(c->ca_data);
	assert_int_equal(c->ca_len, 31);
	assert_memory_equal(c->ca_data, "-----BEGIN CERTIFICATE-----\nCA\n", 31);
	assert_non_null(c->cert_data);
	assert_non_null(c->key_data);
	assert_int_equal(c->key_len, 4);
	assert_null(c->token);
	assert_false(c->insecure);
	assert_non_null(strstr(c->source, "config"));
	kube_config__free(c);
}

static void test_kubeconfig_named(void **state)
{
	struct kube_config *c = NULL;
	char msg[300], expect[300];

	(void)state;
	write_file("config", kubeconfig);
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "lab", &c, msg,
						      sizeof(msg)), 0);
	snprintf(expect, sizeof(expect), "%s/certs/ca.pem", dir);   /* relative to the file */
	assert_string_equal(c->ca_file, expect);
	snprintf(expect, sizeof(expect), "%s/robot.token", dir);
	assert_string_equal(c->token_file, expect);
	assert_string_equal(c->tls_server_name, "kubernetes.default");
	assert_string_equal(c->namespace, "default");
	kube_config__free(c);

	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "loose", &c, msg,
						      sizeof(msg)), 0);
	assert_true(c->insecure);
	assert_string_equal(c->token, "s3cr3t-t0ken");
	kube_config__free(c);
}

static void test_kubeconfig_errors(void **state)
{
	struct kube_config *c = (struct kube_config *)0x1;
	char msg[300];

	(void)state;
	write_file("config", kubeconfig);
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "cloud", &c, msg,
						      sizeof(msg)), -ENOTSUP);
	assert_non_null(strstr(msg, "exec"));
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "half", &c, msg,
						      sizeof(msg)), -EINVAL);
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "nocluster", &c, msg,
						      sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "missing"));
	assert_int_equal(kube_config__load_kubeconfig(path_of("config"), "nope", &c, msg,
						      sizeof(msg)), -ENOENT);
	assert_int_equal(kube_config__load_kubeconfig(path_of("absent"), NULL, &c, msg,
						      sizeof(msg)), -ENOENT);
	write_file("bad", "clusters: [\n");
	assert_int_equal(kube_config__load_kubeconfig(path_of("bad"), NULL, &c, msg, sizeof(msg)),
			 -EINVAL);
	write_file("nocur", "apiVersion: v1\nclusters: []\n");
	assert_int_equal(kube_config__load_kubeconfig(path_of("nocur"), NULL, &c, msg,
						      sizeof(msg)), -ENOENT);
	write_file("badb64", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
		   "clusters: [{name: c, cluster: {server: 'https://a', "
		   "certificate-authority-data: '!!!'}}]\n");
	assert_int_equal(kube_config__load_kubeconfig(path_of("badb64"), NULL, &c, msg,
						      sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "base64"));
	write_file("noserver", "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
		   "clusters: [{name: c, cluster: {server: 'ftp://a'}}]\n");
	assert_int_equal(kube_config__load_kubeconfig(path_of("noserver"), NULL, &c, msg,
						      sizeof(msg)), -EINVAL);
	assert_ptr_equal(c, (struct kube_config *)0x1);              /* untouched */
}

static void test_kubeconfig_merge(void **state)
{
	struct kube_config *c = NULL;
	char msg[300], list[600];

	(void)state;
	/* KUBECONFIG=a:missing:b — the first file to name something wins; missing ones skip */
	write_file("a", "current-context: mine\n"
		   "contexts: [{name: mine, context: {cluster: shared, user: u}}]\n"
		   "users: [{name: u, user: {token: from-a}}]\n");
	write_file("b", "current-context: other\n"
		   "clusters: [{name: shared, cluster: {server: 'https://b.example'}}]\n"
		   "users: [{name: u, user: {token: from-b}}]\n");
	snprintf(list, sizeof(list), "%s:%s:%s", path_of("a"), path_of("missing"), path_of("b"));
	assert_int_equal(kube_config__load_kubeconfig(list, NULL, &c, msg, sizeof(msg)), 0);
	assert_string_equal(c->server, "https://b.example");
	assert_string_equal(c->token, "from-a");
	kube_config__free(c);
}

static void test_in_cluster(void **state)
{
	struct kube_config *c = NULL;
	char msg[300], sa[200], expect[300];

	(void)state;
	snprintf(sa, sizeof(sa), "%s/sa", dir);
	mkdir(sa, 0700);
	write_file("sa/token", "tok\n");
	write_file("sa/ca.crt", "-----BEGIN CERTIFICATE-----\n");
	write_file("sa/namespace", "aiprof-system\n");
	assert_int_equal(kube_config__in_cluster(sa, "10.96.0.1", "443", &c, msg, sizeof(msg)), 0);
	assert_string_equal(c->server, "https://10.96.0.1:443");
	snprintf(expect, sizeof(expect), "%s/token", sa);
	assert_string_equal(c->token_file, expect);
	snprintf(expect, sizeof(expect), "%s/ca.crt", sa);
	assert_string_equal(c->ca_file, expect);
	assert_string_equal(c->namespace, "aiprof-system");
	assert_null(c->token);
	kube_config__free(c);

	assert_int_equal(kube_config__in_cluster(sa, "fd00::1", "6443", &c, msg, sizeof(msg)), 0);
	assert_string_equal(c->server, "https://[fd00::1]:6443");
	kube_config__free(c);

	unsetenv("KUBERNETES_SERVICE_HOST");
	assert_int_equal(kube_config__in_cluster(sa, NULL, NULL, &c, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "KUBERNETES_SERVICE_HOST"));
	write_file("empty", "");
	assert_int_equal(kube_config__in_cluster(path_of("nosa"), "h", "1", &c, msg, sizeof(msg)),
			 -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_yaml_basic),
		cmocka_unit_test(test_yaml_refusals),
		cmocka_unit_test(test_b64),
		cmocka_unit_test(test_kubeconfig_current),
		cmocka_unit_test(test_kubeconfig_named),
		cmocka_unit_test(test_kubeconfig_errors),
		cmocka_unit_test(test_kubeconfig_merge),
		cmocka_unit_test(test_in_cluster),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
