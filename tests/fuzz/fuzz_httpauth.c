/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what controller/httpauth.c reads from outside: a client's
 * Authorization header, and the API server's TokenReview and SubjectAccessReview answers.
 * The first byte picks which; a user a TokenReview yields must make a SubjectAccessReview
 * that is JSON naming that user, and a token the header yields must make a TokenReview
 * that carries it back unchanged.
 * FUZZ_SOURCES: controller/httpauth.c controller/kubeclient.c controller/kubeconfig.c controller/yamljson.c controller/b64.c common/digest.c common/strbuf.c common/timeutil.c common/readfile.c
 * FUZZ_LIBS: -ljansson -lcurl -lcrypto -lyaml -lpthread
 * FUZZ_ARGS: -max_len=16384
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "controller/httpauth.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void header(const char *s)
{
	char tok[HTTPAUTH_TOKEN_MAX + 1];
	char *body;
	json_t *j;

	if (httpauth__bearer(s, tok, sizeof(tok)) < 0)
		return;
	CHECK(tok[0] && strlen(tok) <= HTTPAUTH_TOKEN_MAX && !strpbrk(tok, " \t"));
	body = httpauth__token_review(tok);
	CHECK(body);
	j = json_loads(body, 0, NULL);
	CHECK(j);
	CHECK(strcmp(json_string_value(json_object_get(json_object_get(j, "spec"), "token")), tok) == 0);
	json_decref(j);
	free(body);
}

static void token_review(const char *s, size_t len)
{
	static const uint8_t key[HTTPAUTH_KEY_LEN];
	const struct httpauth_attr at = { .verb = "list", .group = "aiprof.io",
					  .resource = "profilingsessions", .ns = "a" };
	struct httpauth_user *u = NULL;
	char why[512], *body;
	json_t *j;
	int r = httpauth__parse_token_review(s, len, key, &u, why, sizeof(why));

	CHECK(r == HTTPAUTH_ALLOW || r == HTTPAUTH_UNAUTHENTICATED || r == -EPROTO || r == -ENOMEM);
	if (r != HTTPAUTH_ALLOW)
		return;
	for (const char *p = httpauth_user__name(u); *p; p++)
		CHECK(*p >= 0x20 && *p < 0x7f);
	body = httpauth__access_review(u, &at);
	if (body) {
		j = json_loads(body, 0, NULL);
		CHECK(j && json_is_string(json_object_get(json_object_get(j, "spec"), "user")));
		json_decref(j);
	}
	free(body);
	httpauth__forbidden(u, &at, why, sizeof(why));
	httpauth_user__unref(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[512], *s;
	int r;

	if (size < 1)
		return 0;
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0:
		header(s);
		break;
	case 1:
		token_review(s, size - 1);
		break;
	default:
		r = httpauth__parse_access_review(s, size - 1, why, sizeof(why));
		CHECK(r == HTTPAUTH_ALLOW || r == HTTPAUTH_DENY || r == -EPROTO);
		break;
	}
	free(s);
	return 0;
}
