/* SPDX-License-Identifier: MIT */
/*
 * Fake libibverbs.so.1 for tests on machines without an RDMA NIC. Compiled against the
 * real <infiniband/verbs.h>; exports carry the real symbol versions (IBVERBS_1.1 for the
 * classic verbs, IBVERBS_1.7 ibv_reg_mr_iova, IBVERBS_1.8 ibv_reg_mr_iova2, see
 * libibverbs.map), so a program built against the header links to this double and would
 * run unchanged against the real library.
 *
 * Header subtleties this relies on: ibv_reg_mr, ibv_reg_mr_iova and ibv_query_port are
 * function-like macros in verbs.h (ibv_reg_mr calls the exported ibv_reg_mr when the
 * access flags are a compile-time constant without optional bits, ibv_reg_mr_iova2
 * otherwise), so their definitions below use a parenthesised name. ibv_post_send,
 * ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are static inline and call through
 * context->ops, which is filled; ibv_query_port goes through verbs_context.query_port
 * because the context is an extended one (abi_compat == __VERBS_ABI_IS_EXTENDED), as
 * contexts of every real provider are. None of those four data-path calls is a symbol.
 *
 * One device ("fakeib0", one active InfiniBand port). RC/UC queue pairs are loopback: the
 * destination QP number given in ibv_modify_qp(RTR) names another QP of this process (or
 * the QP itself). Posted sends, RDMA writes and RDMA reads validate lkeys/rkeys against the
 * registered memory regions, really move the bytes at post time, and produce completions
 * that become visible to ibv_poll_cq after NET_LATENCY_NS + bytes / NET_BYTES_PER_S (per
 * QP, in order) like a 100 Gb/s link.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define NET_LATENCY_NS   2000ULL
#define NET_BYTES_PER_S  12500000000ULL
#define FAKE_GUID        0x0002c90300fa4e00ULL
#define MAX_CQE          4194303
#define MAX_QP_WR        32768
#define MAX_SGE          30

struct fake_mr {
	struct ibv_mr mr;
	int access;
	struct fake_mr *next;
};

struct cqe {
	struct ibv_wc wc;
	uint64_t ready_ns;
};

struct fake_cq {
	struct ibv_cq cq;
	struct cqe *ring;      /* FIFO of cq.cqe entries */
	int head, count;
	bool overflow;
};

struct recv_wr {
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sge[MAX_SGE];
};

struct fake_qp {
	struct ibv_qp qp;
	struct ibv_qp_cap cap;
	bool sq_sig_all;
	uint32_t dest_qp_num;
	uint64_t busy_until;   /* completions of this QP's sends become visible in order */
	struct recv_wr *rq;    /* ring of cap.max_recv_wr posted receives */
	uint32_t rq_head, rq_count;
	struct fake_qp *next;
};

/* One lock for all verbs state; the data path of a test double does not need more. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_mr *mrs;
static struct fake_qp *qps;
static uint32_t next_key = 0x1000, next_qpn = 0x100, next_handle = 1;

static struct ibv_device fake_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "fakeib0",
	.dev_name = "uverbs0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",
	.ibdev_path = "/sys/class/infiniband/fakeib0",
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- devices --------------------------------------------------------------------------- */

struct ibv_device **(ibv_get_device_list)(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &fake_device;
	if (num_devices)
		*num_devices = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(FAKE_GUID);
}

int ibv_fork_init(void)
{
	return 0;
}

static int query_port_ext(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr,
			  size_t port_attr_len)
{
	struct ibv_port_attr a = {
		.state = IBV_PORT_ACTIVE,
		.max_mtu = IBV_MTU_4096,
		.active_mtu = IBV_MTU_4096,
		.gid_tbl_len = 1,
		.max_msg_sz = 1U << 30,
		.pkey_tbl_len = 1,
		.lid = 1,
		.sm_lid = 1,
		.max_vl_num = 4,
		.active_width = 2,    /* 4X */
		.active_speed = 32,   /* EDR: 4X EDR = 100 Gb/s */
		.phys_state = 5,      /* LinkUp */
		.link_layer = IBV_LINK_LAYER_INFINIBAND,
	};

	if (!context || !port_attr)
		return EINVAL;
	if (port_num != 1)
		return EINVAL;
	memcpy(port_attr, &a, port_attr_len < sizeof(a) ? port_attr_len : sizeof(a));
	return 0;
}

