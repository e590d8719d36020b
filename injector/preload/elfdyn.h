/* SPDX-License-Identifier: MIT */
/*
 * Reading the dynamic section of a module that the dynamic linker has already loaded:
 * symbol lookup through DT_GNU_HASH / DT_HASH (with symbol versions) and iteration over
 * the GOT relocations (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT) of DT_JMPREL and DT_RELA.
 * Pure functions over memory: no allocation, no locks, no system calls.
 */
#ifndef AIPROF_ELFDYN_H
#define AIPROF_ELFDYN_H

#include <elf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_dyn {
	uintptr_t base;                 /* load bias (dlpi_addr) */
	uintptr_t lo, hi;               /* every table read lies in [lo, hi) */
	const Elf64_Sym *symtab;
	const char *strtab;
	size_t strsz;
	const Elf64_Rela *jmprel;
	size_t jmprelsz;
	const Elf64_Rela *rela;
	size_t relasz;
	const uint32_t *gnu_hash;
	const uint32_t *sysv_hash;
	const Elf64_Versym *versym;
	const Elf64_Verdef *verdef;
	size_t verdefnum;
	const Elf64_Verneed *verneed;
	size_t verneednum;
};

/*
 * Fills `d` from the module's PT_DYNAMIC at `dyn` (already relocated). Pointer entries
 * that the loader left unrelocated (below `base`, e.g. the vDSO) are relocated here.
 * Returns 0, or -ENOENT when the module has no symbol or string table.
 */
int elf_dyn__parse(struct elf_dyn *d, uintptr_t base, const Elf64_Dyn *dyn);

/* The same, every read of the module's tables (the dynamic section included) kept inside
 * [lo, hi): its mapped extent. A table that leaves it reads as absent; a chain that leaves
 * it ends there. elf_dyn__parse() bounds nothing (lo 1, hi UINTPTR_MAX). */
int elf_dyn__parse_bounded(struct elf_dyn *d, uintptr_t base, const Elf64_Dyn *dyn,
			   uintptr_t lo, uintptr_t hi);

struct elf_sym_def {
	uintptr_t addr;                 /* absolute address of the definition */
	unsigned char type;             /* STT_FUNC, STT_GNU_IFUNC, ... */
	const char *version;            /* version name, NULL if unversioned */
};

/*
 * Looks up a symbol *defined* by the module (never SHN_UNDEF, so never a canonical PLT
 * entry). Prefers the default version (no VERSYM_HIDDEN). Returns true when found.
 */
bool elf_dyn__lookup(const struct elf_dyn *d, const char *name, struct elf_sym_def *out);

/*
 * Like elf_dyn__lookup() but only accepts the definition of version `version` (hidden
 * or default), e.g. dlopen@GLIBC_2.2.5 next to dlopen@@GLIBC_2.34.
 */
bool elf_dyn__lookup_version(const struct elf_dyn *d, const char *name, const char *version,
			     struct elf_sym_def *out);

struct elf_got_ref {
	void **slot;                    /* absolute address of the GOT slot */
	const char *name;
	const char *version;            /* required version (DT_VERNEED), NULL if none */
	uint32_t type;                  /* R_X86_64_JUMP_SLOT or R_X86_64_GLOB_DAT */
	bool sym_defined;               /* the module defines this symbol itself */
};

/*
 * Calls `fn` for every JUMP_SLOT / GLOB_DAT relocation with a named symbol. Stops and
 * returns fn's value when it is non-zero; returns 0 after the last relocation.
 */
int elf_dyn__for_each_got(const struct elf_dyn *d,
			  int (*fn)(const struct elf_got_ref *ref, void *ctx), void *ctx);

uint32_t elf_gnu_hash(const char *name);

#endif
