/*
 * The verbs protocol between librdmagraph-verbs.so (in an application) and the daemon
 * (dataplane/verbs-server/): the control messages on the SOCK_SEQPACKET socket and the shared
 * rings. Little-endian, fixed layouts; what each message and ring word means, who writes it and
 * when: docs/VERBS-PROTOCOL.md (section numbers cited below).
 *
 * This file is the one source of the ABI. It includes nothing but <stdint.h>, so that
 * native/tools/verbs-abi.c (a C compiler and nothing else) can print every constant, enum and
 * struct of it; native/tools/gen-verbs-abi.mjs turns that into
 * dataplane/verbs-server/abi.generated.ts, the daemon's copy, and test/verbs-abi.test.ts fails
 * while the two differ. Adding a constant, an enum member or a struct here: add it to
 * verbs-abi.c too (the generator refuses a name it does not print; a struct member it does not
 * list leaves a hole it refuses), then `npm run build`.
 */
#ifndef RDMA_GRAPH_VERBS_PROTO_H
#define RDMA_GRAPH_VERBS_PROTO_H

#include <stdint.h>

#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert /* the daemon's addon includes it for RGV_MAX_MR_PIECES */
#endif

/* ------------------------------------------------------------------ control messages (§2, §3) */

#define RGV_MAGIC 0x31564752u /* "RGV1" */
#define RGV_NONE 0xffffffffu  /* no channel, no SRQ */
#define RGV_MAX_DEVICES 64u   /* device records in a DEVICES reply, at most */
#define RGV_MAX_REASON 480u   /* bytes of text after a refusal's header, at most (§2.3) */
#define RGV_MAX_MR_PIECES 64u /* pieces (and memfds) of one REG_MR, at most (§3) */

/* The requests; each is answered once, with the same op and seq (§3). */
enum rgv_op {
  RGV_OP_DEVICES = 1,
  RGV_OP_ALLOC_PD = 2,
  RGV_OP_DEALLOC_PD = 3,
  RGV_OP_REG_MR = 4,
  RGV_OP_DEREG_MR = 5,
  RGV_OP_CREATE_CQ = 6,
  RGV_OP_DESTROY_CQ = 7,
  RGV_OP_CREATE_QP = 8,
  RGV_OP_MODIFY_QP = 9,
  RGV_OP_DESTROY_QP = 10,
  RGV_OP_QUERY_QP = 11,
  RGV_OP_ATTACH = 12,
  RGV_OP_CREATE_CHANNEL = 13,
  RGV_OP_DESTROY_CHANNEL = 14,
  RGV_OP_QP_RING = 15,
  RGV_OP_CREATE_SRQ = 16,
  RGV_OP_SRQ_RING = 17,
  RGV_OP_DESTROY_SRQ = 18,
  RGV_OP_MODIFY_SRQ = 19,
  RGV_OP_ASYNC_FD = 20,
  RGV_OP_ALLOC_MW = 21,
  RGV_OP_DEALLOC_MW = 22,
  RGV_OP_REG_SHM = 23,      /* an MR over pages of one SysV shared memory segment (struct rgv_reg_shm) */
  RGV_OP_ATTACH_MCAST = 24, /* ibv_attach_mcast: a UD QP to an IPv4 multicast group (struct rgv_mcast) */
  RGV_OP_DETACH_MCAST = 25, /* ibv_detach_mcast */
  RGV_OP_UCMA_CHANNEL = 40, /* rdma_cm: a channel (an open of rdma_cm): the passed eventfd; its handle */
  RGV_OP_UCMA = 41,         /* rdma_cm: one command (struct rgv_ucma) */
};

/* The file descriptor a request passes with it (SCM_RIGHTS); the daemon closes any other unread. */
enum rgv_fd {
  RGV_FD_NONE = 0,
  RGV_FD_MEMFD = 1,   /* memory sealed against shrinking and growing, mapped by the daemon */
  RGV_FD_EVENTFD = 2, /* an eventfd the daemon writes (never reads but to drain it) */
  RGV_FD_MEMFDS = 3,  /* 1..RGV_MAX_MR_PIECES memfds, as RGV_FD_MEMFD each (REG_MR's pieces) */
  RGV_FD_CHANNEL = 4, /* an end of an AF_UNIX stream socketpair, sent a byte per notification (or an eventfd) */
};

/*
 * Every request: its body, its reply's body (`none`: nothing after the header), whether the reply
 * holds `count` records of that body rather than one, and the fd it passes. The daemon serves
 * every one (dataplane/verbs-server/handlers.ts has a handler for each, which tsc checks).
 */
