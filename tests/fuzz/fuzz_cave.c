/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for injector/attach/cave.c: what find_cave() reads of a target's modules
 * from its memory (an ELF header and program headers, any bytes at all) beside the kernel's
 * maps, and the glibc banner scan over the target's libc file. The room found must lie inside
 * an executable private mapping of the same file; the version is digits and dots only.
 * Input: a need (2 bytes), up to 8 maps entries (18 bytes each), an Elf64_Ehdr, up to 64
 * Elf64_Phdr; the rest is the libc file's bytes.
 * FUZZ_SOURCES: injector/attach/cave.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "attach/cave.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path_a[] = "/lib/a.so", path_b[] = "/lib/b.so";

/* The next n bytes (little-endian, the first 8 of them), consumed. */
static uint64_t take(const uint8_t **p, size_t *left, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n && *left; i++, (*p)++, (*left)--)
		if (i < 8)
			v |= (uint64_t)**p << (8 * i);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct maps_entry v[8];
	struct maps m = { .v = v };
	Elf64_Ehdr eh;
	Elf64_Phdr *ph;
	size_t need, left = size, nph;
	const uint8_t *p = data;
	char ver[16], *lib;
	uint64_t at;

	need = (size_t)take(&p, &left, 2) % 8192;
	m.n = (size_t)take(&p, &left, 1) % 9;
	for (size_t i = 0; i < m.n; i++) {
		uint8_t sel;

		memset(&v[i], 0, sizeof(v[i]));
		v[i].start = take(&p, &left, 8) << 12;
		v[i].end = v[i].start + (take(&p, &left, 4) << 12);
		v[i].prot = (unsigned)take(&p, &left, 1) & (PROT_READ | PROT_WRITE | PROT_EXEC);
		sel = (uint8_t)take(&p, &left, 1);
		v[i].shared = sel & 4;
		v[i].path = (sel & 3) == 1 ? path_a : (sel & 3) == 2 ? path_b : NULL;
		v[i].offset = (sel & 8) ? 4096 : 0;
	}
	memset(&eh, 0, sizeof(eh));
	memcpy(&eh, p, left < sizeof(eh) ? left : sizeof(eh));
	take(&p, &left, sizeof(eh));
	nph = eh.e_phnum <= CAVE_MAX_PHDRS ? eh.e_phnum : CAVE_MAX_PHDRS;
	ph = calloc(CAVE_MAX_PHDRS, sizeof(*ph));
	if (!ph)
		return 0;
	memcpy(ph, p, left < nph * sizeof(*ph) ? left : nph * sizeof(*ph));
	take(&p, &left, nph * sizeof(*ph));
	if (m.n && cave_ehdr_ok(&eh)) {
		at = cave_find_in(&m, 0, &eh, ph, need);
		if (at) {
			bool inside = false;

			CHECK(at % 16 == 0);
			for (size_t j = 0; j < m.n; j++)
				inside |= v[j].start <= at && at + need <= v[j].end &&
					  (v[j].prot & PROT_EXEC) && !v[j].shared && v[j].path &&
					  v[0].path && strcmp(v[j].path, v[0].path) == 0;
			CHECK(inside);
		}
	}
	free(ph);
	lib = malloc(left ? left : 1);           /* exactly the rest: ASan sees any overrun */
	if (!lib)
		return 0;
	memcpy(lib, p, left);
	cave_glibc_version(lib, left, ver, sizeof(ver));
	CHECK(strlen(ver) < sizeof(ver) && strspn(ver, "0123456789.") == strlen(ver));
	free(lib);
	return 0;
}
