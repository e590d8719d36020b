/* SPDX-License-Identifier: MIT */
/*
 * The ProfilingSession reconciler's decisions, as a pure function: from the session, what the
 * cache knows of its target pods and injectors, and the time (injected), it plans the API
 * calls to make, the status to write, the Events to emit and when to look again. No I/O:
 * controller.c gathers the input and carries the plan out (tests/unit/test_reconcile.c
 * drives this with a fixed clock).
 *
 * Life of a session:
 *   - first sight: add the finalizer (nothing else until it is there);
 *   - spec invalid, or targets outside the session's namespace: Failed at once;
 *   - targets (podName, or the selector's pods, sorted) resolved while Pending; once an
 *     injector was created (status.startTime) the set is frozen in status.targets;
 *   - a target waits (Pending) for its pod and container to run, up to target_wait after
 *     the session's creation, then fails (TargetNotFound / TargetNotRunning);
 *   - per target one injector: a node-agent pod (runc) or an ephemeral container (a Kata
 *     RuntimeClass handler, or injection.mode EphemeralContainer); its name is derived from
 *     the session UID, so a restarted controller finds it instead of making a second;
 *   - the injector's container state drives the target: waiting = Injecting, running =
 *     Profiling (Uploading once the window is over), terminated = Succeeded with the
 *     termination message's artifacts, or Failed with its error;
 *   - deadline: startTime + duration + grace; targets not done by then fail
 *     (DeadlineExceeded) and their injector pods are deleted;
 *   - all targets done, two or more of them and at least two succeeded: one merge pod
 *     (injspec__merge_pod) merges the succeeded ranks' artifacts onto one clock; meanwhile
 *     the session is Uploading with condition Merged=Unknown (Merging); its result becomes
 *     artifacts and findings with target "merged" and Merged=True (Merged), or Merged=False
 *     (MergeFailed, MergeDeleted, MergeCreateFailed, MergeDeadlineExceeded) — a failed
 *     merge never fails the session; the merge has until the deadline + MERGE_DEADLINE_S;
 *   - all targets done (and merged): Succeeded if every one succeeded, else Failed; completionTime set;
 *     injector pods still running are deleted; with ttlSecondsAfterFinished the session is
 *     deleted that long after completion;
 *   - deletion: injector pods deleted, then the finalizer removed.
 */
#ifndef AIPROF_RECONCILE_H
#define AIPROF_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "injspec.h"
#include "kpod.h"
#include "session.h"

struct reconcile_config {
	struct injector_config inj;
	uint64_t target_wait_ns;    /* how long targets may take to exist and run */
	const char *denied_ns;      /* namespaces whose sessions are refused, ','-separated */
	unsigned max_running_per_ns;/* sessions of a namespace started at once; 0: no limit */
	/* --store-max-age: a session that keeps its artifacts in the in-cluster store and has no
	 * ttlSecondsAfterFinished is deleted (and its artifacts with it) that long after it
	 * finished; 0: kept */
	uint64_t store_max_age_ns;
};

/* Whether p is one of s's pods (injector or merge): labelled with its UID and, in s's own
 * namespace, controlled by it (ownerReference); in the injector namespace cfg->ns, labelled
 * with s's namespace too (an ownerReference cannot cross namespaces). */
bool reconcile__pod_of(const struct injector_config *cfg, const struct session *s,
		       const struct kpod *p);

/* Whether inj, the pod under the injector's name for target, is the session's own
 * (reconcile__pod_of()) and the pod the status recorded (targets[].injectorUID) when it
 * recorded one. */
bool reconcile__injector_ours(const struct injector_config *cfg, const struct session *s,
			      const char *target, const struct kpod *inj);

/* Whether p, found under the session's merge pod name, is its merge pod: the session's own
 * and the one whose UID the status recorded (status.mergeUID) if any. */
bool reconcile__merge_ours(const struct injector_config *cfg, const struct session *s,
			   const struct kpod *p);

/*
 * Whether the status recorded another pod under p's name (an injector's targets[].injectorUID,
 * the merge pod's status.mergeUID): p then replaced the session's own, carrying its labels
 * and ownerReference, and is left alone: never stopped, never deleted.
 */
bool reconcile__pod_replaced(const struct session *s, const struct kpod *p);

/* Whether ns is one of list's (','-separated names; NULL or "" names none). */
bool reconcile__namespace_denied(const char *list, const char *ns);

