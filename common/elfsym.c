/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "elfsym.h"
#include "procmaps.h"

/* From the C++ runtime (we link -lstdc++); declared here so C code can call it. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define INTERP_MAX    4096   /* bytes of PT_INTERP we look at */
#define VERDEF_MAX    65536  /* a version index is 15 bits */
#define DEMANGLE_MAX  4096   /* longer names are not handed to the demangler (its recursion) */
#define CONTAIN_WALK  16     /* entries looked back for a sized function containing an address */

struct symtab {
	Elf_Data *syms;          /* NULL when the file has no such table */
	size_t n;
	Elf_Data *strs;          /* its string table (sh_link) */
	Elf_Data *versym;        /* .gnu.version, parallel to .dynsym; may be NULL */
	size_t n_versym;
};

struct verdef {
	unsigned ndx;            /* version index, as in .gnu.version (without the hidden bit) */
	const char *name;        /* "GLIBC_2.34" */
};

struct addr_sym {
	uint64_t addr, size;
	const char *name;
	unsigned rank;           /* higher is the better name for an address; see sym_rank() */
};

struct addr_index {
	bool built;
	int err;                 /* of the build, returned again on later calls */
	struct addr_sym *v;      /* sorted by addr, one entry per address */
	size_t n;
};

struct elf_file {
	int fd;                  /* our dup, -1 for elf_file__open_mem() */
	void *image;             /* our copy, for elf_file__open_mem() */
	Elf *elf;
	struct elf_info info;
	struct elf_segment *loads;
	size_t n_loads_cap;
	char *interp;
	struct symtab dynsym, symtab;
	struct verdef *verdefs;
	size_t n_verdefs;
	/* Filled by the first elf_file__symbolize(): a cache behind the const API. */
	struct addr_index *index;
};

/* A NUL-terminated string at off in a string table, or NULL. */
static const char *strtab_get(const Elf_Data *d, uint64_t off)
{
	const char *s;

	if (!d || !d->d_buf || off >= d->d_size)
		return NULL;
	s = (const char *)d->d_buf + off;
	if (!memchr(s, '\0', d->d_size - (size_t)off))
		return NULL;
	return s;
}

static unsigned prot_from_pflags(uint64_t flags)
{
	return ((flags & PF_R) ? PROT_READ : 0) | ((flags & PF_W) ? PROT_WRITE : 0) |
	       ((flags & PF_X) ? PROT_EXEC : 0);
}

static void hex_encode(const unsigned char *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 0xf];
	}
	out[2 * n] = '\0';
}

/* Looks for NT_GNU_BUILD_ID in one block of notes; true when found. */
static bool notes_build_id(struct elf_file *f, Elf_Data *d)
{
	size_t off = 0;

	if (!d || !d->d_buf || (d->d_type != ELF_T_NHDR && d->d_type != ELF_T_NHDR8))
		return false;
	while (off < d->d_size) {
		GElf_Nhdr nh;
		size_t name_off, desc_off, next;
		const unsigned char *base = d->d_buf;

		next = gelf_getnote(d, off, &nh, &name_off, &desc_off);
		if (next == 0 || next <= off)
			break;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof(ELF_NOTE_GNU) &&
		    name_off <= d->d_size && d->d_size - name_off >= sizeof(ELF_NOTE_GNU) &&
		    memcmp(base + name_off, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0 &&
		    nh.n_descsz > 0 && nh.n_descsz <= ELF_BUILD_ID_MAX &&
		    desc_off <= d->d_size && d->d_size - desc_off >= nh.n_descsz) {
			hex_encode(base + desc_off, nh.n_descsz, f->info.build_id);
			return true;
		}
		off = next;
	}
	return false;
}

