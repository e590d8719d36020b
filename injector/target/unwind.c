/* SPDX-License-Identifier: MIT */
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <elfutils/libdw.h>

#include "digest.h"
#include "u64map.h"
#include "unwind.h"

#define CACHE_DEFAULT 65536
#define EXPR_STACK 16             /* DWARF expression stack depth */
#define EXPR_MAX_OPS 64           /* longer expressions are not evaluated */

/* The tables of one module: libdw's opened on the first row decoded here. */
struct uw_module {
	uint64_t key;
	bool opened;
	Dwarf_CFI *eh;            /* .eh_frame, NULL if none (owned: dwarf_cfi_end) */
	Dwarf *dw;                /* for .debug_frame, NULL if none */
	Dwarf_CFI *dbg;           /* owned by dw */
	struct uws_file *share;   /* its shared rows; NULL: not shared */
	const void *image;        /* its CFI sections in the shared directory; NULL: none */
	size_t image_len;
	Elf *image_elf;           /* over image, for libdw (elf_end) */
};

struct uw_cached {
	uint64_t key, vaddr;
	Dwarf_Frame *frame;       /* NULL: no CFI covers vaddr */
};

struct unwind_tables {
	struct uw_module *mods;
	size_t nmods, capmods;
	struct u64map mod_of;     /* key -> index into mods */
	struct uw_cached *cache;
	size_t ncache, capcache, cache_max;
	struct u64map cache_of;   /* hash(key, vaddr) -> index into cache */
	struct uws_dir *share;    /* NULL: rows are not shared */
	struct unwind_stats st;
};

static const char *const end_names[UNWIND_END__N] = {
	[UNWIND_END_ROOT] = "root",
	[UNWIND_END_UNKNOWN_CODE] = "unknown_code",
	[UNWIND_END_NO_CFI] = "no_cfi",
	[UNWIND_END_STACK] = "stack_copy_end",
	[UNWIND_END_MAX_DEPTH] = "max_depth",
	[UNWIND_END_BAD_FRAME] = "bad_frame",
};

const char *unwind_end_name(enum unwind_end e)
{
	return (unsigned)e < UNWIND_END__N ? end_names[e] : "?";
}

int unwind_tables__new(size_t cache_max, struct unwind_tables **ret)
{
	struct unwind_tables *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->cache_max = cache_max ? cache_max : CACHE_DEFAULT;
	t->st.frames_cache_max = t->cache_max;
	*ret = t;
	return 0;
}

void unwind_tables__free(struct unwind_tables *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nmods; i++) {
		if (t->mods[i].eh)
			dwarf_cfi_end(t->mods[i].eh);
		if (t->mods[i].dw)
			dwarf_end(t->mods[i].dw);
		if (t->mods[i].image_elf)
			elf_end(t->mods[i].image_elf);
	}
	free(t->mods);
	u64map_clear(&t->mod_of);
	for (size_t i = 0; i < t->ncache; i++)
		free(t->cache[i].frame);
	free(t->cache);
	u64map_clear(&t->cache_of);
	uws_dir__free(t->share);
	free(t);
}

void unwind_tables__stats(const struct unwind_tables *t, struct unwind_stats *ret)
{
	*ret = t->st;
	ret->frames_cached = t->ncache;
	ret->shared = t->share != NULL;
	if (t->share)
		uws_dir__stats(t->share, &ret->share);
}

int unwind_tables__share(struct unwind_tables *t, const char *dir, char *why, size_t whylen)
{
	struct uws_dir *d;
	int r = uws_dir__open(dir, &d, why, whylen);

	if (r < 0)
		return r;
	uws_dir__free(t->share);
	t->share = d;
	return 0;
}

const char *unwind_tables__share_dir(const struct unwind_tables *t)
{
	return t->share ? uws_dir__path(t->share) : NULL;
}

static bool is_cfi_section(const char *name)
{
	return name && (strcmp(name, ".eh_frame") == 0 || strcmp(name, ".eh_frame_hdr") == 0 ||
			strcmp(name, ".debug_frame") == 0);
}

