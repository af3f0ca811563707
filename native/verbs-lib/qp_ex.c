/*
 * The extended QP (ibv_create_qp_ex) and its send API: ibv_wr_start, ibv_wr_<op> (send,
 * send_inv, send_imm, rdma_write, rdma_write_imm, rdma_read, atomic_cmp_swp, atomic_fetch_add;
 * bind_mw and local_inv, which take no data and go into the ring at once), one data
 * setter each (ibv_wr_set_sge, _sge_list, _inline_data, _inline_data_list), ibv_wr_complete or
 * ibv_wr_abort. Each work request is written into the send ring (ring.c's WQE, the same as
 * ibv_post_send's) when its data is set, so inline data is copied at that call, as a NIC's
 * provider copies it; wr_complete publishes them all at once, wr_abort drops them. The first
 * failure (a full queue, too many SGEs, an operation this device does not have) is kept and
 * returned by wr_complete, which then posts nothing. The send queue's lock is held from
 * wr_start to wr_complete/wr_abort.
 *
 * Not here: TSO, XRC addressing, atomic write: their wr_ ops fail the batch with
 * EOPNOTSUPP and say so once; ibv_create_qp_ex refuses send_ops_flags that ask for them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

/* What ibv_create_qp_ex's send_ops_flags may ask for. */
enum {
  SUPPORTED_SEND_OPS = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                       IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV |
                       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV
};

/* The most SGEs or inline buffers one ibv_wr_set_*_list takes (the QP's max_sge bounds SGEs). */
#define MAX_INLINE_BUFS 64

static struct rg_qp* of(struct ibv_qp_ex* x) { return (struct rg_qp*)x; }

static void fail(struct rg_qp* q, int err) {
  if (q->batch.err == 0) q->batch.err = err;
  q->batch.open = 0;
}

static void not_here(struct rg_qp* q, const char* what) {
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) rg_say("%s: not supported on this device (EOPNOTSUPP)", what);
  fail(q, EOPNOTSUPP);
}

/* A new WR of `opcode`: the previous one must have had its data. */
static struct ibv_send_wr* begin(struct rg_qp* q, enum ibv_wr_opcode opcode) {
  struct rg_wr_batch* b = &q->batch;
  if (b->open) fail(q, EINVAL); /* a wr_<op> without wr_set_sge/inline before the next */
  memset(&b->wr, 0, sizeof b->wr);
  b->wr.wr_id = q->qpx.wr_id;
  b->wr.send_flags = q->qpx.wr_flags;
  b->wr.opcode = opcode;
  b->open = 1;
  return &b->wr;
}

/* The WR's data: it goes into the ring now. */
static void finish(struct rg_qp* q, struct ibv_sge* sg, int n, int inl) {
  struct rg_wr_batch* b = &q->batch;
  if (!b->open) { /* data without a wr_<op> (or after a failure): the batch fails */
    fail(q, EINVAL);
    return;
  }
  b->open = 0;
  if (b->err != 0) return;
  b->wr.sg_list = sg;
  b->wr.num_sge = n;
  if (inl) b->wr.send_flags |= IBV_SEND_INLINE;
  int err = rg_sq_write(q, &b->wr);
  if (err != 0) fail(q, err);
}

static void wr_start(struct ibv_qp_ex* x) {
  struct rg_qp* q = of(x);
  pthread_spin_lock(&q->sq_lock);
  q->batch.open = 0;
  q->batch.err = 0;
  q->batch.first = q->sq_prod;
  if (rg_ctx(x->qp_base.context)->dead)
    q->batch.err = ECONNRESET;
  else if (x->qp_base.state != IBV_QPS_RTS && x->qp_base.state != IBV_QPS_SQD && x->qp_base.state != IBV_QPS_ERR)
    q->batch.err = EINVAL;
}

static int wr_complete(struct ibv_qp_ex* x) {
  struct rg_qp* q = of(x);
  if (q->batch.open) fail(q, EINVAL); /* the last wr_<op> never got its data */
  int err = q->batch.err;
  if (err != 0)
    q->sq_prod = q->batch.first; /* nothing of the batch is posted */
  else if (q->sq_prod != q->batch.first)
    rg_sq_publish(q);
  pthread_spin_unlock(&q->sq_lock);
  return err;
}

static void wr_abort(struct ibv_qp_ex* x) {
  struct rg_qp* q = of(x);
  q->sq_prod = q->batch.first;
  q->batch.open = 0;
  pthread_spin_unlock(&q->sq_lock);
}

