/* SPDX-License-Identifier: MIT */
/*
 * ibverbs. The control path is hooked by symbol: ibv_reg_mr (programs bind either the
 * exported ibv_reg_mr or, through verbs.h's __ibv_reg_mr() when the access flags need
 * it, ibv_reg_mr_iova2; ibv_reg_mr_iova likewise), ibv_dereg_mr, ibv_modify_qp.
 *
 * The data path has no symbols: ibv_post_send / ibv_post_recv / ibv_poll_cq are static
 * inline in verbs.h and call qp->context->ops.post_send etc. So whenever a context shows
 * up (ibv_open_device's return, the context of a PD, QP or CQ passed to a hooked call)
 * we replace those three ops pointers with wrappers, after storing the originals in a
 * small per-context table. Wrappers look the originals up (one probe), call them and
 * record while enabled; poll_cq only when it returned completions. The ops are never
 * restored: idle wrappers cost a table probe. Each pointer store is a single aligned
 * 8-byte write, so threads already posting see either the original or the wrapper.
 */
#include <infiniband/verbs.h>

#include "preload.h"

#define NO_REAL_ERR ENOSYS
#define CTX_SLOTS 256                  /* power of two */

typedef struct ibv_context *(*ibv_open_device_fn)(struct ibv_device *);
typedef struct ibv_mr *(*ibv_reg_mr_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*ibv_reg_mr_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t, int);
typedef struct ibv_mr *(*ibv_reg_mr_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t,
					      unsigned int);
typedef int (*ibv_dereg_mr_fn)(struct ibv_mr *);
typedef struct ibv_qp *(*ibv_create_qp_fn)(struct ibv_pd *, struct ibv_qp_init_attr *);
typedef struct ibv_cq *(*ibv_create_cq_fn)(struct ibv_context *, int, void *,
					   struct ibv_comp_channel *, int);
typedef int (*ibv_modify_qp_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);

typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*post_recv_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);

struct ctx_slot {
	_Atomic uintptr_t ctx;
	void *_Atomic post_send;
	void *_Atomic post_recv;
	void *_Atomic poll_cq;
};

static struct ctx_slot g_ctxs[CTX_SLOTS];

static uint32_t ctx_hash(const void *ctx)
{
	return (uint32_t)(((uintptr_t)ctx >> 4) * 0x9e3779b1u) & (CTX_SLOTS - 1);
}

static struct ctx_slot *ctx_find(const struct ibv_context *ctx)
{
	uint32_t i = ctx_hash(ctx);

	for (uint32_t probe = 0; probe < CTX_SLOTS; probe++, i = (i + 1) & (CTX_SLOTS - 1)) {
		uintptr_t k = atomic_load_explicit(&g_ctxs[i].ctx, memory_order_acquire);

		if (k == (uintptr_t)ctx)
			return &g_ctxs[i];
		if (!k)
			return NULL;
	}
	return NULL;
}

/* ---- wrappers --------------------------------------------------------------------- */

/* The provider's op saved for this context (NULL if we never wrapped it). */
#define CTX_ORIG(ctx, op) ({                                                            \
		struct ctx_slot *s_ = ctx_find(ctx);                                     \
		s_ ? atomic_load_explicit(&s_->op, memory_order_acquire) : NULL;         \
	})

/*
 * <op>_slow for post_send / post_recv (`wr_t` struct ibv_send_wr / ibv_recv_wr): the
 * event sums the SGE lengths of the WR list; `first` is what it reports of the first WR.
 */
#define POST_SLOW(op, wr_t, api, first)                                                    \
	static __attribute__((noinline)) int op##_slow(struct ibv_qp *qp, wr_t *wr,        \
						       wr_t **bad, op##_fn orig)           \
	{                                                                                  \
		struct aiprof_event *e;                                                    \
		struct rec r;                                                              \
		int ret;                                                                   \
											   \
		if (unlikely(!orig))                                                       \
			return NO_REAL_ERR;                                                \
		if (!rec_begin(&r, AIPROF_COLLECT_RDMA))                                   \
			return orig(qp, wr, bad);                                          \
		ret = orig(qp, wr, bad);                                                   \
		e = rec_event(&r, AIPROF_EV_IBV, api);                                     \
		if (e) {                                                                   \
			uint64_t bytes = 0;                                                \
			uint32_t n = 0;                                                    \
											   \
			/* the WR list belongs to the caller and is unchanged by posting */ \
			for (const wr_t *w = wr; w && n < 4096; w = w->next, n++)          \
				for (int i = 0; i < w->num_sge; i++)                       \
					bytes += w->sg_list[i].length;                     \
			e->u.ibv.handle = (uintptr_t)qp;                                   \
			e->u.ibv.addr = wr && wr->num_sge > 0 ? wr->sg_list[0].addr : 0;   \
			e->u.ibv.length = bytes;                                           \
			e->u.ibv.qp_num = qp->qp_num;                                      \
			e->u.ibv.count = n;                                                \
			e->u.ibv.attr = first;                                             \
			e->u.ibv.result = ret;                                             \
		}                                                                          \
		rec_done(&r, e);                                                           \
		return ret;                                                                \
	}

