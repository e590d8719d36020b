/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for injector/preload/elfdyn.c: a module's dynamic section and the tables
 * it points at (symbols, strings, GNU and SysV hashes, versions, relocations), any bytes at
 * all, read within the module's bounds. The input is the module's image; its first two bytes
 * say where the dynamic section starts. Pointers in it are offsets (below the image's
 * address, so relocated by the load bias like the vDSO's). Lookups and the GOT walk must stay
 * inside the image and end.
 * FUZZ_SOURCES: injector/preload/elfdyn.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "preload/elfdyn.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uintptr_t lo, hi;

static int got_ref(const struct elf_got_ref *ref, void *ctx)
{
	size_t *n = ctx;

	CHECK((uintptr_t)ref->name >= lo && (uintptr_t)ref->name + strlen(ref->name) < hi);
	CHECK(!ref->version || ((uintptr_t)ref->version >= lo && (uintptr_t)ref->version < hi));
	return ++*n > 100000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "malloc", "cudaLaunchKernel", "dlopen", "a", "" };
	struct elf_dyn d;
	struct elf_sym_def def;
	size_t at, n = 0;
	uint64_t *img;

	if (size < 2)
		return 0;
	at = ((size_t)data[0] | (size_t)data[1] << 8) & ~(size_t)7;
	/* 8-aligned, exactly the image's bytes: ASan sees any read past them */
	img = malloc(size - 2 ? size - 2 : 1);
	if (!img)
		return 0;
	memcpy(img, data + 2, size - 2);
	lo = (uintptr_t)img;
	hi = lo + size - 2;
	if (elf_dyn__parse_bounded(&d, lo, (const Elf64_Dyn *)((char *)img + at), lo, hi) == 0) {
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			if (elf_dyn__lookup(&d, names[i], &def))
				CHECK(!def.version || ((uintptr_t)def.version >= lo &&
						       (uintptr_t)def.version < hi));
			elf_dyn__lookup_version(&d, names[i], "GLIBC_2.2.5", &def);
		}
		elf_dyn__for_each_got(&d, got_ref, &n);
	}
	free(img);
	return 0;
}
