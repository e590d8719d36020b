/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "elfsym.h"
#include "event.h"
#include "procmaps.h"
#include "procstat.h"
#include "targetfile.h"
#include "timeutil.h"
#include "u64map.h"
#include "target/container.h"
#include "target/unwind.h"
#include "ebpf_kallsyms.h"
#include "ebpf_symbols.h"

#define REFRESH_MIN_NS (200 * NSEC_PER_MSEC)
#define VDSO_KEY "[vdso]"

/* One ELF file for the whole session, keyed by build-id (or path@dev:inode without one). */
struct sym_elf {
	char *key;
	struct elf_file *elf;
};

/* Per mapping of a process: the ELF behind it and its load bias, resolved once (again only
 * if another file is mapped at the same start since). */
struct map_state {
	uint64_t start;           /* the entry's start: key */
	uint64_t offset, inode;   /* the file mapped there, as it was resolved */
	uint32_t dev_major, dev_minor;
	int elf;                  /* index into symbolizer.elfs, -1 if none */
	int err;                  /* why not */
	bool bias_ok;
	uint64_t bias;
	int module;               /* index into proc_symbolizer.mods */
};

struct proc_symbolizer {
	pid_t pid;
	unsigned long long start_ticks;   /* its start time: a pid reused is not it (0: unknown) */
	bool gone;                /* exited (or its pid names another process): maps kept */
	struct symbolizer *z;
	struct maps *maps;
	uint64_t last_refresh_ns;
	long long code_kb;        /* VmExe + VmLib as maps was read (-1: unknown): the size of
				   * its executable file mappings, which a library loaded since
				   * changes */
	bool held;                /* proc_symbolizer__hold() resolved every mapping once */
	bool frozen;              /* its maps are read no more (proc_symbolizer__freeze) */
	struct map_state *ms;
	size_t nms, capms;
	struct u64map by_start;   /* entry start -> index into ms */
	struct psym_module *mods;
	char **mod_strings;       /* owned copies of paths and build-ids */
	size_t nmods, capmods;
};

struct symbolizer {
	struct sym_elf *elfs;
	size_t nelfs, capelfs;
	struct ksyms *ks;
	bool ks_tried;
	struct proc_symbolizer **procs;
	size_t nprocs;
};

int symbolizer__new(struct symbolizer **ret)
{
	struct symbolizer *z = calloc(1, sizeof(*z));

	if (!z)
		return -ENOMEM;
	*ret = z;
	return 0;
}

static void proc_free(struct proc_symbolizer *ps)
{
	if (!ps)
		return;
	maps__free(ps->maps);
	free(ps->ms);
	u64map_clear(&ps->by_start);
	for (size_t i = 0; i < 2 * ps->nmods; i++)
		free(ps->mod_strings[i]);
	free(ps->mod_strings);
	free(ps->mods);
	free(ps);
}

void symbolizer__free(struct symbolizer *z)
{
	if (!z)
		return;
	for (size_t i = 0; i < z->nelfs; i++) {
		free(z->elfs[i].key);
		elf_file__free(z->elfs[i].elf);
	}
	free(z->elfs);
	ksyms__free(z->ks);
	for (size_t i = 0; i < z->nprocs; i++)
		proc_free(z->procs[i]);
	free(z->procs);
	free(z);
}

const struct ksyms *symbolizer__ksyms(struct symbolizer *z)
{
	if (!z->ks_tried) {
		z->ks_tried = true;
		if (ksyms__load(NULL, &z->ks) < 0)
			z->ks = NULL;
	}
	return z->ks;
}

/* pid's VmExe + VmLib (kB): read before its maps, so that a mapping added between the two
 * reads shows as a change next time; -1 when unknown (then every look reads the maps) */
