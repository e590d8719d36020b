/* SPDX-License-Identifier: MIT */
/* Ring records as a hostile target could forge them (ring_scribbler, test_event_store). */
#ifndef AIPROF_RING_FORGE_H
#define AIPROF_RING_FORGE_H

#include <string.h>
#include "event.h"

/* A string chunk: id, offset, announced total, its bytes all `fill`. */
static inline struct aiprof_event forge_str_chunk(uint32_t id, uint16_t offset, uint16_t total, char fill)
{
	struct aiprof_event e;

	memset(&e, 0, sizeof(e));
	e.type = AIPROF_EV_STRING;
	e.u.str.id = id;
	e.u.str.offset = offset;
	e.u.str.total = total;
	memset(e.u.str.s, fill, sizeof(e.u.str.s));
	return e;
}

#endif
