/*
 * verbs-abi: prints the verbs protocol's ABI as the C compiler lays out native/verbs-lib/proto.h,
 * for native/tools/gen-verbs-abi.mjs. Every constant, enum member, struct and request, one item a
 * line; the generator writes dataplane/verbs-server/abi.generated.ts from it
 * (test/verbs-abi.test.ts builds this and compares). Needs a C compiler and nothing else:
 * proto.h includes only <stdint.h>. Built by native/CMakeLists.txt (not installed).
 *
 *   constant NAME VALUE                          a #define of proto.h
 *   enum NAME / member NAME VALUE                an enum and its members
 *   struct NAME SIZE / field NAME OFFSET TYPE N  a struct and its members (TYPE char: text)
 *   op NAME VALUE REQUEST REPLY RECORDS FD       a row of RGV_OPS (none: no body)
 *
 * What it checks itself: each struct's members, as listed here, cover every byte of the struct
 * once (a member proto.h gained and this file lacks leaves a hole: exit 1 naming it). The
 * generator checks the rest against proto.h's text: every name it defines is printed here.
 * The protocol itself: docs/VERBS-PROTOCOL.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../verbs-lib/proto.h"

/* A member's type name and its element's size (an array decays to a pointer to its element). */
#define TYPE_OF(x) \
  _Generic((x), char*: "char", uint8_t*: "u8", int16_t*: "i16", uint16_t*: "u16", uint32_t*: "u32", uint64_t*: "u64", \
           uint8_t: "u8", int16_t: "i16", uint16_t: "u16", int32_t: "i32", uint32_t: "u32", uint64_t: "u64",         \
           default: "?")
#define ELEM_OF(x) \
  _Generic((x), char*: sizeof(char), uint8_t*: sizeof(uint8_t), int16_t*: sizeof(int16_t),                   \
           uint16_t*: sizeof(uint16_t), uint32_t*: sizeof(uint32_t), uint64_t*: sizeof(uint64_t), default: 0)
#define MEMBER_OF(s, m) (((struct s*)0)->m)

static int failed;
static const char* cur_struct;
static size_t cur_size;
static struct {
  size_t offset, size;
  const char* name;
} fields[64];
static size_t nfields;

static void begin(const char* name, size_t size) {
  cur_struct = name;
  cur_size = size;
  nfields = 0;
  printf("struct %s %zu\n", name, size);
}

static void field(const char* name, size_t offset, size_t size, const char* type, size_t elem) {
  /* elem 0: a scalar, one of its size */
  size_t count = elem == 0 ? 1 : size / elem;
  if (strcmp(type, "?") == 0) {
    fprintf(stderr, "verbs-abi: struct %s: member %s has a type this printer does not know\n", cur_struct, name);
    failed = 1;
  }
  if (nfields == sizeof fields / sizeof fields[0]) {
    fprintf(stderr, "verbs-abi: struct %s: too many members\n", cur_struct);
    exit(1);
  }
  fields[nfields].offset = offset;
  fields[nfields].size = size;
  fields[nfields].name = name;
  nfields++;
  printf("field %s %zu %s %zu\n", name, offset, type, count);
}

static int by_offset(const void* a, const void* b) {
  const size_t x = *(const size_t*)a, y = *(const size_t*)b;
  return x < y ? -1 : x > y;
}

/* The members listed cover the struct exactly: no hole, no overlap, nothing past its end. */
static void end(void) {
  qsort(fields, nfields, sizeof fields[0], by_offset);
  size_t at = 0;
  for (size_t k = 0; k < nfields; k++) {
    if (fields[k].offset > at) {
      fprintf(stderr,
              "verbs-abi: struct %s: bytes %zu..%zu are no member listed here (a member of proto.h missing from "
              "native/tools/verbs-abi.c?)\n",
              cur_struct, at, fields[k].offset);
      failed = 1;
    } else if (fields[k].offset < at) {
      fprintf(stderr, "verbs-abi: struct %s: %s overlaps the member before it (listed twice?)\n", cur_struct,
              fields[k].name);
      failed = 1;
    }
    at = fields[k].offset + fields[k].size;
  }
  if (at != cur_size) {
    fprintf(stderr,
            "verbs-abi: struct %s: bytes %zu..%zu are no member listed here (a member of proto.h missing from "
            "native/tools/verbs-abi.c?)\n",
            cur_struct, at, cur_size);
    failed = 1;
  }
}