// clang-format off: the table is read down its columns
#define RGV_OPS(X)                                                  \
  /* name            request          reply          records  fd */ \
  X(DEVICES, none, rgv_device, 1, RGV_FD_NONE)                      \
  X(ALLOC_PD, none, rgv_handle, 0, RGV_FD_NONE)                     \
  X(DEALLOC_PD, rgv_handle, none, 0, RGV_FD_NONE)                   \
  X(REG_MR, rgv_reg_mr, rgv_mr, 0, RGV_FD_MEMFDS)                   \
  X(DEREG_MR, rgv_handle, none, 0, RGV_FD_NONE)                     \
  X(CREATE_CQ, rgv_create_cq, rgv_cq, 0, RGV_FD_MEMFD)              \
  X(DESTROY_CQ, rgv_handle, none, 0, RGV_FD_NONE)                   \
  X(CREATE_QP, rgv_create_qp, rgv_qp, 0, RGV_FD_NONE)               \
  X(MODIFY_QP, rgv_modify_qp, none, 0, RGV_FD_NONE)                 \
  X(DESTROY_QP, rgv_handle, none, 0, RGV_FD_NONE)                   \
  X(QUERY_QP, rgv_handle, rgv_qp_attr, 0, RGV_FD_NONE)              \
  X(ATTACH, rgv_attach, none, 0, RGV_FD_EVENTFD)                    \
  X(CREATE_CHANNEL, none, rgv_handle, 0, RGV_FD_CHANNEL)            \
  X(DESTROY_CHANNEL, rgv_handle, none, 0, RGV_FD_NONE)              \
  X(QP_RING, rgv_qp_ring, none, 0, RGV_FD_MEMFD)                    \
  X(CREATE_SRQ, rgv_create_srq, rgv_srq, 0, RGV_FD_NONE)            \
  X(SRQ_RING, rgv_srq_ring, none, 0, RGV_FD_MEMFD)                  \
  X(DESTROY_SRQ, rgv_handle, none, 0, RGV_FD_NONE)                  \
  X(MODIFY_SRQ, rgv_modify_srq, none, 0, RGV_FD_NONE)               \
  X(ASYNC_FD, none, none, 0, RGV_FD_EVENTFD)                        \
  X(ALLOC_MW, rgv_alloc_mw, rgv_mw, 0, RGV_FD_NONE)                 \
  X(DEALLOC_MW, rgv_handle, none, 0, RGV_FD_NONE)                   \
  X(REG_SHM, rgv_reg_shm, rgv_mr, 0, RGV_FD_NONE)                   \
  X(ATTACH_MCAST, rgv_mcast, none, 0, RGV_FD_NONE)                  \
  X(DETACH_MCAST, rgv_mcast, none, 0, RGV_FD_NONE)                  \
  RGV_UCMA_OPS(X)
// clang-format on

/* Every request and reply starts with this (16 bytes, §2.1). */
struct rgv_hdr {
  uint32_t magic; /* RGV_MAGIC */
  uint16_t op;    /* enum rgv_op; a reply repeats its request's */
  int16_t status; /* replies: 0 or a negative errno */
  uint32_t seq;   /* the requester's; a reply repeats it */
  uint32_t count; /* replies: records that follow (DEVICES), else 0 */
};

/* A handle of the connection's own (PD, MR, CQ, SRQ, channel) or a QPN: the destroys, QUERY_QP,
   and the replies of ALLOC_PD and CREATE_CHANNEL. */
struct rgv_handle {
  uint32_t handle;
};

/* DEVICES: one device per data-plane interface with an IPv4 address, 240 bytes: its name, its
   interface and the attributes ibv_query_device and ibv_query_port answer, as the daemon's
   device view (GET /v1/devices, `rdmactl show device`) has them: one source, the daemon's. */
