/*
 * The verbs control channel between librdmagraph-verbs.so (in an application) and the daemon
 * (dataplane/verbs-server/connections.ts): SOCK_SEQPACKET messages, little-endian, fixed layouts. The TypeScript
 * side mirrors these offsets; test/verbs-lib.test.ts checks them against a real exchange.
 */
#ifndef RDMA_GRAPH_VERBS_PROTO_H
#define RDMA_GRAPH_VERBS_PROTO_H

#include <stdint.h>

#define RGV_MAGIC 0x31564752u /* "RGV1" */
#define RGV_OP_DEVICES 1u   /* -> count x rgv_device */
#define RGV_OP_ALLOC_PD 2u  /* -> u32 pd handle */
#define RGV_OP_DEALLOC_PD 3u /* u32 pd */
#define RGV_OP_REG_MR 4u    /* rgv_reg_mr + the memory's memfd (SCM_RIGHTS) -> rgv_mr */
#define RGV_OP_DEREG_MR 5u  /* u32 mr handle */
#define RGV_OP_CREATE_CQ 6u /* rgv_create_cq + the ring memfd -> u32 cq handle, u32 entries */
#define RGV_OP_DESTROY_CQ 7u /* u32 cq */
#define RGV_OP_CREATE_QP 8u /* rgv_create_qp -> rgv_qp */
#define RGV_OP_MODIFY_QP 9u /* rgv_modify_qp */
#define RGV_OP_DESTROY_QP 10u /* u32 qpn */
#define RGV_OP_QUERY_QP 11u /* u32 qpn -> rgv_qp_attr */
#define RGV_OP_ATTACH 12u   /* char ifname[32] (the opened device's) + the doorbell eventfd (SCM_RIGHTS) */
#define RGV_OP_CREATE_CHANNEL 13u /* a completion channel's eventfd (SCM_RIGHTS) -> u32 handle */
#define RGV_OP_DESTROY_CHANNEL 14u /* u32 channel */
#define RGV_OP_QP_RING 15u  /* rgv_qp_ring + the rings' memfd: the QP's work queues */
#define RGV_OP_CREATE_SRQ 16u /* rgv_create_srq -> u32 handle, u32 max_wr, u32 max_sge */
#define RGV_OP_SRQ_RING 17u /* rgv_srq_ring + the ring's memfd */
#define RGV_OP_DESTROY_SRQ 18u /* u32 srq */
#define RGV_OP_MODIFY_SRQ 19u /* u32 srq, u32 limit */
#define RGV_NONE 0xffffffffu /* no channel, no SRQ */
#define RGV_MAX_DEVICES 64u

/* Every request and response starts with this (16 bytes). */
struct rgv_hdr {
  uint32_t magic;
  uint16_t op;
  int16_t status; /* responses: 0 or a negative errno */
  uint32_t seq;
  uint32_t count; /* responses: records that follow */
};

/* One device per data-plane interface with an IPv4 address (RGV_OP_DEVICES), 128 bytes. */
struct rgv_device {
  char name[64];   /* rdmagraph_<ifname> */
  char ifname[32];
  uint8_t mac[6];
  uint8_t link_up;
  uint8_t pad;
  uint8_t ipv4[4]; /* network order */
  uint32_t mtu;    /* IP MTU of the interface */
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t max_sge;
  uint32_t max_cqe;
  uint32_t max_rd_atom;
};

/* RGV_OP_REG_MR: the pages [page start, page end) of the registration, moved onto a memfd sealed
   against shrinking and growing (`span` bytes, a multiple of the page size); the MR is the
   `length` bytes at virtual address `addr` in them (peers address it by that address). */
struct rgv_reg_mr {
  uint32_t pd;
  uint32_t access; /* bit 0 local-write, 1 remote-write, 2 remote-read, 3 remote-atomic */
  uint64_t span;
  uint64_t start; /* virtual address of the first page */
  uint64_t addr;
  uint64_t length;
};

