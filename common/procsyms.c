/* SPDX-License-Identifier: MIT */
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "elfsym.h"
#include "procmaps.h"
#include "targetfile.h"
#include "procsyms.h"

#define NONE SIZE_MAX

/* One ELF file, shared by every load of it. */
struct ps_elf {
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	char *path;               /* part of the key only when inode is 0 */
	struct elf_file *elf;     /* NULL when it could not be opened: err says why */
	int err;
};

struct ps_module {
	struct maps_module m;
	size_t elf;               /* index into proc_syms.elfs, NONE until first needed */
	bool bias_done;
	int bias_err;
	uint64_t bias;
};

struct proc_syms {
	pid_t pid;
	struct maps *maps;
	struct ps_module *mods;
	size_t n_mods;
	size_t *entry_mod;        /* per maps entry: index into mods, or NONE */
	char *exe_path;           /* readlink of /proc/PID/exe, NULL if unreadable */
	struct ps_elf *elfs;
	size_t n_elfs, cap_elfs;
	struct elf_file *exe;     /* /proc/PID/exe, opened on first proc_syms__target() */
	int exe_err;
	bool exe_tried;
};

/* The parts of a proc_syms that a refresh replaces together. */
struct ps_view {
	struct maps *maps;
	struct ps_module *mods;
	size_t n_mods;
	size_t *entry_mod;
	char *exe_path;
};

static void view_free(struct ps_view *v)
{
	maps__free(v->maps);
	free(v->mods);
	free(v->entry_mod);
	free(v->exe_path);
	*v = (struct ps_view) { 0 };
}

