/* SPDX-License-Identifier: MIT */
/*
 * The in-cluster artifact store's pure parts (docs/artifact-store.md is the contract): the
 * upload's path, the ConfigMaps an artifact is stored as, and what the API server's answers
 * say about who uploads. No I/O, no logging; artupload.c does the requests, httpd.c serves
 * the route. Every parser here reads outside input (tests/fuzz/fuzz_artstore.c).
 */
#ifndef AIPROF_ARTSTORE_H
#define AIPROF_ARTSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "digest.h"

#define ARTSTORE_ROUTE "/v1/artifacts/"         /* PUT ARTSTORE_ROUTE{ns}/{session}/{name} */
#define ARTSTORE_AUDIENCE "aiprof.io/artifacts" /* the token's, and the TokenReview's */
#define ARTSTORE_SHA256_HEADER "x-aiprof-sha256:"       /* as libwebsockets looks it up */
#define ARTSTORE_CHUNK_MAX (768u << 10)         /* binaryData bytes of one ConfigMap */
#define ARTSTORE_NAME_MAX 200
#define ARTSTORE_NS_MAX 63                      /* a DNS label */
#define ARTSTORE_OBJ_MAX 253                    /* a DNS subdomain */
#define ARTSTORE_UID_MAX 64
#define ARTSTORE_MAX_FILE_BYTES (16ull << 20)   /* --store-max-file-bytes' default */
#define ARTSTORE_MAX_SESSION_BYTES (64ull << 20) /* --store-max-session-bytes' default */
#define ARTSTORE_MAX_NS_BYTES (256ull << 20)    /* --store-max-namespace-bytes' default */
#define ARTSTORE_MAX_NS_SESSIONS 20             /* --store-max-namespace-sessions' default */
/* "aiprof-" 12 hex "-" chunk index: at most 7 + 12 + 1 + 10 characters */
#define ARTSTORE_CM_NAME_MAX 32

/* Labels and annotations of the stored ConfigMaps. */
#define ARTSTORE_LABEL_ARTIFACT "aiprof.io/artifact"
#define ARTSTORE_LABEL_ARTIFACT_QUERY "aiprof.io%2Fartifact%3Dtrue"     /* a labelSelector */
#define ARTSTORE_ANN_SESSION "aiprof.io/session"
#define ARTSTORE_ANN_NAME "aiprof.io/artifact-name"
#define ARTSTORE_ANN_SHA256 "aiprof.io/sha256"
#define ARTSTORE_ANN_SIZE "aiprof.io/size"
#define ARTSTORE_ANN_CHUNK "aiprof.io/chunk"

/* An upload's path, parsed. */
struct artstore_path {
	char ns[ARTSTORE_NS_MAX + 1];
	char session[ARTSTORE_OBJ_MAX + 1];
	char name[ARTSTORE_NAME_MAX + 1];
};

/*
 * uri ("/v1/artifacts/train/s1/trainer-0/summary.json", no query) into *ret: the namespace a
 * DNS label, the session a DNS subdomain, the name 1-200 characters of [A-Za-z0-9._/-] with
 * no empty, "." or ".." component. 0, or -EINVAL with why. *ret untouched on error.
 */
int artstore__parse_path(const char *uri, struct artstore_path *ret, char *why, size_t whylen);
bool artstore__valid_name(const char *name);
/* A namespace's name (dots false: [a-z0-9-], at most 63) or an object's (dots true:
 * [a-z0-9.-], at most 253), alphanumeric at both ends (common/storeurl.h's checks). */
bool artstore__dns_name(const char *s, bool dots);

/* 64 hex digits (either case) into out; -EINVAL otherwise. Outside input. */
int artstore__parse_sha256(const char *hex, uint8_t out[SHA256_LEN]);

/* "aiprof-<12 hex of sha256(uid "/" name)>-<chunk>". */
void artstore__cm_name(const char *session_uid, const char *name, size_t chunk,
		       char out[ARTSTORE_CM_NAME_MAX + 1]);
/* How many ConfigMaps hold size bytes: ceil(size / ARTSTORE_CHUNK_MAX), at least 1. */
size_t artstore__chunks(uint64_t size);

