/* SPDX-License-Identifier: MIT */
/*
 * A core/v1 Event about one of aiprof's objects (a ProfilingSession or ProfilingPolicy), as
 * the controller records them: generateName from the object's name, involvedObject with its
 * uid and resourceVersion, source/reportingComponent aiprof-controller, action Reconcile.
 */
#ifndef AIPROF_KEVENT_H
#define AIPROF_KEVENT_H

#include <stdbool.h>
#include <stdint.h>

/* The Event as compact JSON (malloc'd; the caller frees), or NULL when out of memory.
 * instance: reportingInstance (NULL: the component's name); now_ns: wall clock. */
char *kevent__body(const char *kind, const char *ns, const char *name, const char *uid,
		   const char *rv, bool warning, const char *reason, const char *message,
		   const char *instance, int64_t now_ns);

#endif