#define STRUCT(s) begin(#s, sizeof(struct s))
#define FIELD(s, m) \
  field(#m, offsetof(struct s, m), sizeof(MEMBER_OF(s, m)), TYPE_OF(MEMBER_OF(s, m)), ELEM_OF(MEMBER_OF(s, m)))
#define CONSTANT(c) printf("constant %s %llu\n", #c, (unsigned long long)(c))
#define ENUM(e) printf("enum %s\n", #e)
#define MEMBER(c) printf("member %s %lld\n", #c, (long long)(c))
#define OP(name, request, reply, records, fd) \
  printf("op %s %u %s %s %u %s\n", #name, (unsigned)RGV_OP_##name, #request, #reply, (unsigned)(records), #fd);

int main(void) {
  CONSTANT(RGV_MAGIC);
  CONSTANT(RGV_NONE);
  CONSTANT(RGV_MAX_DEVICES);
  CONSTANT(RGV_MAX_REASON);
  CONSTANT(RGV_MAX_MR_PIECES);
  CONSTANT(RGV_RING_HDR);
  CONSTANT(RGV_QP_SQ_PROD);
  CONSTANT(RGV_QP_RQ_PROD);
  CONSTANT(RGV_QP_SQ_CONS);
  CONSTANT(RGV_QP_RQ_CONS);
  CONSTANT(RGV_QP_SQ_DONE);
  CONSTANT(RGV_QP_RQ_DONE);
  CONSTANT(RGV_QP_NEED_KICK);
  CONSTANT(RGV_QP_STATE);
  CONSTANT(RGV_SRQ_PROD);
  CONSTANT(RGV_SRQ_CONS);
  CONSTANT(RGV_SRQ_DONE);
  CONSTANT(RGV_SRQ_NEED_KICK);
  CONSTANT(RGV_CQ_CONS);
  CONSTANT(RGV_CQ_ARMED);
  CONSTANT(RGV_CQ_SLEEPERS);
  CONSTANT(RGV_CQ_PROD);
  CONSTANT(RGV_CQ_EVENTS);
  CONSTANT(RGV_CQ_OVERFLOW);
  CONSTANT(RGV_CQ_WAKE);
  CONSTANT(RGV_CQ_SIGNALLED);
  CONSTANT(RGV_CQ_SIGNALLED_UNSET);
  CONSTANT(RGV_CQ_ARM_NEXT);
  CONSTANT(RGV_CQ_ARM_SOLICITED);
  CONSTANT(RGV_INLINE_ALIGN);

  ENUM(rgv_op);
  MEMBER(RGV_OP_DEVICES);
  MEMBER(RGV_OP_ALLOC_PD);
  MEMBER(RGV_OP_DEALLOC_PD);
  MEMBER(RGV_OP_REG_MR);
  MEMBER(RGV_OP_DEREG_MR);
  MEMBER(RGV_OP_CREATE_CQ);
  MEMBER(RGV_OP_DESTROY_CQ);
  MEMBER(RGV_OP_CREATE_QP);
  MEMBER(RGV_OP_MODIFY_QP);
  MEMBER(RGV_OP_DESTROY_QP);
  MEMBER(RGV_OP_QUERY_QP);
  MEMBER(RGV_OP_ATTACH);
  MEMBER(RGV_OP_CREATE_CHANNEL);
  MEMBER(RGV_OP_DESTROY_CHANNEL);
  MEMBER(RGV_OP_QP_RING);
  MEMBER(RGV_OP_CREATE_SRQ);
  MEMBER(RGV_OP_SRQ_RING);
  MEMBER(RGV_OP_DESTROY_SRQ);
  MEMBER(RGV_OP_MODIFY_SRQ);
  MEMBER(RGV_OP_ASYNC_FD);
  MEMBER(RGV_OP_ALLOC_MW);
  MEMBER(RGV_OP_DEALLOC_MW);
  MEMBER(RGV_OP_REG_SHM);
  MEMBER(RGV_OP_ATTACH_MCAST);
  MEMBER(RGV_OP_DETACH_MCAST);
  MEMBER(RGV_OP_UCMA_CHANNEL);
  MEMBER(RGV_OP_UCMA);
  ENUM(rgv_fd);
  MEMBER(RGV_FD_NONE);
  MEMBER(RGV_FD_MEMFD);
  MEMBER(RGV_FD_EVENTFD);
  MEMBER(RGV_FD_MEMFDS);
  MEMBER(RGV_FD_CHANNEL);
  ENUM(rgv_access);
  MEMBER(RGV_ACCESS_LOCAL_WRITE);
  MEMBER(RGV_ACCESS_REMOTE_WRITE);
  MEMBER(RGV_ACCESS_REMOTE_READ);
  MEMBER(RGV_ACCESS_REMOTE_ATOMIC);
  MEMBER(RGV_ACCESS_MW_BIND);
  ENUM(rgv_qp_state);
  MEMBER(RGV_QPS_RESET);
  MEMBER(RGV_QPS_INIT);
  MEMBER(RGV_QPS_RTR);
  MEMBER(RGV_QPS_RTS);
  MEMBER(RGV_QPS_SQD);
  MEMBER(RGV_QPS_SQE);
  MEMBER(RGV_QPS_ERR);
  ENUM(rgv_qp_attr_mask);
  MEMBER(RGV_ATTR_STATE);
  MEMBER(RGV_ATTR_QKEY);
  MEMBER(RGV_ATTR_AV);
  MEMBER(RGV_ATTR_PATH_MTU);
  MEMBER(RGV_ATTR_TIMEOUT);
  MEMBER(RGV_ATTR_RETRY_CNT);
  MEMBER(RGV_ATTR_RNR_RETRY);
  MEMBER(RGV_ATTR_RQ_PSN);
  MEMBER(RGV_ATTR_MAX_QP_RD_ATOMIC);
  MEMBER(RGV_ATTR_SQ_PSN);
  MEMBER(RGV_ATTR_MAX_DEST_RD_ATOMIC);
  MEMBER(RGV_ATTR_DEST_QPN);
  ENUM(rgv_mtu);
  MEMBER(RGV_MTU_256);
  MEMBER(RGV_MTU_512);
  MEMBER(RGV_MTU_1024);
  MEMBER(RGV_MTU_2048);
  MEMBER(RGV_MTU_4096);
  ENUM(rgv_wr_opcode);
  MEMBER(RGV_WR_RDMA_WRITE);
  MEMBER(RGV_WR_RDMA_WRITE_WITH_IMM);
  MEMBER(RGV_WR_SEND);
  MEMBER(RGV_WR_SEND_WITH_IMM);
  MEMBER(RGV_WR_RDMA_READ);
  MEMBER(RGV_WR_ATOMIC_CMP_AND_SWP);
  MEMBER(RGV_WR_ATOMIC_FETCH_AND_ADD);
  MEMBER(RGV_WR_LOCAL_INV);
  MEMBER(RGV_WR_BIND_MW);
  MEMBER(RGV_WR_SEND_WITH_INV);
  ENUM(rgv_send_flags);
  MEMBER(RGV_SEND_FENCE);
  MEMBER(RGV_SEND_SIGNALED);
  MEMBER(RGV_SEND_SOLICITED);
  MEMBER(RGV_SEND_INLINE);
  ENUM(rgv_wc_status);
  MEMBER(RGV_WC_SUCCESS);
  MEMBER(RGV_WC_LOC_LEN_ERR);
  MEMBER(RGV_WC_LOC_QP_OP_ERR);
  MEMBER(RGV_WC_LOC_PROT_ERR);
  MEMBER(RGV_WC_WR_FLUSH_ERR);
  MEMBER(RGV_WC_MW_BIND_ERR);
  MEMBER(RGV_WC_REM_INV_REQ_ERR);
  MEMBER(RGV_WC_REM_ACCESS_ERR);
  MEMBER(RGV_WC_REM_OP_ERR);
  MEMBER(RGV_WC_RETRY_EXC_ERR);
  MEMBER(RGV_WC_RNR_RETRY_EXC_ERR);
  MEMBER(RGV_WC_GENERAL_ERR);
  ENUM(rgv_wc_opcode);
  MEMBER(RGV_WC_SEND);
  MEMBER(RGV_WC_RDMA_WRITE);
  MEMBER(RGV_WC_RDMA_READ);
  MEMBER(RGV_WC_COMP_SWAP);
  MEMBER(RGV_WC_FETCH_ADD);
  MEMBER(RGV_WC_BIND_MW);
  MEMBER(RGV_WC_LOCAL_INV);
  MEMBER(RGV_WC_RECV);
  MEMBER(RGV_WC_RECV_RDMA_WITH_IMM);
  ENUM(rgv_qp_type);
  MEMBER(RGV_QPT_RC);
  MEMBER(RGV_QPT_UD);
  ENUM(rgv_qp_flags);
  MEMBER(RGV_QP_BLOCK_SELF_MCAST_LB);
  ENUM(rgv_wc_flags);
  MEMBER(RGV_WC_GRH);
  MEMBER(RGV_WC_WITH_IMM);
  MEMBER(RGV_WC_WITH_INV);

  STRUCT(rgv_hdr);
  FIELD(rgv_hdr, magic);
  FIELD(rgv_hdr, op);
  FIELD(rgv_hdr, status);
  FIELD(rgv_hdr, seq);
  FIELD(rgv_hdr, count);
  end();
  STRUCT(rgv_handle);
  FIELD(rgv_handle, handle);
  end();
  STRUCT(rgv_device);
  FIELD(rgv_device, name);
  FIELD(rgv_device, ifname);
  FIELD(rgv_device, mac);
  FIELD(rgv_device, link_up);
  FIELD(rgv_device, active_mtu);
  FIELD(rgv_device, ipv4);
  FIELD(rgv_device, mtu);
  FIELD(rgv_device, max_qp);
  FIELD(rgv_device, max_qp_wr);
  FIELD(rgv_device, max_sge);
  FIELD(rgv_device, max_cqe);
  FIELD(rgv_device, max_rd_atom);
  FIELD(rgv_device, max_cq);
  FIELD(rgv_device, max_mr);
  FIELD(rgv_device, max_pd);
  FIELD(rgv_device, max_srq);
  FIELD(rgv_device, max_srq_wr);
  FIELD(rgv_device, max_srq_sge);
  FIELD(rgv_device, max_inline);
  FIELD(rgv_device, max_msg_sz);
  FIELD(rgv_device, max_mtu);
  FIELD(rgv_device, vendor_id);
  FIELD(rgv_device, vendor_part_id);
  FIELD(rgv_device, hw_ver);
  FIELD(rgv_device, page_size_cap);
  FIELD(rgv_device, max_sge_rd);
  FIELD(rgv_device, max_res_rd_atom);
  FIELD(rgv_device, max_mr_size);
  FIELD(rgv_device, node_guid);
  FIELD(rgv_device, fw_ver);
  FIELD(rgv_device, max_mcast_grp);
  FIELD(rgv_device, max_mcast_qp_attach);
  FIELD(rgv_device, max_total_mcast_qp_attach);
  FIELD(rgv_device, pad);
  end();
  STRUCT(rgv_attach);
  FIELD(rgv_attach, ifname);
  end();
  STRUCT(rgv_reg_mr);
  FIELD(rgv_reg_mr, pd);
  FIELD(rgv_reg_mr, access);
  FIELD(rgv_reg_mr, span);
  FIELD(rgv_reg_mr, start);
  FIELD(rgv_reg_mr, addr);
  FIELD(rgv_reg_mr, length);
  FIELD(rgv_reg_mr, pieces);
  FIELD(rgv_reg_mr, pad);
  end();
  STRUCT(rgv_reg_shm);
  FIELD(rgv_reg_shm, pd);
  FIELD(rgv_reg_shm, access);
  FIELD(rgv_reg_shm, span);
  FIELD(rgv_reg_shm, start);
  FIELD(rgv_reg_shm, addr);
  FIELD(rgv_reg_shm, length);
  FIELD(rgv_reg_shm, offset);
  FIELD(rgv_reg_shm, shmid);
  FIELD(rgv_reg_shm, pad);
  STRUCT(rgv_mr_piece);
  FIELD(rgv_mr_piece, offset);
  FIELD(rgv_mr_piece, length);
  FIELD(rgv_mr_piece, fd);
  FIELD(rgv_mr_piece, pad);
  end();
  STRUCT(rgv_mr);
  FIELD(rgv_mr, handle);
  FIELD(rgv_mr, stag);
  STRUCT(rgv_alloc_mw);
  FIELD(rgv_alloc_mw, pd);
  FIELD(rgv_alloc_mw, type);
  STRUCT(rgv_mw);
  FIELD(rgv_mw, handle);
  FIELD(rgv_mw, rkey);
  end();
  STRUCT(rgv_create_cq);
  FIELD(rgv_create_cq, entries);
  FIELD(rgv_create_cq, channel);
  FIELD(rgv_create_cq, bytes);
  end();
  STRUCT(rgv_cq);
  FIELD(rgv_cq, handle);
  FIELD(rgv_cq, entries);
  end();
  STRUCT(rgv_create_qp);
  FIELD(rgv_create_qp, pd);
  FIELD(rgv_create_qp, send_cq);
  FIELD(rgv_create_qp, recv_cq);
  FIELD(rgv_create_qp, max_send_wr);
  FIELD(rgv_create_qp, max_recv_wr);
  FIELD(rgv_create_qp, max_sge);
  FIELD(rgv_create_qp, max_inline);
  FIELD(rgv_create_qp, srq);
  FIELD(rgv_create_qp, qp_type);
  FIELD(rgv_create_qp, flags);
  end();
  STRUCT(rgv_qp);
  FIELD(rgv_qp, qpn);
  FIELD(rgv_qp, max_send_wr);
  FIELD(rgv_qp, max_recv_wr);
  FIELD(rgv_qp, max_sge);
  FIELD(rgv_qp, max_inline);
  end();
  STRUCT(rgv_qp_ring);
  FIELD(rgv_qp_ring, qpn);
  FIELD(rgv_qp_ring, sq_entries);
  FIELD(rgv_qp_ring, rq_entries);
  FIELD(rgv_qp_ring, sq_stride);
  FIELD(rgv_qp_ring, rq_stride);
  FIELD(rgv_qp_ring, pad);
  FIELD(rgv_qp_ring, bytes);
  end();
  STRUCT(rgv_modify_qp);
  FIELD(rgv_modify_qp, qpn);
  FIELD(rgv_modify_qp, mask);
  FIELD(rgv_modify_qp, state);
  FIELD(rgv_modify_qp, dgid);
  FIELD(rgv_modify_qp, dest_qpn);
  FIELD(rgv_modify_qp, rq_psn);
  FIELD(rgv_modify_qp, sq_psn);
  FIELD(rgv_modify_qp, max_rd_atomic);
  FIELD(rgv_modify_qp, max_dest_rd_atomic);
  FIELD(rgv_modify_qp, path_mtu);
  FIELD(rgv_modify_qp, timeout);
  FIELD(rgv_modify_qp, retry_cnt);
  FIELD(rgv_modify_qp, rnr_retry);
  FIELD(rgv_modify_qp, qkey);
  end();
  STRUCT(rgv_qp_attr);
  FIELD(rgv_qp_attr, state);
  FIELD(rgv_qp_attr, dest_qpn);
  FIELD(rgv_qp_attr, rq_psn);
  FIELD(rgv_qp_attr, sq_psn);
  FIELD(rgv_qp_attr, max_rd_atomic);
  FIELD(rgv_qp_attr, max_dest_rd_atomic);
  FIELD(rgv_qp_attr, path_mtu);
  FIELD(rgv_qp_attr, max_send_wr);
  FIELD(rgv_qp_attr, max_recv_wr);
  FIELD(rgv_qp_attr, max_sge);
  FIELD(rgv_qp_attr, max_inline);
  FIELD(rgv_qp_attr, dest_ipv4);
  FIELD(rgv_qp_attr, qkey);
  end();
  STRUCT(rgv_create_srq);
  FIELD(rgv_create_srq, pd);
  FIELD(rgv_create_srq, max_wr);
  FIELD(rgv_create_srq, max_sge);
  FIELD(rgv_create_srq, limit);
  end();
  STRUCT(rgv_srq);
  FIELD(rgv_srq, handle);
  FIELD(rgv_srq, max_wr);
  FIELD(rgv_srq, max_sge);
  end();
  STRUCT(rgv_srq_ring);
  FIELD(rgv_srq_ring, srq);
  FIELD(rgv_srq_ring, entries);
  FIELD(rgv_srq_ring, stride);
  FIELD(rgv_srq_ring, pad);
  FIELD(rgv_srq_ring, bytes);
  end();
  STRUCT(rgv_mcast);
  FIELD(rgv_mcast, qpn);
  FIELD(rgv_mcast, group);
  STRUCT(rgv_modify_srq);
  FIELD(rgv_modify_srq, srq);
  FIELD(rgv_modify_srq, limit);
  end();
  STRUCT(rgv_send_wqe);
  FIELD(rgv_send_wqe, wr_id);
  FIELD(rgv_send_wqe, opcode);
  FIELD(rgv_send_wqe, flags);
  FIELD(rgv_send_wqe, num_sge);
  FIELD(rgv_send_wqe, imm);
  FIELD(rgv_send_wqe, remote_addr);
  FIELD(rgv_send_wqe, rkey);
  FIELD(rgv_send_wqe, inline_len);
  FIELD(rgv_send_wqe, compare_add);
  FIELD(rgv_send_wqe, swap);
  FIELD(rgv_send_wqe, bind_lkey);
  FIELD(rgv_send_wqe, pad);
  end();
  STRUCT(rgv_sge);
  FIELD(rgv_sge, addr);
  FIELD(rgv_sge, length);
  FIELD(rgv_sge, lkey);
  end();
  STRUCT(rgv_recv_wqe);
  FIELD(rgv_recv_wqe, wr_id);
  FIELD(rgv_recv_wqe, num_sge);
  FIELD(rgv_recv_wqe, pad);
  end();
  STRUCT(rgv_cqe);
  FIELD(rgv_cqe, wr_id);
  FIELD(rgv_cqe, status);
  FIELD(rgv_cqe, opcode);
  FIELD(rgv_cqe, byte_len);
  FIELD(rgv_cqe, imm);
  FIELD(rgv_cqe, qp_num);
  FIELD(rgv_cqe, wc_flags);
  FIELD(rgv_cqe, src_qp);
  FIELD(rgv_cqe, pad);
  end();

  /* rdma_cm (proto.h's last section) */
  CONSTANT(RGV_UCMA_MAX_PRIVATE_DATA);
  CONSTANT(RGV_UCMA_MAX_EVENTS);
  ENUM(rgv_ucma_cmd);
  MEMBER(RGV_UCMA_CREATE_ID);
  MEMBER(RGV_UCMA_DESTROY_ID);
  MEMBER(RGV_UCMA_BIND);
  MEMBER(RGV_UCMA_RESOLVE_ADDR);
  MEMBER(RGV_UCMA_RESOLVE_ROUTE);
  MEMBER(RGV_UCMA_QUERY);
  MEMBER(RGV_UCMA_CONNECT);
  MEMBER(RGV_UCMA_LISTEN);
  MEMBER(RGV_UCMA_ACCEPT);
  MEMBER(RGV_UCMA_REJECT);
  MEMBER(RGV_UCMA_DISCONNECT);
  MEMBER(RGV_UCMA_INIT_QP_ATTR);
  MEMBER(RGV_UCMA_GET_EVENT);
  MEMBER(RGV_UCMA_MIGRATE_ID);
  MEMBER(RGV_UCMA_CLOSE);
  MEMBER(RGV_UCMA_JOIN);
  MEMBER(RGV_UCMA_LEAVE);
  ENUM(rgv_cm_event);
  MEMBER(RGV_CM_ADDR_RESOLVED);
  MEMBER(RGV_CM_ADDR_ERROR);
  MEMBER(RGV_CM_ROUTE_RESOLVED);
  MEMBER(RGV_CM_ROUTE_ERROR);
  MEMBER(RGV_CM_CONNECT_REQUEST);
  MEMBER(RGV_CM_CONNECT_RESPONSE);
  MEMBER(RGV_CM_CONNECT_ERROR);
  MEMBER(RGV_CM_UNREACHABLE);
  MEMBER(RGV_CM_REJECTED);
  MEMBER(RGV_CM_ESTABLISHED);
  MEMBER(RGV_CM_DISCONNECTED);
  MEMBER(RGV_CM_DEVICE_REMOVAL);
  MEMBER(RGV_CM_MULTICAST_JOIN);
  MEMBER(RGV_CM_TIMEWAIT_EXIT);
  STRUCT(rgv_ucma);
  FIELD(rgv_ucma, cmd);
  FIELD(rgv_ucma, channel);
  FIELD(rgv_ucma, id);
  FIELD(rgv_ucma, qpn);
  FIELD(rgv_ucma, uid_lo);
  FIELD(rgv_ucma, uid_hi);
  FIELD(rgv_ucma, src_ipv4);
  FIELD(rgv_ucma, dst_ipv4);
  FIELD(rgv_ucma, src_port);
  FIELD(rgv_ucma, dst_port);
  FIELD(rgv_ucma, ps);
  FIELD(rgv_ucma, qp_type);
  FIELD(rgv_ucma, private_data_len);
  FIELD(rgv_ucma, backlog);
  FIELD(rgv_ucma, responder_resources);
  FIELD(rgv_ucma, initiator_depth);
  FIELD(rgv_ucma, retry_count);
  FIELD(rgv_ucma, rnr_retry_count);
  FIELD(rgv_ucma, private_data);
  end();
  STRUCT(rgv_ucma_reply);
  FIELD(rgv_ucma_reply, uid_lo);
  FIELD(rgv_ucma_reply, uid_hi);
  FIELD(rgv_ucma_reply, id);
  FIELD(rgv_ucma_reply, event);
  FIELD(rgv_ucma_reply, status);
  FIELD(rgv_ucma_reply, count);
  FIELD(rgv_ucma_reply, node_guid);
  FIELD(rgv_ucma_reply, src_ipv4);
  FIELD(rgv_ucma_reply, dst_ipv4);
  FIELD(rgv_ucma_reply, src_port);
  FIELD(rgv_ucma_reply, dst_port);
  FIELD(rgv_ucma_reply, qpn);
  FIELD(rgv_ucma_reply, mask);
  FIELD(rgv_ucma_reply, rq_psn);
  FIELD(rgv_ucma_reply, path_mtu);
  FIELD(rgv_ucma_reply, responder_resources);
  FIELD(rgv_ucma_reply, initiator_depth);
  FIELD(rgv_ucma_reply, retry_count);
  FIELD(rgv_ucma_reply, rnr_retry_count);
  FIELD(rgv_ucma_reply, private_data_len);
  FIELD(rgv_ucma_reply, state);
  FIELD(rgv_ucma_reply, ud);
  FIELD(rgv_ucma_reply, qkey);
  FIELD(rgv_ucma_reply, private_data);
  end();

  RGV_OPS(OP)

  /* The ring strides (proto.h's functions) at a few sizes, for the daemon's copy to be checked. */
  static const uint32_t sges[] = {0, 1, 2, 4, 32}, inlines[] = {0, 1, 16, 17, 64, 100, 4096};
  for (size_t a = 0; a < sizeof sges / sizeof sges[0]; a++)
    for (size_t b = 0; b < sizeof inlines / sizeof inlines[0]; b++)
      printf("stride %u %u %llu %llu\n", sges[a], inlines[b], (unsigned long long)rgv_sq_stride(sges[a], inlines[b]),
             (unsigned long long)rgv_rq_stride(sges[a]));

  if (fflush(stdout) != 0) return 1;
  return failed;
}