POST_SLOW(post_send, struct ibv_send_wr, AIPROF_API_ibv_post_send,
	  wr ? (uint32_t)wr->opcode : 0)
POST_SLOW(post_recv, struct ibv_recv_wr, AIPROF_API_ibv_post_recv, 0)

static __attribute__((noinline)) int poll_cq_slow(struct ibv_cq *cq, int num, struct ibv_wc *wc,
						  poll_cq_fn orig)
{
	struct aiprof_event *e;
	struct rec r;
	int ret;

	if (unlikely(!orig))
		return -NO_REAL_ERR;
	if (!rec_begin(&r, AIPROF_COLLECT_RDMA))
		return orig(cq, num, wc);
	ret = orig(cq, num, wc);
	if (ret <= 0) {                 /* empty polls would flood the ring */
		rec_stop(&r);
		rec_done(&r, NULL);
		return ret;
	}
	e = rec_event(&r, AIPROF_EV_IBV, AIPROF_API_ibv_poll_cq);
	if (e) {
		uint64_t bytes = 0;

		for (int i = 0; i < ret; i++)
			bytes += wc[i].byte_len;
		e->u.ibv.handle = (uintptr_t)cq;
		e->u.ibv.length = bytes;
		e->u.ibv.qp_num = wc[0].qp_num;
		e->u.ibv.count = (uint32_t)ret;
		e->u.ibv.attr = (uint32_t)wc[0].opcode;
		e->u.ibv.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

/*
 * wrap_<op>, what a wrapped context's ops table points at: the provider's op straight
 * away while idle, else <op>_slow. `obj` is the QP or CQ the op works on.
 */
#define WRAP_OP(op, obj_t, a_t, b_t)                                                       \
	static int wrap_##op(obj_t *obj, a_t a, b_t b)                                     \
	{                                                                                  \
		op##_fn orig = (op##_fn)CTX_ORIG(obj->context, op);                         \
											   \
		if (likely(orig != NULL) && likely(hook_idle()))                           \
			return orig(obj, a, b);                                            \
		return op##_slow(obj, a, b, orig);                                         \
	}

WRAP_OP(post_send, struct ibv_qp, struct ibv_send_wr *, struct ibv_send_wr **)
WRAP_OP(post_recv, struct ibv_qp, struct ibv_recv_wr *, struct ibv_recv_wr **)
WRAP_OP(poll_cq, struct ibv_cq, int, struct ibv_wc *)

/* Stores `wrapper` in *op after remembering the original in *orig_slot. */
static void wrap_op(void **op, void *_Atomic *orig_slot, void *wrapper)
{
	void *cur = __atomic_load_n(op, __ATOMIC_ACQUIRE);

	if (!cur || cur == wrapper)
		return;
	atomic_store_explicit(orig_slot, cur, memory_order_release);
	__atomic_store_n(op, wrapper, __ATOMIC_RELEASE);
}

int ibv__wrap_context(struct ibv_context *ctx)
{
	uint32_t i;
	struct ctx_slot *s = NULL;

	if (!ctx)
		return -EINVAL;
	/* fast path: seen and still wrapped */
	s = ctx_find(ctx);
	if (s && __atomic_load_n((void **)&ctx->ops.post_send, __ATOMIC_RELAXED) ==
		 (void *)wrap_post_send)
		return 0;
	if (!s) {
		i = ctx_hash(ctx);
		for (uint32_t probe = 0; probe < CTX_SLOTS; probe++, i = (i + 1) & (CTX_SLOTS - 1)) {
			uintptr_t expected = 0;

			if (atomic_compare_exchange_strong(&g_ctxs[i].ctx, &expected,
							   (uintptr_t)ctx) ||
			    expected == (uintptr_t)ctx) {
				s = &g_ctxs[i];
				break;
			}
		}
		if (!s)
			return -ENOSPC;
	}
	/* A context re-allocated at a known address has fresh provider ops: re-wrap. */
	wrap_op((void **)&ctx->ops.post_send, &s->post_send, (void *)wrap_post_send);
	wrap_op((void **)&ctx->ops.post_recv, &s->post_recv, (void *)wrap_post_recv);
	wrap_op((void **)&ctx->ops.poll_cq, &s->poll_cq, (void *)wrap_poll_cq);
	return 0;
}

/* ---- hooked symbols ---------------------------------------------------------------- */

/* Wraps `ctx` (if any) and leaves errno as the caller's call left it. */
static void see_ctx(struct ibv_context *ctx)
{
	int saved = errno;

	if (ctx)
		(void)ibv__wrap_context(ctx);
	errno = saved;
}

/*
 * hook_<name> of a call that returns a new `obj_t` object (NULL and errno on failure):
 * on success the context `ctx`, an expression of `obj` and the parameters, is wrapped.
 */
#define CREATE_HOOK(name, obj_t, params, args, ctx)                                        \
	static obj_t *hook_##name params                                                   \
	{                                                                                  \
		name##_fn real = REAL(name);                                               \
		obj_t *obj;                                                                \
											   \
		if (unlikely(!real)) {                                                     \
			errno = NO_REAL_ERR;                                               \
			return NULL;                                                       \
		}                                                                          \
		obj = real args;                                                           \
		if (obj)                                                                   \
			see_ctx(ctx);                                                      \
		return obj;                                                                \
	}

CREATE_HOOK(ibv_open_device, struct ibv_context, (struct ibv_device *dev), (dev), obj)
CREATE_HOOK(ibv_create_qp, struct ibv_qp, (struct ibv_pd *pd, struct ibv_qp_init_attr *attr),
	    (pd, attr), obj->context)
CREATE_HOOK(ibv_create_cq, struct ibv_cq, (struct ibv_context *ctx, int cqe, void *cq_context,
	    struct ibv_comp_channel *channel, int comp_vector),
	    (ctx, cqe, cq_context, channel, comp_vector), ctx)

static void reg_done(struct rec *r, struct ibv_mr *mr, void *addr, size_t length,
		     unsigned access)
{
	struct aiprof_event *e = rec_event(r, AIPROF_EV_IBV, AIPROF_API_ibv_reg_mr);

	if (e) {
		e->u.ibv.handle = (uintptr_t)mr;
		e->u.ibv.addr = (uintptr_t)addr;
		e->u.ibv.length = length;
		e->u.ibv.attr = access;
		e->u.ibv.result = mr ? 0 : r->saved_errno;
	}
	rec_done(r, e);
}

/* ibv_reg_mr and its iova variants, all reported as ibv_reg_mr. */
#define REG_MR_HOOK(name, params, args)                                                    \
	static struct ibv_mr *hook_##name params                                           \
	{                                                                                  \
		name##_fn real = REAL(name);                                               \
		struct ibv_mr *mr;                                                         \
		struct rec r;                                                              \
											   \
		if (unlikely(!real)) {                                                     \
			errno = NO_REAL_ERR;                                               \
			return NULL;                                                       \
		}                                                                          \
		see_ctx(pd ? pd->context : NULL);                                          \
		if (likely(!rec_begin(&r, AIPROF_COLLECT_RDMA)))                           \
			return real args;                                                  \
		mr = real args;                                                            \
		reg_done(&r, mr, addr, length, (unsigned)access);                          \
		return mr;                                                                 \
	}

REG_MR_HOOK(ibv_reg_mr, (struct ibv_pd *pd, void *addr, size_t length, int access),
	    (pd, addr, length, access))
REG_MR_HOOK(ibv_reg_mr_iova, (struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
	    int access), (pd, addr, length, iova, access))
REG_MR_HOOK(ibv_reg_mr_iova2, (struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
	    unsigned int access), (pd, addr, length, iova, access))

HOOK_FAST(int, ibv_dereg_mr, ibv_dereg_mr_fn, (struct ibv_mr *mr), (mr))
{
	ibv_dereg_mr_fn real = REAL(ibv_dereg_mr);
	struct aiprof_event *e;
	uint64_t addr, length;
	struct rec r;
	int ret;

	if (unlikely(!real))
		return NO_REAL_ERR;
	if (likely(!rec_begin(&r, AIPROF_COLLECT_RDMA)))
		return real(mr);
	addr = mr ? (uintptr_t)mr->addr : 0;          /* mr is freed by the call */
	length = mr ? mr->length : 0;
	ret = real(mr);
	e = rec_event(&r, AIPROF_EV_IBV, AIPROF_API_ibv_dereg_mr);
	if (e) {
		e->u.ibv.handle = (uintptr_t)mr;
		e->u.ibv.addr = addr;
		e->u.ibv.length = length;
		e->u.ibv.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

static int hook_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	ibv_modify_qp_fn real = REAL(ibv_modify_qp);
	struct aiprof_event *e;
	struct rec r;
	int ret;

	if (unlikely(!real))
		return NO_REAL_ERR;
	see_ctx(qp ? qp->context : NULL);
	if (likely(!rec_begin(&r, AIPROF_COLLECT_RDMA)))
		return real(qp, attr, mask);
	ret = real(qp, attr, mask);
	e = rec_event(&r, AIPROF_EV_IBV, AIPROF_API_ibv_modify_qp);
	if (e) {
		e->u.ibv.handle = (uintptr_t)qp;
		e->u.ibv.qp_num = qp ? qp->qp_num : 0;
		e->u.ibv.attr = (uint32_t)mask;
		/* UINT32_MAX: the call did not change the state */
		e->u.ibv.state = attr && (mask & IBV_QP_STATE) ? (uint32_t)attr->qp_state
							       : UINT32_MAX;
		e->u.ibv.result = ret;
	}
	rec_done(&r, e);
	return ret;
}

const struct hook_impl hook_impls_ibv[] = {
#define HOOK(name, group) HOOK_IMPL_IF(group, IBV, HOOK_ID_##name, hook_##name)
#include "hooks.def"
#undef HOOK
	{ 0, NULL },
};
