/* SPDX-License-Identifier: MIT */
/* The Chrome Trace Event records both timeline writers share (timeline.c, ebpf_timeline.c). */
#ifndef AIPROF_TRACE_JSON_H
#define AIPROF_TRACE_JSON_H

#include <stdint.h>
#include <sys/types.h>
#include "jsonw.h"

/* Opens one trace event: its phase, category (NULL: none), name, track and time; the caller
 * adds the rest and closes it. */
static inline void trace_event_begin(struct jsonw *w, const char *ph, const char *cat,
				     const char *name, pid_t pid, uint32_t tid, uint64_t ts_ns)
{
	jsonw_newline(w);
	jsonw_obj_open(w);
	jsonw_kv_str(w, "ph", ph);
	if (cat)
		jsonw_kv_str(w, "cat", cat);
	jsonw_kv_str(w, "name", name);
	jsonw_kv_int(w, "pid", pid);
	jsonw_kv_uint(w, "tid", tid);
	jsonw_key(w, "ts");
	jsonw_fixed3(w, ts_ns);
}

#endif
