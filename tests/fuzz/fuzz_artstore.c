/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what controller/artstore.c reads from outside: an upload's path and
 * X-Aiprof-Sha256, and the API server's answers (a TokenReview, a Pod, a session, a list of
 * ConfigMaps, one ConfigMap). The first byte picks which. A path accepted must give names the checks
 * accept again and ConfigMaps whose JSON names them; a review accepted must name a pod in
 * a namespace that fits the fields.
 * FUZZ_SOURCES: controller/artstore.c common/storeurl.c common/s3url.c common/digest.c common/strbuf.c common/readfile.c
 * FUZZ_LIBS: -ljansson -lcrypto
 * FUZZ_ARGS: -max_len=16384
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "controller/artstore.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void path(const char *s)
{
	static const uint8_t body[] = "abc";
	struct artstore_artifact a = { .session_uid = "u", .data = body, .size = 3, .sha256 = "x" };
	char why[256], name[ARTSTORE_CM_NAME_MAX + 1];
	struct artstore_path p;
	json_t *cm;

	if (artstore__parse_path(s, &p, why, sizeof(why)) < 0) {
		CHECK(why[0]);
		return;
	}
	CHECK(artstore__dns_name(p.ns, false) && artstore__dns_name(p.session, true));
	CHECK(artstore__valid_name(p.name) && strlen(p.name) <= ARTSTORE_NAME_MAX);
	CHECK(!strstr(p.name, "//") && p.name[0] != '/');
	a.ns = p.ns;
	a.session = p.session;
	a.name = p.name;
	cm = artstore__configmap(&a, 0);
	if (!cm)
		return;
	artstore__cm_name(a.session_uid, a.name, 0, name);
	CHECK(strcmp(json_string_value(json_object_get(json_object_get(cm, "metadata"), "name")),
		     name) == 0);
	CHECK(strlen(name) <= ARTSTORE_CM_NAME_MAX);
	json_decref(cm);
}

static void review(const char *s, size_t len)
{
	struct artstore_pod p;
	char why[256];
	int r = artstore__parse_review(s, len, &p, why, sizeof(why));

	CHECK(r == 0 || r == -EKEYREJECTED || r == -EPERM || r == -EPROTO);
	if (r == -EKEYREJECTED || r == -EPERM)
		for (const char *c = why; *c; c++)
			CHECK(*c >= 0x20 && *c < 0x7f);
	if (r == 0)
		CHECK(p.ns[0] && strlen(p.ns) <= ARTSTORE_NS_MAX && p.name[0] && p.uid[0] &&
		      !strchr(p.ns, ':'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256], existing[SHA256_HEX_LEN + 1], uid[ARTSTORE_UID_MAX + 1], *s;
	uint8_t sha[SHA256_LEN];
	uint64_t others;
	size_t n;
	int r;

	if (size < 1)
		return 0;
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	switch (data[0] % 6) {
	case 0:
		path(s);
		break;
	case 1:
		review(s, size - 1);
		break;
	case 2:
		r = artstore__check_injector(s, size - 1, "aiprof-injectors", "train", "s1", "u-1",
					     "p-1", "t-0/a.json", why, sizeof(why));
		CHECK(r == 0 || r == -EPERM || r == -EPROTO);
		r = artstore__check_session(s, size - 1, "p-1", "t-0/a.json", uid, why, sizeof(why));
		CHECK(r == -EPROTO || r == -EPERM || r == -EAGAIN || (r == 0 && uid[0]));
		break;
	case 3:
		r = artstore__stored(s, size - 1, "a", &others, existing);
		CHECK(r == 0 || r == -EPROTO || r == -ENOMEM);
		CHECK(r != 0 || existing[0] == '\0' || strlen(existing) == SHA256_HEX_LEN);
		break;
	case 4:
		r = artstore__ns_usage(s, size - 1, "u-1", &others, &n);
		CHECK(r == 0 || r == -EPROTO || r == -ENOMEM);
		r = artstore__cm_sha256(s, size - 1, existing);
		CHECK(r == -EPROTO || (r == 0 && (!existing[0] || strlen(existing) == SHA256_HEX_LEN)));
		break;
	default:
		r = artstore__parse_sha256(s, sha);
		CHECK(r == 0 || r == -EINVAL);
		CHECK(r != 0 || strlen(s) == SHA256_HEX_LEN);
		break;
	}
	free(s);
	return 0;
}
