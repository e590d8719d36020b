/* SPDX-License-Identifier: MIT */
/*
 * What the injector reads of a target's modules before it writes there, as pure functions
 * over bytes the target controls (its ELF headers in its memory, its libc's file): where the
 * return path's room is, and which glibc it runs. inject.c reads the bytes; these judge them.
 */
#ifndef AIPROF_CAVE_H
#define AIPROF_CAVE_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>

#include "procmaps.h"

#define CAVE_PAGE 4096UL
#define CAVE_MAX_PHDRS 64

/* Whether eh, read from the start of a module's mapping, has program headers that can be
 * read (ELF64, e_phnum 1..CAVE_MAX_PHDRS, within its first page). */
bool cave_ehdr_ok(const Elf64_Ehdr *eh);

/*
 * The room for need bytes of the return path in the module mapped from m->v[i] (offset 0),
 * whose headers are eh and ph[0..eh->e_phnum): the tail of the last page of an executable
 * PT_LOAD segment past its end, 16-aligned, that the kernel (m) maps executable and private
 * from the same file. Its address, or 0.
 */
uint64_t cave_find_in(const struct maps *m, size_t i, const Elf64_Ehdr *eh, const Elf64_Phdr *ph,
		      size_t need);

/* The glibc version ("2.31") after the banner "release version " in buf[0..n) into out
 * (NUL-terminated, at most len - 1 bytes; "" if none). Returns its length. */
size_t cave_glibc_version(const char *buf, size_t n, char *out, size_t len);

#endif
