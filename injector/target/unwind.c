/* SPDX-License-Identifier: MIT */
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <elfutils/libdw.h>

#include "u64map.h"
#include "unwind.h"

#define CACHE_DEFAULT 65536
#define EXPR_STACK 16             /* DWARF expression stack depth */
#define EXPR_MAX_OPS 64           /* longer expressions are not evaluated */

/* The tables of one module, opened on first use. */
struct uw_module {
	uint64_t key;
	Dwarf_CFI *eh;            /* .eh_frame, NULL if none (owned: dwarf_cfi_end) */
	Dwarf *dw;                /* for .debug_frame, NULL if none */
	Dwarf_CFI *dbg;           /* owned by dw */
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
	}
	free(t->mods);
	u64map_clear(&t->mod_of);
	for (size_t i = 0; i < t->ncache; i++)
		free(t->cache[i].frame);
	free(t->cache);
	u64map_clear(&t->cache_of);
	free(t);
}

void unwind_tables__stats(const struct unwind_tables *t, struct unwind_stats *ret)
{
	*ret = t->st;
	ret->frames_cached = t->ncache;
}

/* Bytes of the sections libdw reads the CFI from. */
static uint64_t cfi_section_bytes(Elf *elf)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	uint64_t sum = 0;

	if (elf_getshdrstrndx(elf, &shstrndx) < 0)
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (name && (strcmp(name, ".eh_frame") == 0 || strcmp(name, ".eh_frame_hdr") == 0 ||
			     strcmp(name, ".debug_frame") == 0))
			sum += sh.sh_size;
	}
	return sum;
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
	if (c->elf) {
		m->eh = dwarf_getcfi_elf(c->elf);
		m->dw = dwarf_begin_elf(c->elf, DWARF_C_READ, NULL);
		m->dbg = m->dw ? dwarf_getcfi(m->dw) : NULL;
		t->st.cfi_bytes += cfi_section_bytes(c->elf);
	}
	t->st.modules++;
	if (!m->eh && !m->dbg)
		t->st.modules_without_cfi++;
	return m;
}

/*
 * The decoded frame of vaddr in module c: from the cache, else from libdw (kept if the
 * cache has room; *ret_owned tells the caller to free it otherwise). NULL: no CFI covers
 * vaddr. *ret_err is -ENOMEM on allocation failure.
 */
static Dwarf_Frame *frame_at(struct unwind_tables *t, const struct unwind_code *c,
			     uint64_t vaddr, bool *ret_owned, int *ret_err)
{
	uint64_t h = u64_hash2(c->key, vaddr), idx;
	struct uw_module *m;
	Dwarf_Frame *f = NULL;

	*ret_owned = false;
	*ret_err = 0;
	t->st.lookups++;
	if (u64map_get(&t->cache_of, h, &idx) && t->cache[idx].key == c->key &&
	    t->cache[idx].vaddr == vaddr) {
		t->st.cache_hits++;
		return t->cache[idx].frame;
	}
	m = module_of(t, c);
	if (!m) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	if (!m->eh || dwarf_cfi_addrframe(m->eh, vaddr, &f) != 0) {
		f = NULL;
		if (m->dbg && dwarf_cfi_addrframe(m->dbg, vaddr, &f) != 0)
			f = NULL;
	}
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
		Dwarf_Frame *f = NULL;
		bool owned = false, by_fp = false;
		int r, err;

		if (pc == 0) {
			/* not a root: glibc marks its outermost frames with an undefined rip */
			res.end = UNWIND_END_BAD_FRAME;
			break;
		}
		pcs[res.n++] = pc;
		r = tgt->code(tgt->arg, exact ? pc : pc - 1, &c);
		if (r == 0) {
			f = frame_at(t, &c, (exact ? pc : pc - 1) - c.bias, &owned, &err);
			if (err < 0)
				return err;
		}
		if (f) {
			r = step_cfi(tgt, f, &cur, &next);
			if (r == 0) {
				bool signal = false;

				dwarf_frame_info(f, NULL, NULL, &signal);
				exact = signal;
			}
			if (owned)
				free(f);
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