struct rgv_mr {
  uint32_t handle;
  uint32_t stag; /* lkey and rkey */
};

struct rgv_create_qp {
  uint32_t pd, send_cq, recv_cq;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint32_t srq; /* RGV_NONE: the QP's own receive queue */
};

/* RGV_OP_CREATE_CQ: `entries` (a power of two) CQEs in a ring of RGV_RING_HDR + entries x 32 bytes on the memfd. */
struct rgv_create_cq {
  uint32_t entries;
  uint32_t channel; /* RGV_NONE or a handle from RGV_OP_CREATE_CHANNEL */
  uint64_t bytes;
};

/* RGV_OP_QP_RING: a QP's send and receive rings (rgv_qp_bytes of them) on the passed memfd. */
struct rgv_qp_ring {
  uint32_t qpn;
  uint32_t sq_entries, rq_entries; /* powers of two; rq_entries 1 with an SRQ (unused) */
  uint32_t sq_stride, rq_stride;   /* rgv_sq_stride(max_sge, max_inline), rgv_rq_stride(max_sge) */
  uint32_t pad;
  uint64_t bytes;
};

struct rgv_create_srq {
  uint32_t pd, max_wr, max_sge, limit;
};

struct rgv_srq_ring {
  uint32_t srq, entries, stride, pad;
  uint64_t bytes;
};

/*
 * The shared rings. Each ring memfd starts with two cache lines: the first written by the
 * application, the second by the daemon. Indices are free-running u32 counters; an entry is at
 * index % entries. The daemon trusts none of what the application writes: it keeps its own
 * consumer index and reads each WQE's fields once.
 *
 * QP: [0] sq_prod, [4] rq_prod | [64] sq_cons, [68] rq_cons, [72] sq_done, [76] rq_done,
 *     [80] need_kick (the daemon is about to sleep: write the doorbell), [84] state (ibv_qp_state)
 *     then the send ring (sq_entries x sq_stride), then the receive ring (rq_entries x rq_stride).
 * SRQ: [0] prod | [64] cons, [68] done, [80] need_kick; then entries x stride.
 * CQ: [0] cons, [4] armed (1 next, 2 solicited; the daemon clears it when it signals) |
 *     [64] prod, [68] events signalled, [72] overflow; then entries x rgv_cqe.
 */
#define RGV_RING_HDR 128u
#define RGV_QP_SQ_PROD 0u
#define RGV_QP_RQ_PROD 4u
#define RGV_QP_SQ_CONS 64u
#define RGV_QP_RQ_CONS 68u
#define RGV_QP_SQ_DONE 72u
#define RGV_QP_RQ_DONE 76u
#define RGV_QP_NEED_KICK 80u
#define RGV_QP_STATE 84u
#define RGV_SRQ_PROD 0u
#define RGV_SRQ_CONS 64u
#define RGV_SRQ_DONE 68u
#define RGV_SRQ_NEED_KICK 80u
#define RGV_CQ_CONS 0u
#define RGV_CQ_ARMED 4u
#define RGV_CQ_PROD 64u
#define RGV_CQ_EVENTS 68u
#define RGV_CQ_OVERFLOW 72u

/* A send WQE: this header, then num_sge x rgv_sge, or inline_len bytes of data. */
struct rgv_send_wqe {
  uint64_t wr_id;
  uint32_t opcode;   /* enum ibv_wr_opcode */
  uint32_t flags;    /* enum ibv_send_flags */
  uint32_t num_sge;
  uint32_t imm;      /* imm_data (as the program stored it) or invalidate_rkey */
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t inline_len;
  uint64_t compare_add;
  uint64_t swap;
  uint64_t pad;
};

struct rgv_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

/* A receive WQE: this header, then num_sge x rgv_sge. */
struct rgv_recv_wqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t pad;
};