struct rgv_device {
  char name[64];   /* rg_<ifname> (at most 15 characters, docs/VERBS-PROTOCOL.md §3), NUL-terminated */
  char ifname[32]; /* NUL-terminated */
  uint8_t mac[6];
  uint8_t link_up;
  uint8_t active_mtu; /* enum rgv_mtu: the largest IB MTU the interface's segments hold */
  uint8_t ipv4[4];    /* network order */
  uint32_t mtu;       /* IP MTU of the interface */
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t max_sge;
  uint32_t max_cqe;
  uint32_t max_rd_atom; /* max_qp_rd_atom and max_qp_init_rd_atom */
  uint32_t max_cq;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  uint32_t max_inline;
  uint32_t max_msg_sz; /* bytes of one message */
  uint32_t max_mtu;    /* enum rgv_mtu: the largest path_mtu MODIFY_QP takes */
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t page_size_cap;
  uint32_t max_sge_rd;
  uint32_t max_res_rd_atom;
  uint64_t max_mr_size;               /* bytes of one MR */
  uint8_t node_guid[8];               /* network order (the EUI-64 of the MAC) */
  char fw_ver[32];                    /* the daemon's version, NUL-terminated */
  uint32_t max_mcast_grp;             /* multicast groups with members at once */
  uint32_t max_mcast_qp_attach;       /* UD QPs attached to one group */
  uint32_t max_total_mcast_qp_attach; /* attachments in all */
  uint32_t pad;
};

/* ATTACH_MCAST/DETACH_MCAST: UD QP `qpn` (the connection's own) and an IPv4 multicast group
   (224.0.0.0/4, network order: the last 4 bytes of the IPv4-mapped GID). */
struct rgv_mcast {
  uint32_t qpn;
  uint8_t group[4];
};

/* ATTACH: the opened device's interface (its QPs take that address) + the doorbell eventfd. */
struct rgv_attach {
  char ifname[32]; /* rgv_device.ifname */
};

/* REG_MR: the pages [start, start + span) of the registration (`span` a multiple of the page
   size), shared with the daemon through memfds sealed against shrinking: with `pieces` 0, the
   one passed memfd from offset 0; else `pieces` rgv_mr_piece records follow this struct, in
   address order, abutting, covering the span exactly, each naming one of the passed memfds
   (the same pages registered twice are one memory: §3). The MR is the `length` bytes at
   virtual address `addr` in the span (peers address it by that address). */
struct rgv_reg_mr {
  uint32_t pd;
  uint32_t access; /* enum rgv_access bits */
  uint64_t span;
  uint64_t start; /* virtual address of the first page */
  uint64_t addr;
  uint64_t length;
  uint32_t pieces; /* 0, or 1..RGV_MAX_MR_PIECES records after this struct */
  uint32_t pad;
};

/* REG_SHM: as REG_MR, for pages [start, start + span) that are all one System V shared memory
   segment's, attached by the program (shmat): `offset` (a multiple of the page size) is where
   `start` is in segment `shmid`. The daemon attaches the segment itself, if the program's user
   owns or created it, so that the pages stay the segment's (moving them onto a memfd, as REG_MR
   does, would end the sharing with every other process that attached it). No fd passes. */
struct rgv_reg_shm {
  uint32_t pd;
  uint32_t access; /* enum rgv_access bits */
  uint64_t span;
  uint64_t start; /* virtual address of the first page */
  uint64_t addr;
  uint64_t length;
  uint64_t offset; /* of `start` in the segment */
  uint32_t shmid;
  uint32_t pad;
};

/* One piece of a REG_MR span: `length` bytes (a multiple of the page size) at `offset` (one
   too) of passed memfd number `fd` (0 the first passed), placed after the piece before it. */
struct rgv_mr_piece {
  uint64_t offset;
  uint64_t length;
  uint32_t fd;
  uint32_t pad;
};

struct rgv_mr {
  uint32_t handle;
  uint32_t stag; /* lkey and rkey */
};

/* ALLOC_MW: a memory window of `type` (1 or 2) in PD `pd`; its handle and first rkey. */
struct rgv_alloc_mw {
  uint32_t pd;
  uint32_t type;
};

struct rgv_mw {
  uint32_t handle;
  uint32_t rkey;
};

/* CREATE_CQ: `entries` (a power of two) CQEs in a ring of RGV_RING_HDR + entries x
   sizeof(struct rgv_cqe) bytes, `bytes`, on the passed memfd. */
struct rgv_create_cq {
  uint32_t entries;
  uint32_t channel; /* RGV_NONE or a handle from CREATE_CHANNEL */
  uint64_t bytes;
};

struct rgv_cq {
  uint32_t handle;
  uint32_t entries; /* what the CQ holds: at least asked, at most the ring's entries */
};

struct rgv_create_qp {
  uint32_t pd, send_cq, recv_cq;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint32_t srq;     /* RGV_NONE: the QP's own receive queue */
  uint32_t qp_type; /* enum rgv_qp_type */
  uint32_t flags;   /* enum rgv_qp_flags */
};