static long long code_kb_of(pid_t pid)
{
	char buf[4096];
	ssize_t len = procstatus_read(pid, buf, sizeof(buf));
	long long exe, lib;

	if (len < 0 || procstatus_text_number(buf, (size_t)len, "VmExe", 10, &exe) < 0 ||
	    procstatus_text_number(buf, (size_t)len, "VmLib", 10, &lib) < 0)
		return -1;
	return exe + lib;
}

int symbolizer__proc(struct symbolizer *z, pid_t pid, struct proc_symbolizer **ret)
{
	struct proc_symbolizer *ps, **nv;
	pid_t ppid = 0;
	int r;

	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->pid = pid;
	ps->z = z;
	(void)container__parent_and_start("/proc", pid, &ppid, &ps->start_ticks);
	ps->code_kb = code_kb_of(pid);
	r = maps__read(pid, &ps->maps);
	if (r < 0) {
		free(ps);
		return r;
	}
	ps->last_refresh_ns = now_monotonic_ns();
	nv = realloc(z->procs, (z->nprocs + 1) * sizeof(*nv));
	if (!nv) {
		proc_free(ps);
		return -ENOMEM;
	}
	z->procs = nv;
	z->procs[z->nprocs++] = ps;
	*ret = ps;
	return 0;
}


struct proc_symbolizer *symbolizer__proc_of(struct symbolizer *z, pid_t pid)
{
	for (size_t i = z->nprocs; i-- > 0;)
		if (z->procs[i]->pid == pid)
			return z->procs[i];
	return NULL;
}

/* Keeps f (taken over, freed on failure) under key: its index into z->elfs, or -ENOMEM. */
static int add_elf(struct symbolizer *z, const char *key, struct elf_file *f)
{
	struct sym_elf *nv;

	if (z->nelfs == z->capelfs) {
		size_t ncap = z->capelfs ? z->capelfs * 2 : 32;

		nv = realloc(z->elfs, ncap * sizeof(*nv));
		if (!nv) {
			elf_file__free(f);
			return -ENOMEM;
		}
		z->elfs = nv;
		z->capelfs = ncap;
	}
	z->elfs[z->nelfs].key = strdup(key);
	if (!z->elfs[z->nelfs].key) {
		elf_file__free(f);
		return -ENOMEM;
	}
	z->elfs[z->nelfs].elf = f;
	return (int)z->nelfs++;
}

/* The session-wide ELF for a mapping: an index into z->elfs, or a negative errno. */
static int elf_for(struct symbolizer *z, pid_t pid, const struct maps_entry *e)
{
	struct elf_file *f = NULL;
	const struct elf_info *info;
	char key[PATH_MAX + 64];
	int r;

	r = target_file__open_elf(pid, e, &f);
	if (r < 0)
		return r;
	info = elf_file__info(f);
	if (info->build_id[0])
		snprintf(key, sizeof(key), "%s", info->build_id);
	else
		snprintf(key, sizeof(key), "%s@%u:%u:%" PRIu64, e->path, e->dev_major, e->dev_minor,
			 e->inode);
	for (size_t i = 0; i < z->nelfs; i++)
		if (strcmp(z->elfs[i].key, key) == 0) {
			elf_file__free(f);  /* the same bytes are already open (and indexed) */
			return (int)i;
		}
	return add_elf(z, key, f);
}

/*
 * The kernel's vDSO as this process has it (every process of this kernel maps the same
 * image): an index into z->elfs, or a negative errno.
 */
static int elf_for_vdso(struct symbolizer *z)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR);
	struct elf_file *f = NULL;
	struct maps *self = NULL;
	int r;

	for (size_t i = 0; i < z->nelfs; i++)
		if (strcmp(z->elfs[i].key, VDSO_KEY) == 0)
			return (int)i;
	if (!base)
		return -ENOENT;
	r = maps__read(getpid(), &self);
	if (r < 0)
		return r;
	r = -ENOENT;
	for (size_t i = 0; i < self->n; i++)
		if (self->v[i].start == base && self->v[i].path &&
		    strcmp(self->v[i].path, VDSO_KEY) == 0) {
			r = elf_file__open_mem((const void *)(uintptr_t)base,
					       self->v[i].end - self->v[i].start, &f);
			break;
		}
	maps__free(self);
	if (r < 0)
		return r;
	return add_elf(z, VDSO_KEY, f);
}

