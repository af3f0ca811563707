/*
 * The extended CQ (ibv_create_cq_ex), ibv_query_device_ex, and the extended verbs this device
 * does not have (each says so by name): verbs.h's inline helpers reach
 * them through the extended context (verbs.c). The CQ is the same ring as ibv_create_cq's
 * (ring.c); ibv_start_poll / ibv_next_poll / ibv_end_poll walk it one completion at a time and
 * the ibv_wc_read_* ops read the current one. The ring's lock is held from a successful
 * start_poll to end_poll (as rdma-core's providers do), so a program's threads may share a CQ.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "lib.h"

#define RING_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define RING_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* What the read_* ops answer (ibv_create_cq_ex's wc_flags): those a CQE carries. */
enum {
  KNOWN_WC_FLAGS = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
                   IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS
};

static struct rg_cq* of(struct ibv_cq_ex* cq) { return (struct rg_cq*)cq; }

static uint32_t* word(struct rg_cq* q, size_t off) { return (uint32_t*)(q->ring.mem + off); }

static const struct rgv_cqe* current(struct rg_cq* q) {
  return (const struct rgv_cqe*)(q->ring.mem + RGV_RING_HDR) + (q->cons & (q->entries - 1));
}

/* The completion at cons, if the daemon produced it: wr_id and status into the CQ. */
static int load(struct rg_cq* q) {
  q->current = q->cons != RING_LOAD(word(q, RGV_CQ_PROD));
  if (!q->current) return ENOENT;
  const struct rgv_cqe* e = current(q);
  q->cqx.wr_id = e->wr_id;
  q->cqx.status = (enum ibv_wc_status)e->status;
  return 0;
}

/* The completion the program had is taken off the ring. */
static void consume(struct rg_cq* q) {
  if (!q->current) return;
  q->current = 0;
  q->cons++;
  RING_STORE(word(q, RGV_CQ_CONS), q->cons);
}

static int start_poll(struct ibv_cq_ex* cq, struct ibv_poll_cq_attr* attr) {
  struct rg_cq* q = of(cq);
  if (attr == NULL || attr->comp_mask != 0) return EINVAL;
  pthread_spin_lock(&q->lock);
  int r = load(q);
  if (r == ENOENT && RING_LOAD(word(q, RGV_CQ_OVERFLOW)) != 0) r = EOVERFLOW;
  if (r != 0) pthread_spin_unlock(&q->lock); /* held only while the program has a completion */
  if (r == ENOENT)
    rg_cq_empty(q);
  else if (r == 0)
    rg_cq_busy(q);
  return r;
}

static int next_poll(struct ibv_cq_ex* cq) {
  struct rg_cq* q = of(cq);
  consume(q);
  return load(q);
}

static void end_poll(struct ibv_cq_ex* cq) {
  struct rg_cq* q = of(cq);
  consume(q);
  pthread_spin_unlock(&q->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex* cq) { return (enum ibv_wc_opcode)current(of(cq))->opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex* cq) { return (void)cq, 0; }
static uint32_t read_byte_len(struct ibv_cq_ex* cq) { return current(of(cq))->byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex* cq) { return (__be32)current(of(cq))->imm; }
static uint32_t read_qp_num(struct ibv_cq_ex* cq) { return current(of(cq))->qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex* cq) { return current(of(cq))->src_qp; } /* UD receives */
static unsigned int read_wc_flags(struct ibv_cq_ex* cq) { return current(of(cq))->wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex* cq) { return (void)cq, 0; }
static uint8_t read_sl(struct ibv_cq_ex* cq) { return rg_wc_sl(current(of(cq))->wc_flags); }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex* cq) { return (void)cq, 0; }

