/* SPDX-License-Identifier: MIT */
/*
 * Kernel symbols from /proc/kallsyms, for the kernel half of stacks: address -> function
 * (and module), plus the bounds of the scheduler's text (__sched_text_start/_end), which
 * is how the kernel itself decides where a sleeping task waits (its "wchan").
 */
#ifndef AIPROF_EBPF_KALLSYMS_H
#define AIPROF_EBPF_KALLSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ksyms;

struct ksym {
	uint64_t addr;
	const char *name;
	const char *module;       /* "ext4", "bpf", ... or NULL for the core kernel */
};

/*
 * Parses the text of /proc/kallsyms (len bytes, need not be NUL-terminated). Pure. Keeps
 * code symbols (types t, T, w, W) with a non-zero address; other lines, and lines that do
 * not parse, are skipped. Returns 0 and *ret (caller frees with ksyms__free()), -ENOENT if
 * no usable symbol was found (all addresses zero: kptr_restrict), or -ENOMEM.
 */
int ksyms__parse(const char *text, size_t len, struct ksyms **ret);

/* Reads and parses a kallsyms file (NULL: /proc/kallsyms). Errors as above, or open's. */
int ksyms__load(const char *path, struct ksyms **ret);

void ksyms__free(struct ksyms *ks);  /* NULL-safe */

size_t ksyms__count(const struct ksyms *ks);

/* The symbol at or before addr, or NULL if addr is below the first one or more than
 * 1 MiB past the last one. Points into ks. */
const struct ksym *ksyms__find(const struct ksyms *ks, uint64_t addr);

/* The first code symbol of that name (a linear search: for rare lookups), or NULL. */
const struct ksym *ksyms__find_name(const struct ksyms *ks, const char *name);

/* addr is in the scheduler's own code (schedule(), io_schedule(), ...). */
bool ksyms__in_sched_text(const struct ksyms *ks, uint64_t addr);

#endif
