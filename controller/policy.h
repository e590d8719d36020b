/* SPDX-License-Identifier: MIT */
/*
 * ProfilingPolicy: to ProfilingSessions what a CronJob is to Jobs.
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
 * change of its condition), CreateFailed.
 *
 * policy__plan() is pure (the clock is an input: tests/unit/test_policy.c); struct
 * policy_ctl runs it against the API (its own informer, queue and worker) with the sessions
 * and pods that controller.c caches.
 */
#ifndef AIPROF_POLICY_H
#define AIPROF_POLICY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "cron.h"
#include "kpod.h"
#include "reconcile.h"
#include "selector.h"
#include "session.h"
#include "store.h"
#include "strbuf.h"

#define POLICY_DEFAULT_TRIGGER "aiprof.io/profile-now"
#define POLICY_MAX_TRIGGERS 64          /* handled triggers remembered in status.triggers */
#define POLICY_NAME_PREFIX_MAX 200      /* of the policy's name in its sessions' names */

/* Labels and annotations on the sessions a policy makes. */
#define LABEL_POLICY            "aiprof.io/policy"
#define ANNOTATION_SCHEDULED    "aiprof.io/scheduled-time"
#define ANNOTATION_TRIGGER_POD  "aiprof.io/trigger-pod"

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
 * not an error: spec_err says so. Outside input. */
int policy__from_json(const json_t *j, struct policy **ret);
struct policy *policy__ref(struct policy *p);
void policy__unref(struct policy *p);   /* NULL-safe */

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

/* ---- running it ------------------------------------------------------------------------ */

struct informer;
struct kube_config;

struct policy_ctl_config {
	const struct kube_config *kube;
	const char *namespace;          /* one namespace, or NULL for all */
	struct store *sessions, *pods;  /* controller.c's caches */
	struct informer *session_informer; /* for informer__update() after a create */
	struct informer *pod_informer;  /* the worker waits for both caches to sync */
	long watch_timeout_s;
	const char *identity;           /* reportingInstance of Events */
	const char *zoneinfo_dir;       /* NULL: TZ_DEFAULT_DIR */
	void (*log)(void *ctx, int level, const char *msg);
	void *log_ctx;
};

struct policy_ctl;

int policy_ctl__new(const struct policy_ctl_config *cfg, struct policy_ctl **ret);
int policy_ctl__start(struct policy_ctl *pc);      /* informer, then the worker */
bool policy_ctl__synced(struct policy_ctl *pc);
void policy_ctl__stop(struct policy_ctl *pc);      /* NULL-safe */
void policy_ctl__free(struct policy_ctl *pc);      /* NULL-safe */
/* From controller.c's informer handlers: look at the policies concerned. NULL-safe. */
void policy_ctl__session_changed(struct policy_ctl *pc, const struct session *s);
void policy_ctl__pod_changed(struct policy_ctl *pc, const struct kpod *old,
			     const struct kpod *pod);
void policy_ctl__metrics(struct policy_ctl *pc, struct strbuf *b);

#endif
