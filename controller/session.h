/* SPDX-License-Identifier: MIT */
/*
 * A ProfilingSession as the controller reads it: identity, the validated spec, and the status
 * last written (kept as JSON: the reconciler carries over what it does not recompute, such as
 * start times and condition transition times). A spec that cannot be run is not an error
 * here: spec_err/spec_msg say why, and the reconciler fails the session with that message.
 * Immutable once built; shared by reference count.
 */
#ifndef AIPROF_SESSION_H
#define AIPROF_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "selector.h"
#include "store.h"

enum session_phase {
	PHASE_NONE = 0,         /* no status yet */
	PHASE_PENDING,          /* waiting for targets */
	PHASE_INJECTING,        /* injectors created, not all running */
	PHASE_PROFILING,        /* injectors running, inside the window */
	PHASE_UPLOADING,        /* the window is over, injectors still running (building, upload) */
	PHASE_SUCCEEDED,
	PHASE_FAILED,
	PHASE__MAX
};

const char *session_phase_name(enum session_phase p);   /* "Pending"...; "" for NONE */
enum session_phase session_phase_parse(const char *s);  /* PHASE_NONE if unknown */
static inline bool session_phase_terminal(enum session_phase p)
{
	return p == PHASE_SUCCEEDED || p == PHASE_FAILED;
}

enum inj_mode { INJ_AUTO = 0, INJ_NODE_AGENT, INJ_EPHEMERAL };
enum inj_method { METHOD_PTRACE = 0, METHOD_EBPF_ONLY };

#define SESSION_DEFAULT_DURATION_NS (30ULL * 1000000000ULL)
#define SESSION_MAX_DURATION_NS (24ULL * 3600 * 1000000000ULL)
/* spec.cost, within what `aiprof profile --record-rate` and `--budget` take */
#define SESSION_RECORD_RATE_MAX 1000000
#define SESSION_BUDGET_LEN_MAX 16

struct session_s3 {
	char *endpoint;         /* "https://s3.example.com", or NULL for AWS */
	char *bucket;
	char *prefix;           /* "" for the bucket's root; no leading or trailing '/' */
	char *region;           /* or NULL */
	char *secret_name;      /* a Secret in the session's namespace, or NULL (no credentials) */
	char *key_id_key;       /* keys in it; default AWS_ACCESS_KEY_ID ... */
	char *secret_key_key;
	char *token_key;        /* optional session token key, or NULL */
};

struct session_spec {
	char *pod_name;         /* targets.podName, or NULL */
	bool has_selector;
	struct label_selector selector;
	char *target_namespace; /* targets.namespace if given (must be the session's own) */
	char *container;        /* NULL: the pod's first container */
	char *process_match;    /* NULL: the injector's default choice */
	uint64_t duration_ns;
	char duration[32];      /* as the injector takes it: "30s", "1500ms", "1500000ns" */
	char *collectors;       /* comma-separated for `aiprof profile --collectors`, or NULL */
	unsigned cpu_hz;        /* collectors.cpu.frequencyHz, 0 for the default */
	int32_t record_rate;    /* cost.recordRate for --record-rate: records with stacks per
	                         * target thread a second (0: every one), -1: not given */
	char budget[SESSION_BUDGET_LEN_MAX + 1];   /* cost.budgetPercent for --budget, as given
	                         * ("1%", "0.5"), checked; "" when not given */
	enum inj_mode mode;
	enum inj_method method;
	struct session_s3 s3;
	bool s3_defaulted;      /* spec.output.s3 was absent: s3 holds the controller's defaults */
	char *storage_ref;      /* spec.output.storageRef.name (s3 is empty until resolved), or NULL */
	bool in_cluster;        /* no S3 anywhere: the controller's in-cluster store
	                         * (docs/artifact-store.md); s3 is empty */
	int64_t ttl_s;          /* ttlSecondsAfterFinished, -1 to keep the session */
};

struct session {
	struct store_node node;     /* the cache's link (store.h) */
	atomic_int refs;
	char *key;              /* "namespace/name" */
	char *ns, *name, *uid, *rv;
	int64_t generation;
	int64_t created_ns;     /* metadata.creationTimestamp, ns since the epoch */
	bool deleting;          /* metadata.deletionTimestamp set */
	bool has_finalizer;     /* SESSION_FINALIZER is among metadata.finalizers */
	json_t *finalizers;     /* metadata.finalizers as read (owned), or NULL */
	char *policy_uid;       /* the controlling ProfilingPolicy's uid (ownerReferences), or NULL */
	struct session_spec spec;
	int spec_err;           /* 0, or -EINVAL: spec_msg says what is wrong */
	char spec_msg[300];
	json_t *status;         /* owned: .status as read, or NULL */
	enum session_phase phase;
};

/* Whether this controller keeps artifacts in the cluster (--store-url given): a session
 * with no S3 anywhere then uses that store instead of failing. */
void session__set_store(bool available);

/* Returns 0 and *ret (refs 1), -EINVAL (no name/namespace/uid), -ENOMEM. Outside input:
 * tests/fuzz/fuzz_kubejson.c. */
int session__from_json(const json_t *j, struct session **ret);
struct session *session__ref(struct session *s);
void session__unref(struct session *s);  /* NULL-safe */

/*
 * Where a session's artifacts go when its spec has no output.s3: aiprof-controller's
 * --default-s3-* flags. All or nothing: a session that gives output.s3 takes none of them
 * (its own endpoint never gets the default Secret's credentials). secret is the NAME of a
 * Secret looked up in each session's own namespace; the controller never reads it.
 */
struct session_s3_defaults {
	const char *endpoint, *bucket, *prefix, *region, *secret;   /* NULL or "": not set */
};

/*
 * Sets the defaults every later session__from_json() applies (once, before the threads
 * start; a NULL bucket clears them). Returns 0, -EINVAL (why says which value is wrong and
 * what it should be), -ENOMEM.
 */
int session__set_s3_defaults(const struct session_s3_defaults *d, char *why, size_t whylen);
/* "s3://bucket/prefix" of the defaults in force, or NULL when there are none. */
const char *session__s3_defaults_url(void);

/*
 * Whether sessions may give their own spec.output.s3 (endpoint, bucket and Secret of their
 * choosing): aiprof-controller's --allow-inline-s3, off by default, so that tenants name
 * only the storage the admin set up (spec.output.storageRef); a session that had started
 * (status.startTime) keeps its own. Set once, before the threads.
 */
void session__set_inline_s3(bool allowed);

/*
 * Where session s's artifacts go when it names a ClusterProfilingStorage: storage is that
 * object as read. Refuses a storage whose spec.namespaces does not list s's namespace
 * (-EPERM), one with a plain-http endpoint unless its spec.allowInsecureEndpoint is true, or
 * one that is not valid (-EINVAL); why says which and what to do. On success fills out (clear
 * it with session__s3_clear()). -ENOMEM.
 */
int session__resolve_storage(const struct session *s, const json_t *storage,
			     struct session_s3 *out, char *why, size_t whylen);
void session__s3_clear(struct session_s3 *o);

/* Whether the injector needs eBPF (and so CAP_BPF, CAP_PERFMON) for s: an eBPF collector is
 * asked for (cpu, offcpu, syscalls, python; all are by default), or method EBPFOnly. */
bool session__needs_ebpf(const struct session *s);

/* A short stable id of the session (first 10 hex of SHA-256 of its UID and salt). */
void session__short_id(const char *uid, const char *salt, char out[11]);

#endif