#define IMAGE_SECTIONS 2          /* .eh_frame_hdr and .eh_frame */

/* Whether the module's header is one the shared files describe; *eh: that header. */
static bool cfi_header_shareable(Elf *elf, GElf_Ehdr *eh)
{
	return gelf_getehdr(elf, eh) && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
	       eh->e_ident[EI_DATA] == ELFDATA2LSB && eh->e_machine == EM_X86_64;
}

/* The header fields the rows depend on, in a fixed layout (no padding reaches the hash). */
static void cfi_header_digest(struct sha256_ctx *h, const GElf_Ehdr *eh)
{
	uint8_t b[16] = { eh->e_ident[EI_CLASS], eh->e_ident[EI_DATA], eh->e_ident[EI_VERSION],
			  eh->e_ident[EI_OSABI], eh->e_ident[EI_ABIVERSION],
			  (uint8_t)eh->e_type, (uint8_t)(eh->e_type >> 8),
			  (uint8_t)eh->e_machine, (uint8_t)(eh->e_machine >> 8) };

	for (int i = 0; i < 4; i++)
		b[9 + i] = (uint8_t)(eh->e_flags >> (8 * i));
	sha256_ctx__update(h, "elf-header", sizeof("elf-header"));
	sha256_ctx__update(h, b, sizeof(b));
}

/*
 * Bytes of the sections libdw reads the CFI from; with digest, also their SHA-256 (names,
 * addresses, sizes and bytes, read from fd: nothing is kept) and in img[0..*ret_nimg) the
 * .eh_frame sections, for the shared image. -1: no digest (unreadable).
 */
static int cfi_sections(Elf *elf, int fd, uint64_t *ret_bytes, uint8_t digest[UWS_DIGEST_LEN],
			struct uws_section img[IMAGE_SECTIONS], size_t *ret_nimg)
{
	struct sha256_ctx *h = digest && fd >= 0 ? sha256_ctx__new() : NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	struct stat st;
	GElf_Ehdr eh;
	int r = h ? 0 : -1;

	*ret_bytes = 0;
	*ret_nimg = 0;
	if (elf_getshdrstrndx(elf, &shstrndx) < 0) {
		sha256_ctx__free(h);
		return -1;
	}
	if (h && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
		r = -1;
	/* The rows also depend on the header (the machine decides the registers, the class
	 * and byte order how the bytes read): it is in the digest, and a module the shared
	 * files cannot describe (they hold x86_64 rows, the image is ELF64 little-endian) is
	 * not shared at all. */
	if (r == 0 && !cfi_header_shareable(elf, &eh))
		r = -1;
	if (r == 0)
		cfi_header_digest(h, &eh);
	while ((scn = elf_nextscn(elf, scn))) {
		const char *name;
		char buf[65536];
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!is_cfi_section(name))
			continue;
		*ret_bytes += sh.sh_size;
		if (r < 0)
			continue;
		if (strcmp(name, ".debug_frame") != 0 && *ret_nimg < IMAGE_SECTIONS)
			img[(*ret_nimg)++] = (struct uws_section){
				.name = strcmp(name, ".eh_frame") == 0 ? ".eh_frame" : ".eh_frame_hdr",
				.type = sh.sh_type, .flags = sh.sh_flags, .addr = sh.sh_addr,
				.offset = sh.sh_offset, .size = sh.sh_size, .align = sh.sh_addralign };
		sha256_ctx__update(h, name, strlen(name) + 1);
		sha256_ctx__update(h, &sh.sh_addr, sizeof(sh.sh_addr));
		sha256_ctx__update(h, &sh.sh_size, sizeof(sh.sh_size));
		for (uint64_t done = 0; done < sh.sh_size && r == 0;) {
			size_t want = sh.sh_size - done < sizeof(buf) ? (size_t)(sh.sh_size - done) :
				      sizeof(buf);
			ssize_t got = pread(fd, buf, want, (off_t)(sh.sh_offset + done));

			if (got <= 0)
				r = -1;
			else
				sha256_ctx__update(h, buf, (size_t)got);
			done += got > 0 ? (uint64_t)got : 0;
		}
	}
	if (r == 0)
		sha256_ctx__final(h, digest);
	sha256_ctx__free(h);
	return r;
}

