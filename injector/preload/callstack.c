/* SPDX-License-Identifier: MIT */
/*
 * Call stacks at kernel launches, for the GPU-launch flame graph.
 *
 * A launch hook takes the return addresses of the calling thread and interns the stack:
 * its hash is the key of the INTERN_STACK table, the text "ADDR,ADDR,..." (lower-case hex,
 * innermost first; a leading '@' when it was unwound by CFI) is sent once per stack and
 * generation as an AIPROF_EV_STRING, and the launch carries the string id in
 * u.launch.stack_id. The injector symbolises the addresses. Frames inside libaiprof
 * itself (a hook that did not tail-call) are skipped.
 *
 * Two walkers. The call site (the innermost frames by frame pointers, below) is looked up
 * first, and a site seen before takes its stack without any walk: that is the fast path.
 * A new site is walked:
 * - by CFI, with the unwinder the process already has (_Unwind_Backtrace of its
 *   libgcc_s, the one its C++ exceptions use), over the .eh_frame tables its libraries
 *   carry: whole stacks through code built without frame pointers (Debian's CPython,
 *   glibc, libtorch). Every frame above the hook is stopped at a call, where the tables
 *   are exact (an exception thrown from here would take the same path). Its cost is
 *   bounded per thread: CFI walks take at most 1/CFI_SHARE of the thread's time (a
 *   burst of CFI_BURST_NS at first), beyond that new sites are walked by frame pointers
 *   and sites known by CFI keep their stack.
 *   The library loads libgcc_s when it starts if nothing did (callstack__load_unwinder();
 *   a plain C program); a launch before that is walked by frame pointers (its site is
 *   walked again later); not used where loading fails or the injector asked for
 *   AIPROF_COLLECT_FP_STACKS (--unwind fp).
 * - by frame pointers: every load is inside the thread's own stack, whose bounds are read
 *   once per thread (pthread_getattr_np); a chain that leaves it, goes backwards or is
 *   misaligned ends the walk. Code without frame pointers ends the chain early or skips
 *   frames (fewer frames, never a fault).
 *
 * CPython: when the injector recognised the target's interpreter (hdr->py_valid, with the
 * offsets of its version, checked against its memory first), the hook also records the
 * calling thread's Python frames the way the eBPF walker does (bpf/pystack.bpf.h): from
 * PyGILState_GetThisThreadState() down the `previous` chain, (code object, instruction |
 * owner << 48 | is_entry << 56) per frame. These are the calling thread's own frames,
 * which nothing else changes while it is inside the CUDA call. The text then continues
 * "|code:flags,code:flags..." (innermost first) and the injector names and merges them.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unwind.h>

#include "preload.h"

/* linker-defined bounds of this library's image (hidden: no GOT entry, our own copy) */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char etext[] __attribute__((visibility("hidden")));

#define PY_MAX 64
#define PY_INSTR_MASK  0x0000ffffffffffffull
#define PY_OWNER_SHIFT 48
#define PY_ENTRY_SHIFT 56
#define PY_NONE 0xffffu

/*
 * Per-call-site reuse: a launch whose innermost SITE_FRAMES return addresses, frame and
 * Python frames equal an earlier one's on this thread (in this session) takes that
 * launch's stack without walking further, except 1 in SITE_REWALK times at random (1 in
 * SITE_REWALK_CFI for a site walked by CFI, and only while the CFI budget lasts: a
 * frame-pointer walk would cut its stack), when it walks again: a call site reached at the
 * same depth through callers that differ only further out is then counted by samples of
 * its real callers, never by a fixed pattern.
 */
#define SITE_FRAMES 3
#define SITE_BITS 8
#define SITE_REWALK 16u
#define SITE_REWALK_CFI 64u     /* a site walked by CFI: each walk costs more */

#define CFI_SHARE 200                   /* CFI walks: at most 0.5% of a thread's time */
#define CFI_BURST_NS 20000000ll         /* ... after a first 20 ms (a job's first steps) */

struct site {
	uintptr_t pc[SITE_FRAMES], fp;
	uint64_t pyh;
	uint32_t id, gen;         /* gen: generation + 1 the id was sent in; 0 = none */
	bool cfi;                 /* its stack was unwound by CFI */
};

struct cur_stack {
	uintptr_t pc[CALLSTACK_MAX];
	size_t n;
	uint64_t py[PY_MAX][2];       /* code, instr | flags */
	size_t npy;
	struct site sites[1u << SITE_BITS];
	uint64_t rng;
	int64_t cfi_budget_ns;          /* time CFI walks may still take */
	uint64_t cfi_at_ns;             /* when the budget was last topped up; 0 = never */
	bool cfi;                       /* pc[] came from the CFI walker */
	char text[(CALLSTACK_MAX + 2 * PY_MAX) * 17 + 3];   /* '@', '|' and the NUL */
};

