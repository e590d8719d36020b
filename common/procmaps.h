/* SPDX-License-Identifier: MIT */
/*
 * /proc/PID/maps: the memory map of a process, parsed into one entry per line.
 *
 * Paths are kept exactly as the kernel prints them: "[vdso]", "[stack]", "[anon:name]",
 * and a trailing " (deleted)" all stay. A path that contained a newline shows up as "\012"
 * (the kernel's escaping); it is not unescaped here.
 */
#ifndef AIPROF_PROCMAPS_H
#define AIPROF_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct maps_entry {
	uint64_t start, end;      /* [start, end) in the process's address space */
	uint64_t offset;          /* file offset mapped at start */
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	unsigned prot;            /* PROT_READ | PROT_WRITE | PROT_EXEC */
	bool shared;              /* 's' (MAP_SHARED) rather than 'p' */
	char *path;               /* NULL for anonymous memory */
};

struct maps {
	struct maps_entry *v;     /* sorted by start */
	size_t n;
};

/*
 * Parses the text of a maps file (len bytes, need not be NUL-terminated). Pure: touches
 * nothing but memory. Returns 0 and *ret (caller frees with maps__free()), -EINVAL if any
 * line is malformed or two ranges overlap (nothing is reported; the whole text is
 * refused), or -ENOMEM. Lines out of order are sorted.
 * Empty text is a valid, empty map (a zombie has one).
 */
int maps__parse(const char *text, size_t len, struct maps **ret);

/* Reads and parses /proc/PID/maps, reading again (up to 3 times) if what it read was
 * inconsistent because the map changed meanwhile. -ENOENT/-ESRCH if the process is gone,
 * -EACCES if we may not read it. */
int maps__read(pid_t pid, struct maps **ret);

void maps__free(struct maps *m);  /* NULL-safe */

/* The entry containing addr, or NULL. Points into m. */
const struct maps_entry *maps__find_addr(const struct maps *m, uint64_t addr);

/* A file-backed entry: its path is absolute ("/usr/lib/...", "/memfd:x (deleted)"), not a
 * pseudo-name like "[heap]". */
bool maps_entry__is_file(const struct maps_entry *e);

/* Same file: same device, inode and path. */
bool maps_entry__same_file(const struct maps_entry *a, const struct maps_entry *b);

/*
 * fnmatch(3) glob against the basename of a maps path, e.g. "libc.so.6", "libc-2.*.so",
 * "ld-musl-*". A path that ends in " (deleted)" also matches as if it did not.
 */
bool maps_path__matches(const char *path, const char *glob);

/*
 * One load of a mapped file (an executable or a shared library): its mappings are
 * v[first..last] that are maps_entry__same_file() as v[first]. Entries in between that are
 * anonymous (.bss) are part of the range but not of the file. A module starts at a
 * file-backed entry and extends over later entries of the same file with a non-zero
 * offset, or anonymous entries, until anything else is mapped.
 */
struct maps_module {
	const char *path;         /* borrowed from the maps */
	size_t first, last;       /* indexes into maps->v, inclusive */
	uint64_t load_start;      /* v[first].start; where the ELF header is when v[first].offset == 0 */
	uint64_t start, end;      /* v[first].start, v[last].end */
};

/*
 * Iterates over the modules: start with *pos = 0; each call fills *ret with the next module
 * at or after entry *pos and moves *pos past it. Returns 0, or -ENOENT when there are no
 * more.
 */
int maps__next_module(const struct maps *m, size_t *pos, struct maps_module *ret);

/* The first (lowest-addressed) module whose path maps_path__matches() glob. -ENOENT if
 * none. */
int maps__find_module(const struct maps *m, const char *glob, struct maps_module *ret);

#endif