int unwind_module_digest(int fd, uint8_t digest[UWS_DIGEST_LEN])
{
	struct uws_section img[IMAGE_SECTIONS];
	uint64_t bytes;
	size_t nimg;
	Elf *elf;
	int r;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	r = cfi_sections(elf, fd, &bytes, digest, img, &nimg) == 0 ? 0 : -ENOTSUP;
	elf_end(elf);
	return r;
}

static struct uw_module *module_of(struct unwind_tables *t, const struct unwind_code *c)
{
	struct uw_module *m;
	uint64_t idx;

	if (u64map_get(&t->mod_of, c->key, &idx))
		return &t->mods[idx];
	if (t->nmods == t->capmods) {
		size_t ncap = t->capmods ? t->capmods * 2 : 32;
		struct uw_module *nv = reallocarray(t->mods, ncap, sizeof(*nv));

		if (!nv)
			return NULL;
		t->mods = nv;
		t->capmods = ncap;
	}
	m = &t->mods[t->nmods];
	*m = (struct uw_module){ .key = c->key };
	if (u64map_put(&t->mod_of, c->key, t->nmods) < 0)
		return NULL;
	t->nmods++;
	t->st.modules++;
	if (c->elf) {
		struct uws_section img[IMAGE_SECTIONS];
		uint8_t digest[UWS_DIGEST_LEN];
		uint64_t bytes;
		size_t nimg;

		if (cfi_sections(c->elf, c->fd, &bytes, t->share ? digest : NULL, img, &nimg) == 0) {
			m->share = uws_dir__file(t->share, digest);
			m->image = uws_dir__image(t->share, digest, c->fd, img, nimg, &m->image_len);
		}
		t->st.cfi_bytes += bytes;
	}
	return m;
}

/* libdw's tables of m, on the first row decoded here. */
static void module_open(struct unwind_tables *t, struct uw_module *m, const struct unwind_code *c)
{
	if (m->opened)
		return;
	m->opened = true;
	if (m->image) {
		/* the shared copy of the .eh_frame sections: not read into this process */
		m->image_elf = elf_memory((char *)(uintptr_t)m->image, m->image_len);
		m->eh = m->image_elf ? dwarf_getcfi_elf(m->image_elf) : NULL;
		if (m->eh)
			t->st.modules_from_image++;
	}
	if (c->elf) {
		if (!m->eh)
			m->eh = dwarf_getcfi_elf(c->elf);
		m->dw = dwarf_begin_elf(c->elf, DWARF_C_READ, NULL);
		m->dbg = m->dw ? dwarf_getcfi(m->dw) : NULL;
	}
	t->st.modules_decoded++;
	if (c->fd < 0)
		t->st.modules_from_memory++;
	if (!m->eh && !m->dbg)
		t->st.modules_without_cfi++;
}

static bool share_row(struct unwind_tables *t, struct uw_module *m, uint64_t vaddr,
		      Dwarf_Frame *f);

/*
 * The decoded frame of vaddr in module m (code c): from the cache, else from libdw (kept if
 * the cache has room and the row did not go to the shared rules; *ret_owned tells the caller
 * to free it otherwise). NULL: no CFI covers vaddr. *ret_err is -ENOMEM on allocation
 * failure.
 */