static void wr_send(struct ibv_qp_ex* x) { begin(of(x), IBV_WR_SEND); }

static void wr_send_inv(struct ibv_qp_ex* x, uint32_t rkey) {
  begin(of(x), IBV_WR_SEND_WITH_INV)->invalidate_rkey = rkey;
}

static void wr_rdma_write(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  struct ibv_send_wr* w = begin(of(x), IBV_WR_RDMA_WRITE);
  w->wr.rdma.rkey = rkey;
  w->wr.rdma.remote_addr = addr;
}

static void wr_rdma_write_imm(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  struct ibv_send_wr* w = begin(of(x), IBV_WR_RDMA_WRITE_WITH_IMM);
  w->wr.rdma.rkey = rkey;
  w->wr.rdma.remote_addr = addr;
  w->imm_data = imm;
}

static void wr_rdma_read(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  struct ibv_send_wr* w = begin(of(x), IBV_WR_RDMA_READ);
  w->wr.rdma.rkey = rkey;
  w->wr.rdma.remote_addr = addr;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  struct ibv_send_wr* w = begin(of(x), IBV_WR_ATOMIC_CMP_AND_SWP);
  w->wr.atomic.rkey = rkey;
  w->wr.atomic.remote_addr = addr;
  w->wr.atomic.compare_add = compare;
  w->wr.atomic.swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add) {
  struct ibv_send_wr* w = begin(of(x), IBV_WR_ATOMIC_FETCH_AND_ADD);
  w->wr.atomic.rkey = rkey;
  w->wr.atomic.remote_addr = addr;
  w->wr.atomic.compare_add = add;
}

static void wr_send_imm(struct ibv_qp_ex* x, __be32 imm) { begin(of(x), IBV_WR_SEND_WITH_IMM)->imm_data = imm; }
static void wr_send_tso(struct ibv_qp_ex* x, void* hdr, uint16_t sz, uint16_t mss) {
  (void)hdr, (void)sz, (void)mss;
  not_here(of(x), "ibv_wr_send_tso");
}
/* A bind and a local invalidate take no data setter: they go into the ring at once. */
static void wr_bind_mw(struct ibv_qp_ex* x, struct ibv_mw* mw, uint32_t rkey, const struct ibv_mw_bind_info* b) {
  struct rg_qp* q = of(x);
  struct ibv_send_wr* w = begin(q, IBV_WR_BIND_MW);
  if (b == NULL) {
    fail(q, EINVAL);
    return;
  }
  w->bind_mw.mw = mw;
  w->bind_mw.rkey = rkey;
  w->bind_mw.bind_info = *b;
  finish(q, NULL, 0, 0);
}
static void wr_local_inv(struct ibv_qp_ex* x, uint32_t rkey) {
  struct rg_qp* q = of(x);
  begin(q, IBV_WR_LOCAL_INV)->invalidate_rkey = rkey;
  finish(q, NULL, 0, 0);
}
/* A UD QP's destination for the WR begun last (before its data setter). */
static void wr_set_ud_addr(struct ibv_qp_ex* x, struct ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
  struct rg_qp* q = of(x);
  if (!q->batch.open || ah == NULL) {
    fail(q, EINVAL);
    return;
  }
  q->batch.wr.wr.ud.ah = ah;
  q->batch.wr.wr.ud.remote_qpn = qpn;
  q->batch.wr.wr.ud.remote_qkey = qkey;
}
static void wr_set_xrc_srqn(struct ibv_qp_ex* x, uint32_t srqn) {
  (void)srqn;
  not_here(of(x), "ibv_wr_set_xrc_srqn (XRC)");
}
static void wr_atomic_write(struct ibv_qp_ex* x, uint32_t rkey, uint64_t addr, const void* v) {
  (void)rkey, (void)addr, (void)v;
  not_here(of(x), "ibv_wr_atomic_write");
}

static void wr_set_sge(struct ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
  finish(of(x), &sge, 1, 0);
}

static void wr_set_sge_list(struct ibv_qp_ex* x, size_t n, const struct ibv_sge* list) {
  struct rg_qp* q = of(x);
  if (n > q->max_sge) { /* checked before the ring's writer reads the list */
    q->batch.open = 1;  /* closed by fail */
    fail(q, EINVAL);
    return;
  }
  finish(q, (struct ibv_sge*)list, (int)n, 0);
}