/* CREATE_QP's flags: ibv_create_qp_ex's create flags the daemon takes. */
enum rgv_qp_flags {
  RGV_QP_BLOCK_SELF_MCAST_LB = 1, /* a UD QP's datagrams to a group are not looped back to this data plane */
};

/* What the QP got: its number (our UDP port) and its sizes. */
struct rgv_qp {
  uint32_t qpn;
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
};

/* QP_RING: a QP's send and receive rings (`bytes` of them) on the passed memfd (§4.2). */
struct rgv_qp_ring {
  uint32_t qpn;
  uint32_t sq_entries, rq_entries; /* powers of two; rq_entries 1 with an SRQ (unused) */
  uint32_t sq_stride, rq_stride;   /* rgv_sq_stride(max_sge, max_inline), rgv_rq_stride(max_sge) */
  uint32_t pad;
  uint64_t bytes;
};

/* MODIFY_QP: libibverbs' attr_mask bits and the attributes the daemon honours. */
struct rgv_modify_qp {
  uint32_t qpn;
  uint32_t mask;  /* enum rgv_qp_attr_mask bits */
  uint32_t state; /* enum rgv_qp_state */
  uint8_t dgid[16];
  uint32_t dest_qpn, rq_psn, sq_psn;
  uint32_t max_rd_atomic;      /* ORD */
  uint32_t max_dest_rd_atomic; /* IRD */
  uint8_t path_mtu;            /* enum rgv_mtu (RGV_ATTR_PATH_MTU) */
  uint8_t timeout;             /* 4.096 us x 2^timeout (RGV_ATTR_TIMEOUT), 0: the daemon's */
  uint8_t retry_cnt;           /* RGV_ATTR_RETRY_CNT */
  uint8_t rnr_retry;           /* RGV_ATTR_RNR_RETRY: not applied */
  uint32_t qkey;               /* RGV_ATTR_QKEY (UD): the high bit only for a root program */
};

/* QUERY_QP: the QP as it is, with the attributes it was given. */
struct rgv_qp_attr {
  uint32_t state; /* enum rgv_qp_state */
  uint32_t dest_qpn, rq_psn, sq_psn;
  uint32_t max_rd_atomic, max_dest_rd_atomic;
  uint32_t path_mtu; /* enum rgv_mtu of the QP's segments */
  uint32_t max_send_wr, max_recv_wr, max_sge, max_inline;
  uint8_t dest_ipv4[4]; /* network order; 0.0.0.0: no peer yet */
  uint32_t qkey;        /* UD: the Q_Key; RC: 0 */
};

struct rgv_create_srq {
  uint32_t pd, max_wr, max_sge, limit;
};

struct rgv_srq {
  uint32_t handle, max_wr, max_sge;
};

/* SRQ_RING: the SRQ's receive ring (`bytes`) on the passed memfd. */
struct rgv_srq_ring {
  uint32_t srq, entries, stride, pad;
  uint64_t bytes;
};

struct rgv_modify_srq {
  uint32_t srq, limit;
};

/* ------------------------------------------------------------------ the shared rings (§4) */

/*
 * Each ring memfd starts with two cache lines: the first written by the application, the
 * second by the daemon. Indices are free-running u32 counters; an entry is at index % entries.
 * The daemon trusts none of what the application writes: it keeps its own consumer index and
 * reads each WQE's fields once. Byte offsets in the header:
 *
 * QP: [0] sq_prod, [4] rq_prod | [64] sq_cons, [68] rq_cons, [72] sq_done, [76] rq_done,
 *     [80] need_kick (the daemon is about to sleep: write the doorbell), [84] state
 *     (enum rgv_qp_state); then the send ring (sq_entries x sq_stride), then the receive ring
 *     (rq_entries x rq_stride).
 * SRQ: [0] prod | [64] cons, [68] done, [80] need_kick; then entries x stride.
 * CQ: [0] cons, [4] armed (RGV_CQ_ARM_*; the daemon clears it when it signals), [8] sleepers
 *     (threads asleep in a futex wait on prod: the daemon wakes them after it moves prod) |
 *     [64] prod, [68] events counted, [72] overflow, [76] wake, [80] events whose byte was sent;
 *     then entries x rgv_cqe.
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
#define RGV_CQ_SLEEPERS 8u
#define RGV_CQ_PROD 64u
#define RGV_CQ_EVENTS 68u
#define RGV_CQ_OVERFLOW 72u
#define RGV_CQ_WAKE 76u      /* the daemon adds 1, then wakes its sleepers: the word they wait on */
#define RGV_CQ_SIGNALLED 80u /* RGV_CQ_EVENTS as it was when the channel's byte had been sent */
/* RGV_CQ_SIGNALLED as the library makes the ring; the daemon sets it to RGV_CQ_EVENTS when it
   takes the CQ (a daemon of a build before the word leaves it: the library then waits for no byte) */