typedef void *(*get_tstate_fn)(void);
static struct lazy_sym s_get_tstate = LAZY_SYM("PyGILState_GetThisThreadState");

typedef _Unwind_Reason_Code (*backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*get_ip_fn)(struct _Unwind_Context *);
/*
 * The process's unwinder, published by callstack__load_unwinder() once dlopen() returned
 * (never looked up by the hooks themselves: a libgcc_s that another thread is loading at
 * that moment is mapped before it is relocated).
 */
static backtrace_fn _Atomic g_backtrace;
static get_ip_fn _Atomic g_get_ip;

/* the stack being interned, for stack_text() (intern's callback takes only the key) */
static __thread struct cur_stack t_cur;

/* 1: bounds known, -1: unavailable (no walk on this thread) */
static int stack_bounds(struct tls *t)
{
	pthread_attr_t a;
	void *addr = NULL;
	size_t size = 0;
	int ok;

	if (likely(t->stack_state))
		return t->stack_state;
	if (pthread_getattr_np(pthread_self(), &a) != 0) {
		t->stack_state = -1;
		return -1;
	}
	ok = pthread_attr_getstack(&a, &addr, &size) == 0 && addr && size;
	pthread_attr_destroy(&a);
	t->stack_lo = (uintptr_t)addr;
	t->stack_hi = (uintptr_t)addr + size;
	t->stack_state = ok ? 1 : -1;
	return t->stack_state;
}

static inline bool frame_ok(const struct tls *t, uintptr_t fp)
{
	return fp >= t->stack_lo && fp <= t->stack_hi - 2 * sizeof(uintptr_t) &&
	       !(fp & (sizeof(uintptr_t) - 1));
}

/* The first frame, from fp up, whose return address is outside libaiprof; 0 if none. */
static uintptr_t first_foreign(const struct tls *t, uintptr_t fp)
{
	uintptr_t lo = (uintptr_t)__ehdr_start, hi = (uintptr_t)etext;

	for (int i = 0; i < 8 && frame_ok(t, fp); i++) {
		uintptr_t next = ((const uintptr_t *)fp)[0], ret = ((const uintptr_t *)fp)[1];

		if (ret < 4096)
			return 0;
		if (ret < lo || ret >= hi)
			return fp;
		if (next <= fp)
			return 0;
		fp = next;
	}
	return 0;
}

static size_t walk_from(const struct tls *t, uintptr_t fp, uintptr_t *out, size_t max)
{
	size_t n = 0;

	while (n < max && frame_ok(t, fp)) {
		uintptr_t next = ((const uintptr_t *)fp)[0], ret = ((const uintptr_t *)fp)[1];

		if (ret < 4096)
			break;
		out[n++] = ret;
		if (next <= fp)
			break;
		fp = next;
	}
	return n;
}

struct cfi_walk {
	get_ip_fn get_ip;
	uintptr_t *out;
	size_t n, max;
	bool foreign;           /* past libaiprof's own frames */
};

static _Unwind_Reason_Code cfi_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct cfi_walk *w = arg;
	uintptr_t ip = (uintptr_t)w->get_ip(ctx);

	if (ip < 4096)
		return _URC_END_OF_STACK;
	if (!w->foreign) {
		if (ip >= (uintptr_t)__ehdr_start && ip < (uintptr_t)etext)
			return _URC_NO_REASON;
		w->foreign = true;
	}
	w->out[w->n++] = ip;
	return w->n < w->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* Whether this thread may spend a CFI walk now (the budget refills at 1/CFI_SHARE). */
static bool cfi_allowed(struct cur_stack *c, uint64_t now)
{
	if (!c->cfi_at_ns)
		c->cfi_budget_ns = CFI_BURST_NS;
	else if (now > c->cfi_at_ns)
		c->cfi_budget_ns += (int64_t)((now - c->cfi_at_ns) / CFI_SHARE);
	if (c->cfi_budget_ns > CFI_BURST_NS)
		c->cfi_budget_ns = CFI_BURST_NS;
	c->cfi_at_ns = now;
	return c->cfi_budget_ns > 0;
}

/*
 * The calling thread's return addresses by CFI, innermost first, libaiprof's frames
 * skipped; 0 when the process has no unwinder, or the budget is spent.
 */
