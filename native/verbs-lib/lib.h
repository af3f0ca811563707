/*
 * librdmagraph-verbs.so's own objects, shared by verbs.c (devices, queries, PD, MR, QP control)
 * and ring.c (CQs, channels, QP and SRQ rings, the data path). Each wraps the libibverbs struct
 * the program holds as its first member.
 */
#ifndef RDMA_GRAPH_VERBS_LIB_H
#define RDMA_GRAPH_VERBS_LIB_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define EXPORT __attribute__((visibility("default")))

struct rg_device {
  struct ibv_device dev; /* first: the program holds a struct ibv_device * */
  struct rgv_device info;
};

struct rg_qp;
struct rg_cq;

/*
 * The most the library takes from a daemon, whatever its devices say they allow (the daemon
 * answers 16384 WRs, 32 SGEs, 4096 inline bytes, 2^20 CQEs): every size a daemon answers is
 * checked against what the program asked for and against these before it sizes a ring, and the
 * rings' bytes are computed in 64 bits. A daemon caught answering otherwise is refused
 * (rg_refuse): the verb fails with EPROTO, and the context stops trusting it (rg_distrust).
 */
#define RG_MAX_QP (1u << 24)
#define RG_MAX_WR (1u << 20)
#define RG_MAX_SGE 1024u
#define RG_MAX_INLINE (1u << 16)
#define RG_MAX_CQE (1u << 24)
#define RG_MAX_RD_ATOM 255u
#define RG_MAX_MTU 65536u
#define RG_MAX_RING_BYTES (1ull << 30)
#define RG_MAX_QPN 0xffffffu /* QPNs are 24 bits */

struct rg_context {
  struct ibv_context ctx; /* first: the program holds a struct ibv_context * */
  struct rg_device dev;   /* a copy: valid after the device list is freed */
  int sock;
  int doorbell; /* eventfd the daemon sleeps on: written after a post when it asked (need_kick) */
  int dead;     /* the daemon went away, or is not trusted any more: the rings are flushed, verbs fail with ECONNRESET */
  pthread_mutex_t objs; /* the QP and CQ lists (for the flush when the daemon goes away) */
  struct rg_qp* qps;
  struct rg_cq* cqs;
};

/* A memfd mapping both sides share: the ring header's two cache lines, then the entries. */
struct rg_ring {
  uint8_t* mem;
  size_t bytes;
};

struct rg_channel {
  struct ibv_comp_channel ch; /* first; ch.fd is an eventfd the daemon writes */
  uint32_t handle;
};

struct rg_cq {
  struct ibv_cq cq; /* first */
  struct rg_ring ring;
  uint32_t entries; /* a power of two */
  uint32_t cons;    /* ours; published at RGV_CQ_CONS */
  uint32_t events_seen; /* channel notifications this CQ has reported (ibv_get_cq_event) */
  uint32_t empty_polls; /* since the last check that the daemon is there */
  struct rg_channel* channel;
  pthread_spinlock_t lock;
  struct rg_cq* next; /* in the context */
};

struct rg_srq {
  struct ibv_srq srq; /* first */
  struct rg_ring ring;
  uint32_t entries, stride, max_wr, max_sge;
  uint32_t prod;
  pthread_spinlock_t lock;
};

struct rg_qp {
  struct ibv_qp qp; /* first */
  struct rg_ring ring;
  uint32_t sq_entries, rq_entries, sq_stride, rq_stride;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint32_t sq_prod, rq_prod; /* ours; published at RGV_QP_SQ_PROD / RGV_QP_RQ_PROD */
  int sig_all;
  pthread_spinlock_t sq_lock, rq_lock;
  struct rg_qp* next; /* in the context */
};

static inline struct rg_context* rg_ctx(struct ibv_context* c) { return (struct rg_context*)c; }

/* verbs.c */
void rg_say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * The daemon answered something impossible: says "the daemon answered <what>: refused", stops
 * trusting the context's daemon (c may be NULL: no context yet), sets errno to EPROTO.
 */
void rg_refuse(struct rg_context* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* A size the daemon answered: within [asked, most], or refused naming it; 0 or -1 + errno. */
int rg_check_size(struct rg_context* c, const char* what, uint32_t got, uint32_t asked, uint32_t most);
/* The context's socket is readable outside a request: take what is there (a message nobody asked for). */
void rg_drain_unsolicited(struct rg_context* c);
void rg_not_yet(const char* fn);
int rg_ctx_call(struct ibv_context* context, uint16_t op, const void* req, size_t len, int pass_fd, void* out, size_t out_len);
int rg_handle_call(struct ibv_context* context, uint16_t op, uint32_t handle);

/* ring.c */
void rg_set_ops(struct ibv_context_ops* ops);
/*
 * The context's daemon is gone or not to be trusted: every posted, unfinished WQE of its QPs is
 * flushed into their CQs (IBV_WC_WR_FLUSH_ERR), their channels signalled, `why` said once, and
 * later verbs fail with ECONNRESET.
 */
void rg_forsake(struct rg_context* c, const char* why);
/* A sealed memfd of `bytes` mapped here; its fd (the caller passes then closes it), or -1 + errno. */
int rg_ring_create(struct rg_ring* r, size_t bytes);
void rg_ring_free(struct rg_ring* r);
/* The QP's rings: created, handed to the daemon; 0 or -1 + errno. */
int rg_qp_attach(struct rg_qp* q, const struct ibv_qp_init_attr* attr);
void rg_qp_forget(struct rg_qp* q);

#endif
