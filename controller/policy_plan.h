/* SPDX-License-Identifier: MIT */
/*
 * The ProfilingPolicy reconciler's decisions, as a pure function: from the policy, the
 * sessions it controls, the annotated pods of its namespace, its time zone and the time
 * (injected), it plans the sessions to create and delete, the status to write, the Events to
 * emit and when to look again. No I/O: policy_ctl.c gathers the input and carries the plan
 * out (tests/unit/test_policy.c drives this with a fixed clock).
 *
 * A policy selects pods in its namespace and makes sessions from its sessionTemplate:
 *   - on its cron `schedule` (cron.h; in `timeZone`, default UTC): one session per scheduled
 *     time over every selected pod (targets.selector = the policy's selector), named
 *     `<policy>-<scheduled time in unix minutes>` so that a restarted controller never makes a
 *     second one for the same time (409 AlreadyExists is success);
 *   - on demand: a selected pod annotated `trigger.annotation` (default
 *     aiprof.io/profile-now) gets one session for itself (targets.podName) per distinct value
 *     of the annotation, named `<policy>-now-<10 hex of the pod and value>`; handled values
 *     are remembered in status.triggers (the last 64), so a restart does not repeat them.
 *     The annotation must be under aiprof.io/ (the pod cache keeps only those).
 * Sessions carry an ownerReference to the policy (controller: true), so deleting the policy
 * garbage-collects them; the reconciler recognises its sessions by that reference.
 *
 * As CronJob: missed times (controller down, suspended, Forbid) are counted from
 * status.lastScheduleTime, else metadata.creationTimestamp, and only the most recent is
 * started (an Event says how many were missed); `startingDeadlineSeconds` drops a time that
 * could not start within it; `concurrencyPolicy` Allow / Forbid (wait for the running session
 * to end; the time stays due) / Replace (delete the running sessions, then create);
 * `successfulSessionsHistoryLimit` (3) / `failedSessionsHistoryLimit` (1) delete the oldest
 * finished sessions beyond them; `suspend` stops making sessions (triggers wait too).
 * On-demand triggers follow concurrencyPolicy as scheduled times do.
 *
 * Status: observedGeneration, active[] ({name, uid}), lastScheduleTime, lastSuccessfulTime,
 * triggers[], conditions Ready (False: InvalidSpec, UnknownTimeZone, NeverScheduled) and
 * Scheduling (True: Scheduled / Suspended / Idle; False: ConcurrencyForbid). Events: Normal
 * SessionCreated, SessionDeleted (history limits), SessionReplaced; Warning MissedSchedule,
 * InvalidSpec, UnknownTimeZone, NeverScheduled, ConcurrencyForbid (each of these four once per
 * change of its condition), CreateFailed (policy_ctl.c: the API refused a session).
 */
#ifndef AIPROF_POLICY_PLAN_H
#define AIPROF_POLICY_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "cron.h"
#include "kpod.h"
#include "policy.h"
#include "reconcile.h"
#include "session.h"

#define POLICY_MAX_TRIGGERS 64          /* handled triggers remembered in status.triggers */
#define POLICY_NAME_PREFIX_MAX 200      /* of the policy's name in its sessions' names */

/* Labels and annotations on the sessions a policy makes. */
#define LABEL_POLICY            "aiprof.io/policy"
#define ANNOTATION_SCHEDULED    "aiprof.io/scheduled-time"
#define ANNOTATION_TRIGGER_POD  "aiprof.io/trigger-pod"

struct policy_input {
	const struct policy *p;
	const struct session *const *sessions;  /* every session this policy controls */
	size_t n_sessions;
	const struct kpod *const *pods;  /* the pods of its namespace (any order; injectors skipped) */
	size_t n_pods;
	const struct tz *zone;           /* resolved timeZone (NULL: UTC) */
	int zone_err;                    /* < 0: timeZone could not be resolved; zone_msg says why */
	const char *zone_msg;
	int64_t now;                     /* wall clock, s since the epoch */
};

enum policy_action_kind {
	PACT_CREATE_SESSION,            /* name, body: the session */
	PACT_DELETE_SESSION,            /* name (uid as precondition) */
};

struct policy_action {
	enum policy_action_kind kind;
	char name[254];
	char uid[64];
	json_t *body;                   /* owned */
};

struct policy_plan {
	struct policy_action *actions;
	size_t n_actions;
	json_t *status;                 /* owned: the status to write, or NULL when unchanged */
	struct plan_event events[RECONCILE_MAX_EVENTS];
	size_t n_events;
	int64_t requeue_at;             /* s since the epoch, 0: only on change */
};

/* Plans. Returns 0 (release with policy_plan__release()), -ENOMEM. */
int policy__plan(const struct policy_input *in, struct policy_plan *plan);
void policy_plan__release(struct policy_plan *plan);

/* The name of the session for a scheduled time, or for a trigger (pod, value). */
void policy__scheduled_name(const struct policy *p, int64_t t, char out[254]);
void policy__trigger_name(const struct policy *p, const char *pod, const char *token,
			  char out[254]);

#endif
