/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the ELF reader: a file in memory, then everything a caller does
 * with it (info, build-id, name -> symbol, address -> symbol, load bias). The demangler is
 * the C++ runtime's and is not fuzzed here.
 * FUZZ_SOURCES: common/elfsym.c common/procmaps.c common/readfile.c
 * FUZZ_LIBS: -lelf -lz
 * FUZZ_ARGS: -max_len=65536
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include "elfsym.h"
#include "procmaps.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
	"main", "_start", "dlopen", "pthread_create", "foo", "foo@V1", "foo@@V2", "bar",
	"memcpy", "memcpy@GLIBC_2.14", "x@",
};

static void probe(const struct elf_file *f, uint64_t vaddr)
{
	const char *name = NULL;
	uint64_t off = 0, v2;

	if (elf_file__symbolize(f, vaddr, &name, &off) < 0)
		return;
	CHECK(name && name[0] && off <= vaddr);
	/* Round trip: every name the index shows can be looked up (it may be a label,
	 * which find_symbol does not return, or carry "@VER"). */
	if (!strchr(name, '@'))
		(void)elf_file__find_symbol(f, name, &v2, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elf_file *f = NULL;
	const struct elf_info *info;

	if (elf_file__open_mem(data, size, &f) < 0) {
		CHECK(f == NULL);
		return 0;
	}
	info = elf_file__info(f);
	CHECK(strlen(info->build_id) % 2 == 0 && strlen(info->build_id) <= 2 * ELF_BUILD_ID_MAX);
	(void)elf_info__is_x86_64(info);
	if (info->interp)
		(void)strlen(info->interp);

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		uint64_t vaddr, sz;

		if (elf_file__find_symbol(f, names[i], &vaddr, &sz) >= 0) {
			probe(f, vaddr);
			probe(f, vaddr + sz / 2);
		}
	}
	for (size_t i = 0; i < info->n_loads && i < 16; i++) {
		const struct elf_segment *s = &info->loads[i];
		struct maps_entry e = {
			.start = 0x7f0000000000ull + (s->vaddr & ~0xfffull),
			.end = 0x7f0000001000ull + (s->vaddr & ~0xfffull),
			.offset = s->offset & ~0xfffull,
			.prot = s->prot,
		};
		uint64_t bias;

		(void)elf_file__load_bias(f, &e, &bias);
		for (uint64_t k = 0; k < 8; k++)
			probe(f, s->vaddr + k * (s->memsz / 8 + 1));
	}
	probe(f, 0);
	probe(f, UINT64_MAX);
	elf_file__free(f);
	return 0;
}
