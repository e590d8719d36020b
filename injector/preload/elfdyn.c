/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "elfdyn.h"

uint32_t elf_gnu_hash(const char *name)
{
	uint32_t h = 5381;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h << 5) + h + *p;
	return h;
}

static uint32_t elf_sysv_hash(const char *name)
{
	uint32_t h = 0, g;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h = (h << 4) + *p;
		g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

/* glibc relocates d_ptr entries in place unless the dynamic section is read-only. */
static const void *dyn_ptr(uintptr_t base, uint64_t ptr)
{
	if (base && ptr < base)
		ptr += base;
	return (const void *)(uintptr_t)ptr;
}

int elf_dyn__parse(struct elf_dyn *d, uintptr_t base, const Elf64_Dyn *dyn)
{
	uint64_t pltrel = DT_RELA;

	memset(d, 0, sizeof(*d));
	d->base = base;
	if (!dyn)
		return -ENOENT;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		uint64_t v = dyn->d_un.d_val;

		switch (dyn->d_tag) {
		case DT_SYMTAB:     d->symtab = dyn_ptr(base, v); break;
		case DT_STRTAB:     d->strtab = dyn_ptr(base, v); break;
		case DT_STRSZ:      d->strsz = v; break;
		case DT_JMPREL:     d->jmprel = dyn_ptr(base, v); break;
		case DT_PLTRELSZ:   d->jmprelsz = v; break;
		case DT_PLTREL:     pltrel = v; break;
		case DT_RELA:       d->rela = dyn_ptr(base, v); break;
		case DT_RELASZ:     d->relasz = v; break;
		case DT_GNU_HASH:   d->gnu_hash = dyn_ptr(base, v); break;
		case DT_HASH:       d->sysv_hash = dyn_ptr(base, v); break;
		case DT_VERSYM:     d->versym = dyn_ptr(base, v); break;
		case DT_VERDEF:     d->verdef = dyn_ptr(base, v); break;
		case DT_VERDEFNUM:  d->verdefnum = v; break;
		case DT_VERNEED:    d->verneed = dyn_ptr(base, v); break;
		case DT_VERNEEDNUM: d->verneednum = v; break;
		default: break;
		}
	}
	if (pltrel != DT_RELA) {        /* x86_64 only uses RELA; do not misread REL */
		d->jmprel = NULL;
		d->jmprelsz = 0;
	}
	if (!d->symtab || !d->strtab)
		return -ENOENT;
	return 0;
}

static const char *sym_name(const struct elf_dyn *d, const Elf64_Sym *s)
{
	if (d->strsz && s->st_name >= d->strsz)
		return NULL;
	return d->strtab + s->st_name;
}

/* Version name of version index `ndx` from DT_VERDEF, NULL if none. */
static const char *verdef_name(const struct elf_dyn *d, uint16_t ndx)
{
	const Elf64_Verdef *vd = d->verdef;

	if (!vd || ndx < 2)
		return NULL;
	for (size_t i = 0; i < d->verdefnum; i++) {
		if (vd->vd_ndx == ndx && vd->vd_cnt > 0) {
			const Elf64_Verdaux *a = (const void *)((const char *)vd + vd->vd_aux);
			return d->strtab + a->vda_name;
		}
		if (!vd->vd_next)
			break;
		vd = (const void *)((const char *)vd + vd->vd_next);
	}
	return NULL;
}

/* Version name that reference version index `ndx` needs (DT_VERNEED), NULL if none. */
static const char *verneed_name(const struct elf_dyn *d, uint16_t ndx)
{
	const Elf64_Verneed *vn = d->verneed;

	if (!vn || ndx < 2)
		return NULL;
	for (size_t i = 0; i < d->verneednum; i++) {
		const Elf64_Vernaux *a = (const void *)((const char *)vn + vn->vn_aux);

		for (unsigned j = 0; j < vn->vn_cnt; j++) {
			if (a->vna_other == ndx)
				return d->strtab + a->vna_name;
			if (!a->vna_next)
				break;
			a = (const void *)((const char *)a + a->vna_next);
		}
		if (!vn->vn_next)
			break;
		vn = (const void *)((const char *)vn + vn->vn_next);
	}
	return NULL;
}

/*
 * Checks symbol `idx` against `name`; on a defined match fills `out` and returns
 * 2 (default version) or 1 (hidden version), else 0.
 */
static int sym_match(const struct elf_dyn *d, uint32_t idx, const char *name,
		     struct elf_sym_def *out)
{
	const Elf64_Sym *s = &d->symtab[idx];
	const char *n = sym_name(d, s);
	unsigned char type = ELF64_ST_TYPE(s->st_info);
	unsigned char bind = ELF64_ST_BIND(s->st_info);
	uint16_t vs = d->versym ? d->versym[idx] : 1;