struct target_obs {
	const char *name;           /* target pod name */
	const struct kpod *pod;     /* NULL: no such pod */
	const char *runtime_handler;/* the RuntimeClass's handler ("kata-qemu"...), "" for default */
	const struct kpod *injector;/* node-agent injector pod (by its derived name), or NULL */
	bool foreign_injector;      /* a pod has that name, but reconcile__injector_ours() says no */
	bool node_gone;             /* its node (the pod's, or the one the status recorded) is
	                             * no longer in the cluster (GET 404); looked up only when
	                             * the injector or the pod is missing */
	int create_err;             /* < 0: creating its injector failed for good in this pass */
	char create_msg[256];
};

/* Whether the session's status has target pod in flight (Injecting, Profiling, Uploading). */
bool reconcile__target_inflight(const struct session *s, const char *pod);

/* The node of target o: its pod's, else the one the session's status recorded; "" if none. */
const char *reconcile__target_node(const struct session *s, const struct target_obs *o);

struct reconcile_input {
	const struct session *s;
	struct target_obs *targets; /* see reconcile__target_names() */
	size_t n_targets;
	const struct kpod *const *injectors;  /* every pod labelled with the session's UID */
	size_t n_injectors;
	const struct kpod *merge_pod;         /* the session's merge pod (by its name), or NULL */
	bool merge_foreign;         /* a pod has the merge pod's name but is not the session's */
	int merge_create_err;       /* < 0: creating the merge pod failed for good in this pass */
	char merge_create_msg[256];
	int64_t now_ns;             /* wall clock, ns since the epoch */
	const struct reconcile_config *cfg;
	/* the session names a ClusterProfilingStorage (spec.output.storageRef): 0 when s's
	 * spec.s3 is that storage's, else why not: -ENOENT (not there, or not readable yet),
	 * -EPERM (not for this namespace), -EINVAL (not valid), with storage_msg */
	int storage_err;
	char storage_msg[400];
	size_t ns_running;          /* other sessions of s's namespace started and not ended */
};

/* Whether s has started (its status has a startTime) and not ended: what
 * max_running_per_ns counts. */
bool reconcile__session_running(const struct session *s);

/* An action on a pod names it, and the UID it had when planned: the delete is made with
 * that precondition, so a pod put under the name since is not deleted. */
enum action_kind {
	ACT_ADD_FINALIZER,
	ACT_REMOVE_FINALIZER,
	ACT_CREATE_POD,             /* body: the injector pod */
	ACT_ADD_EPHEMERAL,          /* name: the target pod; body: the ephemeral container */
	ACT_DELETE_POD,             /* name: the injector pod */
	ACT_DELETE_SESSION,         /* ttlSecondsAfterFinished has passed */
	ACT_CREATE_MERGE_POD,       /* name, body: the merge pod */
};

struct action {
	enum action_kind kind;
	size_t target;              /* index in input targets (CREATE_POD, ADD_EPHEMERAL) */
	char name[254];
	char uid[64];               /* DELETE_POD: the pod's UID when planned ("": not known) */
	json_t *body;               /* owned */
};

#define RECONCILE_MAX_EVENTS 16

struct plan_event {
	bool warning;
	char reason[48];
	char message[512];
};

struct reconcile_plan {
	struct action *actions;
	size_t n_actions;
	json_t *status;             /* owned: the status to write, or NULL when unchanged */
	struct plan_event events[RECONCILE_MAX_EVENTS];
	size_t n_events;
	int64_t requeue_at_ns;      /* when to reconcile again (wall clock), 0: only on change */
};

/*
 * Target pod names to look up: status.targets[].pod once the session started, else
 * NULL (*ret_n 0) and the caller resolves spec.targets (podName, or the selector among the
 * namespace's pods that are not injectors, sorted by name). Returns 0 or -ENOMEM; the caller
 * frees the array and its strings (free_strv()).
 */
int reconcile__target_names(const struct session *s, char ***ret, size_t *ret_n);
void free_strv(char **v, size_t n);

/* Is this handler a Kata Containers runtime (kata, kata-qemu, kata-clh, kata-fc...)? */
bool runtime_is_kata(const char *handler);

/* Plans. Returns 0 (release with reconcile_plan__release()), -ENOMEM. */
int reconcile__plan(const struct reconcile_input *in, struct reconcile_plan *p);
void reconcile_plan__release(struct reconcile_plan *p);

#endif