static Dwarf_Frame *frame_at(struct unwind_tables *t, struct uw_module *m,
			     const struct unwind_code *c, uint64_t vaddr, bool *ret_owned,
			     int *ret_err)
{
	uint64_t h = u64_hash2(c->key, vaddr), idx;
	Dwarf_Frame *f = NULL;

	*ret_owned = false;
	*ret_err = 0;
	t->st.lookups++;
	if (u64map_get(&t->cache_of, h, &idx) && t->cache[idx].key == c->key &&
	    t->cache[idx].vaddr == vaddr) {
		t->st.cache_hits++;
		return t->cache[idx].frame;
	}
	module_open(t, m, c);
	if (!m->eh || dwarf_cfi_addrframe(m->eh, vaddr, &f) != 0) {
		f = NULL;
		if (m->dbg && dwarf_cfi_addrframe(m->dbg, vaddr, &f) != 0)
			f = NULL;
	}
	if (m->share && share_row(t, m, vaddr, f))
		goto uncached;    /* the next lookup finds it there */
	if (t->ncache < t->cache_max && !u64map_get(&t->cache_of, h, &idx)) {
		if (t->ncache == t->capcache) {
			size_t ncap = t->capcache ? t->capcache * 2 : 256;
			struct uw_cached *nv = reallocarray(t->cache, ncap, sizeof(*nv));

			if (!nv)
				goto uncached;
			t->cache = nv;
			t->capcache = ncap;
		}
		if (u64map_put(&t->cache_of, h, t->ncache) < 0)
			goto uncached;
		t->cache[t->ncache++] = (struct uw_cached){ .key = c->key, .vaddr = vaddr, .frame = f };
		if (f)
			t->st.frames_cache_bytes += malloc_usable_size(f);
		return f;
	}
uncached:
	*ret_owned = f != NULL;
	return f;
}

/* ---- DWARF expressions ------------------------------------------------------------------ */

struct expr_ctx {
	const struct unwind_target *tgt;
	const struct unwind_regs *regs;   /* the frame's registers (callee side) */
	uint64_t cfa;
	bool have_cfa;
};

/*
 * Evaluates ops with an optional initial value on the stack. *ret_is_value is true when
 * the expression ended in DW_OP_stack_value (a value, not an address). 0, -EINVAL for an
 * expression this does not evaluate, -EFAULT when memory or a register is not available.
 */