static int add_load(struct elf_file *f, const GElf_Phdr *ph)
{
	if (f->info.n_loads == f->n_loads_cap) {
		size_t ncap = f->n_loads_cap ? f->n_loads_cap * 2 : 8;
		struct elf_segment *nv = reallocarray(f->loads, ncap, sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		f->loads = nv;
		f->n_loads_cap = ncap;
	}
	f->loads[f->info.n_loads++] = (struct elf_segment) {
		.vaddr = ph->p_vaddr, .memsz = ph->p_memsz,
		.offset = ph->p_offset, .filesz = ph->p_filesz,
		.align = ph->p_align, .prot = prot_from_pflags(ph->p_flags),
	};
	return 0;
}

static int read_interp(struct elf_file *f, const GElf_Phdr *ph)
{
	Elf_Data *d;
	size_t len;

	if (ph->p_filesz == 0 || ph->p_filesz > INTERP_MAX)
		return 0;
	d = elf_getdata_rawchunk(f->elf, (int64_t)ph->p_offset, ph->p_filesz, ELF_T_BYTE);
	if (!d || !d->d_buf || d->d_size == 0)
		return 0;  /* points outside the file: has_interp stays true, the path unknown */
	len = strnlen(d->d_buf, d->d_size);
	free(f->interp);
	f->interp = strndup(d->d_buf, len);
	return f->interp ? 0 : -ENOMEM;
}

static int load_phdrs(struct elf_file *f, bool *ret_build_id)
{
	size_t n;
	int r;

	if (elf_getphdrnum(f->elf, &n) != 0)
		return 0;  /* unreadable program headers: treat as none */
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(f->elf, (int)i, &ph))
			continue;
		switch (ph.p_type) {
		case PT_LOAD:
			if ((r = add_load(f, &ph)) < 0)
				return r;
			break;
		case PT_INTERP:
			f->info.has_interp = true;
			if ((r = read_interp(f, &ph)) < 0)
				return r;
			break;
		case PT_DYNAMIC:
			f->info.has_dynamic = true;
			break;
		case PT_NOTE:
			if (!*ret_build_id && ph.p_filesz > 0) {
				Elf_Data *d = elf_getdata_rawchunk(f->elf, (int64_t)ph.p_offset,
					ph.p_filesz, ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);

				*ret_build_id = notes_build_id(f, d);
			}
			break;
		default:
			break;
		}
	}
	return 0;
}

/* Sets t from a SHT_DYNSYM/SHT_SYMTAB section; leaves t empty if its data is unreadable. */
static void load_symtab(struct elf_file *f, Elf_Scn *scn, const GElf_Shdr *sh, struct symtab *t)
{
	size_t entsize = f->info.elf_class == ELFCLASS64 ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
	Elf_Scn *strscn;
	Elf_Data *d, *sd;

	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || d->d_size < entsize)
		return;
	strscn = elf_getscn(f->elf, sh->sh_link);
	if (!strscn || sh->sh_link == 0)
		return;
	sd = elf_getdata(strscn, NULL);
	if (!sd || !sd->d_buf)
		return;
	t->syms = d;
	t->n = d->d_size / entsize;
	t->strs = sd;
}

static int load_verdefs(struct elf_file *f, Elf_Scn *scn, const GElf_Shdr *sh)
{
	Elf_Data *d = elf_getdata(scn, NULL), *sd;
	Elf_Scn *strscn = sh->sh_link ? elf_getscn(f->elf, sh->sh_link) : NULL;
	size_t off = 0, cap = 0;

	if (!d || !d->d_buf || !strscn || !(sd = elf_getdata(strscn, NULL)))
		return 0;
	for (unsigned k = 0; k < VERDEF_MAX; k++) {
		GElf_Verdef vd;
		GElf_Verdaux aux;
		const char *name;

		if (!gelf_getverdef(d, (int)off, &vd))
			break;
		if (vd.vd_ndx > 1 && !(vd.vd_flags & VER_FLG_BASE) && vd.vd_aux != 0 &&
		    off + vd.vd_aux <= INT32_MAX &&
		    gelf_getverdaux(d, (int)(off + vd.vd_aux), &aux) &&
		    (name = strtab_get(sd, aux.vda_name))) {
			if (f->n_verdefs == cap) {
				size_t ncap = cap ? cap * 2 : 16;
				struct verdef *nv = reallocarray(f->verdefs, ncap, sizeof(*nv));

				if (!nv)
					return -ENOMEM;
				f->verdefs = nv;
				cap = ncap;
			}
			f->verdefs[f->n_verdefs++] = (struct verdef) { vd.vd_ndx & 0x7fff, name };
		}
		if (vd.vd_next == 0 || off + vd.vd_next > d->d_size)
			break;
		off += vd.vd_next;
	}
	return 0;
}

