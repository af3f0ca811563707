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

struct rg_context {
  struct ibv_context ctx; /* first: the program holds a struct ibv_context * */
  struct rg_device dev;   /* a copy: valid after the device list is freed */
  int sock;
  int doorbell; /* eventfd the daemon sleeps on: written after a post when it asked (need_kick) */
  int dead;     /* the daemon went away: the rings are flushed, verbs fail with ECONNRESET */
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
void rg_not_yet(const char* fn);
int rg_ctx_call(struct ibv_context* context, uint16_t op, const void* req, size_t len, int pass_fd, void* out, size_t out_len);
int rg_handle_call(struct ibv_context* context, uint16_t op, uint32_t handle);

/* ring.c */
void rg_set_ops(struct ibv_context_ops* ops);
/* A sealed memfd of `bytes` mapped here; its fd (the caller passes then closes it), or -1 + errno. */
int rg_ring_create(struct rg_ring* r, size_t bytes);
void rg_ring_free(struct rg_ring* r);
/* The QP's rings: created, handed to the daemon; 0 or -1 + errno. */
int rg_qp_attach(struct rg_qp* q, const struct ibv_qp_init_attr* attr);
void rg_qp_forget(struct rg_qp* q);

#endif
