/* SPDX-License-Identifier: MIT */
/*
 * The running ProfilingPolicy controller: an informer on ProfilingPolicies, a work queue of
 * policy keys and one worker that gathers a policy's input from the caches controller.c
 * keeps (the sessions it controls, the annotated pods of its namespace) and its time zone,
 * asks policy__plan() what to do (policy_plan.h), and does it through the API: sessions
 * created (409 AlreadyExists is success; a permanent refusal is a CreateFailed Event) and
 * deleted with their uid as precondition, the status patched with the resourceVersion as
 * precondition (a 409 re-plans on a fresh object), Events. The worker waits for every cache
 * to sync before it decides anything, and makes its API client only at the first policy.
 *
 * Library code: it returns errors and reports through the log hook of its configuration,
 * never printing on its own.
 */
#ifndef AIPROF_POLICY_CTL_H
#define AIPROF_POLICY_CTL_H

#include <stdbool.h>
#include "kpod.h"
#include "session.h"
#include "store.h"
#include "strbuf.h"

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
