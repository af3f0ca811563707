/*
 * What the verbs programs of tools/ (verbs-ex.c, verbs-mw.c, verbs-warm-up.c) share: CHECK, which prints "ok NAME" or
 * "FAIL NAME: why" and counts failures, and connect_rc, which takes an RC QP of the opened
 * device through INIT, RTR and RTS to a peer QP of the same device (loopback) at PSN `psn`
 * (connect_rc_mtu: at path MTU `mtu`, else 1024), and open_first_device.
 */
#ifndef RDMA_GRAPH_VERBS_TOOL_H
#define RDMA_GRAPH_VERBS_TOOL_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(name, cond, ...)   \
  do {                           \
    if (cond) {                  \
      printf("ok %s\n", name);   \
    } else {                     \
      printf("FAIL %s: ", name); \
      printf(__VA_ARGS__);       \
      printf("\n");              \
      failures++;                \
    }                            \
  } while (0)

static inline int connect_rc_mtu(struct ibv_qp* qp, uint32_t peer, const union ibv_gid* gid, uint32_t psn,
                                 enum ibv_mtu mtu) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .port_num = 1,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer;
  a.rq_psn = psn;
  a.max_dest_rd_atomic = 4;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = *gid;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = psn;
  a.max_rd_atomic = 4;
  return ibv_modify_qp(
      qp, &a,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static inline int connect_rc(struct ibv_qp* qp, uint32_t peer, const union ibv_gid* gid, uint32_t psn) {
  return connect_rc_mtu(qp, peer, gid, psn, IBV_MTU_1024);
}

/* The first device (the daemon's first interface with an address), opened, its list freed (an
 * open device outlives it); NULL and `*why` when there is none or it cannot be opened. */
static inline struct ibv_context* open_first_device(const char** why) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    if (list != NULL) ibv_free_device_list(list);
    *why = "no device";
    return NULL;
  }
  struct ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (ctx == NULL) *why = "ibv_open_device failed";
  return ctx;
}

/* The device named `name` (its hca_id, "rg_memif0"), opened; NULL and `*why` when there is none
 * of that name or it cannot be opened. */
static inline struct ibv_context* open_device_named(const char* name, const char** why) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  *why = "no device of that name";
  for (int i = 0; list != NULL && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
      ctx = ibv_open_device(list[i]);
      if (ctx == NULL) *why = "ibv_open_device failed";
      break;
    }
  if (list != NULL) ibv_free_device_list(list);
  return ctx;
}

#endif
