/* SPDX-License-Identifier: MIT */
/*
 * Symbolisation for the eBPF collectors' stacks, in user space. User addresses go through
 * the target's /proc/PID/maps to the mapped ELF file (opened through
 * /proc/PID/map_files, so across mount namespaces), whose .symtab/.dynsym name them
 * (C++ demangled). ELF files are opened once per build-id for the whole session: eight
 * ranks of one job index libtorch once. Kernel addresses come from /proc/kallsyms.
 */
#ifndef AIPROF_EBPF_SYMBOLS_H
#define AIPROF_EBPF_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct symbolizer;
struct proc_symbolizer;
struct ksyms;

int symbolizer__new(struct symbolizer **ret);
void symbolizer__free(struct symbolizer *z);  /* NULL-safe; frees its proc_symbolizers too */

/* Kernel symbols, loaded on first use. NULL if /proc/kallsyms could not be read. */
const struct ksyms *symbolizer__ksyms(struct symbolizer *z);

/* A per-process view; owned by z. -ENOENT/-EACCES from reading the maps. */
int symbolizer__proc(struct symbolizer *z, pid_t pid, struct proc_symbolizer **ret);
/* Reads its maps again now, replacing the old ones (a new program after an exec). 0, or
 * maps__read()'s error, or -ESRCH when the pid names another process now (the old maps are
 * kept then). */
int proc_symbolizer__reread(struct proc_symbolizer *ps);
/*
 * Resolves the ELF file of every executable mapping now, while the process lives, so that
 * its addresses are named after it exits (a trainer that ends inside the window, a
 * short-lived child): the file is opened through /proc/PID/map_files only while the
 * mapping exists. Cheap when called again with nothing mapped since (its status read, no
 * maps). Maps only grow here: when a mapping held before is gone (the process exec'd, or
 * unloaded a library) the maps held are kept, and never read again (frozen), so that the
 * addresses recorded under them are not named after another program's. *ret_opened (may be
 * NULL): how many files were opened for the first time. 0, -ESRCH once the process is gone
 * (what was held stays), -ENOMEM. A module mapped after the last call and before the exit
 * is not named.
 */
int proc_symbolizer__hold(struct proc_symbolizer *ps, size_t *ret_opened);
/* Whether a look at it found the process exited or its pid reused. */
bool proc_symbolizer__gone(const struct proc_symbolizer *ps);
/* Its maps are read no more, by a hold or a lookup: the process exec'd, and what was
 * recorded before is named by the old program's maps. */
void proc_symbolizer__freeze(struct proc_symbolizer *ps);
/* The per-process view of pid made earlier (newest first), or NULL. */
struct proc_symbolizer *symbolizer__proc_of(struct symbolizer *z, pid_t pid);

enum usym_flags {
	USYM_MAPPED = 1 << 0,     /* in an executable mapping of the process */
	USYM_NAMED = 1 << 1,      /* a symbol was found (not just the module) */
	USYM_LIBC = 1 << 2,       /* in the C library (where threads and main() are started) */
	USYM_OURS = 1 << 3,       /* in libaiprof.so (a hook of ours): left out of stacks */
};

/*
 * The function at addr: its demangled name without offset, or "[module]" when the module
 * has no symbol there, or "[unknown]". Returns enum usym_flags bits (0: not mapped
 * executable — a bogus return address from a broken frame-pointer chain), or -ENOMEM.
 */
int proc_symbolizer__lookup(struct proc_symbolizer *ps, uint64_t addr, char *buf, size_t len);

/*
 * For the unwinder (target/unwind.h): the ELF and load bias of the file-backed executable
 * mapping at addr ([vdso] too: the kernel's, read from this process). The key is the
 * session-wide index of the file, the same for every process that maps it. 0, -ENOENT if
 * addr is in no such mapping, the open error if its file could not be read, -ENOMEM.
 */
struct unwind_code;
int proc_symbolizer__code(struct proc_symbolizer *ps, uint64_t addr, struct unwind_code *ret);

/* Modules an address was looked up in, with their build-ids, for the artifacts. */
struct psym_module {
	const char *path;
	const char *build_id;     /* lower-case hex, "" if none */
};
size_t proc_symbolizer__modules(const struct proc_symbolizer *ps,
				const struct psym_module **ret);

#endif