#define RGV_CQ_SIGNALLED_UNSET 0xffffffffu
#define RGV_CQ_ARM_NEXT 1u      /* ibv_req_notify_cq(cq, 0): the next completion */
#define RGV_CQ_ARM_SOLICITED 2u /* ibv_req_notify_cq(cq, 1): a solicited or failed one */
#define RGV_INLINE_ALIGN 16u    /* inline data in a send WQE takes a multiple of this */

/* A send WQE: this header, then num_sge x rgv_sge, or inline_len bytes of data. */
struct rgv_send_wqe {
  uint64_t wr_id;
  uint32_t opcode; /* enum rgv_wr_opcode */
  uint32_t flags;  /* enum rgv_send_flags bits */
  uint32_t num_sge;
  uint32_t imm; /* imm_data (as the program stored it) or invalidate_rkey */
  /* A UD QP's send: remote_addr's first 4 bytes the destination's IPv4 address (network order),
     rkey its QPN, compare_add its Q_Key. */
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t inline_len;
  uint64_t compare_add;
  uint64_t swap;
  uint32_t bind_lkey; /* BIND_MW: the MR's lkey (0: unbind); then rkey is the window's handle, imm
                         its new rkey, remote_addr/compare_add the range, swap the access flags */
  uint32_t pad;
};

/* struct ibv_sge's layout (ring.c copies a program's list as it is). */
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
  uint32_t status; /* enum rgv_wc_status */
  uint32_t opcode; /* enum rgv_wc_opcode */
  uint32_t byte_len;
  uint32_t imm; /* imm_data or invalidated_rkey (wc_flags says which) */
  uint32_t qp_num;
  uint32_t wc_flags; /* enum rgv_wc_flags bits */
  uint32_t src_qp;   /* UD receives: the sender's QPN (RGV_WC_GRH set: a GRH is in front) */
  uint32_t pad;
};

/* A ring's entry sizes; in 64 bits: from sizes a daemon answered they must not wrap (the
   library bounds them first). */
static inline uint64_t rgv_sq_stride(uint32_t max_sge, uint32_t max_inline) {
  uint64_t data = (uint64_t)max_sge * sizeof(struct rgv_sge);
  uint64_t in = ((uint64_t)max_inline + RGV_INLINE_ALIGN - 1) & ~(uint64_t)(RGV_INLINE_ALIGN - 1);
  return sizeof(struct rgv_send_wqe) + (data > in ? data : in);
}
static inline uint64_t rgv_rq_stride(uint32_t max_sge) {
  return sizeof(struct rgv_recv_wqe) + (uint64_t)max_sge * sizeof(struct rgv_sge);
}

/* ------------------------------------------------------------------ libibverbs' values (§5) */

/*
 * The values of libibverbs' enums that travel in the messages and rings, as the daemon reads and
 * writes them (the library passes the program's values through: lib.h checks these against
 * <infiniband/verbs.h> at compile time).
 */
enum rgv_access {
  RGV_ACCESS_LOCAL_WRITE = 1,
  RGV_ACCESS_REMOTE_WRITE = 2,
  RGV_ACCESS_REMOTE_READ = 4,
  RGV_ACCESS_REMOTE_ATOMIC = 8,
  RGV_ACCESS_MW_BIND = 16,
};

enum rgv_qp_state {
  RGV_QPS_RESET = 0,
  RGV_QPS_INIT = 1,
  RGV_QPS_RTR = 2,
  RGV_QPS_RTS = 3,
  RGV_QPS_SQD = 4,
  RGV_QPS_SQE = 5,
  RGV_QPS_ERR = 6,
};

/* The attr_mask bits the daemon reads. */
enum rgv_qp_attr_mask {
  RGV_ATTR_STATE = 1 << 0,
  RGV_ATTR_QKEY = 1 << 6,
  RGV_ATTR_AV = 1 << 7,
  RGV_ATTR_PATH_MTU = 1 << 8,
  RGV_ATTR_TIMEOUT = 1 << 9,
  RGV_ATTR_RETRY_CNT = 1 << 10,
  RGV_ATTR_RNR_RETRY = 1 << 11,
  RGV_ATTR_RQ_PSN = 1 << 12,
  RGV_ATTR_MAX_QP_RD_ATOMIC = 1 << 13,
  RGV_ATTR_SQ_PSN = 1 << 16,
  RGV_ATTR_MAX_DEST_RD_ATOMIC = 1 << 17,
  RGV_ATTR_DEST_QPN = 1 << 20,
};