static size_t cfi_walk(struct cur_stack *c, uintptr_t *out, size_t max)
{
	backtrace_fn backtrace = atomic_load_explicit(&g_backtrace, memory_order_acquire);
	struct cfi_walk w = { .out = out, .max = max };
	uint64_t t0;

	if (!backtrace || !max)
		return 0;
	w.get_ip = atomic_load_explicit(&g_get_ip, memory_order_relaxed);
	t0 = clk_mono_ns();
	if (!cfi_allowed(c, t0))
		return 0;
	backtrace(cfi_frame, &w);
	c->cfi_budget_ns -= (int64_t)(clk_mono_ns() - t0);
	return w.n;
}

void callstack__load_unwinder(void)
{
	static bool done;
	const char *how = "already loaded";
	backtrace_fn bt;
	get_ip_fn ip;
	void *gcc;

	if (done)
		return;
	done = true;
	gcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!gcc) {
		gcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
		how = "loaded now";
	}
	bt = gcc ? (backtrace_fn)dlsym(gcc, "_Unwind_Backtrace") : NULL;
	ip = gcc ? (get_ip_fn)dlsym(gcc, "_Unwind_GetIP") : NULL;
	if (!bt || !ip) {
		const char *err = gcc ? "no _Unwind_Backtrace in it" : dlerror();

		lib_status("launch stacks by frame pointers only: libgcc_s.so.1: %s",
			   err ? err : "not found");
		return;
	}
	/* loaded and relocated: the hooks may call it now (our reference keeps it loaded) */
	atomic_store_explicit(&g_get_ip, ip, memory_order_relaxed);
	atomic_store_explicit(&g_backtrace, bt, memory_order_release);
	lib_status("launch stacks: new call sites unwound by CFI (libgcc_s.so.1 %s)", how);
}

size_t callstack__walk(struct tls *t, uintptr_t fp, uintptr_t *out, size_t max)
{
	if (stack_bounds(t) < 0)
		return 0;
	fp = first_foreign(t, fp);
	return fp ? walk_from(t, fp, out, max) : 0;
}

static inline uint64_t ld64(uintptr_t base, uint16_t off)
{
	return *(const uint64_t *)(base + off);
}

/* The calling thread's Python frames into c->py, innermost first. */
static void py_walk(const struct aiprof_ring_hdr *h, struct cur_stack *c)
{
	const struct aiprof_py_walk *o = &h->py;
	get_tstate_fn get = (get_tstate_fn)lazy_sym_get(&s_get_tstate);
	uintptr_t ts, frame, cf;

	c->npy = 0;
	if (!get)
		return;
	ts = (uintptr_t)get();
	if (!ts)
		return;
	if (o->ts_cframe != PY_NONE) {
		cf = (uintptr_t)ld64(ts, o->ts_cframe);
		frame = cf ? (uintptr_t)ld64(cf, o->cframe_current_frame) : 0;
	} else {
		frame = (uintptr_t)ld64(ts, o->ts_current_frame);
	}
	while (frame && !(frame & 7) && c->npy < PY_MAX) {
		uint64_t code = ld64(frame, o->fr_code) & o->code_mask;
		uint64_t fl = (ld64(frame, o->fr_instr) & PY_INSTR_MASK) |
			      (uint64_t)*(const uint8_t *)(frame + o->fr_owner) << PY_OWNER_SHIFT;

		if (o->fr_is_entry != PY_NONE)
			fl |= (uint64_t)(*(const uint8_t *)(frame + o->fr_is_entry) & 1) << PY_ENTRY_SHIFT;
		c->py[c->npy][0] = code;
		c->py[c->npy][1] = fl;
		c->npy++;
		frame = (uintptr_t)ld64(frame, o->fr_previous);
	}
}

/*
 * Products with a different odd multiplier per position, summed: the multiplies do not
 * wait for each other (a chained hash costs a multiply's latency per frame), and one mix
 * at the end spreads the bits. Stacks that collide in 64 bits would share a name.
 */
static uint64_t stack_hash(const struct cur_stack *c)
{
	uint64_t h = 0, k = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < c->n; i++, k += 0x632be59bd9b4e01aull)
		h += (c->pc[i] ^ (c->pc[i] >> 29)) * (k | 1);
	for (size_t i = 0; i < c->npy; i++, k += 0x632be59bd9b4e01aull)
		h += (c->py[i][0] * (k | 1)) ^ (c->py[i][1] * ((k >> 7) | 1));
	h ^= (uint64_t)c->n << 56 ^ (uint64_t)c->npy << 48 ^ (uint64_t)c->cfi << 47;
	h ^= h >> 31;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 32;
	return h ? h : 1;
}