int (ibv_query_port)(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	/* Callers go through ___ibv_query_port(), which passes a full struct ibv_port_attr. */
	return query_port_ext(context, port_num, (struct ibv_port_attr *)port_attr, sizeof(struct ibv_port_attr));
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	memset(device_attr, 0, sizeof(*device_attr));
	snprintf(device_attr->fw_ver, sizeof(device_attr->fw_ver), "%s", "20.99.0000 (aiprof fake)");
	device_attr->node_guid = htobe64(FAKE_GUID);
	device_attr->sys_image_guid = htobe64(FAKE_GUID);
	device_attr->max_mr_size = ~0ULL;
	device_attr->page_size_cap = 0xfffff000;
	device_attr->vendor_id = 0x02c9;
	device_attr->vendor_part_id = 4123;
	device_attr->max_qp = 131072;
	device_attr->max_qp_wr = MAX_QP_WR;
	device_attr->max_sge = MAX_SGE;
	device_attr->max_cq = 16777216;
	device_attr->max_cqe = MAX_CQE;
	device_attr->max_mr = 16777216;
	device_attr->max_pd = 16777216;
	device_attr->max_qp_rd_atom = 16;
	device_attr->max_qp_init_rd_atom = 16;
	device_attr->max_pkeys = 1;
	device_attr->phys_port_cnt = 1;
	return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (!context || !gid || port_num != 1 || index != 0)
		return -1;
	gid->global.subnet_prefix = htobe64(0xfe80000000000000ULL);
	gid->global.interface_id = htobe64(FAKE_GUID + 1);
	return 0;
}

/* ---- data path (reached through context->ops) ------------------------------------------ */

static struct fake_mr *mr_find(uint32_t key, bool remote, uint64_t addr, uint64_t len, int need_access)
{
	for (struct fake_mr *m = mrs; m; m = m->next) {
		uint64_t start = (uintptr_t)m->mr.addr;

		if ((remote ? m->mr.rkey : m->mr.lkey) != key)
			continue;
		if (addr < start || addr + len > start + m->mr.length || (m->access & need_access) != need_access)
			return NULL;
		return m;
	}
	return NULL;
}

static struct fake_qp *qp_find(uint32_t qp_num)
{
	for (struct fake_qp *q = qps; q; q = q->next)
		if (q->qp.qp_num == qp_num)
			return q;
	return NULL;
}

/* Called with the lock held. */
static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc, uint64_t ready_ns)
{
	struct fake_cq *c = (struct fake_cq *)cq;

	if (c->count == c->cq.cqe) {
		c->overflow = true;
		return;
	}
	c->ring[(c->head + c->count) % c->cq.cqe] = (struct cqe){ .wc = *wc, .ready_ns = ready_ns };
	c->count++;
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	default: return IBV_WC_SEND;
	}
}

/* Scatters `len` bytes of `src` into a posted receive; false if it does not fit. */
static bool scatter(const struct recv_wr *r, const uint8_t *src, size_t len)
{
	size_t room = 0;

	for (int i = 0; i < r->num_sge; i++)
		room += r->sge[i].length;
	if (len > room)
		return false;
	for (int i = 0; i < r->num_sge && len; i++) {
		size_t n = len < r->sge[i].length ? len : r->sge[i].length;

		memcpy((void *)(uintptr_t)r->sge[i].addr, src, n);
		src += n;
		len -= n;
	}
	return true;
}