static int add_module(struct proc_symbolizer *ps, const char *path, const char *build_id)
{
	for (size_t i = 0; i < ps->nmods; i++)
		if (strcmp(ps->mods[i].path, path) == 0 && strcmp(ps->mods[i].build_id, build_id) == 0)
			return (int)i;
	if (ps->nmods == ps->capmods) {
		size_t ncap = ps->capmods ? ps->capmods * 2 : 16;
		struct psym_module *nm = realloc(ps->mods, ncap * sizeof(*nm));
		char **ns;

		if (!nm)
			return -ENOMEM;
		ps->mods = nm;
		ns = realloc(ps->mod_strings, 2 * ncap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		ps->mod_strings = ns;
		ps->capmods = ncap;
	}
	ps->mod_strings[2 * ps->nmods] = strdup(path);
	ps->mod_strings[2 * ps->nmods + 1] = strdup(build_id);
	if (!ps->mod_strings[2 * ps->nmods] || !ps->mod_strings[2 * ps->nmods + 1]) {
		free(ps->mod_strings[2 * ps->nmods]);
		free(ps->mod_strings[2 * ps->nmods + 1]);
		return -ENOMEM;
	}
	ps->mods[ps->nmods] = (struct psym_module){ .path = ps->mod_strings[2 * ps->nmods],
						    .build_id = ps->mod_strings[2 * ps->nmods + 1] };
	return (int)ps->nmods++;
}

static struct map_state *state_for(struct proc_symbolizer *ps, const struct maps_entry *e)
{
	struct map_state *m;
	uint64_t idx;

	if (u64map_get(&ps->by_start, e->start, &idx) && ps->ms[idx].start == e->start) {
		m = &ps->ms[idx];
		if (m->offset == e->offset && m->inode == e->inode &&
		    m->dev_major == e->dev_major && m->dev_minor == e->dev_minor)
			return m;
		/* another file mapped where this one was: resolved anew in its place */
	} else {
		if (ps->nms == ps->capms) {
			size_t ncap = ps->capms ? ps->capms * 2 : 64;
			struct map_state *nv = realloc(ps->ms, ncap * sizeof(*nv));

			if (!nv)
				return NULL;
			ps->ms = nv;
			ps->capms = ncap;
		}
		if (u64map_put(&ps->by_start, e->start, ps->nms) < 0)
			return NULL;
		m = &ps->ms[ps->nms++];
	}
	*m = (struct map_state){ .start = e->start, .offset = e->offset, .inode = e->inode,
				 .dev_major = e->dev_major, .dev_minor = e->dev_minor, .elf = -1,
				 .module = -1 };
	if (maps_entry__is_file(e) || (e->path && strcmp(e->path, VDSO_KEY) == 0)) {
		int r = maps_entry__is_file(e) ? elf_for(ps->z, ps->pid, e) : elf_for_vdso(ps->z);

		if (r >= 0) {
			struct elf_file *f = ps->z->elfs[r].elf;

			m->elf = r;
			m->bias_ok = elf_file__load_bias(f, e, &m->bias) == 0;
			m->module = add_module(ps, e->path, elf_file__info(f)->build_id);
		} else {
			m->err = r;
			m->module = add_module(ps, e->path, "");
		}
	}
	return m;
}

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* Copies a symbol name, demangled, without a "@VERSION" suffix. */
static void copy_name(const char *raw, char *buf, size_t len)
{
	char *d = symbol_demangle(raw);
	const char *src = d ? d : raw;
	const char *at = strchr(src, '@');
	size_t n = at ? (size_t)(at - src) : strlen(src);

	snprintf(buf, len, "%.*s", (int)n, src);
	free(d);
}

/* Whether ps->pid is still the process ps was made for (not exited, its pid not reused). */
static bool still_it(struct proc_symbolizer *ps)
{
	unsigned long long start = 0;
	pid_t ppid = 0;

	if (ps->gone)
		return false;
	if (container__parent_and_start("/proc", ps->pid, &ppid, &start) < 0 ||
	    (ps->start_ticks && start != ps->start_ticks))
		ps->gone = true;
	return !ps->gone;
}

/* ps's maps read again; code_kb: the process's code size read just before. The ELF files
 * already resolved stay resolved (a process that exits later is still named by them); maps
 * read from a pid that names another process now are thrown away. */
static int reread_at(struct proc_symbolizer *ps, long long code_kb)
{
	struct maps *nm;
	int r;

	if (ps->gone || ps->frozen)
		return -ESRCH;
	r = maps__read(ps->pid, &nm);
	if (r < 0) {
		(void)still_it(ps);
		return r;
	}
	if (!still_it(ps)) {
		maps__free(nm);
		return -ESRCH;
	}
	maps__free(ps->maps);
	ps->maps = nm;
	ps->last_refresh_ns = now_monotonic_ns();
	ps->code_kb = code_kb;
	return 0;
}

int proc_symbolizer__reread(struct proc_symbolizer *ps)
{
	return reread_at(ps, code_kb_of(ps->pid));
}

static bool wants_elf(const struct maps_entry *e)
{
	return (e->prot & PROT_EXEC) &&
	       (maps_entry__is_file(e) || (e->path && strcmp(e->path, VDSO_KEY) == 0));
}

/* Whether every executable file mapping of old is in new as it was. */
static bool maps_grew(const struct maps *old, const struct maps *new)
{
	for (size_t i = 0; i < old->n; i++) {
		const struct maps_entry *a = &old->v[i], *b;

		if (!wants_elf(a))
			continue;
		b = maps__find_addr(new, a->start);
		if (!b || b->start != a->start || b->end != a->end || b->offset != a->offset ||
		    b->inode != a->inode || b->dev_major != a->dev_major ||
		    b->dev_minor != a->dev_minor)
			return false;
	}
	return true;
}

int proc_symbolizer__hold(struct proc_symbolizer *ps, size_t *ret_opened)
{
	long long code_kb;
	size_t before = ps->z->nelfs;

	if (ret_opened)
		*ret_opened = 0;
	if (ps->gone)
		return -ESRCH;
	if (ps->frozen)
		return 0;
	code_kb = code_kb_of(ps->pid);
	if (ps->held && code_kb >= 0 && code_kb == ps->code_kb)
		return still_it(ps) ? 0 : -ESRCH;        /* no mapping came or went */
	if (ps->held || code_kb != ps->code_kb) {
		struct maps *nm;
		int r = maps__read(ps->pid, &nm);

		if (r < 0 || !still_it(ps)) {
			if (r >= 0)
				maps__free(nm);
			(void)still_it(ps);
			return ps->gone ? -ESRCH : r;
		}
		if (!maps_grew(ps->maps, nm)) {
			/* code went away (an exec, a dlclose): the addresses recorded so far are
			 * named by the maps they were recorded under, which are kept from now on */
			maps__free(nm);
			ps->frozen = true;
			return 0;
		}
		maps__free(ps->maps);
		ps->maps = nm;
		ps->last_refresh_ns = now_monotonic_ns();
		ps->code_kb = code_kb;
	}
	for (size_t i = 0; i < ps->maps->n; i++)
		if (wants_elf(&ps->maps->v[i]) && !state_for(ps, &ps->maps->v[i]))
			return -ENOMEM;
	ps->held = true;
	if (ret_opened)
		*ret_opened = ps->z->nelfs - before;
	return 0;
}

bool proc_symbolizer__gone(const struct proc_symbolizer *ps)
{
	return ps->gone;
}

void proc_symbolizer__freeze(struct proc_symbolizer *ps)
{
	ps->frozen = true;
}

/*
 * The mapping of addr; a library loaded since the last look is found by re-reading the
 * maps, at most every 200 ms, and only when the process's executable mappings changed in
 * size since (its status, a few counters: its maps of a PyTorch process are thousands of
 * lines, each path walked by the kernel, and an address in no mapping — a frame pointer
 * walk gone astray — is common). NULL if none.
 */
static const struct maps_entry *entry_of(struct proc_symbolizer *ps, uint64_t addr)
{
	const struct maps_entry *e = maps__find_addr(ps->maps, addr);
	uint64_t now;
	long long code_kb;

	if (e)
		return e;
	now = now_monotonic_ns();
	if (now - ps->last_refresh_ns < REFRESH_MIN_NS)
		return NULL;
	code_kb = code_kb_of(ps->pid);
	if (code_kb >= 0 && code_kb == ps->code_kb) {
		ps->last_refresh_ns = now;      /* nothing new to find */
		return NULL;
	}
	if (reread_at(ps, code_kb) == 0)
		e = maps__find_addr(ps->maps, addr);
	return e;
}

int proc_symbolizer__code(struct proc_symbolizer *ps, uint64_t addr, struct unwind_code *ret)
{
	const struct maps_entry *e = entry_of(ps, addr);
	struct map_state *m;

	if (!e || !(e->prot & PROT_EXEC))
		return -ENOENT;
	m = state_for(ps, e);
	if (!m)
		return -ENOMEM;
	if (m->elf < 0)
		return m->err < 0 ? m->err : -ENOENT;
	if (!m->bias_ok)
		return -ENOENT;
	*ret = (struct unwind_code){ .elf = elf_file__libelf(ps->z->elfs[m->elf].elf),
				     .fd = elf_file__fd(ps->z->elfs[m->elf].elf),
				     .key = (uint64_t)m->elf, .bias = m->bias };
	return 0;
}

int proc_symbolizer__lookup(struct proc_symbolizer *ps, uint64_t addr, char *buf, size_t len)
{
	const struct maps_entry *e = entry_of(ps, addr);
	struct map_state *m;
	int flags;

	if (!e) {
		snprintf(buf, len, "[unknown]");
		return 0;
	}
	if (!(e->prot & PROT_EXEC)) {
		snprintf(buf, len, "[unknown]");
		return 0;
	}
	flags = USYM_MAPPED;
	if (e->path && (maps_path__matches(e->path, "libc.so.6") ||
			maps_path__matches(e->path, "libc-2.*.so") ||
			maps_path__matches(e->path, "libc.musl-*") ||
			maps_path__matches(e->path, "ld-musl-*")))
		flags |= USYM_LIBC;
	if (e->path && (strstr(e->path, "/memfd:" AIPROF_LIB_MEMFD) ||
			maps_path__matches(e->path, "libaiprof.so")))
		flags |= USYM_OURS;
	m = state_for(ps, e);
	if (!m)
		return -ENOMEM;
	if (m->elf >= 0 && m->bias_ok) {
		const char *name = NULL;
		uint64_t off = 0;

		if (elf_file__symbolize(ps->z->elfs[m->elf].elf, addr - m->bias, &name, &off) == 0 &&
		    name && *name) {
			copy_name(name, buf, len);
			return flags | USYM_NAMED;
		}
	}
	if (e->path && e->path[0] == '[')
		snprintf(buf, len, "%s", e->path);  /* [vdso] */
	else if (e->path)
		snprintf(buf, len, "[%s]", basename_of(e->path));
	else
		snprintf(buf, len, "[anon]");
	return flags;
}

size_t proc_symbolizer__modules(const struct proc_symbolizer *ps, const struct psym_module **ret)
{
	*ret = ps->mods;
	return ps->nmods;
}