static size_t put_hex(char *out, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[16];
	size_t k = 0, o = 0;

	do {
		tmp[k++] = hex[v & 15];
		v >>= 4;
	} while (v);
	while (k)
		out[o++] = tmp[--k];
	return o;
}

static const char *stack_text(uintptr_t key)
{
	struct cur_stack *c = &t_cur;
	size_t o = 0;

	(void)key;
	if (c->cfi)
		c->text[o++] = '@';
	for (size_t i = 0; i < c->n; i++) {
		if (i)
			c->text[o++] = ',';
		o += put_hex(c->text + o, c->pc[i]);
	}
	if (c->npy)
		c->text[o++] = '|';
	for (size_t i = 0; i < c->npy; i++) {
		if (i)
			c->text[o++] = ',';
		o += put_hex(c->text + o, c->py[i][0]);
		c->text[o++] = ':';
		o += put_hex(c->text + o, c->py[i][1]);
	}
	c->text[o] = 0;
	return c->text;
}

static uint64_t py_hash(const struct cur_stack *c)
{
	uint64_t h = c->npy;

	for (size_t i = 0; i < c->npy; i++)
		h += (c->py[i][0] ^ c->py[i][1] << 17) * (0x9e3779b97f4a7c15ull + 2 * i);
	return h;
}

static inline uint32_t rng_next(struct cur_stack *c, const struct tls *t)
{
	uint64_t x = c->rng ? c->rng : 0x2545f4914f6cdd1dull ^ t->tid;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	c->rng = x;
	return (uint32_t)x;
}

uint32_t callstack__id(struct aiprof_ring_hdr *h, struct tls *t, uintptr_t fp)
{
	struct cur_stack *c = likely(t->cs != NULL) ? t->cs : (t->cs = &t_cur);
	struct site *st;
	uintptr_t key_pc[SITE_FRAMES];
	uint32_t collectors = atomic_load_explicit(&h->collectors, memory_order_relaxed);
	uint64_t pyh = 0, hash, key;
	size_t nsite;
	uint32_t gen, id;

	if (collectors & AIPROF_COLLECT_NO_STACKS)
		return 0;
	if (unlikely(stack_bounds(t) < 0))
		return 0;
	fp = first_foreign(t, fp);
	c->npy = 0;
	if (unlikely(atomic_load_explicit(&h->py_valid, memory_order_acquire))) {
		py_walk(h, c);
		pyh = py_hash(c);
	}
	if (!fp && !c->npy)
		return 0;
	/* the call site: the innermost return addresses and the frame they start at */
	nsite = fp ? walk_from(t, fp, c->pc, SITE_FRAMES) : 0;
	for (size_t i = nsite; i < SITE_FRAMES; i++)
		c->pc[i] = 0;
	gen = atomic_load_explicit(&h->generation, memory_order_relaxed) + 1;
	key = (c->pc[0] ^ c->pc[1] * 0xff51afd7ed558ccdull ^ c->pc[2] * 0xc4ceb9fe1a85ec53ull ^
	       fp >> 4 ^ pyh) * 0x9e3779b97f4a7c15ull;
	st = &c->sites[key >> (64 - SITE_BITS)];
	if (st->fp == fp && st->pc[0] == c->pc[0] && st->pc[1] == c->pc[1] &&
	    st->pc[2] == c->pc[2] && st->pyh == pyh && st->gen == gen &&
	    ((rng_next(c, t) & ((st->cfi ? SITE_REWALK_CFI : SITE_REWALK) - 1)) ||
	     (st->cfi && !cfi_allowed(c, clk_mono_ns()))))
		return st->id;
	memcpy(key_pc, c->pc, sizeof(key_pc));
	c->n = collectors & AIPROF_COLLECT_FP_STACKS ? 0 : cfi_walk(c, c->pc, CALLSTACK_MAX);
	c->cfi = c->n > 0;
	if (!c->cfi)
		c->n = fp ? walk_from(t, fp, c->pc, CALLSTACK_MAX) : 0;
	hash = stack_hash(c);
	id = intern__id(h, INTERN_STACK, (uintptr_t)hash, stack_text);
	/* reused only once its string is in the ring: a full ring makes the next launch retry */
	*st = (struct site){ .pc = { key_pc[0], key_pc[1], key_pc[2] }, .fp = fp, .pyh = pyh,
			     .id = id, .gen = intern__sent(h, id) ? gen : 0, .cfi = c->cfi };
	return id;
}
