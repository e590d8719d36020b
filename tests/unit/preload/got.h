/* SPDX-License-Identifier: MIT */
/* Test helper: where a module's GOT slot for a symbol is, read with elfdyn. */
#ifndef AIPROF_TEST_GOT_H
#define AIPROF_TEST_GOT_H

#include <link.h>
#include <stdio.h>
#include <string.h>

#include "elfdyn.h"

struct got_find {
	const char *module;     /* substring of the module path; "" = the executable */
	const char *sym;
	uint32_t type;          /* R_X86_64_JUMP_SLOT or R_X86_64_GLOB_DAT */
	void **slot;
};

static int got_find_ref(const struct elf_got_ref *ref, void *data)
{
	struct got_find *g = data;

	if (ref->type == g->type && strcmp(ref->name, g->sym) == 0) {
		g->slot = ref->slot;
		return 1;
	}
	return 0;
}

static int got_find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct got_find *g = data;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	struct elf_dyn d;

	if (g->module[0] ? !strstr(name, g->module) : name[0] != '\0')
		return 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		if (elf_dyn__parse(&d, info->dlpi_addr,
				   (const Elf64_Dyn *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr)) == 0)
			elf_dyn__for_each_got(&d, got_find_ref, g);
	}
	return g->slot != NULL;
}

/* The GOT slot of `sym` (relocation `type`) in the module whose path contains `module`. */
static inline void **got_slot(const char *module, const char *sym, uint32_t type)
{
	struct got_find g = { .module = module, .sym = sym, .type = type };

	dl_iterate_phdr(got_find_cb, &g);
	return g.slot;
}

/* "r--p"-style permissions of the mapping holding `addr`, or "" */
static inline const char *maps_perms(const void *addr, char out[5])
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];

	out[0] = '\0';
	if (!f)
		return out;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 &&
		    (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			memcpy(out, perms, 5);
			break;
		}
	}
	fclose(f);
	return out;
}

#endif