static int load_sections(struct elf_file *f, bool *ret_build_id)
{
	Elf_Scn *scn = NULL, *dynsym_scn = NULL, *versym_scn = NULL;
	GElf_Word versym_link = 0;
	bool have_verdef = false;
	int r;

	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh))
			continue;
		switch (sh.sh_type) {
		case SHT_DYNSYM:
			if (!f->dynsym.syms) {
				load_symtab(f, scn, &sh, &f->dynsym);
				if (f->dynsym.syms)
					dynsym_scn = scn;
			}
			break;
		case SHT_SYMTAB:
			if (!f->symtab.syms)
				load_symtab(f, scn, &sh, &f->symtab);
			break;
		case SHT_GNU_versym:
			if (!versym_scn) {
				versym_scn = scn;
				versym_link = sh.sh_link;
			}
			break;
		case SHT_GNU_verdef:
			if (!have_verdef) {
				have_verdef = true;
				if ((r = load_verdefs(f, scn, &sh)) < 0)
					return r;
			}
			break;
		case SHT_NOTE:
			if (!*ret_build_id)
				*ret_build_id = notes_build_id(f, elf_getdata(scn, NULL));
			break;
		default:
			break;
		}
	}
	if (versym_scn && dynsym_scn && versym_link == elf_ndxscn(dynsym_scn)) {
		Elf_Data *d = elf_getdata(versym_scn, NULL);

		if (d && d->d_buf) {
			f->dynsym.versym = d;
			f->dynsym.n_versym = d->d_size / sizeof(GElf_Versym);
		}
	}
	f->info.has_dynsym = f->dynsym.syms != NULL;
	f->info.has_symtab = f->symtab.syms != NULL;
	return 0;
}

/* Everything elf_file__open*() share once f->elf is set. */
static int elf_file_load(struct elf_file *f)
{
	GElf_Ehdr eh;
	bool build_id = false;
	int r, cls;

	if (elf_kind(f->elf) != ELF_K_ELF || !gelf_getehdr(f->elf, &eh))
		return -ENOEXEC;
	cls = gelf_getclass(f->elf);
	if (cls != ELFCLASS32 && cls != ELFCLASS64)
		return -ENOEXEC;
	f->info.elf_class = (unsigned)cls;
	f->info.machine = eh.e_machine;
	f->info.type = eh.e_type;

	/* Sections first: a build-id note section is the usual place, PT_NOTE the fallback. */
	if ((r = load_sections(f, &build_id)) < 0)
		return r;
	if ((r = load_phdrs(f, &build_id)) < 0)
		return r;
	f->info.loads = f->loads;
	f->info.interp = f->interp;
	return 0;
}

/* A new, empty elf_file, once libelf is ready: 0, -ELIBBAD or -ENOMEM. */
static int elf_file_alloc(struct elf_file **ret)
{
	struct elf_file *f;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ELIBBAD;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	f->index = calloc(1, sizeof(*f->index));
	if (!f->index) {
		free(f);
		return -ENOMEM;
	}
	*ret = f;
	return 0;
}

void elf_file__free(struct elf_file *f)
{
	if (!f)
		return;
	if (f->elf)
		elf_end(f->elf);
	if (f->fd >= 0)
		close(f->fd);
	if (f->index)
		free(f->index->v);
	free(f->index);
	free(f->image);
	free(f->loads);
	free(f->interp);
	free(f->verdefs);
	free(f);
}

/* The last step of every open: f's tables read (f->elf NULL: libelf refused it), into *ret;
 * f is freed on failure. */
static int elf_file_opened(struct elf_file *f, struct elf_file **ret)
{
	int r = f->elf ? elf_file_load(f) : -ENOEXEC;

	if (r < 0) {
		elf_file__free(f);
		return r;
	}
	*ret = f;
	return 0;
}

int elf_file__open_fd(int fd, struct elf_file **ret)
{
	struct elf_file *f = NULL;
	struct stat st;
	int r;

	if (fd < 0 || !ret)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	r = elf_file_alloc(&f);
	if (r < 0)
		return r;
	f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (f->fd < 0) {
		r = -errno;
		goto fail;
	}
	/* ELF_C_READ: libelf preads what it needs instead of mapping the file, so a file
	 * truncated under us is a read error rather than a SIGBUS, and only the tables we look
	 * at of a huge library are read. */
	f->elf = elf_begin(f->fd, ELF_C_READ, NULL);
	return elf_file_opened(f, ret);
fail:
	elf_file__free(f);
	return r;
}

