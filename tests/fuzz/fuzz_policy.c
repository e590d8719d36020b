/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for a ProfilingPolicy as the controller reads it from the API server:
 * the spec's validation (controller/policy.c: selector, schedule, trigger annotation, limits,
 * template) and then the planner (controller/policy_plan.c) on the decoded policy, at a fixed
 * time, with one running session it controls and one pod carrying the trigger annotation.
 * Whatever the input, a plan's sessions carry the controller ownerReference and a name under
 * 254 bytes.
 * FUZZ_SOURCES: controller/policy.c controller/policy_plan.c controller/cron.c controller/kjson.c controller/kubeclient.c controller/kubeconfig.c controller/yamljson.c controller/b64.c controller/kpod.c controller/session.c controller/selector.c controller/ktime.c common/digest.c common/s3url.c common/timeutil.c common/strbuf.c common/readfile.c common/recheck.c common/utf8.c
 * FUZZ_LIBS: -ljansson -lcurl -lcrypto -lyaml -lpthread
 * FUZZ_ARGS: -max_len=8192
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "controller/kjson.h"
#include "controller/policy_plan.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct session *running;
static struct kpod *annotated;

static void setup(void)
{
	json_t *j;

	if (running)
		return;
	j = json_loads("{\"metadata\":{\"name\":\"p-1\",\"namespace\":\"train\",\"uid\":\"s1\","
		       "\"ownerReferences\":[{\"kind\":\"ProfilingPolicy\",\"uid\":\"u1\","
		       "\"controller\":true}]},\"spec\":{},\"status\":{\"phase\":\"Profiling\"}}",
		       0, NULL);
	CHECK(j && session__from_json(j, &running) == 0);
	json_decref(j);
	j = json_loads("{\"metadata\":{\"name\":\"trainer-0\",\"namespace\":\"train\","
		       "\"labels\":{\"job\":\"llama\"},\"annotations\":"
		       "{\"aiprof.io/profile-now\":\"x\",\"aiprof.io/now\":\"y\"}}}", 0, NULL);
	CHECK(j && kpod__from_json(j, &annotated) == 0);
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	struct policy *p = NULL;
	struct policy_plan plan;
	const struct session *sessions[1];
	const struct kpod *pods[1];
	struct policy_input in;

	setup();
	sessions[0] = running;
	pods[0] = annotated;
	if (!j)
		return 0;
	if (policy__from_json(j, &p) == 0) {
		CHECK(!p->spec_err || p->spec_msg[0]);
		in = (struct policy_input){ .p = p, .sessions = sessions, .n_sessions = 1,
					    .pods = pods, .n_pods = 1, .now = 1714561230 };
		if (policy__plan(&in, &plan) == 0) {
			for (size_t i = 0; i < plan.n_actions; i++) {
				const struct policy_action *a = &plan.actions[i];

				CHECK(strlen(a->name) < 254 && a->name[0]);
				if (a->kind == PACT_CREATE_SESSION)
					CHECK(json_is_true(json_object_get(json_array_get(
						kj_get(a->body, "metadata.ownerReferences"), 0),
						"controller")));
			}
			policy_plan__release(&plan);
		}
		policy__unref(p);
	}
	json_decref(j);
	return 0;
}