/* One artifact to store. */
struct artstore_artifact {
	const char *ns, *session, *session_uid;
	const char *name;
	const uint8_t *data;
	size_t size;
	char sha256[SHA256_HEX_LEN + 1];        /* lower-case hex of data */
};

/* ConfigMap chunk (0-based, < artstore__chunks(a->size)) of a, as the API server takes it:
 * immutable, labelled, annotated, owned by the session. NULL when out of memory. */
json_t *artstore__configmap(const struct artstore_artifact *a, size_t chunk);
/* The 201's body: {"name","size","sha256","configMaps":[...]} (malloc'd), NULL: no memory. */
char *artstore__answer(const struct artstore_artifact *a);

/*
 * What a TokenReview of an upload's token says (outside input): 0 and the pod the token is
 * bound to (status.user.extra's authentication.kubernetes.io/pod-name and pod-uid, the
 * namespace of the user system:serviceaccount:NS:SA) when it is authenticated for
 * ARTSTORE_AUDIENCE; -EKEYREJECTED (not authenticated, or not for that audience) or -EPERM
 * (authenticated, but not a pod's service-account token) with why; -EPROTO: not a
 * TokenReview.
 */
struct artstore_pod {
	char ns[ARTSTORE_NS_MAX + 1];
	char name[ARTSTORE_OBJ_MAX + 1];
	char uid[ARTSTORE_UID_MAX + 1];
};
int artstore__parse_review(const char *body, size_t len, struct artstore_pod *ret, char *why,
			   size_t whylen);

/*
 * Whether pod (a Pod's JSON from the API server) is an injector the controller made for the
 * session of session_uid in namespace ns (injspec.c's pod_metadata()), in pod_ns (the
 * injector namespace, or ns when the controller has none): the same UID as the token's pod
 * (pod_uid), labels aiprof.io/session (session), aiprof.io/session-uid,
 * aiprof.io/session-namespace (ns), app.kubernetes.io/component aiprof-injector and
 * managed-by aiprof-controller, an ownerReference to the ProfilingSession of that UID when
 * pod_ns is ns (none can cross namespaces), and the artifact's name (its first component)
 * under its own target pod (label aiprof.io/target-pod). 0, -EPERM with why, -EPROTO.
 */
int artstore__check_injector(const char *pod, size_t len, const char *pod_ns, const char *ns,
			     const char *session, const char *session_uid, const char *pod_uid,
			     const char *name, char *why, size_t whylen);

/*
 * Whether the session (its JSON, status included; outside input) takes name from the pod of
 * pod_uid: its status.targets[] entry for the target that name's first component names
 * recorded that pod (injectorUID: the injector the controller created and saw first), and
 * the session has not finished (status.phase neither Succeeded nor Failed). 0 and the
 * session's metadata.uid in uid; -EPERM with why (finished, another pod recorded); -EAGAIN
 * with why (no injector recorded for that target yet: a retry may pass); -EPROTO (no UID).
 */
int artstore__check_session(const char *obj, size_t len, const char *pod_uid, const char *name,
			    char uid[ARTSTORE_UID_MAX + 1], char *why, size_t whylen);

/*
 * What a list of the session's ConfigMaps (a ConfigMapList or PartialObjectMetadataList)
 * says is stored: *ret_others the bytes of the artifacts other than name (aiprof.io/size
 * counted once per aiprof.io/artifact-name), and the sha256 stored under name into
 * existing ("" when none). 0, -EPROTO or -ENOMEM. Outside input.
 */
int artstore__stored(const char *list, size_t len, const char *name, uint64_t *ret_others,
		     char existing[SHA256_HEX_LEN + 1]);

/*
 * What a list of a namespace's artifact ConfigMaps (label aiprof.io/artifact=true, every
 * session's, finished ones included) says the store keeps there for sessions other than
 * session_uid: *ret_bytes (aiprof.io/size once per session and artifact name) and
 * *ret_sessions (how many sessions). 0, -EPROTO or -ENOMEM. Outside input.
 */
int artstore__ns_usage(const char *list, size_t len, const char *session_uid,
		       uint64_t *ret_bytes, size_t *ret_sessions);

/* The aiprof.io/sha256 annotation of one ConfigMap's JSON into out ("" when none); 0 or
 * -EPROTO. */
int artstore__cm_sha256(const char *cm, size_t len, char out[SHA256_HEX_LEN + 1]);

#endif