int elf_file__open(const char *path, struct elf_file **ret)
{
	struct stat st;
	int fd, r;

	if (!path || !ret)
		return -EINVAL;
	/* Look before opening: opening a device (a GPU's /dev node is mapped in the processes
	 * we look at) can have side effects, and a FIFO would block. */
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	r = elf_file__open_fd(fd, ret);
	close(fd);
	return r;
}

int elf_file__open_mem(const void *buf, size_t len, struct elf_file **ret)
{
	struct elf_file *f = NULL;
	int r;

	if (!buf || !ret)
		return -EINVAL;
	if (len == 0)
		return -ENOEXEC;
	r = elf_file_alloc(&f);
	if (r < 0)
		return r;
	/* libelf may convert data in place (byte order); it gets a copy we own. */
	f->image = malloc(len);
	if (!f->image) {
		elf_file__free(f);
		return -ENOMEM;
	}
	memcpy(f->image, buf, len);
	f->elf = elf_memory(f->image, len);
	return elf_file_opened(f, ret);
}

const struct elf_info *elf_file__info(const struct elf_file *f)
{
	return f ? &f->info : NULL;
}

struct Elf *elf_file__libelf(const struct elf_file *f)
{
	return f->elf;
}

int elf_file__fd(const struct elf_file *f)
{
	return f->fd;
}

bool elf_info__is_x86_64(const struct elf_info *info)
{
	return info && info->elf_class == ELFCLASS64 && info->machine == EM_X86_64;
}

static bool sym_defined(const GElf_Sym *s)
{
	return s->st_shndx != SHN_UNDEF && s->st_shndx != SHN_ABS && s->st_shndx != SHN_COMMON;
}

/* The name of symbol i of t when it is defined here, with the symbol in *s; else NULL (and
 * *s zeroed). */
static const char *defined_sym(const struct symtab *t, size_t i, GElf_Sym *s)
{
	if (!gelf_getsym(t->syms, (int)i, s) || !sym_defined(s)) {
		memset(s, 0, sizeof(*s));
		return NULL;
	}
	return strtab_get(t->strs, s->st_name);
}

static const char *verdef_name(const struct elf_file *f, unsigned ndx)
{
	for (size_t i = 0; i < f->n_verdefs; i++)
		if (f->verdefs[i].ndx == ndx)
			return f->verdefs[i].name;
	return NULL;
}

struct sym_query {
	const char *name;
	size_t len;              /* of the name without "@VER" */
	const char *version;     /* NULL: any, the default preferred */
};

struct sym_found {
	int score;               /* 0: nothing yet */
	uint64_t vaddr, size;
	bool ifunc;
};

/*
 * Scores one table's matches into *best: version fit (default or unversioned 2, hidden 1)
 * times two, plus one unless the binding is local. A score of 5 cannot be beaten.
 */
static void symtab_search(const struct elf_file *f, const struct symtab *t, bool dynamic,
			  const struct sym_query *q, struct sym_found *best)
{
	for (size_t i = 0; i < t->n && best->score < 5; i++) {
		GElf_Sym s;
		const char *name = defined_sym(t, i, &s), *version = NULL;
		unsigned type = GELF_ST_TYPE(s.st_info);
		bool hidden = false;
		int score;

		if (!name || (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC) ||
		    strncmp(name, q->name, q->len) != 0)
			continue;
		if (dynamic) {
			GElf_Versym vs;

			if (name[q->len] != '\0')
				continue;
			if (t->versym && i < t->n_versym && gelf_getversym(t->versym, (int)i, &vs)) {
				unsigned ndx = vs & 0x7fff;

				hidden = (vs & 0x8000) || ndx == VER_NDX_LOCAL;
				if (ndx > VER_NDX_GLOBAL)
					version = verdef_name(f, ndx);
			}
		} else if (name[q->len] == '@') {
			/* .symtab spells versions into the name: sym@VER, sym@@VER. */
			version = name + q->len + 1;
			if (*version == '@')
				version++;
			else
				hidden = true;
		} else if (name[q->len] != '\0') {
			continue;
		}
		if (q->version) {
			if (!version || strcmp(version, q->version) != 0)
				continue;
			score = 2;
		} else {
			score = hidden ? 1 : 2;
		}
		score = score * 2 + (GELF_ST_BIND(s.st_info) != STB_LOCAL);
		if (score > best->score) {
			best->score = score;
			best->vaddr = s.st_value;
			best->size = s.st_size;
			best->ifunc = type == STT_GNU_IFUNC;
		}
	}
}

