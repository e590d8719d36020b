/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for ksyms__parse() (/proc/kallsyms text) and lookups in its result.
 * FUZZ_SOURCES: injector/collect/ebpf_kallsyms.c common/readfile.c
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "injector/collect/ebpf_kallsyms.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ksyms *ks = NULL;
	const struct ksym *prev = NULL;
	uint64_t probe = 0;

	if (ksyms__parse((const char *)data, size, &ks) < 0) {
		CHECK(ks == NULL);
		return 0;
	}
	CHECK(ksyms__count(ks) > 0);
	/* lookups at addresses taken from the input itself, and around them */
	for (size_t i = 0; i + 8 <= size && i < 256; i += 8) {
		const struct ksym *s;

		memcpy(&probe, data + i, 8);
		s = ksyms__find(ks, probe);
		if (s) {
			CHECK(s->addr <= probe);
			CHECK(s->name && s->name[0]);
			CHECK(!s->module || s->module[0]);
			CHECK(ksyms__find(ks, s->addr) != NULL);
		}
		(void)ksyms__in_sched_text(ks, probe);
		prev = s;
	}
	(void)prev;
	CHECK(ksyms__find(ks, 0) == NULL || ksyms__find(ks, 0)->addr == 0);
	ksyms__free(ks);
	return 0;
}
