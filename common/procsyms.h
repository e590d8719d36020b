/* SPDX-License-Identifier: MIT */
/*
 * Symbols of another process: its maps, plus the ELF files behind them, opened through
 * /proc/PID/map_files/START-END (the very file that is mapped, even across mount namespaces
 * and after it was deleted or replaced on disk; needs root, or CAP_CHECKPOINT_RESTORE),
 * falling back to /proc/PID/root/PATH (the target's view of its filesystem; this can be a
 * newer file than the one mapped if it was replaced since).
 *
 * ELF files are cached per (device, inode) for the life of the proc_syms. Not thread-safe.
 */
#ifndef AIPROF_PROCSYMS_H
#define AIPROF_PROCSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_syms;
struct maps;

/* Reads /proc/PID/maps. Returns 0 and *ret (caller frees with proc_syms__free()), or
 * maps__read()'s error (-ENOENT: no such process; -EACCES). */
int proc_syms__new(pid_t pid, struct proc_syms **ret);
void proc_syms__free(struct proc_syms *ps);  /* NULL-safe */

/* Re-reads the maps (libraries loaded since). Keeps the ELF cache, but forgets files that
 * could not be opened so they are tried again. On failure ps keeps its old maps. */
int proc_syms__refresh(struct proc_syms *ps);

/* The current maps; valid until the next refresh or free. */
const struct maps *proc_syms__maps(const struct proc_syms *ps);

/*
 * Absolute address, in the target, of a symbol defined in a module whose basename matches
 * module_glob (maps_path__matches(): "libc.so.6", "libc-2.*.so", "ld-musl-*"), or in any
 * module when NULL (the main executable first, then by address). sym is as for
 * elf_file__find_symbol(): "dlopen" gets the default version (dlopen@@GLIBC_2.34), and
 * "sym@VER" one version.
 * Returns 0, or ELF_SYM_IFUNC (> 0) if the address is an IFUNC resolver's; -ENOENT if no
 * matching module defines it; an open error if a matching module could not be read.
 */
int proc_syms__find(struct proc_syms *ps, const char *module_glob, const char *sym,
		    uint64_t *ret_addr);

/* What an address is, for artifacts. Pointers are valid until proc_syms__free(), except
 * module, valid until the next refresh. */
struct proc_sym {
	const char *module;       /* the mapping's path as in maps ("/usr/lib/...", "[vdso]"); NULL
				   * for anonymous memory (JIT code) */
	const char *build_id;     /* lower-case hex, NULL if unknown */
	uint64_t module_offset;   /* the address in the file's terms (ELF vaddr: what addr2line
				   * takes) when the ELF file was read; otherwise the file offset,
				   * or the offset into a non-file mapping */
	bool elf_read;            /* module_offset is an ELF vaddr */
	const char *symbol;       /* raw name (mangled), NULL if none */
	uint64_t symbol_offset;
};

/*
 * The ELF file behind the file-backed executable mapping at addr and its load bias (runtime
 * address = bias + vaddr), for an unwinder; *ret_key is the same for every load of one file
 * in this proc_syms. The file stays valid until proc_syms__free(). 0, -ENOENT if addr is in
 * no such mapping, the open error if the file could not be read, -ENOMEM.
 */
struct elf_file;
int proc_syms__code(struct proc_syms *ps, uint64_t addr, struct elf_file **ret_elf,
		    uint64_t *ret_bias, uint64_t *ret_key);

/* Returns 0 (symbol may be NULL), or -ENOENT if no mapping contains addr. */
int proc_syms__symbolize_info(struct proc_syms *ps, uint64_t addr, struct proc_sym *ret);

/*
 * Writes "name+0xoff" (demangled), else "module+0xoff" (the module's basename, offset as in
 * proc_sym.module_offset), else "[unknown]", NUL-terminated and truncated to len. Returns
 * what snprintf would (the full length: >= len means truncated), or -EINVAL.
 */
int proc_syms__symbolize(struct proc_syms *ps, uint64_t addr, char *buf, size_t len);

enum proc_libc {
	PROC_LIBC_NONE = 0,
	PROC_LIBC_GLIBC,          /* libc.so.6 or libc-2.*.so mapped */
	PROC_LIBC_MUSL,           /* ld-musl-*.so.1, libc.musl-*.so.1 or musl's libc.so */
};

/* What the injector needs to know before it tries anything. */
struct proc_target {
	unsigned elf_class;       /* of the main executable: ELFCLASS32 / ELFCLASS64 */
	unsigned machine;         /* EM_X86_64, EM_386, ... */
	bool x86_64;              /* ELFCLASS64 and EM_X86_64: the only kind supported */
	bool has_interp;          /* the executable asks for a dynamic loader */
	bool is_static;           /* no PT_INTERP and no libc mapped: nothing to dlopen with */
	enum proc_libc libc;
	const char *libc_path;    /* as in maps, NULL if none; valid until refresh/free */
};

/* Reads the main executable through /proc/PID/exe. -ENOENT for a kernel thread (no
 * executable), -EACCES/-EPERM if not allowed, -ENOEXEC if it is not ELF. */
int proc_syms__target(struct proc_syms *ps, struct proc_target *ret);

#endif
