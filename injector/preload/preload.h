/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the files of libaiprof.so. Nothing here is exported: the library
 * is built with -fvisibility=hidden and hooks are installed by writing their addresses
 * into other modules' GOT slots, never by symbol interposition.
 *
 * The hot path of every hook, when the library is idle, is:
 *     real = hook_real[id];  h = g_hdr;  if (!h->enabled) return real(args);
 * g_hdr is never NULL: until a ring exists (or after a fork) it points at a static idle
 * header whose `enabled` is always 0.
 */
#ifndef AIPROF_PRELOAD_H
#define AIPROF_PRELOAD_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

#include "event.h"
#include "ring.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- hook registry (patch.c) ------------------------------------------------------- */

enum hook_group { HOOK_GROUP_DL, HOOK_GROUP_CUDART, HOOK_GROUP_CUDA, HOOK_GROUP_NCCL,
		  HOOK_GROUP_IBV };

enum hook_id {
#define HOOK(name, group) HOOK_ID_##name,
#include "hooks.def"
#undef HOOK
	HOOK__COUNT
};

/* One hook implementation: which symbol it replaces and the function to install. */
struct hook_impl {
	enum hook_id id;
	void *fn;
};

/*
 * Each hook_*.c file builds its table from hooks.def, so a symbol listed there without
 * a hook_<name> in the file of its group does not compile:
 *
 *   const struct hook_impl hook_impls_nccl[] = {
 *   #define HOOK(name, group) HOOK_IMPL_IF(group, NCCL, HOOK_ID_##name, hook_##name)
 *   #include "hooks.def"
 *   #undef HOOK
 *           { 0, NULL },
 *   };
 *
 * The names are pasted right there, before a header's macro can rename them (cuda.h
 * defines cuGetProcAddress as cuGetProcAddress_v2). HOOK_IMPL_IF(group, want, id, fn)
 * is `{ id, fn },` when group is want, else nothing: HOOK_SAME_<g>_<g> exists only for
 * equal groups, and its two tokens push HOOK_IMPL_ENTRY into the place HOOK_PICK_2ND
 * takes.
 */
