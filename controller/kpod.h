/* SPDX-License-Identifier: MIT */
/*
 * The part of a Pod the controller needs, packed into one allocation of a few hundred bytes
 * (10,000 cached pods cost about 3 MB): identity, node, runtime class, labels, and per
 * container (regular and ephemeral) its name, container ID and state. Strings live in the
 * blob behind u32 offsets (read them with the accessors); labels and containers are packed
 * and decoded on access. Termination messages and start/finish times are kept only for the
 * controller's own injectors (a pod labelled aiprof.io/session-uid, an ephemeral container
 * named aiprof-*). Of the annotations only those under aiprof.io/ are kept. Immutable once built; shared by reference count between the cache and
 * readers.
 */
#ifndef AIPROF_KPOD_H
#define AIPROF_KPOD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "selector.h"
#include "store.h"

#define KPOD_TERM_MESSAGE_MAX 4096   /* the kubelet's cap on a termination message */
#define KPOD_MAX_LABELS 256          /* more are dropped (selectors cannot see them) */
/* Annotations are kept only under this prefix (ProfilingPolicy triggers), at most 16 and
 * each value up to 253 bytes; others are dropped. */
#define KPOD_ANNOTATION_PREFIX "aiprof.io/"
#define KPOD_MAX_ANNOTATIONS 16
#define KPOD_ANNOTATION_VALUE_MAX 253

enum kcontainer_state { KC_UNKNOWN = 0, KC_WAITING, KC_RUNNING, KC_TERMINATED };

/* A decoded container: the strings point into the pod, valid while it is referenced. */
struct kcontainer {
	const char *name;
	const char *container_id;    /* "containerd://abc...", "" until started */
	enum kcontainer_state state;
	int exit_code;               /* terminated */
	const char *reason;          /* waiting or terminated reason (own injectors), or "" */
	const char *message;         /* terminated message (own injectors), or "" */
	int64_t started_at;          /* ns since the epoch (own injectors), 0 if unknown */
	int64_t finished_at;
};

struct kpod {
	struct store_node node;      /* the cache's link (store.h) */
	atomic_int refs;
	bool deleting;               /* metadata.deletionTimestamp set */
	bool host_pid;
	uint16_t n_labels, n_containers, n_ephemeral;
	/* offsets of NUL-terminated strings in this allocation */
	uint32_t o_key, o_name, o_ns, o_rv, o_node, o_runtime_class, o_phase, o_session_uid,
		 o_session_name, o_session_ns, o_uid, o_owner_uid;
	uint32_t o_labels;           /* "key\0value\0" n_labels times */
	uint32_t o_containers;       /* packed containers (kpod.c), then the ephemeral ones */
	uint32_t o_ephemeral;
	uint32_t size;               /* of the allocation */
};

#define KPOD_STR(p, o) ((const char *)(p) + (p)->o)
static inline const char *kpod__key(const struct kpod *p) { return KPOD_STR(p, o_key); }
static inline const char *kpod__name(const struct kpod *p) { return KPOD_STR(p, o_name); }
static inline const char *kpod__ns(const struct kpod *p) { return KPOD_STR(p, o_ns); }
static inline const char *kpod__rv(const struct kpod *p) { return KPOD_STR(p, o_rv); }
/* spec.nodeName, "" if unscheduled */
static inline const char *kpod__node(const struct kpod *p) { return KPOD_STR(p, o_node); }
/* spec.runtimeClassName, "" if none */
static inline const char *kpod__runtime_class(const struct kpod *p)
{
	return KPOD_STR(p, o_runtime_class);
}
static inline const char *kpod__phase(const struct kpod *p) { return KPOD_STR(p, o_phase); }
/* metadata.uid and the uid of the controlling ownerReference: kept for pods labelled with a
 * session UID only (injector and merge pods), "" for the others */
static inline const char *kpod__uid(const struct kpod *p) { return KPOD_STR(p, o_uid); }
static inline const char *kpod__owner_uid(const struct kpod *p)
{
	return KPOD_STR(p, o_owner_uid);
}
/* label aiprof.io/session-uid, "" if the pod is not an injector */
static inline const char *kpod__session_uid(const struct kpod *p)
{
	return KPOD_STR(p, o_session_uid);
}
/* label aiprof.io/session */
static inline const char *kpod__session_name(const struct kpod *p)
{
	return KPOD_STR(p, o_session_name);
}
/* label aiprof.io/session-namespace: the session's namespace when the pod runs in the
 * injector namespace, "" otherwise (kept for pods labelled with a session UID only) */
static inline const char *kpod__session_ns(const struct kpod *p)
{
	return KPOD_STR(p, o_session_ns);
}

/* Builds from a Pod object. Returns 0 and *ret (refs 1), -EINVAL (no metadata.name /
 * namespace), -E2BIG (larger than 4 GiB), -ENOMEM. Outside input: fuzz_kubejson.c. */
int kpod__from_json(const json_t *j, struct kpod **ret);
struct kpod *kpod__ref(struct kpod *p);
void kpod__unref(struct kpod *p);   /* NULL-safe */

/* The container named name (regular, or ephemeral), decoded into *out. false if none. */
bool kpod__container(const struct kpod *p, const char *name, struct kcontainer *out);
bool kpod__ephemeral(const struct kpod *p, const char *name, struct kcontainer *out);
/* The i-th regular container (spec order). false when i >= n_containers. */
bool kpod__container_at(const struct kpod *p, size_t i, struct kcontainer *out);
const char *kpod__label(const struct kpod *p, const char *key);   /* NULL if absent */
/* An annotation under KPOD_ANNOTATION_PREFIX; NULL if absent (or not kept, see above). */
const char *kpod__annotation(const struct kpod *p, const char *key);
/* The labels decoded into kv[0..max); returns how many. */
size_t kpod__labels(const struct kpod *p, struct kv *kv, size_t max);
bool kpod__matches(const struct kpod *p, const struct label_selector *sel);
/* Do a and b differ in what the reconciler reads (node, phase, labels, containers)? */
bool kpod__differs(const struct kpod *a, const struct kpod *b);

#endif
