/* SPDX-License-Identifier: MIT */
/*
 * Folded stacks come from the target (frame names are the target's symbols and Python
 * function names): the parser and the SVG writer must survive any bytes.
 *
 * FUZZ_SOURCES: injector/artifacts/flamegraph.c injector/artifacts/membuf.c common/blobtab.c common/u64map.c
 * FUZZ_ARGS: -max_len=65536
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "injector/artifacts/flamegraph.h"
#include "injector/artifacts/membuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fg_opts o = { .id = "fz", .title = "fuzz", .unit = "samples" };
	struct fg_tree *t = NULL;
	struct membuf b = { 0 };

	if (fg_tree__parse((const char *)data, size, &t) < 0)
		return 0;
	if (fg_tree__svg(t, &o, &b) == 0 && b.p) {
		/* whatever the input, the only raw markup of a script is ours */
		const char *p = strstr(b.p, "<script");

		if (!p || strstr(p + 1, "<script"))
			abort();
	}
	membuf_free(&b);
	fg_tree__free(t);
	return 0;
}
