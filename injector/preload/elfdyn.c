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

/* Whether [p, p + n) lies inside the module's bounds. */
static bool in(const struct elf_dyn *d, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;

	return p && a >= d->lo && a < d->hi && n <= d->hi - a;
}

/* Whether p is aligned to a (a power of two): a table that is not reads as absent. */
static bool aligned(const void *p, uintptr_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* Element i (of size sz) of the table at base, in address arithmetic: a hostile index
 * wraps instead of overflowing a pointer; in() then judges it. NULL when i * sz would. */
static const void *elem(const void *base, uint64_t i, size_t sz)
{
	if (i > UINTPTR_MAX / sz)
		return NULL;
	return (const void *)((uintptr_t)base + (uintptr_t)(i * sz));
}

/* Whether the n-element array at p of elements of size sz lies inside the bounds. */
static bool in_array(const struct elf_dyn *d, const void *p, uint64_t n, size_t sz)
{
	return n <= (UINTPTR_MAX / sz) && in(d, p, (size_t)(n * sz));
}

/* The string at strtab + off when it is inside the table and the bounds, NUL included. */
static const char *str_at(const struct elf_dyn *d, uint64_t off)
{
	const char *s;

	if (!in(d, d->strtab, 1) || (d->strsz && off >= d->strsz) ||
	    off >= d->hi - (uintptr_t)d->strtab)
		return NULL;
	s = d->strtab + off;
	if (!memchr(s, 0, d->hi - (uintptr_t)s))
		return NULL;
	return s;
}

/* glibc relocates d_ptr entries in place unless the dynamic section is read-only. */
static const void *dyn_ptr(uintptr_t base, uint64_t ptr)
{
	if (base && ptr < base)
		ptr += base;
	return (const void *)(uintptr_t)ptr;
}

int elf_dyn__parse_bounded(struct elf_dyn *d, uintptr_t base, const Elf64_Dyn *dyn,
			   uintptr_t lo, uintptr_t hi)
{
	uint64_t pltrel = DT_RELA;

	memset(d, 0, sizeof(*d));
	d->base = base;
	d->lo = lo;
	d->hi = hi;
	if (!dyn)
		return -ENOENT;
	for (; in(d, dyn, sizeof(*dyn)) && aligned(dyn, 8) && dyn->d_tag != DT_NULL; dyn++) {
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
	/* the tables' own alignment (a linker's are): anything else is not a table */
	if (!aligned(d->symtab, 8))
		d->symtab = NULL;
	if (!aligned(d->jmprel, 8))
		d->jmprel = NULL;
	if (!aligned(d->rela, 8))
		d->rela = NULL;
	if (!aligned(d->gnu_hash, 8))
		d->gnu_hash = NULL;
	if (!aligned(d->sysv_hash, 4))
		d->sysv_hash = NULL;
	if (!aligned(d->versym, 2))
		d->versym = NULL;
	if (!aligned(d->verdef, 4))
		d->verdef = NULL;
	if (!aligned(d->verneed, 4))
		d->verneed = NULL;
	if (!d->symtab || !d->strtab)
		return -ENOENT;
	return 0;
}

int elf_dyn__parse(struct elf_dyn *d, uintptr_t base, const Elf64_Dyn *dyn)
{
	return elf_dyn__parse_bounded(d, base, dyn, 1, UINTPTR_MAX);
}

static const char *sym_name(const struct elf_dyn *d, const Elf64_Sym *s)
{
	return in(d, s, sizeof(*s)) ? str_at(d, s->st_name) : NULL;
}

/* Version name of version index `ndx` from DT_VERDEF, NULL if none. */
static const char *verdef_name(const struct elf_dyn *d, uint16_t ndx)
{
	const Elf64_Verdef *vd = d->verdef;

	if (!vd || ndx < 2)
		return NULL;
	for (size_t i = 0; i < d->verdefnum && in(d, vd, sizeof(*vd)) && aligned(vd, 4); i++) {
		if (vd->vd_ndx == ndx && vd->vd_cnt > 0) {
			const Elf64_Verdaux *a = (const void *)((const char *)vd + vd->vd_aux);

			return in(d, a, sizeof(*a)) && aligned(a, 4) ? str_at(d, a->vda_name) : NULL;
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
	for (size_t i = 0; i < d->verneednum && in(d, vn, sizeof(*vn)) && aligned(vn, 4); i++) {
		const Elf64_Vernaux *a = (const void *)((const char *)vn + vn->vn_aux);

		for (unsigned j = 0; j < vn->vn_cnt && in(d, a, sizeof(*a)) && aligned(a, 4); j++) {
			if (a->vna_other == ndx)
				return str_at(d, a->vna_name);
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
	const Elf64_Sym *s = elem(d->symtab, idx, sizeof(*s));
	const char *n = sym_name(d, s);
	unsigned char type, bind;
	uint16_t vs = 1;

	if (!n || strcmp(n, name) != 0)
		return 0;
	if (d->versym) {
		const Elf64_Versym *v = elem(d->versym, idx, sizeof(*v));

		if (!in(d, v, sizeof(*v)))
			return 0;
		vs = *v;
	}
	type = ELF64_ST_TYPE(s->st_info);
	bind = ELF64_ST_BIND(s->st_info);
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

	if (d->gnu_hash && in(d, d->gnu_hash, 4 * sizeof(uint32_t))) {
		const uint32_t *h = d->gnu_hash;
		uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
		uint32_t bloom_shift = h[3];
		const uint64_t *bloom = (const uint64_t *)&h[4];
		const uint32_t *buckets, *chain;
		uint32_t hash = elf_gnu_hash(name);
		uint64_t word, mask;

		if (!nbuckets || !bloom_size || bloom_shift >= 32 ||
		    !in_array(d, bloom, bloom_size, sizeof(*bloom)))
			return false;
		buckets = (const uint32_t *)&bloom[bloom_size];
		if (!in_array(d, buckets, nbuckets, sizeof(*buckets)))
			return false;
		chain = &buckets[nbuckets];
		word = bloom[(hash / 64) % bloom_size];
		mask = (1ull << (hash % 64)) | (1ull << ((hash >> bloom_shift) % 64));
		if ((word & mask) != mask)
			return false;
		idx = buckets[hash % nbuckets];
		if (idx < symoffset)
			return false;
		for (;; idx++) {
			const uint32_t *c = elem(chain, idx - symoffset, sizeof(*chain));
			uint32_t h2;

			if (!in(d, c, sizeof(*c)) || idx == UINT32_MAX)
				break;
			h2 = *c;
			if ((h2 | 1) == (hash | 1))
				CONSIDER(idx);
			if (h2 & 1)
				break;
		}
	} else if (d->sysv_hash && in(d, d->sysv_hash, 2 * sizeof(uint32_t))) {
		const uint32_t *h = d->sysv_hash;
		uint32_t nbucket = h[0], nchain = h[1];
		const uint32_t *bucket = &h[2], *chain;

		if (!nbucket || !in_array(d, bucket, nbucket, sizeof(*bucket)))
			return false;
		chain = &bucket[nbucket];
		if (!in_array(d, chain, nchain, sizeof(*chain)))
			return false;
		/* at most nchain steps: a chain that loops ends */
		idx = bucket[elf_sysv_hash(name) % nbucket];
		for (uint32_t steps = 0; idx != STN_UNDEF && idx < nchain && steps < nchain;
		     idx = chain[idx], steps++)
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

	if (!in_array(d, r, n, sizeof(*r)))
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t type = ELF64_R_TYPE(r[i].r_info);
		uint32_t idx = ELF64_R_SYM(r[i].r_info);
		struct elf_got_ref ref;
		const Elf64_Sym *s;
		int ret;

		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || idx == 0)
			continue;
		s = elem(d->symtab, idx, sizeof(*s));
		ref.name = sym_name(d, s);
		if (!ref.name || !ref.name[0])
			continue;
		ref.slot = (void **)(d->base + r[i].r_offset);
		ref.type = type;
		ref.sym_defined = s->st_shndx != SHN_UNDEF;
		ref.version = NULL;
		if (d->versym) {
			const Elf64_Versym *v = elem(d->versym, idx, sizeof(*v));

			if (in(d, v, sizeof(*v)))
				ref.version = verneed_name(d, *v & 0x7fff);
		}
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
