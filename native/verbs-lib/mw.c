/*
 * Memory windows: ibv_alloc_mw, ibv_bind_mw (type 1), ibv_dealloc_mw, reached through the
 * context ops verbs.h's inline helpers call. A window is the daemon's (nodes/rdma/windows.ts):
 * ALLOC_MW gives its handle and first rkey; a bind is a work request on the QP's send queue
 * (ring.c writes IBV_WR_BIND_MW as a WQE naming the window by handle), done by the daemon in
 * order with the queue's other work and completed as IBV_WC_BIND_MW (or IBV_WC_MW_BIND_ERR, the
 * QP then in error). Type 2 windows are bound with ibv_post_send's IBV_WR_BIND_MW or
 * ibv_wr_bind_mw, invalidated by IBV_WR_LOCAL_INV or the peer's Send with Invalidate.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib.h"

static struct ibv_mw* alloc_mw(struct ibv_pd* pd, enum ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return NULL;
  }
  if (rg_ctx(pd->context)->dead) {
    errno = ECONNRESET;
    return NULL;
  }
  struct rgv_alloc_mw q = {.pd = pd->handle, .type = (uint32_t)type};
  struct rgv_mw r;
  if (rg_ctx_call(pd->context, RGV_OP_ALLOC_MW, &q, sizeof q, -1, &r, sizeof r) != 0) return NULL;
  struct ibv_mw* mw = calloc(1, sizeof *mw);
  if (mw == NULL) return NULL; /* the daemon frees it with the connection */
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = r.rkey;
  mw->handle = r.handle;
  mw->type = type;
  return mw;
}

static int dealloc_mw(struct ibv_mw* mw) {
  if (!rg_ctx(mw->context)->dead && rg_handle_call(mw->context, RGV_OP_DEALLOC_MW, mw->handle) != 0) return errno;
  free(mw);
  return 0;
}

/* Type 1: a bind work request with the window's next rkey (the low 8 bits: ibv_inc_rkey), which
   the window has from here (a peer's access through the old rkey fails once the bind is done). */
static int bind_mw(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* b) {
  if (mw == NULL || b == NULL || mw->type != IBV_MW_TYPE_1 || mw->pd != qp->pd) return EINVAL;
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  struct ibv_send_wr wr = {.wr_id = b->wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = b->send_flags};
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = b->bind_info;
  struct ibv_send_wr* bad = NULL;
  int rc = qp->context->ops.post_send(qp, &wr, &bad);
  if (rc != 0) return rc;
  mw->rkey = rkey;
  return 0;
}

void rg_set_mw_ops(struct rg_context* c) {
  c->ctx.ops.alloc_mw = alloc_mw;
  c->ctx.ops.bind_mw = bind_mw;
  c->ctx.ops.dealloc_mw = dealloc_mw;
}
