/*
 * The verbs control channel between librdmagraph-verbs.so (in an application) and the daemon
 * (api/verbs-socket.ts): SOCK_SEQPACKET messages, little-endian, fixed layouts. The TypeScript
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
#define RGV_OP_CREATE_CQ 6u /* u32 entries -> u32 cq handle, u32 entries */
#define RGV_OP_DESTROY_CQ 7u /* u32 cq */
#define RGV_OP_CREATE_QP 8u /* rgv_create_qp -> rgv_qp */
#define RGV_OP_MODIFY_QP 9u /* rgv_modify_qp */
#define RGV_OP_DESTROY_QP 10u /* u32 qpn */
#define RGV_OP_QUERY_QP 11u /* u32 qpn -> rgv_qp_attr */
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
};

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
_Static_assert(sizeof(struct rgv_create_qp) == 28, "rgv_create_qp is 28 bytes");
_Static_assert(sizeof(struct rgv_qp) == 20, "rgv_qp is 20 bytes");
_Static_assert(sizeof(struct rgv_modify_qp) == 48, "rgv_modify_qp is 48 bytes");
_Static_assert(sizeof(struct rgv_reg_mr) == 40, "rgv_reg_mr is 40 bytes");
_Static_assert(sizeof(struct rgv_mr) == 8, "rgv_mr is 8 bytes");
_Static_assert(sizeof(struct rgv_hdr) == 16, "rgv_hdr is 16 bytes");
_Static_assert(sizeof(struct rgv_device) == 132, "rgv_device is 132 bytes");

#endif