static void wr_set_inline_data(struct ibv_qp_ex* x, void* addr, size_t length) {
  struct rg_qp* q = of(x);
  if (length > q->max_inline) {
    fail(q, ENOMEM);
    return;
  }
  struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = (uint32_t)length, .lkey = 0};
  finish(q, &sge, 1, 1);
}

static void wr_set_inline_data_list(struct ibv_qp_ex* x, size_t n, const struct ibv_data_buf* list) {
  struct rg_qp* q = of(x);
  struct ibv_sge sge[MAX_INLINE_BUFS];
  size_t total = 0;
  if (n > MAX_INLINE_BUFS) {
    fail(q, EINVAL);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (list[i].length > q->max_inline - total) {
      fail(q, ENOMEM);
      return;
    }
    total += list[i].length;
    sge[i] = (struct ibv_sge){.addr = (uintptr_t)list[i].addr, .length = (uint32_t)list[i].length, .lkey = 0};
  }
  finish(q, sge, (int)n, 1);
}

EXPORT struct ibv_qp_ex* ibv_qp_to_qp_ex(struct ibv_qp* qp) {
  struct rg_qp* q = (struct rg_qp*)qp;
  return q->send_ops != 0 ? &q->qpx : NULL;
}

struct ibv_qp* rg_create_qp_ex(struct ibv_context* context, struct ibv_qp_init_attr_ex* a) {
  const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  if (a->comp_mask & ~known) {
    rg_say(
        "ibv_create_qp_ex: comp_mask 0x%x asks for XRC, TSO, RSS or a parent domain: not supported "
        "(EOPNOTSUPP)",
        a->comp_mask);
    errno = EOPNOTSUPP;
    return NULL;
  }
  /* Create flags: blocking multicast loopback (a UD QP's; mckey -l), nothing else. */
  const uint32_t cflags = a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS ? a->create_flags : 0;
  if (cflags & ~(uint32_t)IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) {
    rg_say("ibv_create_qp_ex: create_flags 0x%x: only IBV_QP_CREATE_BLOCK_SELF_MCAST_LB is supported (EOPNOTSUPP)",
           cflags);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (cflags != 0 && a->qp_type != IBV_QPT_UD) {
    errno = EINVAL;
    return NULL;
  }
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || a->pd == NULL || a->pd->context != context) {
    errno = EINVAL;
    return NULL;
  }
  uint64_t ops = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS ? a->send_ops_flags : 0;
  if (ops & ~(uint64_t)SUPPORTED_SEND_OPS) {
    rg_say("ibv_create_qp_ex: send_ops_flags 0x%llx: TSO and atomic write are not supported (EOPNOTSUPP)",
           (unsigned long long)ops);
    errno = EOPNOTSUPP;
    return NULL;
  }
  struct ibv_qp_init_attr attr = {.qp_context = a->qp_context,
                                  .send_cq = a->send_cq,
                                  .recv_cq = a->recv_cq,
                                  .srq = a->srq,
                                  .cap = a->cap,
                                  .qp_type = a->qp_type,
                                  .sq_sig_all = a->sq_sig_all};
  struct rg_qp* q = rg_qp_create(a->pd, &attr, cflags != 0 ? RGV_QP_BLOCK_SELF_MCAST_LB : 0);
  if (q == NULL) return NULL;
  a->cap = attr.cap; /* what it got */
  q->send_ops = ops;
  if (ops == 0) return &q->qp;
  struct ibv_qp_ex* x = &q->qpx;
  x->comp_mask = 0;
  x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x->wr_atomic_fetch_add = wr_atomic_fetch_add;
  x->wr_bind_mw = wr_bind_mw;
  x->wr_local_inv = wr_local_inv;
  x->wr_rdma_read = wr_rdma_read;
  x->wr_rdma_write = wr_rdma_write;
  x->wr_rdma_write_imm = wr_rdma_write_imm;
  x->wr_send = wr_send;
  x->wr_send_imm = wr_send_imm;
  x->wr_send_inv = wr_send_inv;
  x->wr_send_tso = wr_send_tso;
  x->wr_set_ud_addr = wr_set_ud_addr;
  x->wr_set_xrc_srqn = wr_set_xrc_srqn;
  x->wr_set_inline_data = wr_set_inline_data;
  x->wr_set_inline_data_list = wr_set_inline_data_list;
  x->wr_set_sge = wr_set_sge;
  x->wr_set_sge_list = wr_set_sge_list;
  x->wr_start = wr_start;
  x->wr_complete = wr_complete;
  x->wr_abort = wr_abort;
  x->wr_atomic_write = wr_atomic_write;
  return &q->qp;
}
