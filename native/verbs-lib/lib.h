/*
 * librdmagraph-verbs.so's own objects, shared by verbs.c (devices, queries, PD, MR, QP control)
 * and ring.c (CQs, channels, QP and SRQ rings, the data path). Each wraps the libibverbs struct
 * the program holds as its first member. The protocol they speak with the daemon: proto.h,
 * described in docs/VERBS-PROTOCOL.md.
 */
#ifndef RDMA_GRAPH_VERBS_LIB_H
#define RDMA_GRAPH_VERBS_LIB_H

#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define EXPORT __attribute__((visibility("default")))

/* The program's libibverbs values travel as they are: proto.h's copies must be libibverbs' own. */
#define RG_SAME(ours, ibv) _Static_assert((uint64_t)(ours) == (uint64_t)(ibv), #ours " is " #ibv)
RG_SAME(RGV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE);
RG_SAME(RGV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
RG_SAME(RGV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_READ);
RG_SAME(RGV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_ATOMIC);
RG_SAME(RGV_ACCESS_MW_BIND, IBV_ACCESS_MW_BIND);
RG_SAME(RGV_QPS_RESET, IBV_QPS_RESET);
RG_SAME(RGV_QPS_INIT, IBV_QPS_INIT);
RG_SAME(RGV_QPS_RTR, IBV_QPS_RTR);
RG_SAME(RGV_QPS_RTS, IBV_QPS_RTS);
RG_SAME(RGV_QPS_SQD, IBV_QPS_SQD);
RG_SAME(RGV_QPS_SQE, IBV_QPS_SQE);
RG_SAME(RGV_QPS_ERR, IBV_QPS_ERR);
RG_SAME(RGV_ATTR_STATE, IBV_QP_STATE);
RG_SAME(RGV_ATTR_QKEY, IBV_QP_QKEY);
RG_SAME(RGV_QPT_RC, IBV_QPT_RC);
RG_SAME(RGV_QPT_UD, IBV_QPT_UD);
RG_SAME(RGV_WC_GRH, IBV_WC_GRH);
RG_SAME(RGV_ATTR_AV, IBV_QP_AV);
RG_SAME(RGV_ATTR_PATH_MTU, IBV_QP_PATH_MTU);
RG_SAME(RGV_ATTR_TIMEOUT, IBV_QP_TIMEOUT);
RG_SAME(RGV_ATTR_RETRY_CNT, IBV_QP_RETRY_CNT);
RG_SAME(RGV_ATTR_RNR_RETRY, IBV_QP_RNR_RETRY);
RG_SAME(RGV_ATTR_RQ_PSN, IBV_QP_RQ_PSN);
RG_SAME(RGV_ATTR_MAX_QP_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC);
RG_SAME(RGV_ATTR_SQ_PSN, IBV_QP_SQ_PSN);
RG_SAME(RGV_ATTR_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_DEST_RD_ATOMIC);
RG_SAME(RGV_ATTR_DEST_QPN, IBV_QP_DEST_QPN);
RG_SAME(RGV_MTU_256, IBV_MTU_256);
RG_SAME(RGV_MTU_512, IBV_MTU_512);
RG_SAME(RGV_MTU_1024, IBV_MTU_1024);
RG_SAME(RGV_MTU_2048, IBV_MTU_2048);
RG_SAME(RGV_MTU_4096, IBV_MTU_4096);
RG_SAME(RGV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE);
RG_SAME(RGV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM);
RG_SAME(RGV_WR_SEND, IBV_WR_SEND);
RG_SAME(RGV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM);
RG_SAME(RGV_WR_RDMA_READ, IBV_WR_RDMA_READ);
RG_SAME(RGV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP);
RG_SAME(RGV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD);
RG_SAME(RGV_WR_LOCAL_INV, IBV_WR_LOCAL_INV);
RG_SAME(RGV_WR_BIND_MW, IBV_WR_BIND_MW);
RG_SAME(RGV_WR_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);
RG_SAME(RGV_SEND_FENCE, IBV_SEND_FENCE);
RG_SAME(RGV_SEND_SIGNALED, IBV_SEND_SIGNALED);
RG_SAME(RGV_SEND_SOLICITED, IBV_SEND_SOLICITED);
RG_SAME(RGV_SEND_INLINE, IBV_SEND_INLINE);
RG_SAME(RGV_WC_SUCCESS, IBV_WC_SUCCESS);
RG_SAME(RGV_WC_LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR);
RG_SAME(RGV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR);
RG_SAME(RGV_WC_LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR);
RG_SAME(RGV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR);
RG_SAME(RGV_WC_MW_BIND_ERR, IBV_WC_MW_BIND_ERR);
RG_SAME(RGV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR);
RG_SAME(RGV_WC_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR);
RG_SAME(RGV_WC_REM_OP_ERR, IBV_WC_REM_OP_ERR);
RG_SAME(RGV_WC_RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR);
RG_SAME(RGV_WC_RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR);
RG_SAME(RGV_WC_GENERAL_ERR, IBV_WC_GENERAL_ERR);
RG_SAME(RGV_WC_SEND, IBV_WC_SEND);
RG_SAME(RGV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE);
RG_SAME(RGV_WC_RDMA_READ, IBV_WC_RDMA_READ);
RG_SAME(RGV_WC_COMP_SWAP, IBV_WC_COMP_SWAP);
RG_SAME(RGV_WC_FETCH_ADD, IBV_WC_FETCH_ADD);
RG_SAME(RGV_WC_BIND_MW, IBV_WC_BIND_MW);
RG_SAME(RGV_WC_LOCAL_INV, IBV_WC_LOCAL_INV);
RG_SAME(RGV_WC_RECV, IBV_WC_RECV);
RG_SAME(RGV_WC_RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
RG_SAME(RGV_WC_WITH_IMM, IBV_WC_WITH_IMM);
RG_SAME(RGV_WC_WITH_INV, IBV_WC_WITH_INV);

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
#define RG_MAX_NAME 15       /* a device name's characters, as UCX and the kernel take them */

/*
 * A UD receive's sl: on RoCE v2 there is no SL on the wire; mlx5 answers the network header type
 * there (bits 2:0, 0 GRH, 1 IPv6, 2 IPv4), and UCX's ud_verbs reads it to find the DGID in the
 * GRH area (the last 4 bytes for IPv4, else the last 16). Our datagrams are all IPv4.
 */
#define RG_UD_SL_IPV4 2u
static inline uint8_t rg_wc_sl(uint32_t wc_flags) { return (wc_flags & RGV_WC_GRH) ? RG_UD_SL_IPV4 : 0; }

struct rg_context {
  /* First: an extended context (verbs.h's verbs_get_ctx finds the verbs_context in front of the
     struct ibv_context the program holds), so the inline helpers reach our ops. */
  union {
    struct verbs_context v;
    struct {
      uint8_t before_ctx[offsetof(struct verbs_context, context)];
      struct ibv_context ctx;
    };
  };
  struct rg_device dev; /* a copy: valid after the device list is freed */
  int sock;
  int doorbell; /* eventfd the daemon sleeps on: written after a post when it asked (need_kick) */
  int dead; /* the daemon went away, or is not trusted any more: the rings are flushed, verbs fail with ECONNRESET */
  int fatal_told;       /* IBV_EVENT_DEVICE_FATAL was returned (async.c) */
  pthread_mutex_t objs; /* the QP and CQ lists (for the flush when the daemon goes away) */
  struct rg_qp* qps;
  struct rg_cq* cqs;
  uint32_t activity; /* posts to any queue (kick), polls that took completions (rg_cq_busy), counted
                       while sleeping is on: a CQ's poller sleeps only while this stays (ring.c) */
};

/* A memfd mapping both sides share: the ring header's two cache lines, then the entries. */
struct rg_ring {
  uint8_t* mem;
  size_t bytes;
};

struct rg_channel {
  struct ibv_comp_channel ch; /* first; ch.fd: our end of a stream socketpair */
  int wake;                   /* the other end, which the daemon has too: a byte sent there makes ch.fd readable */
  uint32_t handle;
  /* ibv_get_cq_event's look before it sleeps, now (ns; ring.c EVENT_SPIN_NS: follows the waits) */
  uint32_t look_ns;
};

struct rg_cq {
  union { /* first: an ibv_cq_ex begins with the ibv_cq (ibv_cq_ex_to_cq is a cast) */
    struct ibv_cq cq;
    struct ibv_cq_ex cqx;
  };
  uint64_t wc_flags; /* ibv_create_cq_ex's: what the read_* ops may be asked */
  int current;       /* between start_poll and end_poll: the CQE at cons is the program's now */
  int overflow_told; /* IBV_EVENT_CQ_ERR was returned (async.c) */
  struct rg_ring ring;
  uint32_t entries;       /* a power of two */
  uint32_t cons;          /* ours; published at RGV_CQ_CONS */
  uint32_t events_seen;   /* channel notifications this CQ has reported (ibv_get_cq_event) */
  uint32_t empty_polls;   /* since the last check that the daemon is there */
  uint64_t idle_since;    /* CLOCK_MONOTONIC ns of the first idle point since the context's activity; 0: none yet */
  uint32_t activity_seen; /* the context's activity then */
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

/* ibv_qp_ex's send API between wr_start and wr_complete (qp_ex.c). */
struct rg_wr_batch {
  struct ibv_send_wr wr; /* the WR being built: opcode and remote set by wr_<op>, data by wr_set_* */
  int open;              /* a wr_<op> waits for its data */
  int err;               /* the first failure: wr_complete returns it and posts nothing */
  uint32_t first;        /* sq_prod at wr_start */
};

struct rg_qp {
  union { /* first: an ibv_qp_ex begins with the ibv_qp */
    struct ibv_qp qp;
    struct ibv_qp_ex qpx;
  };
  uint64_t send_ops; /* ibv_create_qp_ex's send_ops_flags: 0, not an extended QP */
  int last_wqe_told; /* on an SRQ: IBV_EVENT_QP_LAST_WQE_REACHED was returned for its ERROR (async.c) */
  struct rg_wr_batch batch;
  struct rg_ring ring;
  uint32_t sq_entries, rq_entries, sq_stride, rq_stride;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint32_t sq_prod, rq_prod; /* ours; published at RGV_QP_SQ_PROD / RGV_QP_RQ_PROD */
  uint32_t sq_done_seen;     /* RGV_QP_SQ_DONE as last read (under sq_lock) */
  uint32_t* sq_bytes;        /* the data bytes of each send WQE, by slot (ours: ring.c's naps) */
  int sig_all;
  pthread_spinlock_t sq_lock, rq_lock;
  struct rg_qp* next; /* in the context */
};

static inline struct rg_context* rg_ctx(struct ibv_context* c) {
  return (struct rg_context*)((uint8_t*)c - offsetof(struct rg_context, ctx));
}

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
int rg_ctx_call(struct ibv_context* context, uint16_t op, const void* req, size_t len, int pass_fd, void* out,
                size_t out_len);
int rg_handle_call(struct ibv_context* context, uint16_t op, uint32_t handle);
/* rg_ctx_call passing `npass` fds (at most RGV_MAX_MR_PIECES) and a body of up to a full REG_MR. */
int rg_ctx_call_fds(struct ibv_context* context, uint16_t op, const void* req, size_t len, const int* pass,
                    size_t npass, void* out, size_t out_len);

/* regions.c: which of the program's pages are on which memfd, for REG_MR's pieces. */
struct rg_pieces {
  uint32_t n, nfds;
  struct rgv_mr_piece p[RGV_MAX_MR_PIECES];
  int fds[RGV_MAX_MR_PIECES];
  void* mems[RGV_MAX_MR_PIECES];
};
/*
 * The pages [start, end) as pieces of memfds (the parts earlier registrations put on memfds,
 * the rest moved onto a new one now); 0 with a process-wide lock held until rg_pages_done, or
 * -1 + errno (EFAULT: memory the program does not have; ENOMEM: more than RGV_MAX_MR_PIECES).
 */
int rg_pages_share(uintptr_t start, uintptr_t end, struct rg_pieces* out);
/* After the REG_MR: `registered`, a live MR covers [start, end) now; releases the lock. */
void rg_pages_done(uintptr_t start, uintptr_t end, int registered);
/* An MR over [start, end) was deregistered. */
void rg_pages_release(uintptr_t start, uintptr_t end);
/*
 * Whether [start, end) is System V shared memory (/proc/self/maps): 1 when every page is one
 * segment's, attached in order (its id in *shmid, where `start` is in it in *offset); 0 when no
 * page is; -1 + errno EINVAL, with a line, when some are and some are not (moving those onto a
 * memfd would end their sharing: such a registration is refused).
 */
int rg_pages_sysv(uintptr_t start, uintptr_t end, uint32_t* shmid, uint64_t* offset);

/* The daemon's devices (a connection of its own, DEVICES, checked), at most RGV_MAX_DEVICES; -1 + errno. */
int rg_query_devices(struct rgv_device* out);

/* probes.c: what /dev/infiniband, /sys/class/infiniband and /sys/class/infiniband_verbs show
   inside the program: these devices (the list ibv_get_device_list just made). */
void rg_probes_devices(const struct rgv_device* devs, int n);

/* ring.c */
void rg_set_ops(struct ibv_context_ops* ops);
/* A CQ (ibv_create_cq and ibv_create_cq_ex), or NULL + errno. */
struct rg_cq* rg_cq_create(struct ibv_context* context, int cqe, void* cq_context, struct ibv_comp_channel* channel,
                           int comp_vector);
/* A poll of an extended CQ (cq_ex.c) found nothing, or a completion: the idle bookkeeping of
 * ring.c (its yields, naps and sleeps). */
void rg_cq_empty(struct rg_cq* q);
/* The completions of QP `qpn` still in `cq` removed (a reset or destroyed QP's; ring.c); with
   `keep_recv`, its receive completions stay (their receives came from an SRQ). */
void rg_cq_clean(struct ibv_cq* cq, uint32_t qpn, int keep_recv);
void rg_cq_busy(struct rg_cq* q);
/* The send queue, under q->sq_lock: one WR written at sq_prod (not yet published); 0 or an errno. */
int rg_sq_write(struct rg_qp* q, const struct ibv_send_wr* wr);
/* The send queue, under q->sq_lock: sq_prod published, the daemon woken if it sleeps. */
void rg_sq_publish(struct rg_qp* q);

/* verbs.c: a QP (ibv_create_qp and ibv_create_qp_ex), or NULL + errno. */
/* `flags`: enum rgv_qp_flags (ibv_create_qp_ex's create flags we take). */
struct rg_qp* rg_qp_create(struct ibv_pd* pd, struct ibv_qp_init_attr* attr, uint32_t flags);

/* cq_ex.c, qp_ex.c: the extended CQ and QP. */
struct ibv_cq_ex* rg_create_cq_ex(struct ibv_context* context, struct ibv_cq_init_attr_ex* attr);
struct ibv_qp* rg_create_qp_ex(struct ibv_context* context, struct ibv_qp_init_attr_ex* attr);
/* async.c: the context's async_fd handed to the daemon (ASYNC_FD). */
void rg_async_attach(struct rg_context* c);
/* The extended context's entries for what this device has not: EOPNOTSUPP and a line each. */
void rg_set_unsupported(struct rg_context* c);
/* An address handle: the destination a UD QP's sends name (IPv4, network order). */
struct rg_ah {
  struct ibv_ah ah; /* first: the program holds a struct ibv_ah * */
  uint8_t ipv4[4];
};

/* Memory windows' ops (mw.c). */
void rg_set_mw_ops(struct rg_context* c);
int rg_query_device_ex(struct ibv_context* context, const struct ibv_query_device_ex_input* input,
                       struct ibv_device_attr_ex* attr, size_t attr_size);
/*
 * The context's daemon is gone or not to be trusted: every posted, unfinished WQE of its QPs is
 * flushed into their CQs (IBV_WC_WR_FLUSH_ERR), their channels signalled, `why` said once, and
 * later verbs fail with ECONNRESET.
 */
void rg_forsake(struct rg_context* c, const char* why);
/* Is the daemon still there (a peeking recv)? The first caller that finds it gone forsakes the context. */
int rg_daemon_gone(struct rg_context* c);
/*
 * Block in poll() for a verb that the kernel's provider blocks in read() (ibv_get_cq_event,
 * ibv_get_async_event, librdmacm's event wait). poll() is never restarted after a signal
 * handler, read() is when the handler has SA_RESTART: so on EINTR this returns -1 + EINTR
 * (what the kernel's read gives, and qperf's timer relies on) when a caught, unblocked signal's
 * handler lacks SA_RESTART, and 0 (wait again) when every such handler has it (perftest's
 * signal() handlers). Which signal came is not known: a program that mixes both kinds gets
 * EINTR for either.
 */
int rg_block_poll(struct pollfd* p, nfds_t n);
/* A sealed memfd of `bytes` mapped here; its fd (the caller passes then closes it), or -1 + errno. */
int rg_ring_create(struct rg_ring* r, size_t bytes);
void rg_ring_free(struct rg_ring* r);
/* The QP's rings: created, handed to the daemon; 0 or -1 + errno. */
int rg_qp_attach(struct rg_qp* q, const struct ibv_qp_init_attr* attr);
void rg_qp_forget(struct rg_qp* q);

#endif