enum rgv_mtu {
  RGV_MTU_256 = 1,
  RGV_MTU_512 = 2,
  RGV_MTU_1024 = 3,
  RGV_MTU_2048 = 4,
  RGV_MTU_4096 = 5,
};

enum rgv_wr_opcode {
  RGV_WR_RDMA_WRITE = 0,
  RGV_WR_RDMA_WRITE_WITH_IMM = 1,
  RGV_WR_SEND = 2,
  RGV_WR_SEND_WITH_IMM = 3, /* rdma-graph's Send with Immediate (nodes/rdma/PROTOCOL.md §4) */
  RGV_WR_RDMA_READ = 4,
  RGV_WR_ATOMIC_CMP_AND_SWP = 5,
  RGV_WR_ATOMIC_FETCH_AND_ADD = 6,
  RGV_WR_LOCAL_INV = 7, /* a type 2 memory window */
  RGV_WR_BIND_MW = 8,
  RGV_WR_SEND_WITH_INV = 9,
};

enum rgv_send_flags {
  RGV_SEND_FENCE = 1,
  RGV_SEND_SIGNALED = 2,
  RGV_SEND_SOLICITED = 4,
  RGV_SEND_INLINE = 8,
};

enum rgv_wc_status {
  RGV_WC_SUCCESS = 0,
  RGV_WC_LOC_LEN_ERR = 1,
  RGV_WC_LOC_QP_OP_ERR = 2,
  RGV_WC_LOC_PROT_ERR = 4,
  RGV_WC_WR_FLUSH_ERR = 5,
  RGV_WC_MW_BIND_ERR = 6,
  RGV_WC_REM_INV_REQ_ERR = 9,
  RGV_WC_REM_ACCESS_ERR = 10,
  RGV_WC_REM_OP_ERR = 11,
  RGV_WC_RETRY_EXC_ERR = 12,
  RGV_WC_RNR_RETRY_EXC_ERR = 13,
  RGV_WC_GENERAL_ERR = 21,
};

enum rgv_wc_opcode {
  RGV_WC_SEND = 0,
  RGV_WC_RDMA_WRITE = 1,
  RGV_WC_RDMA_READ = 2,
  RGV_WC_COMP_SWAP = 3,
  RGV_WC_FETCH_ADD = 4,
  RGV_WC_BIND_MW = 5,
  RGV_WC_LOCAL_INV = 6,
  RGV_WC_RECV = 128,
  RGV_WC_RECV_RDMA_WITH_IMM = 129,
};

enum rgv_qp_type {
  RGV_QPT_RC = 2,
  RGV_QPT_UD = 4,
};

enum rgv_wc_flags {
  RGV_WC_GRH = 1 << 0,
  RGV_WC_WITH_IMM = 1 << 1,
  RGV_WC_WITH_INV = 1 << 3,
};

