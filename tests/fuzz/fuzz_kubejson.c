/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what the controller reads from the API server: list bodies and watch
 * streams split as they arrive (in chunks whose sizes the input picks), each piece decoded
 * as a Pod (struct kpod), a ProfilingSession (spec validation, selector, spec.cost, with and
 * without inline s3 allowed) and a ClusterProfilingStorage resolved for that session, watch
 * events, and Status error bodies.
 * FUZZ_SOURCES: controller/kjson.c controller/kubeclient.c controller/kubeconfig.c controller/yamljson.c controller/b64.c controller/kpod.c controller/session.c controller/selector.c controller/ktime.c common/digest.c common/s3url.c common/timeutil.c common/strbuf.c common/readfile.c common/recheck.c common/utf8.c
 * FUZZ_LIBS: -ljansson -lcurl -lcrypto -lyaml
 * FUZZ_ARGS: -max_len=65536
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "controller/kjson.h"
#include "controller/kpod.h"
#include "controller/session.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode(const char *json, size_t len)
{
	json_t *j = json_loadb(json, len, 0, NULL);
	struct kpod *p = NULL;
	struct session *s = NULL;

	if (!j)
		return;
	if (kpod__from_json(j, &p) == 0) {
		struct kcontainer c;
		struct kv kv[KPOD_MAX_LABELS];
		size_t n = kpod__labels(p, kv, KPOD_MAX_LABELS);

		CHECK(strlen(kpod__key(p)) == strlen(kpod__ns(p)) + 1 + strlen(kpod__name(p)));
		CHECK(kpod__node(p) && kpod__phase(p) && kpod__session_uid(p) && kpod__rv(p));
		CHECK(n == p->n_labels);
		for (size_t i = 0; i < n; i++)
			CHECK(kpod__label(p, kv[i].key) != NULL);
		for (size_t i = 0; i < p->n_containers; i++) {
			CHECK(kpod__container_at(p, i, &c));
			CHECK(strlen(c.message) <= KPOD_TERM_MESSAGE_MAX);
			CHECK(kpod__container(p, c.name, &c));
		}
		CHECK(!kpod__container_at(p, p->n_containers, &c));
		CHECK(!kpod__differs(p, p));
		kpod__unref(p);
	}
	session__set_inline_s3(len % 2);
	if (session__from_json(j, &s) == 0) {
		struct session_s3 o = { 0 };
		char why[400];
		int r;

		CHECK(s->key && s->uid);
		CHECK(s->spec_err == 0 || s->spec_err == -EINVAL);
		if (s->spec_err == 0) {
			CHECK(!!s->spec.pod_name != s->spec.has_selector);
			CHECK((s->spec.storage_ref || s->spec.s3.bucket) && s->spec.duration_ns > 0);
			/* what reaches the injector's argv: checked numbers and text */
			CHECK(s->spec.record_rate >= -1 &&
			      s->spec.record_rate <= SESSION_RECORD_RATE_MAX);
			CHECK(strspn(s->spec.budget, "0123456789.%") == strlen(s->spec.budget));
		}
		r = session__resolve_storage(s, j, &o, why, sizeof(why));
		CHECK(r == 0 || r == -EPERM || r == -EINVAL || r == -ENOMEM);
		CHECK(r != 0 || o.bucket);
		CHECK(r == 0 || !o.bucket);
		session__s3_clear(&o);
		session__unref(s);
	}
	json_decref(j);
}

static int on_piece(void *ctx, const char *json, size_t len)
{
	struct kwatch_event ev;

	(*(size_t *)ctx)++;
	CHECK(json[len] == '\0');
	decode(json, len);
	if (kwatch_event__parse(json, len, &ev) == 0) {
		CHECK(ev.object != NULL);
		kwatch_event__release(&ev);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kjson_split sp;
	struct kube_status st;
	size_t pieces = 0, off = 0;
	unsigned step;
	char *rv = NULL, *cont = NULL;

	if (size < 1)
		return 0;
	step = data[0] % 64 + 1;
	data++;
	size--;
	for (int mode = 0; mode < 2; mode++) {
		kjson_split__init(&sp, mode ? KJSON_STREAM : KJSON_LIST, on_piece, &pieces);
		for (off = 0; off < size; off += step)
			if (kjson_split__feed(&sp, (const char *)data + off,
					      size - off < step ? size - off : step) < 0)
				break;
		(void)kjson_split__finish(&sp);
		if (mode == 0 && kjson_split__list_meta(&sp, &rv, &cont) == 0) {
			free(rv);
			free(cont);
		}
		kjson_split__release(&sp);
	}
	decode((const char *)data, size);
	(void)kube_status__parse((const char *)data, size, 409, &st);
	CHECK(strlen(st.message) < sizeof(st.message) && strlen(st.reason) < sizeof(st.reason));
	for (size_t i = 0; st.message[i]; i++)
		CHECK((unsigned char)st.message[i] >= 0x20 && st.message[i] != 0x7f);
	return 0;
}