	if (!n || strcmp(n, name) != 0)
		return 0;
	if (s->st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK &&
					 bind != STB_GNU_UNIQUE))
		return 0;
	if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE &&
	    type != STT_OBJECT)
		return 0;
	if ((vs & 0x7fff) == 0)          /* VER_NDX_LOCAL */
		return 0;
	out->addr = (s->st_shndx == SHN_ABS ? 0 : d->base) + s->st_value;
	out->type = type;
	out->version = verdef_name(d, vs & 0x7fff);
	return (vs & 0x8000) ? 1 : 2;
}

/*
 * Walks the definitions of `name` (GNU or SysV hash chain). With `version` NULL returns
 * the default one (falling back to the first hidden one); else the one of that version.
 */
static bool lookup(const struct elf_dyn *d, const char *name, const char *version,
		   struct elf_sym_def *out)
{
	struct elf_sym_def hidden = { 0 }, cur;
	bool have_hidden = false;
	uint32_t idx;

#define CONSIDER(i)                                                                    \
	do {                                                                           \
		int m_ = sym_match(d, (i), name, &cur);                                \
		if (m_ && version) {                                                   \
			if (cur.version && strcmp(cur.version, version) == 0) {        \
				*out = cur;                                            \
				return true;                                           \
			}                                                              \
		} else if (m_ == 2) {                                                  \
			*out = cur;                                                    \
			return true;                                                   \
		} else if (m_ == 1 && !have_hidden) {                                  \
			hidden = cur;                                                  \
			have_hidden = true;                                            \
		}                                                                      \
	} while (0)

	if (d->gnu_hash) {
		const uint32_t *h = d->gnu_hash;
		uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
		uint32_t bloom_shift = h[3];
		const uint64_t *bloom = (const uint64_t *)&h[4];
		const uint32_t *buckets = (const uint32_t *)&bloom[bloom_size];
		const uint32_t *chain = &buckets[nbuckets];
		uint32_t hash = elf_gnu_hash(name);
		uint64_t word, mask;

		if (!nbuckets || !bloom_size)
			return false;
		word = bloom[(hash / 64) % bloom_size];
		mask = (1ull << (hash % 64)) | (1ull << ((hash >> bloom_shift) % 64));
		if ((word & mask) != mask)
			return false;
		idx = buckets[hash % nbuckets];
		if (idx < symoffset)
			return false;
		for (;; idx++) {
			uint32_t h2 = chain[idx - symoffset];

			if ((h2 | 1) == (hash | 1))
				CONSIDER(idx);
			if (h2 & 1)
				break;
		}
	} else if (d->sysv_hash) {
		const uint32_t *h = d->sysv_hash;
		uint32_t nbucket = h[0], nchain = h[1];
		const uint32_t *bucket = &h[2], *chain = &h[2 + nbucket];

		if (!nbucket)
			return false;
		for (idx = bucket[elf_sysv_hash(name) % nbucket]; idx != STN_UNDEF && idx < nchain;
		     idx = chain[idx])
			CONSIDER(idx);
	}
#undef CONSIDER
	if (have_hidden)
		*out = hidden;
	return have_hidden;
}

bool elf_dyn__lookup(const struct elf_dyn *d, const char *name, struct elf_sym_def *out)
{
	return lookup(d, name, NULL, out);
}

bool elf_dyn__lookup_version(const struct elf_dyn *d, const char *name, const char *version,
			     struct elf_sym_def *out)
{
	return version && lookup(d, name, version, out);
}

static int for_each_rela(const struct elf_dyn *d, const Elf64_Rela *r, size_t sz,
			 int (*fn)(const struct elf_got_ref *ref, void *ctx), void *ctx)
{
	size_t n = sz / sizeof(*r);

	for (size_t i = 0; i < n; i++) {
		uint32_t type = ELF64_R_TYPE(r[i].r_info);
		uint32_t idx = ELF64_R_SYM(r[i].r_info);
		struct elf_got_ref ref;
		const Elf64_Sym *s;
		int ret;

		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || idx == 0)
			continue;
		s = &d->symtab[idx];
		ref.name = sym_name(d, s);
		if (!ref.name || !ref.name[0])
			continue;
		ref.slot = (void **)(d->base + r[i].r_offset);
		ref.type = type;
		ref.sym_defined = s->st_shndx != SHN_UNDEF;
		ref.version = d->versym ? verneed_name(d, d->versym[idx] & 0x7fff) : NULL;
		ret = fn(&ref, ctx);
		if (ret)
			return ret;
	}
	return 0;
}

int elf_dyn__for_each_got(const struct elf_dyn *d,
			  int (*fn)(const struct elf_got_ref *ref, void *ctx), void *ctx)
{
	int r = 0;

	if (d->jmprel)
		r = for_each_rela(d, d->jmprel, d->jmprelsz, fn, ctx);
	if (!r && d->rela)
		r = for_each_rela(d, d->rela, d->relasz, fn, ctx);
	return r;
}
