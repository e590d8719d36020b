/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for uprobe_decoder__convert(): a run of records as the eBPF-only
 * method's ring buffer delivers them, whose argument words come from the target process
 * (any value at all). The input is cut into struct gp_rec-sized pieces; fn is folded so
 * that most records name a real function.
 * FUZZ_SOURCES: injector/collect/uprobe_decode.c injector/model/event_store.c injector/model/names.c common/blobtab.c common/u64map.c common/timeutil.c common/elfsym.c common/procmaps.c common/readfile.c
 * FUZZ_LIBS: -lelf -lz
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/gpuprobes.h"
#include "event.h"
#include "injector/model/event_store.h"
#include "injector/collect/uprobes.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct uprobe_decoder *d = NULL;
	struct event_store store;

	memset(&store, 0, sizeof(store));
	CHECK(uprobe_decoder__new(&d) == 0);
	for (size_t off = 0; off + sizeof(struct gp_rec) <= size; off += sizeof(struct gp_rec)) {
		struct gp_rec r;
		size_t before = store.n;
		int n;

		memcpy(&r, data + off, sizeof(r));
		if (r.fn & 0x8000)
			r.fn = (uint16_t)(r.fn % (GP_FN__MAX + 1));
		n = uprobe_decoder__convert(d, &r, &store);
		if (r.fn == GP_FN_NONE || r.fn >= GP_FN__MAX) {
			CHECK(n == -EINVAL);
			CHECK(store.n == before);
			continue;
		}
		CHECK(n >= 0 && n <= 2);
		/* a driver launch may add a string, which the store keeps apart */
		CHECK(store.n == before + (n > 0 ? 1 : 0) || store.store_drops);
		if (store.n > before) {
			const struct aiprof_event *e = &store.v[store.n - 1];

			CHECK(e->type > AIPROF_EV_STRING && e->type < AIPROF_EV__MAX);
			CHECK(e->api > AIPROF_API_NONE && e->api < AIPROF_API__MAX);
			CHECK(e->ts == r.ts && e->dur == r.dur);
			if (e->type == AIPROF_EV_CUDA_LAUNCH && e->u.launch.name_id)
				CHECK(event_store__string(&store, e->u.launch.name_id) != NULL);
		}
	}
	(void)uprobe_decoder__unknown_rank(d);
	uprobe_decoder__free(d);
	event_store__clear(&store);
	return 0;
}