static int expr_eval(const struct expr_ctx *x, const Dwarf_Op *ops, size_t nops, bool push_cfa,
		     uint64_t *ret, bool *ret_is_value)
{
	uint64_t st[EXPR_STACK], a, b;
	size_t sp = 0;

	*ret_is_value = false;
	if (nops > EXPR_MAX_OPS)
		return -EINVAL;
	if (push_cfa) {
		if (!x->have_cfa)
			return -EINVAL;
		st[sp++] = x->cfa;
	}
#define NEED(k) do { if (sp < (k)) return -EINVAL; } while (0)
#define PUSH(v) do { if (sp >= EXPR_STACK) return -EINVAL; st[sp++] = (v); } while (0)
	for (size_t i = 0; i < nops; i++) {
		uint8_t op = ops[i].atom;

		if (op >= DW_OP_lit0 && op <= DW_OP_lit31) {
			PUSH((uint64_t)(op - DW_OP_lit0));
			continue;
		}
		if ((op >= DW_OP_breg0 && op <= DW_OP_breg31) || op == DW_OP_bregx) {
			unsigned reg = op == DW_OP_bregx ? (unsigned)ops[i].number :
					(unsigned)(op - DW_OP_breg0);
			int64_t off = op == DW_OP_bregx ? (int64_t)ops[i].number2 : (int64_t)ops[i].number;

			if (reg >= UW_NREGS || !(x->regs->valid & (1u << reg)))
				return -EFAULT;
			PUSH(x->regs->r[reg] + (uint64_t)off);
			continue;
		}
		switch (op) {
		case DW_OP_nop:
			break;
		case DW_OP_addr: case DW_OP_const1u: case DW_OP_const1s: case DW_OP_const2u:
		case DW_OP_const2s: case DW_OP_const4u: case DW_OP_const4s: case DW_OP_const8u:
		case DW_OP_const8s: case DW_OP_constu: case DW_OP_consts:
			PUSH(ops[i].number);
			break;
		case DW_OP_call_frame_cfa:
			if (!x->have_cfa)
				return -EINVAL;
			PUSH(x->cfa);
			break;
		case DW_OP_dup:
			NEED(1);
			a = st[sp - 1];
			PUSH(a);
			break;
		case DW_OP_drop:
			NEED(1);
			sp--;
			break;
		case DW_OP_over:
			NEED(2);
			a = st[sp - 2];
			PUSH(a);
			break;
		case DW_OP_swap:
			NEED(2);
			a = st[sp - 1];
			st[sp - 1] = st[sp - 2];
			st[sp - 2] = a;
			break;
		case DW_OP_deref:
			NEED(1);
			if (!x->tgt->read(x->tgt->arg, st[sp - 1], &st[sp - 1]))
				return -EFAULT;
			break;
		case DW_OP_plus_uconst:
			NEED(1);
			st[sp - 1] += ops[i].number;
			break;
		case DW_OP_neg:
			NEED(1);
			st[sp - 1] = -st[sp - 1];
			break;
		case DW_OP_not:
			NEED(1);
			st[sp - 1] = ~st[sp - 1];
			break;
		case DW_OP_plus: case DW_OP_minus: case DW_OP_and: case DW_OP_or: case DW_OP_xor:
		case DW_OP_mul: case DW_OP_shl: case DW_OP_shr: case DW_OP_shra: case DW_OP_eq:
		case DW_OP_ne: case DW_OP_lt: case DW_OP_le: case DW_OP_gt: case DW_OP_ge:
			NEED(2);
			b = st[--sp];
			a = st[sp - 1];
			switch (op) {
			case DW_OP_plus: a += b; break;
			case DW_OP_minus: a -= b; break;
			case DW_OP_and: a &= b; break;
			case DW_OP_or: a |= b; break;
			case DW_OP_xor: a ^= b; break;
			case DW_OP_mul: a *= b; break;
			case DW_OP_shl: a = b < 64 ? a << b : 0; break;
			case DW_OP_shr: a = b < 64 ? a >> b : 0; break;
			case DW_OP_shra: a = (uint64_t)((int64_t)a >> (b < 63 ? b : 63)); break;
			/* comparisons are signed (DWARF 5, 2.5.1.4) */
			case DW_OP_eq: a = a == b; break;
			case DW_OP_ne: a = a != b; break;
			case DW_OP_lt: a = (int64_t)a < (int64_t)b; break;
			case DW_OP_le: a = (int64_t)a <= (int64_t)b; break;
			case DW_OP_gt: a = (int64_t)a > (int64_t)b; break;
			case DW_OP_ge: a = (int64_t)a >= (int64_t)b; break;
			}
			st[sp - 1] = a;
			break;
		case DW_OP_stack_value:
			if (i + 1 != nops)
				return -EINVAL;
			*ret_is_value = true;
			break;
		default:
			return -EINVAL;   /* branches, pieces, TLS...: not seen in CFI of x86_64 code */
		}
	}
#undef NEED
#undef PUSH
	if (!sp)
		return -EINVAL;
	*ret = st[sp - 1];
	return 0;
}

/* ---- the walk ----------------------------------------------------------------------------- */

/*
 * One step by CFI: the caller's registers from f. 0; 1 when the return address is
 * undefined (the outermost frame); -EFAULT when needed memory is not in the copy;
 * -EINVAL when the CFI does not compute.
 */
