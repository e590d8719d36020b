/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <jansson.h>
#include "api.h"
#include "kevent.h"
#include "ktime.h"

char *kevent__body(const char *kind, const char *ns, const char *name, const char *uid,
		   const char *rv, bool warning, const char *reason, const char *message,
		   const char *instance, int64_t now_ns)
{
	char now[KTIME_LEN], micro[KTIME_MICRO_LEN], gen[300];
	json_t *ev;
	char *body;

	snprintf(gen, sizeof(gen), "%.200s.", name);
	ev = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s},"
		       "s:s,s:s,s:I,s:s,s:s,s:s,s:s}",
		       "apiVersion", "v1", "kind", "Event",
		       "metadata", "generateName", gen, "namespace", ns,
		       "involvedObject", "apiVersion", AIPROF_API_VERSION, "kind", kind,
		       "name", name, "namespace", ns, "uid", uid, "resourceVersion", rv,
		       "reason", reason, "message", message, "type", warning ? "Warning" : "Normal",
		       "source", "component", MANAGED_BY,
		       "firstTimestamp", ktime_format(now_ns, now), "lastTimestamp", now,
		       "count", (json_int_t)1, "eventTime", ktime_format_micro(now_ns, micro),
		       "reportingComponent", MANAGED_BY, "reportingInstance",
		       instance ? instance : MANAGED_BY, "action", "Reconcile");
	body = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	return body;
}