_Static_assert(sizeof(struct rgv_hdr) == 16, "rgv_hdr is 16 bytes");
_Static_assert(sizeof(struct rgv_handle) == 4, "rgv_handle is 4 bytes");
_Static_assert(sizeof(struct rgv_device) == 256, "rgv_device is 256 bytes");
_Static_assert(sizeof(struct rgv_mcast) == 8, "rgv_mcast is 8 bytes");
_Static_assert(sizeof(struct rgv_attach) == 32, "rgv_attach is 32 bytes");
_Static_assert(sizeof(struct rgv_reg_mr) == 48, "rgv_reg_mr is 48 bytes");
_Static_assert(sizeof(struct rgv_reg_shm) == 56, "rgv_reg_shm is 56 bytes");
_Static_assert(sizeof(struct rgv_mr_piece) == 24, "rgv_mr_piece is 24 bytes");
_Static_assert(sizeof(struct rgv_mr) == 8, "rgv_mr is 8 bytes");
_Static_assert(sizeof(struct rgv_alloc_mw) == 8, "rgv_alloc_mw is 8 bytes");
_Static_assert(sizeof(struct rgv_mw) == 8, "rgv_mw is 8 bytes");
_Static_assert(sizeof(struct rgv_create_cq) == 16, "rgv_create_cq is 16 bytes");
_Static_assert(sizeof(struct rgv_cq) == 8, "rgv_cq is 8 bytes");
_Static_assert(sizeof(struct rgv_create_qp) == 40, "rgv_create_qp is 40 bytes");
_Static_assert(sizeof(struct rgv_qp) == 20, "rgv_qp is 20 bytes");
_Static_assert(sizeof(struct rgv_qp_ring) == 32, "rgv_qp_ring is 32 bytes");
_Static_assert(sizeof(struct rgv_modify_qp) == 56, "rgv_modify_qp is 56 bytes");
_Static_assert(sizeof(struct rgv_qp_attr) == 52, "rgv_qp_attr is 52 bytes");
_Static_assert(sizeof(struct rgv_create_srq) == 16, "rgv_create_srq is 16 bytes");
_Static_assert(sizeof(struct rgv_srq) == 12, "rgv_srq is 12 bytes");
_Static_assert(sizeof(struct rgv_srq_ring) == 24, "rgv_srq_ring is 24 bytes");
_Static_assert(sizeof(struct rgv_modify_srq) == 8, "rgv_modify_srq is 8 bytes");
_Static_assert(sizeof(struct rgv_send_wqe) == 64, "rgv_send_wqe is 64 bytes");
_Static_assert(sizeof(struct rgv_sge) == 16, "rgv_sge is 16 bytes");
_Static_assert(sizeof(struct rgv_recv_wqe) == 16, "rgv_recv_wqe is 16 bytes");
_Static_assert(sizeof(struct rgv_cqe) == 40, "rgv_cqe is 40 bytes");
_Static_assert(RGV_QP_STATE < RGV_RING_HDR && RGV_CQ_SIGNALLED < RGV_RING_HDR, "the ring headers fit RGV_RING_HDR");

/* ------------------------------------------------------------------ rdma_cm (§6) */

/*
 * librdmacm's kernel interface (the ucma commands of <rdma/rdma_user_cm.h>) answered by the
 * library (ucma.c) on the daemon's connection manager (nodes/rdma/cm.ts): an open of
 * /dev/infiniband/rdma_cm is an eventfd the library made and UCMA_CHANNEL passed (the daemon
 * keeps it readable while the channel has events), and each command written to it one UCMA
 * request, its body checked and converted by the library.
 */
// clang-format off: the table is read down its columns
#define RGV_UCMA_OPS(X)                                \
  X(UCMA_CHANNEL, none, rgv_handle, 0, RGV_FD_EVENTFD) \
  X(UCMA, rgv_ucma, rgv_ucma_reply, 0, RGV_FD_NONE)
// clang-format on

#define RGV_UCMA_MAX_PRIVATE_DATA 256u /* the ucma ABI's (its length is a u8: 255 used) */
#define RGV_UCMA_MAX_EVENTS 1024u      /* events a channel holds, at most */

enum rgv_ucma_cmd {
  RGV_UCMA_CREATE_ID = 1,     /* channel, ps, qp_type, uid: id */
  RGV_UCMA_DESTROY_ID = 2,    /* id: count (events reported) */
  RGV_UCMA_BIND = 3,          /* id, src (0.0.0.0: any), src_port (0: one free) */
  RGV_UCMA_RESOLVE_ADDR = 4,  /* id, src (may be 0), dst, dst_port, backlog (timeout ms) */
  RGV_UCMA_RESOLVE_ROUTE = 5, /* id */
  RGV_UCMA_QUERY = 6,         /* id: node_guid, src, dst, ports */
  RGV_UCMA_CONNECT = 7,       /* id, qpn, responder_resources, initiator_depth, private data */
  RGV_UCMA_LISTEN = 8,        /* id, backlog */
  RGV_UCMA_ACCEPT = 9,        /* id, uid, qpn (0: the active side's, after CONNECT_RESPONSE), private data */
  RGV_UCMA_REJECT = 10,       /* id, private data */
  RGV_UCMA_DISCONNECT = 11,   /* id */
  RGV_UCMA_INIT_QP_ATTR = 12, /* id, qpn (the state asked): mask, state, dst, qpn, rq_psn, path_mtu, ... */
  RGV_UCMA_GET_EVENT = 13,    /* channel: uid, id, event, status, count (the listening id of a request) */
  RGV_UCMA_MIGRATE_ID = 14,   /* id, channel (the new one): count (events reported) */
  RGV_UCMA_CLOSE = 15,        /* channel: closed with every id on it */
  RGV_UCMA_JOIN =
      16, /* id (UD, address bound or resolved), uid, dst (the group), backlog (join flags): id (the membership's) */
  RGV_UCMA_LEAVE = 17, /* id (a membership's): count (its events reported) */
};