#define HOOK_IMPL_IF(group, want, id, fn) \
	HOOK_PICK_2ND_(HOOK_SAME_##group##_##want, HOOK_IMPL_SKIP, ~)(id, fn)
#define HOOK_SAME_DL_DL ~, HOOK_IMPL_ENTRY
#define HOOK_SAME_CUDART_CUDART ~, HOOK_IMPL_ENTRY
#define HOOK_SAME_CUDA_CUDA ~, HOOK_IMPL_ENTRY
#define HOOK_SAME_NCCL_NCCL ~, HOOK_IMPL_ENTRY
#define HOOK_SAME_IBV_IBV ~, HOOK_IMPL_ENTRY
#define HOOK_PICK_2ND_(...) HOOK_PICK_2ND(__VA_ARGS__)
#define HOOK_PICK_2ND(a, b, ...) b
#define HOOK_IMPL_ENTRY(id, fn) { id, (void *)fn },
#define HOOK_IMPL_SKIP(id, fn)

/* Implementation tables, one per hook_*.c file, terminated by { 0, NULL }. */
extern const struct hook_impl hook_impls_dl[];
extern const struct hook_impl hook_impls_cudart[];
extern const struct hook_impl hook_impls_cuda[];
extern const struct hook_impl hook_impls_nccl[];
extern const struct hook_impl hook_impls_ibv[];

/*
 * The real function behind each hook: the definition the dynamic linker would bind the
 * symbol to (first non-aiprof module in load order that defines it, default version).
 * Written once, before any GOT slot is pointed at the hook; never our own hook.
 */
extern void *hook_real[HOOK__COUNT];

/* Slow path: resolves a hook's real function now. Returns NULL if no module defines it. */
void *hook_resolve(enum hook_id id);

static inline void *hook_real_get(enum hook_id id)
{
	void *p = __atomic_load_n(&hook_real[id], __ATOMIC_ACQUIRE);

	return likely(p != NULL) ? p : hook_resolve(id);
}

#define REAL(name) ((name##_fn)hook_real_get(HOOK_ID_##name))

/* ---- hook fast path ---------------------------------------------------------------- */

/* What hooks record into; never NULL (an idle header until a ring exists). */
extern struct aiprof_ring_hdr *g_hdr;

/* The only test an idle hook makes: one relaxed load of hdr->enabled. */
static inline bool hook_idle(void)
{
	struct aiprof_ring_hdr *h = __atomic_load_n(&g_hdr, __ATOMIC_RELAXED);

	return !atomic_load_explicit(&h->enabled, memory_order_relaxed);
}

/*
 * Defines hook_<name>: when the real function is resolved and the library is idle it
 * jumps straight to it; anything else (recording, not resolved yet) goes to
 * slow_<name>, whose body follows the macro. Both have the hooked function's exact
 * signature, so both branches compile to a tail jump and the idle hook adds a few
 * instructions and no stack frame to the call:
 *
 *   HOOK_FAST(int, foo, foo_fn, (int a, int b), (a, b))
 *   {
 *           ... slow path, may record ...
 *   }
 */
#define HOOK_FAST(ret_t, name, fn_t, params, args)                                      \
	static ret_t slow_##name params __attribute__((noinline));                       \
	static ret_t hook_##name params                                                  \
	{                                                                                \
		fn_t real_ = (fn_t)__atomic_load_n(&hook_real[HOOK_ID_##name],           \
						   __ATOMIC_ACQUIRE);                    \
		if (likely(real_ != NULL) && likely(hook_idle()))                        \
			return real_ args;                                               \
		return slow_##name args;                                                 \
	}                                                                                \
	static ret_t slow_##name params

/*
 * A function we call but do not hook (cuFuncGetName, ncclCommUserRank, ...), looked up
 * on first use in the first module defining it (never a copy of libaiprof). A miss is
 * retried only after more modules were loaded.
 */
struct lazy_sym {
	const char *name;
	void *_Atomic p;
	_Atomic uint64_t fail_adds;
};
#define LAZY_SYM(n) { .name = (n) }

void *lazy_sym_get_slow(struct lazy_sym *s);

static inline void *lazy_sym_get(struct lazy_sym *s)
{
	void *p = atomic_load_explicit(&s->p, memory_order_acquire);

	return likely(p != NULL) ? p : lazy_sym_get_slow(s);
}

const char *hook_name(enum hook_id id);
/* Our hook for `id`, or NULL. */
void *hook_fn(enum hook_id id);
/* Returns the hook id for symbol `name`, or -1. */
int hook_lookup_name(const char *name);
/* If `fn` is the real function of a hook of `group`, returns that hook, else `fn`. */
void *hook_substitute(void *fn, enum hook_group group);

/* ---- module walking and GOT patching (patch.c) ------------------------------------- */

int patch__init(void);
/*
 * Scans loaded modules and patches GOT slots of hooked symbols in modules not yet seen;
 * verifies slots patched earlier. `wait` = false makes it give up (returning -EBUSY)
 * instead of waiting when another thread is scanning.
 */
int patch__rescan(bool wait);
/* dlpi_adds/dlpi_subs changed since the last rescan. */
bool patch__modules_changed(void);
void patch__atfork_child(void);
void patch__rearm(void);
/* Released by the injector (lib.c lib__go_dormant): no more patching until woken. */
void patch__set_dormant(void);

/* ---- process state (lib.c) --------------------------------------------------------- */

extern struct aiprof_ring_hdr *g_ring;  /* the ring this copy owns, NULL if none */
extern uint32_t g_pid;
extern bool g_active;                   /* this copy owns the ring and the hooks */
extern bool g_preloaded;                /* LD_PRELOAD put it there: not released */
/*
 * The library's only exported symbol, defined in a file generated at link time
 * (module.mk): a hash of the objects linked in. It identifies the build in the ring
 * header and marks a module as a copy of libaiprof, which the patcher never touches
 * and never takes a "real" function from.
 */
extern const uint64_t aiprof_preload_build;

struct tls {
	uint32_t tid;
	uint32_t depth;   /* > 0 while inside one of our hooks that records */
	int stack_state;  /* callstack.c: 0 = bounds not read yet, 1 = known, -1 = unavailable */
	uintptr_t stack_lo, stack_hi;   /* this thread's stack, for the frame-pointer walk */
	void *cs;         /* callstack.c's per-thread state (saves a TLS lookup per launch) */
};

struct tls *tls_get(void);

/* Emits a LIB_STATUS line into the ring (whether or not recording). */
void lib_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Emits `s` as AIPROF_EV_STRING (or LIB_STATUS) chunks. Returns 0 or -ENOSPC. */
int emit_string(struct aiprof_ring_hdr *h, uint16_t type, uint32_t id, const char *s,
		size_t len);

/* ---- clock (clock.c) --------------------------------------------------------------- */

/*
 * Timestamps are CLOCK_MONOTONIC ns. Where the kernel itself uses the TSC as the clock
 * source, hooks read the TSC (10 ns) and convert with parameters the control thread
 * re-anchors to clock_gettime() every second; otherwise they call clock_gettime()
 * (vDSO, ~20 ns). `mult` == 0 means ticks are already ns.
 */
struct clk_params {
	uint64_t tsc0;
	uint64_t mono0;
	uint64_t mult;    /* ns per tick, 32.32 fixed point */
};

extern const struct clk_params *_Atomic g_clk;

static inline uint64_t clk_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline const struct clk_params *clk_get(void)
{
	return atomic_load_explicit(&g_clk, memory_order_acquire);
}

static inline uint64_t clk_ticks(const struct clk_params *p)
{
	return p->mult ? __rdtsc() : clk_mono_ns();
}

static inline uint64_t clk_ns(const struct clk_params *p, uint64_t ticks)
{
	if (!p->mult)
		return ticks;
	__int128 d = (__int128)(int64_t)(ticks - p->tsc0) * (__int128)p->mult;
	return p->mono0 + (uint64_t)(int64_t)(d >> 32);
}

static inline uint64_t clk_dur(const struct clk_params *p, uint64_t t0, uint64_t t1)
{
	if (t1 < t0)
		return 0;
	if (!p->mult)
		return t1 - t0;
	return (uint64_t)(((unsigned __int128)(t1 - t0) * p->mult) >> 32);
}

void clk__init(void);
/* Re-anchors the TSC conversion. Control thread only. */
void clk__calibrate(void);

/* ---- recording helpers ------------------------------------------------------------- */

struct rec {
	struct aiprof_ring_hdr *h;
	const struct clk_params *clk;
	struct tls *tls;
	uint64_t t0;
	uint64_t t1;
	int saved_errno;
};

bool rec_begin_slow(struct rec *r, struct aiprof_ring_hdr *h, uint32_t collector);

/*
 * Returns true when this call must be recorded: the library is enabled, `collector` is
 * requested and we are not already inside one of our hooks on this thread. Then the
 * caller must call rec_event() and rec_done() exactly once each.
 */
static inline bool rec_begin(struct rec *r, uint32_t collector)
{
	struct aiprof_ring_hdr *h = __atomic_load_n(&g_hdr, __ATOMIC_RELAXED);

	if (likely(!atomic_load_explicit(&h->enabled, memory_order_relaxed)))
		return false;
	return rec_begin_slow(r, h, collector);
}

/* Ends the timed interval (and saves the errno the real function left). */
static inline void rec_stop(struct rec *r)
{
	r->t1 = clk_ticks(r->clk);
	r->saved_errno = errno;
}

/* Reserves the event of a stopped interval (NULL if the ring is full). */
static inline struct aiprof_event *rec_reserve(struct rec *r, uint16_t type, uint16_t api)
{
	struct aiprof_event *e = ring__reserve(r->h);

	if (!e)
		return NULL;
	e->type = type;
	e->api = api;
	e->tid = r->tls->tid;
	e->pid = g_pid;
	e->flags = 0;
	e->ts = clk_ns(r->clk, r->t0);
	e->dur = clk_dur(r->clk, r->t0, r->t1);
	memset(&e->u, 0, sizeof(e->u));
	return e;
}

/* rec_stop() + rec_reserve(). */
static inline struct aiprof_event *rec_event(struct rec *r, uint16_t type, uint16_t api)
{
	rec_stop(r);
	return rec_reserve(r, type, api);
}

/* Publishes `e` (if any), leaves the hook and restores the caller's errno. */
static inline void rec_done(struct rec *r, struct aiprof_event *e)
{
	if (e)
		ring__commit(r->h, e);
	r->tls->depth--;
	errno = r->saved_errno;
}

/* ---- pinned host memory (hostmem.c) ------------------------------------------------ */

void hostmem__add(uintptr_t ptr, uint64_t len);
void hostmem__del(uintptr_t ptr);
/* 1 if `ptr` is inside a range we saw registered or allocated pinned, else 0. */
int hostmem__lookup(uintptr_t ptr);
void hostmem__atfork_child(void);

enum mem_class { MEM_UNKNOWN = 0, MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE };
/* Classifies a pointer: our pinned table, then the real cudaPointerGetAttributes. */
enum mem_class hostmem__classify(uintptr_t ptr);
/*
 * Resolves a copy's direction (`kind` as enum aiprof_memcpy_kind; DEFAULT is resolved
 * from both pointers) and ORs AIPROF_MEMCPY_F_HOST_* for the host side into *flags.
 */
void hostmem__memcpy_class(uint32_t kind, uintptr_t dst, uintptr_t src, uint32_t *kind_out,
			   uint32_t *flags);

/* ---- interned names (intern.c) ----------------------------------------------------- */

enum intern_table { INTERN_CUFUNC, INTERN_CUKERNEL, INTERN_CUPTI_NAME, INTERN_STACK, INTERN__TABLES };
/*
 * Returns the name id of `key` (a CUfunction or a CUPTI name pointer), asking `get_name`
 * for the name the first time; 0 if unknown. Emits the string into `h` once per
 * hdr->generation.
 */
uint32_t intern__id(struct aiprof_ring_hdr *h, enum intern_table t, uintptr_t key,
		    const char *(*get_name)(uintptr_t key));
/* Whether the string of `id` went into h in this generation (not lost to a full ring). */
bool intern__sent(struct aiprof_ring_hdr *h, uint32_t id);
/* A woken forked child's ring has seen none of the names its parent's had. */
void intern__forget_sent(void);

/* ---- call stacks at launches (callstack.c) ------------------------------------------ */

#define CALLSTACK_MAX 64   /* return addresses kept per stack (outermost ones are cut) */

/*
 * Return addresses of the calling thread, innermost first, from the frame-pointer chain
 * starting at frame `fp` (__builtin_frame_address(0) of the hook), leading frames inside
 * libaiprof skipped. Never reads outside the thread's stack.
 */
size_t callstack__walk(struct tls *t, uintptr_t fp, uintptr_t *out, size_t max);
/*
 * The string id of the calling thread's stack (see callstack.c for the text), sent into
 * h before it returns, as kernel names are; 0 when no stack could be taken.
 */
uint32_t callstack__id(struct aiprof_ring_hdr *h, struct tls *t, uintptr_t fp);
/*
 * Makes sure the process has the CFI unwinder new call sites are walked with: loads
 * libgcc_s.so.1 (what glibc itself loads to cancel a thread) where nothing did yet, once,
 * and says which walker launch stacks get in a status line. Control thread only, when it
 * starts.
 */
void callstack__load_unwinder(void);

/* ---- control thread (control.c) ---------------------------------------------------- */

/* Starts the control thread serving ring `h`. Returns 0 or -errno. */
int control__start(struct aiprof_ring_hdr *h);
/*
 * The window is over (the injector released the ring, or vanished): the hooks idle for good,
 * the ring's pages are let go and its fd closed, and the copy can be woken again with
 * aiprof_rearm(). Called by the control thread, which then exits. (lib.c)
 */
void lib__go_dormant(void);

/* ---- CUPTI (cupti.c) --------------------------------------------------------------- */

extern _Atomic int g_cupti_active;
/* On enable with AIPROF_COLLECT_CUPTI. Control thread only; never fails hard. */
void cupti__enable(struct aiprof_ring_hdr *h);
/* On disable: flushes outstanding records into the ring and stops CUPTI. */
void cupti__disable(struct aiprof_ring_hdr *h);
void cupti__atfork_child(void);
void cupti__rearm_child(void);
/* Around a launch or copy while CUPTI is active: returns the correlation id pushed. */
uint64_t cupti__push(void);
void cupti__pop(void);

/* ---- hook bodies the hook_*.c files share ------------------------------------------ */

/*
 * Defines hook_<name> for a call recorded as one event, the body most hooks have: a
 * HOOK_FAST whose slow path returns `no_real` while no real function is resolved, calls
 * the real one untimed when rec_begin(`collector`) says not to record, and otherwise
 * times the call and evaluates `done`. `done` publishes the event (rec_mem() and the
 * like, or rec_event() + rec_done()); it sees the hook's parameters, `r` (the struct
 * rec), `ret` (what the real function returned) and `corr`, the CUPTI correlation id
 * pushed around the call when `correlate` is true and CUPTI is active, else 0 (so no
 * parameter of the hook may have one of these names):
 *
 *   HOOK_RECORD(cudaError_t, NO_REAL, AIPROF_COLLECT_CUDA, false, cudaFree, cudaFree_fn,
 *               (void *dev), (dev), rec_mem(&r, AIPROF_EV_CUDA_FREE, ..., ret))
 */
#define HOOK_RECORD(ret_t, no_real, collector, correlate, name, fn_t, params, args, done) \
	HOOK_FAST(ret_t, name, fn_t, params, args)                                        \
	{                                                                                 \
		fn_t real = (fn_t)hook_real_get(HOOK_ID_##name);                          \
		uint64_t corr = 0;                                                        \
		struct rec r;                                                             \
		ret_t ret;                                                                \
											  \
		if (unlikely(!real))                                                      \
			return no_real;                                                   \
		if (likely(!rec_begin(&r, collector)))                                    \
			return real args;                                                 \
		if ((correlate) &&                                                        \
		    atomic_load_explicit(&g_cupti_active, memory_order_relaxed))          \
			corr = cupti__push();                                             \
		ret = real args;                                                          \
		if (corr)                                                                 \
			cupti__pop();                                                     \
		done;                                                                     \
		return ret;                                                               \
	}

/*
 * Defines hook_<name> for a lookup that returns a function through `*out`
 * (cuGetProcAddress, cudaGetDriverEntryPoint): when it returns `ok` with the real
 * function of one of our hooks of `group`, the caller gets the hook instead. Records
 * nothing, and has no idle fast path: handing out hooks is what it is for.
 */
#define HOOK_HAND_OUT(ret_t, ok, no_real, group, name, fn_t, params, args, out)          \
	static ret_t hook_##name params                                                  \
	{                                                                                \
		fn_t real = (fn_t)hook_real_get(HOOK_ID_##name);                         \
		ret_t ret;                                                               \
											 \
		if (unlikely(!real))                                                     \
			return no_real;                                                  \
		ret = real args;                                                         \
		if (ret == (ok) && (out) && *(out))                                      \
			*(out) = hook_substitute(*(out), group);                         \
		return ret;                                                              \
	}

/* The events of a recorded call, as `done` of HOOK_RECORD: each ends the record. */

/* An allocation or free (`type` CUDA_ALLOC / CUDA_FREE) of `kind` memory at `ptr`. */
static inline void rec_mem(struct rec *r, uint16_t type, uint16_t api, uintptr_t ptr,
			   uint64_t bytes, uint32_t kind, int32_t result)
{
	struct aiprof_event *e = rec_event(r, type, api);

	if (e)
		e->u.mem = (struct aiprof_ev_mem){ .ptr = ptr, .bytes = bytes, .kind = kind,
						   .result = result };
	rec_done(r, e);
}

/* A wait on a stream, event, context or the device (`handle` 0). */
static inline void rec_sync(struct rec *r, uint16_t api, uintptr_t handle, uint32_t kind,
			    int32_t result)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_SYNC, api);

	if (e)
		e->u.sync = (struct aiprof_ev_sync){ .handle = handle, .kind = kind,
						     .result = result };
	rec_done(r, e);
}

/* A copy of `kind` (enum aiprof_memcpy_kind): classifies its host side. */
static inline void rec_memcpy(struct rec *r, uint16_t api, uint32_t kind, uintptr_t dst,
			      uintptr_t src, uint64_t bytes, uintptr_t stream, bool async,
			      uint64_t corr, int32_t result)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_CUDA_MEMCPY, api);

	if (e) {
		uint32_t k, flags = async ? AIPROF_MEMCPY_F_ASYNC : 0;

		hostmem__memcpy_class(kind, dst, src, &k, &flags);
		e->u.memcpy = (struct aiprof_ev_memcpy){
			.bytes = bytes, .dst = dst, .src = src, .stream = stream, .kind = k,
			.flags = flags, .correlation = corr, .result = result,
		};
	}
	rec_done(r, e);
}

/* ---- ibverbs ops-table wrapping (hook_ibv.c) ---------------------------------------- */

struct ibv_context;
/* Wraps ctx->ops.post_send/post_recv/poll_cq once. Returns 0, -ENOSPC or -EINVAL. */
int ibv__wrap_context(struct ibv_context *ctx);

#endif