static int step_cfi(const struct unwind_target *tgt, Dwarf_Frame *f,
		    const struct unwind_regs *cur, struct unwind_regs *next)
{
	struct expr_ctx x = { .tgt = tgt, .regs = cur };
	Dwarf_Op ops_mem[3], *ops;
	size_t nops;
	bool is_value, signal = false;
	int ra, r;

	if (dwarf_frame_cfa(f, &ops, &nops) != 0 || nops == 0)
		return -EINVAL;
	r = expr_eval(&x, ops, nops, false, &x.cfa, &is_value);
	if (r < 0)
		return r;
	x.have_cfa = true;
	ra = dwarf_frame_info(f, NULL, NULL, &signal);
	if (ra < 0 || ra >= UW_NREGS)
		return -EINVAL;

	*next = (struct unwind_regs){ 0 };
	for (int reg = 0; reg < UW_NREGS; reg++) {
		uint64_t v;

		if (reg == UW_RSP)
			continue;
		if (dwarf_frame_register(f, reg, ops_mem, &ops, &nops) != 0)
			return -EINVAL;
		if (nops == 0 && ops == ops_mem) {           /* undefined */
			if (reg == ra)
				return 1;
			continue;
		}
		if (nops == 0) {                              /* same value */
			if (cur->valid & (1u << reg)) {
				next->r[reg] = cur->r[reg];
				next->valid |= 1u << reg;
			}
			continue;
		}
		r = expr_eval(&x, ops, nops, true, &v, &is_value);
		if (r == 0 && !is_value && !tgt->read(tgt->arg, v, &v))
			r = -EFAULT;
		if (r < 0) {
			if (reg == ra)
				return r;
			continue;   /* a register the walk may never need */
		}
		next->r[reg] = v;
		next->valid |= 1u << reg;
	}
	next->r[UW_RSP] = x.cfa;
	next->valid |= 1u << UW_RSP;
	if (ra != UW_RIP) {
		next->r[UW_RIP] = next->r[ra];
		if (!(next->valid & (1u << ra)))
			return -EINVAL;
	}
	next->valid |= 1u << UW_RIP;
	return 0;
}

/* One step by frame pointer: 0, or -EFAULT. */
static int step_fp(const struct unwind_target *tgt, const struct unwind_regs *cur,
		   struct unwind_regs *next)
{
	uint64_t bp = cur->r[UW_RBP], saved_bp, ra;
	uint32_t need = 1u << UW_RBP | 1u << UW_RSP;

	if ((cur->valid & need) != need || bp < cur->r[UW_RSP] || (bp & 7))
		return -EFAULT;
	if (!tgt->read(tgt->arg, bp, &saved_bp) || !tgt->read(tgt->arg, bp + 8, &ra))
		return -EFAULT;
	*next = (struct unwind_regs){ 0 };
	next->r[UW_RBP] = saved_bp;
	next->r[UW_RSP] = bp + 16;
	next->r[UW_RIP] = ra;
	next->valid = 1u << UW_RBP | 1u << UW_RSP | 1u << UW_RIP;
	/* callee-saved registers the frame did not touch, as far as anyone can tell */
	for (int reg = UW_R12; reg <= UW_R15; reg++)
		if (cur->valid & (1u << reg)) {
			next->r[reg] = cur->r[reg];
			next->valid |= 1u << reg;
		}
	return 0;
}

/* ---- rows in compact form, for the shared rules ------------------------------------------ */

/*
 * A register rule as step_cfi() evaluates it (the CFA pushed first) when it comes to CFA +
 * n: a location (UWS_AT) or, ending in DW_OP_stack_value, a value (UWS_VAL). False for
 * anything else (a register, a dereference, an offset beyond 16 bits).
 */