/* librdmacm's enum rdma_cm_event_type values (GET_EVENT's event). */
enum rgv_cm_event {
  RGV_CM_ADDR_RESOLVED = 0,
  RGV_CM_ADDR_ERROR = 1,
  RGV_CM_ROUTE_RESOLVED = 2,
  RGV_CM_ROUTE_ERROR = 3,
  RGV_CM_CONNECT_REQUEST = 4,
  RGV_CM_CONNECT_RESPONSE = 5,
  RGV_CM_CONNECT_ERROR = 6,
  RGV_CM_UNREACHABLE = 7,
  RGV_CM_REJECTED = 8,
  RGV_CM_ESTABLISHED = 9,
  RGV_CM_DISCONNECTED = 10,
  RGV_CM_DEVICE_REMOVAL = 11,
  RGV_CM_MULTICAST_JOIN = 12, /* a JOIN's answer: param.ud names the group (QPN 0xFFFFFF) and its Q_Key */
  RGV_CM_TIMEWAIT_EXIT = 15,  /* 13 and 14 (multicast error, address change) are never sent */
};

struct rgv_ucma {
  uint32_t cmd;            /* enum rgv_ucma_cmd */
  uint32_t channel;        /* CREATE_ID, GET_EVENT, MIGRATE_ID, CLOSE */
  uint32_t id;             /* the daemon's handle of the id */
  uint32_t qpn;            /* CONNECT, ACCEPT: the program's QP; INIT_QP_ATTR: enum rgv_qp_state */
  uint32_t uid_lo, uid_hi; /* CREATE_ID, ACCEPT: the program's value its events carry */
  uint8_t src_ipv4[4];     /* network order */
  uint8_t dst_ipv4[4];     /* network order */
  uint16_t src_port, dst_port;
  uint16_t ps;              /* CREATE_ID: the port space (RDMA_PS_TCP, RDMA_PS_IB, RDMA_PS_UDP) */
  uint8_t qp_type;          /* CREATE_ID: IBV_QPT_RC (IBV_QPT_UD for RDMA_PS_UDP) */
  uint8_t private_data_len; /* CONNECT, ACCEPT, REJECT */
  uint32_t backlog;         /* LISTEN; RESOLVE_ADDR: its timeout in ms */
  uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
  uint8_t private_data[RGV_UCMA_MAX_PRIVATE_DATA];
};

struct rgv_ucma_reply {
  uint32_t uid_lo, uid_hi; /* GET_EVENT */
  uint32_t id;             /* CREATE_ID; GET_EVENT: the event's id (a new one for CONNECT_REQUEST) */
  uint32_t event;          /* GET_EVENT: enum rgv_cm_event */
  uint32_t status;         /* GET_EVENT: 0, a negative errno, or REJECTED's reason (as a u32) */
  uint32_t count;          /* DESTROY_ID, MIGRATE_ID: events reported; GET_EVENT: the listening id (requests) */
  uint8_t node_guid[8];    /* QUERY: the device's, network order (0: no device yet) */
  uint8_t src_ipv4[4], dst_ipv4[4];
  uint16_t src_port, dst_port;
  uint32_t qpn;    /* GET_EVENT: the peer's QP; INIT_QP_ATTR: dest_qp_num */
  uint32_t mask;   /* INIT_QP_ATTR: enum rgv_qp_attr_mask bits */
  uint32_t rq_psn; /* INIT_QP_ATTR */
  uint8_t path_mtu, responder_resources, initiator_depth, retry_count;
  uint8_t rnr_retry_count, private_data_len, state;
  uint8_t ud;    /* GET_EVENT, INIT_QP_ATTR: 1 for an id of the UD port space (param.ud; qkey, dst_ipv4) */
  uint32_t qkey; /* GET_EVENT (UD): the serving QP's Q_Key; INIT_QP_ATTR (UD, INIT): the QP's */
  uint8_t private_data[RGV_UCMA_MAX_PRIVATE_DATA];
};

_Static_assert(sizeof(struct rgv_ucma) == 304, "rgv_ucma is 304 bytes");
_Static_assert(sizeof(struct rgv_ucma_reply) == 324, "rgv_ucma_reply is 324 bytes");

#endif
