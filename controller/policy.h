/* SPDX-License-Identifier: MIT */
/*
 * A ProfilingPolicy as the controller reads it: to ProfilingSessions what a CronJob is to
 * Jobs (what it does: policy_plan.h). Identity, the validated spec (selector, cron schedule,
 * time zone name, trigger annotation, concurrencyPolicy, history limits, the session
 * template) and the status last written (kept as JSON: the planner carries over what it does
 * not recompute). A spec that cannot be run is not an error of policy__from_json(): it keeps
 * spec_err/spec_msg, and the planner sets Ready=False (InvalidSpec) with that message.
 * Immutable once built; shared by reference count.
 */
#ifndef AIPROF_POLICY_H
#define AIPROF_POLICY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "cron.h"
#include "selector.h"
#include "store.h"

#define POLICY_DEFAULT_TRIGGER "aiprof.io/profile-now"

enum policy_concurrency { CONC_FORBID = 0, CONC_ALLOW, CONC_REPLACE };

struct policy {
	struct store_node node;         /* the cache's link (store.h) */
	atomic_int refs;
	char *key, *ns, *name, *uid, *rv;
	int64_t generation;
	int64_t created_s;              /* metadata.creationTimestamp, s since the epoch */
	bool deleting;
	/* spec */
	struct label_selector selector;
	json_t *selector_json;          /* spec.selector as given (owned): the sessions' selector */
	char *schedule;                 /* or NULL */
	struct cron_schedule cron;      /* parsed schedule */
	char *time_zone;                /* or NULL (UTC) */
	char *trigger;                  /* the trigger annotation, or NULL without trigger */
	enum policy_concurrency concurrency;
	int64_t starting_deadline_s;    /* -1: none */
	bool suspend;
	int32_t success_limit, failed_limit;
	json_t *template;               /* sessionTemplate (owned) */
	int spec_err;                   /* 0 or -EINVAL: spec_msg says what is wrong */
	char spec_msg[512];
	json_t *status;                 /* owned: .status as read, or NULL */
};

/* Returns 0 and *ret (refs 1), -EINVAL (no name/namespace/uid), -ENOMEM. An unusable spec is
 * not an error: spec_err says so. Outside input (tests/fuzz/fuzz_policy.c). */
int policy__from_json(const json_t *j, struct policy **ret);
struct policy *policy__ref(struct policy *p);
void policy__unref(struct policy *p);   /* NULL-safe */

#endif