struct rgv_cqe {
  uint64_t wr_id;
  uint32_t status;   /* enum ibv_wc_status */
  uint32_t opcode;   /* enum ibv_wc_opcode */
  uint32_t byte_len;
  uint32_t imm;      /* imm_data or invalidated_rkey (wc_flags says which) */
  uint32_t qp_num;
  uint32_t wc_flags; /* IBV_WC_WITH_IMM, IBV_WC_WITH_INV */
};

/* In 64 bits: from sizes a daemon answered they must not wrap (the library bounds them first). */
static inline uint64_t rgv_sq_stride(uint32_t max_sge, uint32_t max_inline) {
  uint64_t data = (uint64_t)max_sge * 16u, in = ((uint64_t)max_inline + 15u) & ~(uint64_t)15u;
  return 64u + (data > in ? data : in);
}
static inline uint64_t rgv_rq_stride(uint32_t max_sge) { return 16u + (uint64_t)max_sge * 16u; }


/* What the QP got: its number (our UDP port) and its sizes. */
struct rgv_qp {
  uint32_t qpn;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
};

/* RGV_OP_MODIFY_QP: libibverbs' attr_mask bits and the attributes the daemon honours. */
struct rgv_modify_qp {
  uint32_t qpn;
  uint32_t mask;  /* IBV_QP_STATE, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, ... */
  uint32_t state; /* enum ibv_qp_state */
  uint8_t dgid[16];
  uint32_t dest_qpn, rq_psn, sq_psn;
  uint32_t max_rd_atomic;      /* ORD */
  uint32_t max_dest_rd_atomic; /* IRD */
  uint8_t path_mtu;  /* enum ibv_mtu (IBV_QP_PATH_MTU) */
  uint8_t timeout;   /* 4.096 us x 2^timeout (IBV_QP_TIMEOUT), 0: the daemon's */
  uint8_t retry_cnt; /* IBV_QP_RETRY_CNT */
  uint8_t rnr_retry; /* IBV_QP_RNR_RETRY */
};

/* RGV_OP_QUERY_QP: the QP as it is, with the attributes it was given. */
struct rgv_qp_attr {
  uint32_t state; /* enum ibv_qp_state */
  uint32_t dest_qpn, rq_psn, sq_psn;
  uint32_t max_rd_atomic, max_dest_rd_atomic;
  uint32_t path_mtu; /* enum ibv_mtu of the QP's segments */
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint8_t dest_ipv4[4]; /* 0.0.0.0: no peer yet */
};

_Static_assert(sizeof(struct rgv_qp_attr) == 48, "rgv_qp_attr is 48 bytes");
_Static_assert(sizeof(struct rgv_create_qp) == 32, "rgv_create_qp is 32 bytes");
_Static_assert(sizeof(struct rgv_create_cq) == 16, "rgv_create_cq is 16 bytes");
_Static_assert(sizeof(struct rgv_qp_ring) == 32, "rgv_qp_ring is 32 bytes");
_Static_assert(sizeof(struct rgv_srq_ring) == 24, "rgv_srq_ring is 24 bytes");
_Static_assert(sizeof(struct rgv_send_wqe) == 64, "rgv_send_wqe is 64 bytes");
_Static_assert(sizeof(struct rgv_recv_wqe) == 16, "rgv_recv_wqe is 16 bytes");
_Static_assert(sizeof(struct rgv_cqe) == 32, "rgv_cqe is 32 bytes");
_Static_assert(sizeof(struct rgv_qp) == 20, "rgv_qp is 20 bytes");
_Static_assert(sizeof(struct rgv_modify_qp) == 52, "rgv_modify_qp is 52 bytes");
_Static_assert(sizeof(struct rgv_reg_mr) == 40, "rgv_reg_mr is 40 bytes");
_Static_assert(sizeof(struct rgv_mr) == 8, "rgv_mr is 8 bytes");
_Static_assert(sizeof(struct rgv_hdr) == 16, "rgv_hdr is 16 bytes");
_Static_assert(sizeof(struct rgv_device) == 132, "rgv_device is 132 bytes");

#endif