struct ibv_cq_ex* rg_create_cq_ex(struct ibv_context* context, struct ibv_cq_init_attr_ex* attr) {
  /* Completion timestamps, flow tags, CVLAN, a parent domain, single-threaded hints we do not need
     to honour: what a CQE does not carry is refused by name, never answered with zeros. */
  if (attr->wc_flags & ~(uint64_t)KNOWN_WC_FLAGS) {
    rg_say(
        "ibv_create_cq_ex: wc_flags 0x%llx: only byte_len, imm, qp_num, src_qp, slid, sl and dlid_path_bits "
        "are supported (EOPNOTSUPP)",
        (unsigned long long)attr->wc_flags);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    rg_say("ibv_create_cq_ex: comp_mask 0x%x (a parent domain): not supported (EOPNOTSUPP)", attr->comp_mask);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
    rg_say("ibv_create_cq_ex: flags 0x%x: not supported (EOPNOTSUPP)", attr->flags);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (attr->cqe > (uint32_t)INT32_MAX) {
    errno = EINVAL;
    return NULL;
  }
  struct rg_cq* q = rg_cq_create(context, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector);
  if (q == NULL) return NULL;
  struct ibv_cq_ex* x = &q->cqx;
  q->wc_flags = attr->wc_flags;
  x->comp_mask = 0;
  x->start_poll = start_poll;
  x->next_poll = next_poll;
  x->end_poll = end_poll;
  x->read_opcode = read_opcode;
  x->read_vendor_err = read_vendor_err;
  x->read_byte_len = read_byte_len;
  x->read_imm_data = read_imm_data;
  x->read_qp_num = read_qp_num;
  x->read_src_qp = read_src_qp;
  x->read_wc_flags = read_wc_flags;
  x->read_slid = read_slid;
  x->read_sl = read_sl;
  x->read_dlid_path_bits = read_dlid_path_bits;
  return x;
}

int rg_query_device_ex(struct ibv_context* context, const struct ibv_query_device_ex_input* input,
                       struct ibv_device_attr_ex* attr, size_t attr_size) {
  if (input != NULL && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof attr->orig_attr) return EINVAL;
  struct ibv_device_attr_ex a;
  memset(&a, 0, sizeof a);
  int rc = ibv_query_device(context, &a.orig_attr);
  if (rc != 0) return rc;
  /* No ODP, timestamps, TSO, RSS, tag matching, device memory or PCI atomics: all zero. */
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  memcpy(attr, &a, attr_size < sizeof a ? attr_size : sizeof a);
  if (attr_size > sizeof a) memset((uint8_t*)attr + sizeof a, 0, attr_size - sizeof a);
  return 0;
}

/* ------------------------------------------------------------------ what this device has not */

/* verbs.h's inline helpers for these reach the extended context's (or the ops') entries: set, so
   the program is told which verb and why, once each, never a silent NULL. */
static struct ibv_xrcd* open_xrcd(struct ibv_context* c, struct ibv_xrcd_init_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_open_xrcd (XRC)");
  return NULL;
}
static int close_xrcd(struct ibv_xrcd* x) {
  (void)x;
  rg_not_yet("ibv_close_xrcd (XRC)");
  return EOPNOTSUPP;
}
static struct ibv_srq* create_srq_ex(struct ibv_context* c, struct ibv_srq_init_attr_ex* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_create_srq_ex with an XRC or tag-matching SRQ (basic SRQs are supported)");
  return NULL;
}
static struct ibv_qp* open_qp(struct ibv_context* c, struct ibv_qp_open_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_open_qp (XRC)");
  return NULL;
}
static struct ibv_dm* alloc_dm(struct ibv_context* c, struct ibv_alloc_dm_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_alloc_dm (device memory)");
  return NULL;
}
static struct ibv_td* alloc_td(struct ibv_context* c, struct ibv_td_init_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_alloc_td (thread domains)");
  return NULL;
}
static struct ibv_pd* alloc_parent_domain(struct ibv_context* c, struct ibv_parent_domain_init_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_alloc_parent_domain");
  return NULL;
}
static struct ibv_wq* create_wq(struct ibv_context* c, struct ibv_wq_init_attr* a) {
  (void)c, (void)a;
  rg_not_yet("ibv_create_wq (RSS work queues)");
  return NULL;
}

void rg_set_unsupported(struct rg_context* c) {
  rg_set_mw_ops(c);
  c->v.open_xrcd = open_xrcd;
  c->v.close_xrcd = close_xrcd;
  c->v.create_srq_ex = create_srq_ex;
  c->v.open_qp = open_qp;
  c->v.alloc_dm = alloc_dm;
  c->v.alloc_td = alloc_td;
  c->v.alloc_parent_domain = alloc_parent_domain;
  c->v.create_wq = create_wq;
}
