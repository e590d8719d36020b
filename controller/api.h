/* SPDX-License-Identifier: MIT */
/* Names the controller shares with the cluster: the API group, labels, finalizer. */
#ifndef AIPROF_API_H
#define AIPROF_API_H

#define AIPROF_GROUP           "aiprof.io"
#define AIPROF_VERSION         "v1alpha1"
#define AIPROF_API_VERSION     AIPROF_GROUP "/" AIPROF_VERSION
#define SESSION_KIND           "ProfilingSession"
#define SESSION_RESOURCE       "profilingsessions"
#define SESSION_API_PREFIX     "/apis/" AIPROF_API_VERSION
#define POLICY_KIND            "ProfilingPolicy"
#define POLICY_RESOURCE        "profilingpolicies"

/* On every injector pod the controller creates: which session it belongs to. */
#define LABEL_SESSION_UID      "aiprof.io/session-uid"
#define LABEL_SESSION          "aiprof.io/session"
/* the session's namespace, on pods that run in the injector namespace (no ownerReference
 * can cross namespaces) */
#define LABEL_SESSION_NS       "aiprof.io/session-namespace"
#define LABEL_TARGET_POD       "aiprof.io/target-pod"
#define LABEL_COMPONENT        "app.kubernetes.io/component"
#define LABEL_MANAGED_BY       "app.kubernetes.io/managed-by"
#define COMPONENT_INJECTOR     "aiprof-injector"
#define COMPONENT_MERGE        "aiprof-merge"
#define MANAGED_BY             "aiprof-controller"

/* Ephemeral injector containers are named EPHEMERAL_PREFIX + an id of the session. */
#define EPHEMERAL_PREFIX       "aiprof-"

#define SESSION_FINALIZER      "aiprof.io/cleanup"

#endif
