/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the kubeconfig reader: YAML -> JSON (libyaml events, aliases and
 * merge keys refused, depth capped) and the resolution of contexts, clusters and users,
 * with base64 decoding of the *-data fields (controller/b64.c: OpenSSL's EVP_DecodeUpdate
 * behind a guard, so the raw input is also fed to it straight).
 * FUZZ_SOURCES: controller/yamljson.c controller/kubeconfig.c controller/b64.c common/readfile.c
 * FUZZ_LIBS: -lyaml -ljansson -lcrypto
 * FUZZ_ARGS: -max_len=16384
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "controller/b64.h"
#include "controller/kubeconfig.h"
#include "controller/yamljson.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const contexts[] = { NULL, "dev", "a", "" };
	const char *dirs[1] = { "/base" };
	struct kube_config *c = NULL;
	json_t *doc = NULL;
	char msg[300];
	uint8_t *out = NULL;
	size_t n = 0;
	int r;

	r = yaml_to_json((const char *)data, size, &doc, msg, sizeof(msg));
	CHECK(strlen(msg) < sizeof(msg));
	if (r == 0) {
		CHECK(doc != NULL);
		for (size_t i = 0; i < sizeof(contexts) / sizeof(contexts[0]); i++) {
			c = NULL;
			r = kube_config__resolve(&doc, dirs, 1, contexts[i], &c, msg, sizeof(msg));
			if (r < 0) {
				CHECK(c == NULL);
				continue;
			}
			CHECK(c->server && (strncmp(c->server, "https://", 8) == 0 ||
					    strncmp(c->server, "http://", 7) == 0));
			CHECK(c->namespace && c->source);
			CHECK(!c->ca_file || c->ca_file[0] == '/');
			CHECK(!!(c->cert_data || c->cert_file) == !!(c->key_data || c->key_file));
			kube_config__free(c);
		}
		json_decref(doc);
	} else {
		CHECK(doc == NULL);
	}
	if (b64_decode((const char *)data, size, &out, &n) == 0) {
		CHECK(n <= size / 4 * 3 + 3);
		CHECK(out[n] == 0);
		CHECK(!memchr(data, '-', size));   /* never a PEM-style early end */
		free(out);
	}
	return 0;
}