static char *read_exe_link(pid_t pid)
{
	char link[64], buf[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

static int view_load(pid_t pid, struct ps_view *ret)
{
	struct ps_view v = { 0 };
	struct maps_module mod;
	size_t pos = 0, cap = 0;
	int r;

	if ((r = maps__read(pid, &v.maps)) < 0)
		goto fail;
	if (v.maps->n) {
		v.entry_mod = malloc(v.maps->n * sizeof(*v.entry_mod));
		if (!v.entry_mod) {
			r = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < v.maps->n; i++)
			v.entry_mod[i] = NONE;
	}
	while (maps__next_module(v.maps, &pos, &mod) == 0) {
		if (v.n_mods == cap) {
			size_t ncap = cap ? cap * 2 : 32;
			struct ps_module *nm = reallocarray(v.mods, ncap, sizeof(*nm));

			if (!nm) {
				r = -ENOMEM;
				goto fail;
			}
			v.mods = nm;
			cap = ncap;
		}
		for (size_t i = mod.first; i <= mod.last; i++)
			if (maps_entry__same_file(&v.maps->v[mod.first], &v.maps->v[i]))
				v.entry_mod[i] = v.n_mods;
		v.mods[v.n_mods++] = (struct ps_module) { .m = mod, .elf = NONE };
	}
	v.exe_path = read_exe_link(pid);  /* optional: only orders proc_syms__find(NULL) */
	*ret = v;
	return 0;
fail:
	view_free(&v);
	return r;
}

void proc_syms__free(struct proc_syms *ps)
{
	if (!ps)
		return;
	maps__free(ps->maps);
	free(ps->mods);
	free(ps->entry_mod);
	free(ps->exe_path);
	for (size_t i = 0; i < ps->n_elfs; i++) {
		elf_file__free(ps->elfs[i].elf);
		free(ps->elfs[i].path);
	}
	free(ps->elfs);
	elf_file__free(ps->exe);
	free(ps);
}

static void ps_set_view(struct proc_syms *ps, struct ps_view *v)
{
	maps__free(ps->maps);
	free(ps->mods);
	free(ps->entry_mod);
	free(ps->exe_path);
	ps->maps = v->maps;
	ps->mods = v->mods;
	ps->n_mods = v->n_mods;
	ps->entry_mod = v->entry_mod;
	ps->exe_path = v->exe_path;
	*v = (struct ps_view) { 0 };
}

int proc_syms__new(pid_t pid, struct proc_syms **ret)
{
	struct proc_syms *ps;
	struct ps_view v;
	int r;

	if (pid <= 0 || !ret)
		return -EINVAL;
	if ((r = view_load(pid, &v)) < 0)
		return r;
	ps = calloc(1, sizeof(*ps));
	if (!ps) {
		view_free(&v);
		return -ENOMEM;
	}
	ps->pid = pid;
	ps_set_view(ps, &v);
	*ret = ps;
	return 0;
}

int proc_syms__refresh(struct proc_syms *ps)
{
	struct ps_view v;
	size_t out = 0;
	int r;

	if (!ps)
		return -EINVAL;
	if ((r = view_load(ps->pid, &v)) < 0)
		return r;
	ps_set_view(ps, &v);
	/* Forget failures (a file may be readable now); keep what was read. */
	for (size_t i = 0; i < ps->n_elfs; i++) {
		if (ps->elfs[i].elf)
			ps->elfs[out++] = ps->elfs[i];
		else
			free(ps->elfs[i].path);
	}
	ps->n_elfs = out;
	/* The process may have exec()ed. */
	elf_file__free(ps->exe);
	ps->exe = NULL;
	ps->exe_tried = false;
	return 0;
}

const struct maps *proc_syms__maps(const struct proc_syms *ps)
{
	return ps ? ps->maps : NULL;
}


static int module_elf(struct proc_syms *ps, struct ps_module *mod, struct elf_file **ret)
{
	const struct maps_entry *e = &ps->maps->v[mod->m.first];
	struct ps_elf *pe;

	if (mod->elf == NONE) {
		for (size_t i = 0; i < ps->n_elfs; i++) {
			pe = &ps->elfs[i];
			if (pe->dev_major == e->dev_major && pe->dev_minor == e->dev_minor &&
			    pe->inode == e->inode && (e->inode != 0 || strcmp(pe->path, e->path) == 0)) {
				mod->elf = i;
				break;
			}
		}
	}
	if (mod->elf == NONE) {
		if (ps->n_elfs == ps->cap_elfs) {
			size_t ncap = ps->cap_elfs ? ps->cap_elfs * 2 : 16;
			struct ps_elf *nv = reallocarray(ps->elfs, ncap, sizeof(*nv));

			if (!nv)
				return -ENOMEM;
			ps->elfs = nv;
			ps->cap_elfs = ncap;
		}
		pe = &ps->elfs[ps->n_elfs];
		*pe = (struct ps_elf) {
			.dev_major = e->dev_major, .dev_minor = e->dev_minor, .inode = e->inode,
			.path = strdup(e->path),
		};
		if (!pe->path)
			return -ENOMEM;
		pe->err = target_file__open_elf(ps->pid, e, &pe->elf);
		if (pe->err == -ENOMEM) {
			free(pe->path);
			return -ENOMEM;  /* not cached: may work next time */
		}
		mod->elf = ps->n_elfs++;
	}
	pe = &ps->elfs[mod->elf];
	if (!pe->elf)
		return pe->err < 0 ? pe->err : -ENOEXEC;
	*ret = pe->elf;
	return 0;
}

static int module_bias(struct proc_syms *ps, struct ps_module *mod, const struct elf_file *elf,
		       uint64_t *ret)
{
	if (!mod->bias_done) {
		const struct maps_entry *first = &ps->maps->v[mod->m.first];

		mod->bias_err = -ENOENT;
		for (size_t i = mod->m.first; i <= mod->m.last; i++) {
			const struct maps_entry *e = &ps->maps->v[i];

			if (maps_entry__same_file(first, e) &&
			    elf_file__load_bias(elf, e, &mod->bias) == 0) {
				mod->bias_err = 0;
				break;
			}
		}
		mod->bias_done = true;
	}
	if (mod->bias_err < 0)
		return mod->bias_err;
	*ret = mod->bias;
	return 0;
}

/* Looks sym up in one module: 0/ELF_SYM_IFUNC with *ret_addr, or a negative errno. */
static int module_find(struct proc_syms *ps, struct ps_module *mod, const char *sym,
		       uint64_t *ret_addr)
{
	struct elf_file *elf;
	uint64_t vaddr, bias;
	int r, found;

	if ((r = module_elf(ps, mod, &elf)) < 0)
		return r;
	found = elf_file__find_symbol(elf, sym, &vaddr, NULL);
	if (found < 0)
		return found;
	if ((r = module_bias(ps, mod, elf, &bias)) < 0)
		return r;
	*ret_addr = bias + vaddr;
	return found;
}

int proc_syms__find(struct proc_syms *ps, const char *module_glob, const char *sym,
		    uint64_t *ret_addr)
{
	size_t exe_mod = NONE;
	int err = -ENOENT, r;
	uint64_t addr;

	if (!ps || !sym || !ret_addr)
		return -EINVAL;
	if (!module_glob && ps->exe_path) {
		for (size_t i = 0; i < ps->n_mods && exe_mod == NONE; i++)
			if (strcmp(ps->mods[i].m.path, ps->exe_path) == 0)
				exe_mod = i;
		if (exe_mod != NONE) {
			r = module_find(ps, &ps->mods[exe_mod], sym, &addr);
			if (r >= 0) {
				*ret_addr = addr;
				return r;
			}
			if (r == -EINVAL || r == -ENOMEM)
				return r;
		}
	}
	for (size_t i = 0; i < ps->n_mods; i++) {
		if (i == exe_mod)
			continue;
		if (module_glob && !maps_path__matches(ps->mods[i].m.path, module_glob))
			continue;
		r = module_find(ps, &ps->mods[i], sym, &addr);
		if (r >= 0) {
			*ret_addr = addr;
			return r;
		}
		if (r == -EINVAL || r == -ENOMEM)
			return r;
		/* With a glob, say why a module that should have it could not be read. Without
		 * one, every mapped file is tried: most are not ELF, and that is not news. */
		if (module_glob && r != -ENOENT && err == -ENOENT)
			err = r;
	}
	return err;
}

int proc_syms__code(struct proc_syms *ps, uint64_t addr, struct elf_file **ret_elf,
		    uint64_t *ret_bias, uint64_t *ret_key)
{
	const struct maps_entry *e;
	struct ps_module *mod;
	struct elf_file *elf;
	size_t modi;
	int r;

	if (!ps || !ret_elf || !ret_bias || !ret_key)
		return -EINVAL;
	e = maps__find_addr(ps->maps, addr);
	if (!e || !(e->prot & PROT_EXEC) || !maps_entry__is_file(e))
		return -ENOENT;
	modi = ps->entry_mod ? ps->entry_mod[e - ps->maps->v] : NONE;
	if (modi == NONE)
		return -ENOENT;
	mod = &ps->mods[modi];
	if ((r = module_elf(ps, mod, &elf)) < 0)
		return r;
	if ((r = module_bias(ps, mod, elf, ret_bias)) < 0)
		return r;
	*ret_elf = elf;
	*ret_key = (uint64_t)mod->elf;
	return 0;
}

int proc_syms__symbolize_info(struct proc_syms *ps, uint64_t addr, struct proc_sym *ret)
{
	const struct maps_entry *e;
	struct proc_sym out = { 0 };
	size_t modi;
	int r;

	if (!ps || !ret)
		return -EINVAL;
	e = maps__find_addr(ps->maps, addr);
	if (!e)
		return -ENOENT;
	out.module = e->path;
	modi = ps->entry_mod ? ps->entry_mod[e - ps->maps->v] : NONE;
	if (modi != NONE) {
		struct ps_module *mod = &ps->mods[modi];
		struct elf_file *elf;
		uint64_t bias;

		r = module_elf(ps, mod, &elf);
		if (r == -ENOMEM)
			return r;
		if (r == 0) {
			const struct elf_info *info = elf_file__info(elf);

			if (info->build_id[0])
				out.build_id = info->build_id;
			if (module_bias(ps, mod, elf, &bias) == 0) {
				out.module_offset = addr - bias;
				out.elf_read = true;
				r = elf_file__symbolize(elf, out.module_offset, &out.symbol,
							&out.symbol_offset);
				if (r == -ENOMEM)
					return r;
			}
		}
	}
	if (!out.elf_read)
		out.module_offset = addr - e->start + e->offset;
	*ret = out;
	return 0;
}

int proc_syms__symbolize(struct proc_syms *ps, uint64_t addr, char *buf, size_t len)
{
	struct proc_sym s;
	int r;

	if (!ps || (!buf && len))
		return -EINVAL;
	r = proc_syms__symbolize_info(ps, addr, &s);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return snprintf(buf, len, "[unknown]");
	if (s.symbol) {
		char *d = symbol_demangle(s.symbol);

		r = snprintf(buf, len, "%s+0x%" PRIx64, d ? d : s.symbol, s.symbol_offset);
		free(d);
		return r;
	}
	if (s.module) {
		const char *slash = strrchr(s.module, '/');

		return snprintf(buf, len, "%s+0x%" PRIx64, slash ? slash + 1 : s.module,
				s.module_offset);
	}
	return snprintf(buf, len, "[unknown]");
}

static const char *const glibc_globs[] = { "libc.so.6", "libc-2.*.so", NULL };
static const char *const musl_globs[] = {
	"ld-musl-*.so.1", "libc.musl-*.so.1", "libc.so", NULL,
};

static const char *find_module_path(const struct proc_syms *ps, const char *const *globs)
{
	for (size_t i = 0; i < ps->n_mods; i++)
		for (const char *const *g = globs; *g; g++)
			if (maps_path__matches(ps->mods[i].m.path, *g))
				return ps->mods[i].m.path;
	return NULL;
}

int proc_syms__target(struct proc_syms *ps, struct proc_target *ret)
{
	const struct elf_info *info;
	struct proc_target t = { 0 };

	if (!ps || !ret)
		return -EINVAL;
	if (!ps->exe_tried) {
		char p[64];

		snprintf(p, sizeof(p), "/proc/%d/exe", (int)ps->pid);
		ps->exe_err = elf_file__open(p, &ps->exe);
		if (ps->exe_err == -ENOMEM)
			return -ENOMEM;
		ps->exe_tried = true;
	}
	if (!ps->exe)
		return ps->exe_err < 0 ? ps->exe_err : -ENOEXEC;
	info = elf_file__info(ps->exe);
	t.elf_class = info->elf_class;
	t.machine = info->machine;
	t.x86_64 = elf_info__is_x86_64(info);
	t.has_interp = info->has_interp;
	if ((t.libc_path = find_module_path(ps, glibc_globs)))
		t.libc = PROC_LIBC_GLIBC;
	else if ((t.libc_path = find_module_path(ps, musl_globs)))
		t.libc = PROC_LIBC_MUSL;
	t.is_static = !t.has_interp && t.libc == PROC_LIBC_NONE;
	*ret = t;
	return 0;
}