/* Executes one send work request; returns its completion status. Lock held. */
static enum ibv_wc_status execute_send(struct fake_qp *q, const struct ibv_send_wr *wr, uint32_t *byte_len,
				       uint64_t ready_ns)
{
	bool inl = wr->send_flags & IBV_SEND_INLINE;
	struct fake_qp *dst = qp_find(q->dest_qp_num);
	uint8_t *buf = NULL;
	size_t len = 0, off = 0;
	enum ibv_wc_status st = IBV_WC_SUCCESS;

	for (int i = 0; i < wr->num_sge; i++) {
		if (!inl && !mr_find(wr->sg_list[i].lkey, false, wr->sg_list[i].addr, wr->sg_list[i].length,
				     wr->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0))
			return IBV_WC_LOC_PROT_ERR;
		len += wr->sg_list[i].length;
	}
	*byte_len = (uint32_t)len;
	if (!dst || dst->qp.state < IBV_QPS_RTR || dst->qp.state == IBV_QPS_ERR)
		return IBV_WC_RETRY_EXC_ERR;

	if (wr->opcode == IBV_WR_RDMA_READ) {
		if (!mr_find(wr->wr.rdma.rkey, true, wr->wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_READ))
			return IBV_WC_REM_ACCESS_ERR;
		for (int i = 0; i < wr->num_sge; i++) {
			memmove((void *)(uintptr_t)wr->sg_list[i].addr,
				(const uint8_t *)(uintptr_t)wr->wr.rdma.remote_addr + off, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		return IBV_WC_SUCCESS;
	}

	/* Gather into one buffer: source and destination ranges may overlap (loopback). */
	buf = malloc(len ? len : 1);
	if (!buf)
		return IBV_WC_LOC_QP_OP_ERR;
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy(buf + off, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		off += wr->sg_list[i].length;
	}

	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (!mr_find(wr->wr.rdma.rkey, true, wr->wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_WRITE)) {
			st = IBV_WC_REM_ACCESS_ERR;
			break;
		}
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && dst->rq_count == 0) {
			st = IBV_WC_RNR_RETRY_EXC_ERR;
			break;
		}
		memcpy((void *)(uintptr_t)wr->wr.rdma.remote_addr, buf, len);
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			struct recv_wr *r = &dst->rq[dst->rq_head];
			struct ibv_wc wc = { .wr_id = r->wr_id, .status = IBV_WC_SUCCESS,
					     .opcode = IBV_WC_RECV_RDMA_WITH_IMM, .byte_len = (uint32_t)len,
					     .imm_data = wr->imm_data, .qp_num = dst->qp.qp_num,
					     .src_qp = q->qp.qp_num, .wc_flags = IBV_WC_WITH_IMM };

			dst->rq_head = (dst->rq_head + 1) % dst->cap.max_recv_wr;
			dst->rq_count--;
			cq_push(dst->qp.recv_cq, &wc, ready_ns);
		}
		break;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM: {
		struct recv_wr *r;
		struct ibv_wc wc = { .opcode = IBV_WC_RECV, .byte_len = (uint32_t)len, .qp_num = 0,
				     .src_qp = q->qp.qp_num };

		if (dst->rq_count == 0) {
			st = IBV_WC_RNR_RETRY_EXC_ERR;
			break;
		}
		r = &dst->rq[dst->rq_head];
		dst->rq_head = (dst->rq_head + 1) % dst->cap.max_recv_wr;
		dst->rq_count--;
		wc.wr_id = r->wr_id;
		wc.qp_num = dst->qp.qp_num;
		if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
			wc.imm_data = wr->imm_data;
			wc.wc_flags = IBV_WC_WITH_IMM;
		}
		if (!scatter(r, buf, len)) {
			wc.status = IBV_WC_LOC_LEN_ERR;
			st = IBV_WC_REM_INV_REQ_ERR;
		}
		cq_push(dst->qp.recv_cq, &wc, ready_ns);
		break;
	}
	default:
		st = IBV_WC_LOC_QP_OP_ERR;
		break;
	}
	free(buf);
	return st;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int r = 0;

	pthread_mutex_lock(&lock);
	for (; wr; wr = wr->next) {
		uint64_t now = now_ns(), ready;
		uint32_t byte_len = 0;
		enum ibv_wc_status st;
		struct ibv_wc wc;

		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
			r = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge) {
			r = EINVAL;
			break;
		}
		for (int i = 0; i < wr->num_sge; i++)
			byte_len += wr->sg_list[i].length;
		q->busy_until = (q->busy_until > now ? q->busy_until : now) + NET_LATENCY_NS +
				(uint64_t)byte_len * 1000000000ULL / NET_BYTES_PER_S;
		ready = q->busy_until;
		st = qp->state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR : execute_send(q, wr, &byte_len, ready);
		if (st != IBV_WC_SUCCESS)
			qp->state = IBV_QPS_ERR;
		if (st != IBV_WC_SUCCESS || q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)) {
			wc = (struct ibv_wc){ .wr_id = wr->wr_id, .status = st, .opcode = wc_opcode(wr->opcode),
					      .qp_num = qp->qp_num,
					      .byte_len = wr->opcode == IBV_WR_RDMA_READ ? byte_len : 0 };
			cq_push(qp->send_cq, &wc, ready);
		}
	}
	pthread_mutex_unlock(&lock);
	if (r && bad_wr)
		*bad_wr = wr;
	return r;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int r = 0;

	pthread_mutex_lock(&lock);
	for (; wr; wr = wr->next) {
		struct recv_wr *slot;

		if (qp->state == IBV_QPS_RESET || wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_recv_sge) {
			r = EINVAL;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			struct ibv_wc wc = { .wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
					     .opcode = IBV_WC_RECV, .qp_num = qp->qp_num };

			cq_push(qp->recv_cq, &wc, now_ns());
			continue;
		}
		if (q->rq_count == q->cap.max_recv_wr) {
			r = ENOMEM;
			break;
		}
		slot = &q->rq[(q->rq_head + q->rq_count) % q->cap.max_recv_wr];
		slot->wr_id = wr->wr_id;
		slot->num_sge = wr->num_sge;
		memcpy(slot->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
		q->rq_count++;
	}
	pthread_mutex_unlock(&lock);
	if (r && bad_wr)
		*bad_wr = wr;
	return r;
}