int elf_file__find_symbol(const struct elf_file *f, const char *name, uint64_t *ret_vaddr,
			  uint64_t *ret_size)
{
	struct sym_found best = { 0 };
	struct sym_query q;
	const char *at;

	if (!f || !name)
		return -EINVAL;
	at = strchr(name, '@');
	q.name = name;
	q.len = at ? (size_t)(at - name) : strlen(name);
	q.version = NULL;
	if (at) {
		q.version = at[1] == '@' ? at + 2 : at + 1;
		if (!*q.version)
			return -EINVAL;
	}
	if (q.len == 0)
		return -EINVAL;

	symtab_search(f, &f->dynsym, true, &q, &best);
	if (best.score == 0)
		symtab_search(f, &f->symtab, false, &q, &best);
	if (best.score == 0)
		return -ENOENT;
	if (ret_vaddr)
		*ret_vaddr = best.vaddr;
	if (ret_size)
		*ret_size = best.size;
	return best.ifunc ? ELF_SYM_IFUNC : 0;
}

/* For one address, the name to show: functions over labels, sized over unsized, global
 * over local, .dynsym's plain names over .symtab's (which may carry "@VER"); then fewer
 * leading underscores, then shorter (cmp_addr_sym). */
static unsigned sym_rank(unsigned type, uint64_t size, unsigned bind, bool dynamic)
{
	return ((type == STT_FUNC || type == STT_GNU_IFUNC) ? 8u : 0u) | (size ? 4u : 0u) |
	       (bind != STB_LOCAL ? 2u : 0u) | (dynamic ? 1u : 0u);
}

