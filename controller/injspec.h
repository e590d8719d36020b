/* SPDX-License-Identifier: MIT */
/*
 * What the controller asks the cluster to run: the injector as a pod on the target's node
 * (runc) or as an ephemeral container inside the target's pod (Kata, or when the session
 * asks). Pure builders of JSON from a session, a target pod and the controller's settings.
 *
 * The node-agent pod: nodeName = the target's node, hostPID (the host's pid namespace holds
 * the target container's processes; the injector reaches the container's mount namespace
 * through /proc/PID/root and never writes into it), restartPolicy Never, no service-account
 * token, capabilities dropped to SYS_PTRACE, BPF and PERFMON (SYS_PTRACE alone when the
 * session asks for library collectors only; plus SYS_ADMIN for eBPF on a
 * kernel older than 5.8, which has no CAP_BPF/CAP_PERFMON, and for eBPF with a
 * spec.cost.budgetPercent, kept by the kernel's BPF statistics), tolerating every taint, an
 * activeDeadlineSeconds of duration + grace. It runs in the injector namespace (the
 * operator's, where tenants have no verbs) when the session's storage is the admin's or the
 * in-cluster store, labelled
 * with the session's namespace, name and UID (an ownerReference cannot cross namespaces);
 * in the session's own namespace, with an ownerReference to it, when the session gives its
 * own spec.output.s3, whose Secret is the tenant's (injspec__pods_namespace()).
 * The ephemeral container: targetContainerName = the target container, so it shares that
 * container's pid namespace; the same capabilities.
 *
 * S3 credentials are passed by reference only: a secret volume (pod) or env valueFrom
 * secretKeyRef (ephemeral containers cannot add volumes). No literal env value is ever a
 * credential; endpoint and region are not secrets.
 *
 * The injector's command line (the contract with injector/, see controller/README.md):
 *   aiprof profile --container-id ID | --container-name NAME  --duration D -o s3://...
 *                  [--match RE] [--collectors LIST] [--frequency HZ] [--record-rate N]
 *                  [--budget PCT] [--method ebpf] --termination-log /dev/termination-log
 */
#ifndef AIPROF_INJSPEC_H
#define AIPROF_INJSPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "kpod.h"
#include "session.h"

#define INJECTOR_CONTAINER "injector"
#define INJECTOR_SECRET_DIR "/var/run/secrets/aiprof/s3"
/* The node's directory of unwind rules every injector of the node shares (aiprof
 * --unwind-cache, injector/target/uwshare.h): a hostPath in node-agent pods, at the path
 * the injector uses by default. An ephemeral container cannot mount it: its own. */
#define INJECTOR_UNWIND_CACHE "/var/cache/aiprof/unwind"
#define INJECTOR_POD_NAME_MAX 63

struct injector_config {
	const char *image;          /* the aiprof injector image */
	const char *pull_policy;    /* NULL: IfNotPresent */
	const char *priority_class; /* NULL: none */
	uint64_t grace_ns;          /* beyond the duration: attach, build artifacts, upload */
	/* the injector namespace: node-agent and merge pods of sessions whose storage the admin
	 * chose run here, with the storage's Secret; NULL: in each session's namespace */
	const char *ns;
	/* the merge pod's scheduling (the node-agent pods are pinned by nodeName and tolerate
	 * every taint): a nodeSelector object and a tolerations array, or NULL */
	json_t *merge_node_selector;
	json_t *merge_tolerations;
	/* --store-url: how injector pods reach this controller's in-cluster artifact store
	 * (docs/artifact-store.md), for sessions with no S3; NULL: no store */
	const char *store_url;
};

/* The in-cluster store's token: a projected service-account token of the injector pod
 * (audience STORE_TOKEN_AUDIENCE) at STORE_TOKEN_DIR/token, where the injector reads it
 * (common/storeurl.h STORE_TOKEN_FILE_DEFAULT). */
#define STORE_TOKEN_VOLUME "aiprof-store-token"
#define STORE_TOKEN_DIR "/var/run/secrets/aiprof.io/artifacts"
#define STORE_TOKEN_AUDIENCE "aiprof.io/artifacts"
#define STORE_TOKEN_SECONDS 600

/*
 * --merge-node-selector KEY=VALUE into the object sel; --merge-toleration
 * KEY[=VALUE][:EFFECT] (Equal with a value, else Exists; EFFECT NoSchedule,
 * PreferNoSchedule or NoExecute, else every effect) appended to the array tols.
 * Return 0, -EINVAL (why says what is wrong), -ENOMEM.
 */
int injspec__add_node_selector(json_t *sel, const char *arg, char *why, size_t whylen);
int injspec__add_toleration(json_t *tols, const char *arg, char *why, size_t whylen);

struct injector_target {
	const struct session *s;
	const struct kpod *pod;     /* the target pod */
	const char *container;      /* the target container's name */
	const char *container_id;   /* "containerd://..." */
};

/* The node-agent pod's name: "aiprof-<session>-<10 hex of uid+target>", <= 63 characters,
 * the same for the same session and target on every controller (a restarted controller
 * finds it instead of making a second). */
void injspec__pod_name(const struct session *s, const char *target_pod,
		       char out[INJECTOR_POD_NAME_MAX + 1]);
/* The ephemeral container's name: "aiprof-<10 hex of uid>". */
void injspec__ephemeral_name(const struct session *s, char out[32]);

/*
 * The namespace of s's node-agent and merge pods: cfg->ns for every session but one that
 * gives spec.output.s3 itself (--allow-inline-s3: its Secret is in its namespace): the
 * admin's storage (spec.output.storageRef, the --default-s3-* settings) and the in-cluster
 * store alike; s's own namespace for that one, or when cfg->ns is NULL.
 */
const char *injspec__pods_namespace(const struct injector_config *cfg, const struct session *s);

/* Where one target's artifacts go: "s3://bucket/prefix/namespace/session/uid/pod", or for
 * the in-cluster store "STORE_URL/v1/artifacts/namespace/session/pod". */
int injspec__output_url(const struct injector_config *cfg, const struct session *s,
			const char *target_pod, char **ret);

/*
 * The merge pod of a multi-rank session: once every target is done and at least two
 * succeeded, one pod runs
 *   aiprof merge -o s3://B/P/NS/SESSION/UID/merged --termination-log /dev/termination-log SRC...
 * over the per-target artifact prefixes SRC (injspec__output_url of each succeeded target).
 * Same image, no hostPID, no node, every capability dropped, the S3 secret mounted as for
 * the node-agent pod, labels with the session UID and component aiprof-merge, an
 * ownerReference to the session, activeDeadlineSeconds MERGE_DEADLINE_S. Its name,
 * "aiprof-<session>-merge-<10 hex of uid>", is derived from the UID (a restart finds it) and
 * cannot be an injector's (their hash is over the uid and a pod name, which has no '/').
 */
#define MERGE_CONTAINER "merge"
#define MERGE_TARGET "merged"       /* status.artifacts[].target and the output's last part */
#define MERGE_DEADLINE_S 600
void injspec__merge_pod_name(const struct session *s, char out[INJECTOR_POD_NAME_MAX + 1]);
json_t *injspec__merge_pod(const struct injector_config *cfg, const struct session *s,
			   const char *const *sources, size_t n_sources);

/* Each returns a new JSON object, or NULL when out of memory. */
json_t *injspec__node_agent_pod(const struct injector_config *cfg, const struct injector_target *t);
json_t *injspec__ephemeral_container(const struct injector_config *cfg,
				     const struct injector_target *t);

#endif
