/* SPDX-License-Identifier: MIT */
/*
 * One of aiprof's objects (a ProfilingSession or ProfilingPolicy) written back to the API
 * server with its resourceVersion as the precondition, or read again after a conflict: the
 * request, the JSON of the answer, and the informer's cache brought up to date.
 */
#ifndef AIPROF_KOBJECT_H
#define AIPROF_KOBJECT_H

#include <jansson.h>
#include "informer.h"
#include "kubeclient.h"

/*
 * PATCHes path (a JSON merge patch) after setting patch's metadata.resourceVersion to rv, so
 * that the server refuses it with 409 (-ESTALE) when the object has changed since. On success
 * returns 0 and *ret is the object the server returned (new reference; NULL when the answer
 * was not JSON). Otherwise kube_client__request's -errno or -ENOMEM, with st saying why.
 */
int kobject__patch(struct kube_client *kc, const char *path, const char *rv, json_t *patch,
		   json_t **ret, struct kube_status *st);

/*
 * GETs the object at path, decodes it with decode and writes it into inf's cache. Returns 0
 * and *ret (what decode made; the caller owns it), -EBADMSG when the answer cannot be
 * decoded, or kube_client__request's -errno (-ENOENT when the object is gone).
 */
int kobject__get(struct kube_client *kc, const char *path, struct informer *inf,
		 int (*decode)(const json_t *obj, void **ret), void **ret);

/*
 * POSTs obj to the collection at path ("/api/v1/namespaces/ns/pods") and writes the object
 * the server returned into inf's cache (inf may be NULL). Returns 0, or kube_client__request's
 * -errno (-EEXIST when an object of that name exists) or -ENOMEM, with st saying why.
 */
int kobject__create(struct kube_client *kc, const char *path, const json_t *obj,
		    struct informer *inf, struct kube_status *st);

#endif