static bool linear_rule(const Dwarf_Op *ops, size_t nops, uint8_t *ret_kind, int16_t *ret_off)
{
	struct { bool cfa; uint64_t v; } st[4] = { { true, 0 } };
	size_t sp = 1;
	bool value = false;
	int64_t off;

	if (nops > EXPR_MAX_OPS)
		return false;
	for (size_t i = 0; i < nops; i++) {
		uint8_t op = ops[i].atom;

		if (op == DW_OP_call_frame_cfa || (op >= DW_OP_lit0 && op <= DW_OP_lit31) ||
		    op == DW_OP_constu || op == DW_OP_consts || op == DW_OP_const1u ||
		    op == DW_OP_const1s || op == DW_OP_const2u || op == DW_OP_const2s ||
		    op == DW_OP_const4u || op == DW_OP_const4s || op == DW_OP_const8u ||
		    op == DW_OP_const8s) {
			if (sp == 4)
				return false;
			st[sp].cfa = op == DW_OP_call_frame_cfa;
			st[sp].v = op == DW_OP_call_frame_cfa ? 0 :
				   op >= DW_OP_lit0 && op <= DW_OP_lit31 ? (uint64_t)(op - DW_OP_lit0) :
				   ops[i].number;
			sp++;
		} else if (op == DW_OP_plus_uconst && sp >= 1) {
			st[sp - 1].v += ops[i].number;
		} else if ((op == DW_OP_plus || op == DW_OP_minus) && sp >= 2) {
			if (st[sp - 1].cfa && (op == DW_OP_minus || st[sp - 2].cfa))
				return false;
			st[sp - 2].cfa |= st[sp - 1].cfa;
			st[sp - 2].v = op == DW_OP_plus ? st[sp - 2].v + st[sp - 1].v :
				       st[sp - 2].v - st[sp - 1].v;
			sp--;
		} else if (op == DW_OP_stack_value && i + 1 == nops) {
			value = true;
		} else if (op != DW_OP_nop) {
			return false;
		}
	}
	off = (int64_t)st[sp - 1].v;
	if (!st[sp - 1].cfa || off < INT16_MIN || off > INT16_MAX)
		return false;
	*ret_kind = value ? UWS_VAL : UWS_AT;
	*ret_off = (int16_t)off;
	return true;
}

/* f's row in compact form; false when it needs more than a register plus an offset. */
static bool compact_row(Dwarf_Frame *f, struct uws_rule *ret)
{
	Dwarf_Op ops_mem[3], *ops;
	size_t nops;
	bool signal = false;
	unsigned cfa_reg;
	int64_t cfa_off;

	*ret = (struct uws_rule){ 0 };
	if (dwarf_frame_cfa(f, &ops, &nops) != 0 || nops != 1)
		return false;
	if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
		cfa_reg = (unsigned)(ops[0].atom - DW_OP_breg0);
		cfa_off = (int64_t)ops[0].number;
	} else if (ops[0].atom == DW_OP_bregx) {
		cfa_reg = ops[0].number < UW_NREGS ? (unsigned)ops[0].number : UW_NREGS;
		cfa_off = (int64_t)ops[0].number2;
	} else {
		return false;
	}
	if (cfa_reg >= UW_NREGS || cfa_off < INT32_MIN || cfa_off > INT32_MAX ||
	    dwarf_frame_info(f, NULL, NULL, &signal) != UW_RIP)
		return false;
	ret->cfa_reg = (uint8_t)cfa_reg;
	ret->cfa_off = (int32_t)cfa_off;
	ret->flags = signal ? UWS_SIGNAL : 0;
	for (unsigned reg = 0; reg < UW_NREGS; reg++) {
		uint8_t kind;
		int16_t off = 0;

		if (reg == UW_RSP)
			continue;
		if (dwarf_frame_register(f, (int)reg, ops_mem, &ops, &nops) != 0)
			return false;
		if (nops == 0)
			kind = ops == ops_mem ? UWS_UNDEF : UWS_SAME;
		else if (!linear_rule(ops, nops, &kind, &off))
			return false;
		ret->kinds |= (uint32_t)kind << (2 * uws_index(reg));
		ret->off[uws_index(reg)] = off;
	}
	return true;
}

/* Puts f's row (no CFI for vaddr when f is NULL) into m's shared rules: true when it is
 * there now, so this process need not keep it. */
static bool share_row(struct unwind_tables *t, struct uw_module *m, uint64_t vaddr,
		      Dwarf_Frame *f)
{
	struct uws_rule rule = { .flags = UWS_NO_CFI };

	if (f && !compact_row(f, &rule)) {
		t->st.rows_not_shareable++;
		return false;
	}
	return uws_file__put(t->share, m->share, vaddr, &rule);
}