static int fake_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	uint64_t now = now_ns();
	int n = 0;

	if (num_entries < 0)
		return -1;
	pthread_mutex_lock(&lock);
	while (n < num_entries && c->count > 0 && c->ring[c->head].ready_ns <= now) {
		wc[n++] = c->ring[c->head].wc;
		c->head = (c->head + 1) % c->cq.cqe;
		c->count--;
	}
	pthread_mutex_unlock(&lock);
	return n;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return 0;
}

/* ---- contexts, protection domains, memory regions ---------------------------------------- */

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct verbs_context *v;

	if (device != &fake_device) {
		errno = ENODEV;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	v->sz = sizeof(*v);
	v->query_port = query_port_ext;
	v->context.device = device;
	v->context.cmd_fd = -1;
	v->context.async_fd = -1;
	v->context.num_comp_vectors = 1;
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	v->context.ops.post_send = fake_post_send;
	v->context.ops.post_recv = fake_post_recv;
	v->context.ops.poll_cq = fake_poll_cq;
	v->context.ops.req_notify_cq = fake_req_notify_cq;
	pthread_mutex_init(&v->context.mutex, NULL);
	return &v->context;
}

int ibv_close_device(struct ibv_context *context)
{
	struct verbs_context *v;

	if (!context)
		return EINVAL;
	v = (struct verbs_context *)((uint8_t *)context - offsetof(struct verbs_context, context));
	pthread_mutex_destroy(&context->mutex);
	free(v);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct ibv_pd *pd;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = context;
	pthread_mutex_lock(&lock);
	pd->handle = next_handle++;
	pthread_mutex_unlock(&lock);
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int r = 0;

	if (!pd)
		return EINVAL;
	pthread_mutex_lock(&lock);
	for (struct fake_mr *m = mrs; m; m = m->next)
		if (m->mr.pd == pd)
			r = EBUSY;
	for (struct fake_qp *q = qps; q; q = q->next)
		if (q->qp.pd == pd)
			r = EBUSY;
	pthread_mutex_unlock(&lock);
	if (!r)
		free(pd);
	return r;
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	struct fake_mr *m;

	/* Remote write/atomic need local write, as the verbs specification requires. */
	if (!pd || !addr || length == 0 ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->access = (int)access;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	pthread_mutex_lock(&lock);
	m->mr.handle = next_handle++;
	m->mr.lkey = m->mr.rkey = next_key++;
	m->next = mrs;
	mrs = m;
	pthread_mutex_unlock(&lock);
	return &m->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	int r = EINVAL;

	if (!mr)
		return EINVAL;
	pthread_mutex_lock(&lock);
	for (struct fake_mr **pp = &mrs; *pp; pp = &(*pp)->next) {
		if (&(*pp)->mr == mr) {
			struct fake_mr *m = *pp;

			*pp = m->next;
			free(m);
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- completion queues and queue pairs ---------------------------------------------------- */

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct fake_cq *c;

	if (!context || cqe < 1 || cqe > MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->ring = calloc((size_t)cqe, sizeof(*c->ring));
	if (!c || !c->ring) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->cq.context = context;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	pthread_mutex_lock(&lock);
	c->cq.handle = next_handle++;
	pthread_mutex_unlock(&lock);
	return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	int r = 0;

	if (!cq)
		return EINVAL;
	pthread_mutex_lock(&lock);
	for (struct fake_qp *q = qps; q; q = q->next)
		if (q->qp.send_cq == cq || q->qp.recv_cq == cq)
			r = EBUSY;
	pthread_mutex_unlock(&lock);
	if (r)
		return r;
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c->ring);
	free(c);
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr *a = qp_init_attr;
	struct fake_qp *q;

	if (!pd || !a || !a->send_cq || !a->recv_cq || a->srq) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->cap.max_send_wr > MAX_QP_WR || a->cap.max_recv_wr > MAX_QP_WR || a->cap.max_send_sge > MAX_SGE ||
	    a->cap.max_recv_sge > MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->cap = a->cap;
	if (q->cap.max_recv_wr == 0)
		q->cap.max_recv_wr = 1;
	q->rq = calloc(q->cap.max_recv_wr, sizeof(*q->rq));
	if (!q->rq) {
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->sq_sig_all = a->sq_sig_all;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = a->qp_type;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	pthread_mutex_lock(&lock);
	q->qp.handle = next_handle++;
	q->qp.qp_num = next_qpn++;
	q->next = qps;
	qps = q;
	pthread_mutex_unlock(&lock);
	return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int r = 0;

	if (!qp || !attr)
		return EINVAL;
	pthread_mutex_lock(&lock);
	if (attr_mask & IBV_QP_STATE) {
		enum ibv_qp_state from = qp->state, to = attr->qp_state;
		bool ok = to == IBV_QPS_RESET || to == IBV_QPS_ERR ||
			  (to == IBV_QPS_INIT && (from == IBV_QPS_RESET || from == IBV_QPS_INIT)) ||
			  (to == IBV_QPS_RTR && from == IBV_QPS_INIT && (attr_mask & IBV_QP_DEST_QPN)) ||
			  (to == IBV_QPS_RTS && (from == IBV_QPS_RTR || from == IBV_QPS_RTS));

		if (!ok) {
			r = EINVAL;
			goto out;
		}
		if (to == IBV_QPS_RESET)
			q->rq_head = q->rq_count = 0;
		qp->state = to;
	}
	if (attr_mask & IBV_QP_DEST_QPN)
		q->dest_qp_num = attr->dest_qp_num;
out:
	pthread_mutex_unlock(&lock);
	return r;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct fake_qp *q = (struct fake_qp *)qp;

	if (!qp || !attr || !init_attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	memset(init_attr, 0, sizeof(*init_attr));
	pthread_mutex_lock(&lock);
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->path_mtu = IBV_MTU_4096;
	attr->dest_qp_num = q->dest_qp_num;
	attr->cap = q->cap;
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->cap = q->cap;
	init_attr->qp_type = qp->qp_type;
	init_attr->sq_sig_all = q->sq_sig_all;
	pthread_mutex_unlock(&lock);
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int r = EINVAL;

	if (!qp)
		return EINVAL;
	pthread_mutex_lock(&lock);
	for (struct fake_qp **pp = &qps; *pp; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (r)
		return r;
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q->rq);
	free(q);
	return 0;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const text[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	if ((unsigned int)status >= sizeof(text) / sizeof(text[0]) || !text[status])
		return "unknown";
	return text[status];
}