static int cmp_addr_sym(const void *a, const void *b)
{
	const struct addr_sym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1;
	/* Aliases: the public name (malloc) over the internal ones (__libc_malloc). */
	if (strspn(x->name, "_") != strspn(y->name, "_"))
		return strspn(x->name, "_") < strspn(y->name, "_") ? -1 : 1;
	if (strlen(x->name) != strlen(y->name))
		return strlen(x->name) < strlen(y->name) ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void index_add(struct addr_index *ix, const struct symtab *t, bool dynamic)
{
	for (size_t i = 0; i < t->n; i++) {
		GElf_Sym s;
		const char *name = defined_sym(t, i, &s);
		unsigned type = GELF_ST_TYPE(s.st_info);

		if (!name || !*name || (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE))
			continue;
		ix->v[ix->n++] = (struct addr_sym) {
			.addr = s.st_value, .size = s.st_size, .name = name,
			.rank = sym_rank(type, s.st_size, GELF_ST_BIND(s.st_info), dynamic),
		};
	}
}

static int index_build(const struct elf_file *f, struct addr_index *ix)
{
	size_t cap = f->dynsym.n + f->symtab.n, out = 0;

	if (cap == 0)
		return 0;
	ix->v = calloc(cap, sizeof(*ix->v));
	if (!ix->v)
		return -ENOMEM;
	index_add(ix, &f->dynsym, true);
	index_add(ix, &f->symtab, false);
	qsort(ix->v, ix->n, sizeof(*ix->v), cmp_addr_sym);
	/* One name per address: the best-ranked sorts first. */
	for (size_t i = 0; i < ix->n; i++)
		if (out == 0 || ix->v[out - 1].addr != ix->v[i].addr)
			ix->v[out++] = ix->v[i];
	ix->n = out;
	return 0;
}

int elf_file__symbolize(const struct elf_file *f, uint64_t vaddr, const char **ret_name,
			uint64_t *ret_offset)
{
	struct addr_index *ix;
	const struct addr_sym *hit = NULL;
	size_t lo = 0, hi, i;

	if (!f || !f->index)
		return -EINVAL;
	ix = f->index;
	if (!ix->built) {
		ix->err = index_build(f, ix);
		ix->built = true;
	}
	if (ix->err < 0)
		return ix->err;

	hi = ix->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ix->v[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -ENOENT;
	i = lo - 1;
	/* A label inside a function sorts after the function: look back a little. */
	for (size_t k = 0; k < CONTAIN_WALK && k <= i; k++) {
		const struct addr_sym *s = &ix->v[i - k];

		if (s->size && vaddr - s->addr < s->size) {
			hit = s;
			break;
		}
	}
	if (!hit && ix->v[i].size == 0)
		hit = &ix->v[i];
	if (!hit)
		return -ENOENT;
	if (ret_name)
		*ret_name = hit->name;
	if (ret_offset)
		*ret_offset = vaddr - hit->addr;
	return 0;
}

int elf_file__load_bias(const struct elf_file *f, const struct maps_entry *e,
			uint64_t *ret_bias)
{
	const struct elf_segment *best = NULL;
	long pg = sysconf(_SC_PAGESIZE);
	int best_score = -1;

	if (!f || !e || !ret_bias)
		return -EINVAL;
	if (pg <= 0)
		pg = 4096;
	if (e->prot == 0)
		return -ENOENT;  /* a PROT_NONE gap is not where any segment's bytes are */
	for (size_t i = 0; i < f->info.n_loads; i++) {
		const struct elf_segment *s = &f->loads[i];
		uint64_t lo = s->offset & ~((uint64_t)pg - 1), end = s->offset + s->filesz;
		int score;

		if (s->filesz == 0)
			continue;  /* all .bss: no file pages of its own */
		if (end < s->offset)
			end = UINT64_MAX;
		if (e->offset < lo || e->offset >= end)
			continue;
		score = (s->prot & PROT_EXEC) == (e->prot & PROT_EXEC);
		if (score > best_score) {
			best = s;
			best_score = score;
		}
	}
	if (!best)
		return -ENOENT;
	/* The mapping's first byte is file offset e->offset, i.e. this vaddr: */
	*ret_bias = e->start - (best->vaddr - best->offset + e->offset);
	return 0;
}

/*
 * nvcc gives a kernel with internal linkage (static, or in an anonymous namespace) a name
 * unique to its translation unit: "__nv_static_<N>__<N characters>_" in front of the
 * mangled name, as CUPTI and the driver report it. Returns where the mangled name starts,
 * or `name` itself.
 */
static const char *skip_nv_static(const char *name)
{
	static const char prefix[] = "__nv_static_";
	const char *p = name + sizeof(prefix) - 1;
	size_t n = 0;

	if (strncmp(name, prefix, sizeof(prefix) - 1) != 0)
		return name;
	while (*p >= '0' && *p <= '9' && n < 4096)
		n = n * 10 + (size_t)(*p++ - '0');
	if (n == 0 || p[0] != '_' || p[1] != '_' || strnlen(p + 2, n) < n)
		return name;
	p += 2 + n;
	return strncmp(p, "_Z", 2) == 0 ? p : name;
}

char *device_stub_kernel(const char *name)
{
	static const char stub[] = "__device_stub_";
	char *own = NULL, *mangled, *paren, *k;

	if (!name)
		return NULL;
	if (strncmp(name, "_Z", 2) == 0)
		name = own = symbol_demangle(name);
	if (!name || strncmp(name, stub, sizeof(stub) - 1) != 0) {
		free(own);
		return NULL;
	}
	mangled = strdup(name + sizeof(stub) - 1);   /* "_Z16scale_add_kernelPfPKffi(...)" */
	free(own);
	if (!mangled)
		return NULL;
	paren = strchr(mangled, '(');
	if (paren)
		*paren = 0;
	k = symbol_demangle(mangled);
	free(mangled);
	return k;
}

char *symbol_demangle(const char *name)
{
	const char *at;
	char *base, *out, *joined;
	size_t len, outlen;
	int status = -1;

	if (name)
		name = skip_nv_static(name);
	if (!name || strncmp(name, "_Z", 2) != 0)
		return NULL;
	at = strchr(name, '@');
	len = at ? (size_t)(at - name) : strlen(name);
	if (len > DEMANGLE_MAX)
		return NULL;
	base = strndup(name, len);
	if (!base)
		return NULL;
	out = __cxa_demangle(base, NULL, NULL, &status);
	free(base);
	if (!out || status != 0) {
		free(out);
		return NULL;
	}
	if (!at)
		return out;
	outlen = strlen(out);
	joined = malloc(outlen + strlen(at) + 1);
	if (joined) {
		memcpy(joined, out, outlen);
		memcpy(joined + outlen, at, strlen(at) + 1);
	}
	free(out);
	return joined;
}