/* One step by a shared rule: as step_cfi() with the frame the rule was made from. */
static int step_rule(const struct unwind_target *tgt, const struct uws_rule *u,
		     const struct unwind_regs *cur, struct unwind_regs *next)
{
	uint64_t cfa;

	if (!(cur->valid & (1u << u->cfa_reg)))
		return -EFAULT;
	cfa = cur->r[u->cfa_reg] + (uint64_t)(int64_t)u->cfa_off;
	*next = (struct unwind_regs){ 0 };
	for (unsigned reg = 0; reg < UW_NREGS; reg++) {
		uint64_t at, v;

		if (reg == UW_RSP)
			continue;
		at = cfa + (uint64_t)(int64_t)u->off[uws_index(reg)];
		switch (uws_kind_of(u, reg)) {
		case UWS_UNDEF:
			if (reg == UW_RIP)
				return 1;
			continue;
		case UWS_SAME:
			if (cur->valid & (1u << reg)) {
				next->r[reg] = cur->r[reg];
				next->valid |= 1u << reg;
			}
			continue;
		case UWS_VAL:
			v = at;
			break;
		case UWS_AT:
		default:
			if (!tgt->read(tgt->arg, at, &v)) {
				if (reg == UW_RIP)
					return -EFAULT;
				continue;
			}
			break;
		}
		next->r[reg] = v;
		next->valid |= 1u << reg;
	}
	next->r[UW_RSP] = cfa;
	next->valid |= 1u << UW_RSP | 1u << UW_RIP;
	return 0;
}

int unwind_stack(struct unwind_tables *t, const struct unwind_target *tgt,
		 const struct unwind_regs *regs, uint64_t *pcs, size_t max,
		 struct unwind_result *ret)
{
	struct unwind_regs cur = *regs, next;
	struct unwind_result res = { .end = UNWIND_END_MAX_DEPTH };
	bool exact = true;   /* pc is where execution is, not a return address */

	if (!(cur.valid & (1u << UW_RIP)) || !(cur.valid & (1u << UW_RSP))) {
		res.end = UNWIND_END_BAD_FRAME;
		goto out;
	}
	while (res.n < max) {
		uint64_t pc = cur.r[UW_RIP];
		struct unwind_code c;
		struct uws_rule rule;
		Dwarf_Frame *f = NULL;
		bool owned = false, by_fp = false, by_rule = false;
		int r, err;

		if (pc == 0) {
			/* not a root: glibc marks its outermost frames with an undefined rip */
			res.end = UNWIND_END_BAD_FRAME;
			break;
		}
		pcs[res.n++] = pc;
		r = tgt->code(tgt->arg, exact ? pc : pc - 1, &c);
		if (r == 0) {
			uint64_t vaddr = (exact ? pc : pc - 1) - c.bias;
			struct uw_module *m = module_of(t, &c);

			if (!m)
				return -ENOMEM;
			if (m->share && uws_file__get(t->share, m->share, vaddr, &rule))
				by_rule = !(rule.flags & UWS_NO_CFI);
			else if (!(f = frame_at(t, m, &c, vaddr, &owned, &err)) && err < 0)
				return err;
		}
		if (by_rule || f) {
			if (by_rule) {
				r = step_rule(tgt, &rule, &cur, &next);
				if (r == 0)
					exact = rule.flags & UWS_SIGNAL;
			} else {
				r = step_cfi(tgt, f, &cur, &next);
				if (r == 0) {
					bool signal = false;

					dwarf_frame_info(f, NULL, NULL, &signal);
					exact = signal;
				}
				if (owned)
					free(f);
			}
			if (r == 1) {
				res.end = UNWIND_END_ROOT;
				break;
			}
			if (r < 0) {
				res.end = r == -EFAULT ? UNWIND_END_STACK : UNWIND_END_BAD_FRAME;
				break;
			}
		} else {
			if (step_fp(tgt, &cur, &next) < 0) {
				res.end = r < 0 ? UNWIND_END_UNKNOWN_CODE : UNWIND_END_NO_CFI;
				break;
			}
			by_fp = true;
			exact = false;
		}
		/* the stack must grow toward the callers at every step: no loop, no going back */
		if (next.r[UW_RSP] <= cur.r[UW_RSP]) {
			res.end = UNWIND_END_BAD_FRAME;
			break;
		}
		if (by_fp)
			res.fp_frames++;
		cur = next;
	}
out:
	*ret = res;
	return 0;
}
