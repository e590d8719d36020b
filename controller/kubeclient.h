/* SPDX-License-Identifier: MIT */
/*
 * A thin Kubernetes REST client over libcurl: one request at a time per client (a client
 * belongs to one thread and keeps its connection alive), bearer token or client certificate,
 * TLS verified by default, and errors typed by the API's own Status object.
 *
 * Errors: a call returns 0 for a 2xx answer, else a negative errno and *st says what the
 * API server said (code, reason, message) or what the transport failed with (code 0):
 *   400 BadRequest, 422 Invalid -> -EINVAL      401 Unauthorized -> -EKEYREJECTED
 *   403 Forbidden -> -EACCES                    404 NotFound -> -ENOENT
 *   405 MethodNotAllowed -> -EOPNOTSUPP         409 AlreadyExists -> -EEXIST
 *   409 Conflict (stale resourceVersion) -> -ESTALE
 *   410 Gone / Expired (watch or list too old) -> -ETIME
 *   429 TooManyRequests -> -EBUSY               5xx -> -EIO (504 Timeout -> -ETIMEDOUT)
 *   transport: -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EHOSTUNREACH, -EPROTO (TLS),
 *   -ECANCELED (stopped through kube_client__set_stop()).
 *   -ENOLCK: a write the write gate refused (below); nothing was sent.
 * A 401 re-reads a rotated token file and tries once more.
 *
 * Nothing here logs; no message ever contains the token.
 */
#ifndef AIPROF_KUBECLIENT_H
#define AIPROF_KUBECLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kubeconfig.h"

struct kube_status {
	int code;               /* HTTP status; 0 when no answer came (transport failure) */
	char reason[64];        /* Status.reason ("NotFound", "Conflict", "Expired"...) or "" */
	char message[512];      /* Status.message, or the transport error; printable ASCII */
};

/* The errno for an HTTP status and a Status reason (see above). */
int kube_errno(int code, const char *reason);

/*
 * Fills *st from an error answer: a Status object's reason/message/code when body is one,
 * else the HTTP code and a reason derived from it. Control characters become '?'.
 * Returns kube_errno() of the result. Outside input (tests/fuzz/fuzz_kubejson.c).
 */
int kube_status__parse(const char *body, size_t len, int http_code, struct kube_status *st);

struct kube_client;

/* cfg must outlive the client. Returns 0, -ENOMEM, -EINVAL (libcurl refused an option). */
int kube_client__new(const struct kube_config *cfg, struct kube_client **ret);
void kube_client__free(struct kube_client *c);  /* NULL-safe */

/* Transfers in progress end with -ECANCELED soon after *stop becomes true (NULL: never). */
void kube_client__set_stop(struct kube_client *c, const atomic_bool *stop);
/* The Accept header of this client's next requests (NULL: application/json), such as
 * "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" for a list of metadata
 * only. accept must outlive its use. */
void kube_client__set_accept(struct kube_client *c, const char *accept);
/* Total time allowed for one kube_client__request(), ms (default 30000). */
void kube_client__set_timeout_ms(struct kube_client *c, long ms);

/*
 * The write gate, process-wide: once set, every write (any method but GET) of every client
 * asks fn(ctx) right before it goes out, after whatever the caller waited for. fn returns
 * how long this process may still act, in ns: 0 refuses the write here (-ENOLCK, "not the
 * leader ..."; nothing is sent), else the request's timeout is cut to that, so that no
 * write of ours is in flight past it. fn NULL: no gate. Set it before the threads that use
 * clients start, or once they stopped: it is not synchronised with them. fn is called from
 * those threads and must be thread-safe.
 */
typedef uint64_t (*kube_write_gate_fn)(void *ctx);
void kube_client__set_write_gate(kube_write_gate_fn fn, void *ctx);
/* This client's writes skip the gate (the Lease's own requests, which keep the gate open). */
void kube_client__skip_write_gate(struct kube_client *c);

/*
 * One request. path starts with '/' ("/api/v1/namespaces/ns/pods?limit=500"); body may be
 * NULL; content_type NULL means application/json. On 2xx: 0, and when ret_body is given the
 * answer as a NUL-terminated malloc'd buffer (caller frees). Otherwise see above.
 */
int kube_client__request(struct kube_client *c, const char *method, const char *path,
			 const char *content_type, const char *body, size_t body_len,
			 char **ret_body, size_t *ret_len, struct kube_status *st);

/* Receives a streamed 2xx body chunk by chunk; returns 0 to go on or -errno to stop. */
typedef int (*kube_chunk_fn)(void *ctx, const char *buf, size_t len);

/*
 * A GET whose 2xx body is handed to fn as it arrives (lists, watches). A stream that moves no
 * byte for idle_s seconds ends with -ETIMEDOUT. Returns 0 when the server ended the body,
 * the error fn returned, or an error as above.
 */
int kube_client__stream(struct kube_client *c, const char *path, kube_chunk_fn fn, void *ctx,
			long idle_s, struct kube_status *st);

#endif
