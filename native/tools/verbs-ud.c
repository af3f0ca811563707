/*
 * UD QPs as a verbs program uses them: test/verbs-ud.test.ts runs it against one daemon
 * (librdmagraph-verbs.so preloaded), with UD QPs of one device sending to each other. A send
 * through an AH made from the peer's GID; the receive's GRH (the IPv4 header in its last 20
 * bytes) and its completion (IBV_WC_GRH, src_qp, byte_len with the 40 bytes); the answer through
 * an AH made with ibv_create_ah_from_wc; SEND with immediate; ibv_wr_set_ud_addr; a UD QP on an
 * SRQ; a wrong Q_Key (nothing arrives: the daemon drops and counts it); a message over the
 * port's active MTU (IBV_WC_LOC_LEN_ERR); a controlled Q_Key refused to a program not run by
 * root (EPERM); ibv_query_qp's qkey; datagrams posted just before ibv_destroy_qp still sent;
 * multicast (the device's limits, ibv_attach_mcast's refusals, a group's datagram to each QP
 * attached, ibv_detach_mcast). Each check prints "ok NAME" or "FAIL NAME: why".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verbs-tool.h"

static struct ibv_context* ctx;
static struct ibv_pd* pd;

/* One completion within `ms`; wc.status = -1 when none came. */
static struct ibv_wc one(struct ibv_cq* cq, int ms) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
  wc.status = (enum ibv_wc_status) - 1;
  return wc;
}

static struct ibv_qp* ud_qp(struct ibv_cq* cq, struct ibv_srq* srq, uint32_t qkey, int ex) {
  struct ibv_qp_init_attr_ex a = {.send_cq = cq,
                                  .recv_cq = cq,
                                  .srq = srq,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_UD,
                                  .comp_mask = IBV_QP_INIT_ATTR_PD | (ex ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0),
                                  .pd = pd,
                                  .send_ops_flags = ex ? IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM : 0};
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
  if (qp == NULL) return NULL;
  struct ibv_qp_attr m = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = qkey};
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return NULL;
  m.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE)) return NULL;
  m.qp_state = IBV_QPS_RTS;
  m.sq_psn = 0;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN)) return NULL;
  return qp;
}

static void recv_one(struct ibv_qp* qp, struct ibv_srq* srq, struct ibv_mr* mr, void* at, uint32_t len, uint64_t id) {
  struct ibv_sge s = {.addr = (uintptr_t)at, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
  int rc = srq ? ibv_post_srq_recv(srq, &w, &bad) : ibv_post_recv(qp, &w, &bad);
  if (rc) printf("FAIL post_recv: %d\n", rc), failures++;
}

static int send_ud(struct ibv_qp* qp, struct ibv_ah* ah, uint32_t qpn, uint32_t qkey, struct ibv_mr* mr, void* at,
                   uint32_t len, uint64_t id, int imm) {
  struct ibv_sge s = {.addr = (uintptr_t)at, .length = len, .lkey = mr->lkey};
  struct ibv_send_wr w = {.wr_id = id,
                          .sg_list = &s,
                          .num_sge = 1,
                          .opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED,
                          .imm_data = htonl(0x5eed0001)},
                     *bad;
  w.wr.ud.ah = ah;
  w.wr.ud.remote_qpn = qpn;
  w.wr.ud.remote_qkey = qkey;
  return ibv_post_send(qp, &w, &bad);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* why = NULL;
  ctx = open_first_device(&why);
  if (ctx == NULL) return fprintf(stderr, "%s\n", why), 2;
  pd = ibv_alloc_pd(ctx);
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  struct ibv_port_attr port;
  ibv_query_port(ctx, 1, &port);
  const uint32_t mtu = 128u << port.active_mtu;

  enum { LEN = 1 << 16 };
  uint8_t* buf = calloc(1, LEN);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_cq* ca = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  struct ibv_cq* cb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  const uint32_t QK = 0x22334455;
  struct ibv_qp* a = ud_qp(ca, NULL, QK, 1);
  struct ibv_qp* b = ud_qp(cb, NULL, QK, 0);
  CHECK("UD QPs created and at RTS (INIT with a Q_Key, RTR, RTS)", a != NULL && b != NULL && mr != NULL,
        "a %p b %p errno %d", (void*)a, (void*)b, errno);
  if (a == NULL || b == NULL || mr == NULL) return 4;
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  int rc = ibv_query_qp(b, &qa, IBV_QP_QKEY | IBV_QP_STATE, &qi);
  CHECK("ibv_query_qp: the Q_Key and RTS", rc == 0 && qa.qkey == QK && qa.qp_state == IBV_QPS_RTS,
        "rc %d qkey %x state %d", rc, qa.qkey, qa.qp_state);

  struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 1}};
  struct ibv_ah* to_b = ibv_create_ah(pd, &aa);
  for (int i = 0; i < 600; i++) buf[i] = (uint8_t)(i * 3 + 1);
  recv_one(b, NULL, mr, buf + 8192, 40 + mtu, 1);
  rc = send_ud(a, to_b, b->qp_num, QK, mr, buf, 600, 10, 0);
  struct ibv_wc s = one(ca, 5000), r = one(cb, 5000);
  const uint8_t* ip = buf + 8192 + 20;
  CHECK("a datagram through an AH: IBV_WC_RECV with IBV_WC_GRH, src_qp, byte_len 40 + 600",
        rc == 0 && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND && r.status == IBV_WC_SUCCESS &&
            r.opcode == IBV_WC_RECV && (r.wc_flags & IBV_WC_GRH) && r.src_qp == a->qp_num && r.byte_len == 640 &&
            r.qp_num == b->qp_num && memcmp(buf + 8192 + 40, buf, 600) == 0,
        "rc %d send %d recv %d flags %u src_qp %u byte_len %u", rc, s.status, r.status, r.wc_flags, r.src_qp,
        r.byte_len);
  CHECK("the GRH: 20 zero bytes, then an IPv4 header from our GID's address to it",
        ip[0] == 0x45 && ip[9] == 17 && memcmp(ip + 12, &gid.raw[12], 4) == 0 &&
            memcmp(ip + 16, &gid.raw[12], 4) == 0 && buf[8192] == 0 && buf[8192 + 19] == 0,
        "version/ihl %02x proto %u", ip[0], ip[9]);

  /* B answers through an AH made from the completion and the GRH. */
  struct ibv_ah* back = ibv_create_ah_from_wc(pd, &r, (struct ibv_grh*)(buf + 8192), 1);
  struct ibv_ah_attr from;
  rc = ibv_init_ah_from_wc(ctx, 1, &r, (struct ibv_grh*)(buf + 8192), &from);
  CHECK("ibv_create_ah_from_wc / ibv_init_ah_from_wc: the sender's GID",
        back != NULL && rc == 0 && from.is_global && memcmp(from.grh.dgid.raw, gid.raw, 16) == 0, "ah %p rc %d",
        (void*)back, rc);
  recv_one(a, NULL, mr, buf + 16384, 40 + 64, 2);
  rc = send_ud(b, back, r.src_qp, QK, mr, buf + 100, 64, 11, 1);
  s = one(cb, 5000), r = one(ca, 5000);
  CHECK("the answer, SEND with immediate: IBV_WC_WITH_IMM and the immediate",
        rc == 0 && s.status == IBV_WC_SUCCESS && r.status == IBV_WC_SUCCESS && (r.wc_flags & IBV_WC_WITH_IMM) &&
            ntohl(r.imm_data) == 0x5eed0001 && r.src_qp == b->qp_num && memcmp(buf + 16384 + 40, buf + 100, 64) == 0,
        "rc %d send %d recv %d flags %u imm %x", rc, s.status, r.status, r.wc_flags, ntohl(r.imm_data));

  /* ibv_wr_set_ud_addr on the extended QP. */
  recv_one(b, NULL, mr, buf + 8192, 40 + 100, 3);
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ibv_wr_start(x);
  x->wr_id = 12;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_ud_addr(x, to_b, b->qp_num, QK);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf + 200, 100);
  rc = ibv_wr_complete(x);
  s = one(ca, 5000), r = one(cb, 5000);
  CHECK("ibv_wr_send + ibv_wr_set_ud_addr",
        rc == 0 && s.status == IBV_WC_SUCCESS && r.byte_len == 140 && memcmp(buf + 8192 + 40, buf + 200, 100) == 0,
        "rc %d send %d recv %d len %u", rc, s.status, r.status, r.byte_len);

  /* A wrong Q_Key: the send completes (nothing tells a UD sender), nothing arrives. */
  recv_one(b, NULL, mr, buf + 8192, 40 + 100, 4);
  rc = send_ud(a, to_b, b->qp_num, QK + 1, mr, buf, 10, 13, 0);
  s = one(ca, 5000), r = one(cb, 300);
  CHECK("a wrong Q_Key: sent, never received",
        rc == 0 && s.status == IBV_WC_SUCCESS && r.status == (enum ibv_wc_status) - 1, "rc %d send %d recv %d", rc,
        s.status, r.status);
  printf("waiting for the Q_Key drop to be counted\n");
  /* The receive posted above takes the next good one. */
  rc = send_ud(a, to_b, b->qp_num, QK, mr, buf, 10, 14, 0);
  s = one(ca, 5000), r = one(cb, 5000);
  CHECK("the right Q_Key after it: received by the receive the wrong one left",
        r.status == IBV_WC_SUCCESS && r.wr_id == 4, "recv %d wr_id %lu", r.status, (unsigned long)r.wr_id);

  /* A UD QP on an SRQ. */
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
  struct ibv_srq* srq = ibv_create_srq(pd, &sa);
  struct ibv_cq* cc = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_qp* c = srq ? ud_qp(cc, srq, QK, 0) : NULL;
  for (int i = 0; i < 2; i++) recv_one(c, srq, mr, buf + 32768 + i * 2048, 2048, 50 + i);
  int r1 = c ? send_ud(a, to_b, c->qp_num, QK, mr, buf, 300, 15, 0) : -1;
  int r2 = c ? send_ud(a, to_b, c->qp_num, QK, mr, buf + 300, 300, 16, 0) : -1;
  struct ibv_wc c1 = one(cc, 5000), c2 = one(cc, 5000);
  one(ca, 5000), one(ca, 5000);
  CHECK("a UD QP on an SRQ: two datagrams, two SRQ receives in order",
        r1 == 0 && r2 == 0 && c1.wr_id == 50 && c2.wr_id == 51 && c1.byte_len == 340 &&
            memcmp(buf + 32768 + 2048 + 40, buf + 300, 300) == 0,
        "%d %d wr %lu %lu len %u", r1, r2, (unsigned long)c1.wr_id, (unsigned long)c2.wr_id, c1.byte_len);

  /* A controlled Q_Key (the high bit) is for root only. */
  struct ibv_qp* d = ibv_create_qp(
      pd, &(struct ibv_qp_init_attr){.send_cq = cc,
                                     .recv_cq = cc,
                                     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
                                     .qp_type = IBV_QPT_UD});
  struct ibv_qp_attr m = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x80000001};
  rc = d ? ibv_modify_qp(d, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) : -1;
  CHECK("a controlled Q_Key (high bit): EPERM unless root, else taken", geteuid() == 0 ? rc == 0 : rc == EPERM,
        "rc %d euid %u", rc, (unsigned)geteuid());

  /*
   * Datagrams posted just before ibv_destroy_qp go out, as a NIC sends what it was handed
   * (libfabric's ofi_rxd acknowledges its peer's last message and closes at once).
   */
  enum { LAST = 8 };
  struct ibv_cq* ce = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_qp* e = ce ? ud_qp(ce, NULL, QK, 0) : NULL;
  for (int i = 0; i < LAST; i++) recv_one(b, NULL, mr, buf + 40960 + i * 256, 40 + 100, 60 + i);
  int posted = 0;
  for (int i = 0; e != NULL && i < LAST; i++)
    posted += send_ud(e, to_b, b->qp_num, QK, mr, buf + i, 100, 70 + i, 0) == 0;
  const int destroyed = e != NULL && ibv_destroy_qp(e) == 0;
  int got = 0;
  for (int i = 0; i < LAST; i++) got += one(cb, 3000).status == IBV_WC_SUCCESS;
  CHECK("datagrams posted just before ibv_destroy_qp: all sent, all received",
        posted == LAST && destroyed && got == LAST, "posted %d destroyed %d received %d of %d", posted, destroyed, got,
        LAST);
  if (ce != NULL) ibv_destroy_cq(ce);

  /* Multicast: the device's limits, what attach refuses, a group's datagram to each member
     (loopback: every QP here is on this data plane), and after a detach none. */
  struct ibv_device_attr da;
  rc = ibv_query_device(ctx, &da);
  CHECK("ibv_query_device: max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach",
        rc == 0 && da.max_mcast_grp > 0 && da.max_mcast_qp_attach > 0 &&
            da.max_total_mcast_qp_attach >= da.max_mcast_qp_attach,
        "rc %d %d %d %d", rc, da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);
  union ibv_gid group = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 4, 4, 4}};
  struct ibv_qp_init_attr rci = {.send_cq = ca, .recv_cq = ca, .qp_type = IBV_QPT_RC, .cap = {1, 1, 1, 1, 0}};
  struct ibv_qp* rcq = ibv_create_qp(pd, &rci);
  const int rc_refused = rcq != NULL ? ibv_attach_mcast(rcq, &group, 0) : -1;
  const int unicast_refused = ibv_attach_mcast(b, &gid, 0);
  CHECK("ibv_attach_mcast refuses an RC QP and a unicast GID: EINVAL",
        rc_refused == EINVAL && unicast_refused == EINVAL, "rc QP %d, unicast GID %d", rc_refused, unicast_refused);
  if (rcq != NULL) ibv_destroy_qp(rcq);
  struct ibv_cq* cm = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_qp* mq = cm ? ud_qp(cm, NULL, QK, 0) : NULL;
  const int att = mq != NULL ? ibv_attach_mcast(b, &group, 0) | ibv_attach_mcast(mq, &group, 0) : -1;
  struct ibv_ah_attr ga = {.is_global = 1, .port_num = 1, .grh = {.dgid = group, .hop_limit = 1}};
  struct ibv_ah* to_group = ibv_create_ah(pd, &ga);
  for (int i = 0; i < 300; i++) buf[40000 + i] = (uint8_t)(i * 7 + 5);
  recv_one(b, NULL, mr, buf + 45000, 40 + mtu, 60);
  if (mq != NULL) recv_one(mq, NULL, mr, buf + 50000, 40 + mtu, 61);
  rc = att == 0 && to_group != NULL ? send_ud(a, to_group, 0xffffff, QK, mr, buf + 40000, 300, 18, 0) : -1;
  s = one(ca, 5000);
  struct ibv_wc rb = one(cb, 5000), rm = mq != NULL ? one(cm, 5000) : rb;
  CHECK("a datagram to a group (its GID, QPN 0xFFFFFF): each attached QP takes a copy, the GRH naming the group",
        rc == 0 && s.status == IBV_WC_SUCCESS && rb.status == IBV_WC_SUCCESS && rm.status == IBV_WC_SUCCESS &&
            rb.byte_len == 340 && rm.byte_len == 340 && rb.src_qp == a->qp_num && rm.src_qp == a->qp_num &&
            memcmp(buf + 45040, buf + 40000, 300) == 0 && memcmp(buf + 50040, buf + 40000, 300) == 0 &&
            memcmp(buf + 45036, &group.raw[12], 4) == 0,
        "attach %d rc %d send %d recv %d %d byte_len %u %u", att, rc, s.status, rb.status, rm.status, rb.byte_len,
        rm.byte_len);
  const int det = ibv_detach_mcast(b, &group, 0), again = ibv_detach_mcast(b, &group, 0);
  recv_one(b, NULL, mr, buf + 45000, 40 + mtu, 62);
  if (mq != NULL) recv_one(mq, NULL, mr, buf + 50000, 40 + mtu, 63);
  rc = send_ud(a, to_group, 0xffffff, QK, mr, buf + 40000, 300, 19, 0);
  s = one(ca, 5000);
  rm = mq != NULL ? one(cm, 5000) : rm;
  rb = one(cb, 300);
  CHECK("ibv_detach_mcast: the detached QP takes no more, the other does; a second detach ENOENT",
        det == 0 && again == ENOENT && rc == 0 && rm.status == IBV_WC_SUCCESS && rm.wr_id == 63 &&
            rb.status == (enum ibv_wc_status) - 1,
        "detach %d again %d rc %d member %d detached %d", det, again, rc, rm.status, rb.status);
  if (mq != NULL) ibv_destroy_qp(mq);
  if (cm != NULL) ibv_destroy_cq(cm);
  if (to_group != NULL) ibv_destroy_ah(to_group);

  /* Over the active MTU: a local length error, the QP in error. */
  rc = send_ud(a, to_b, b->qp_num, QK, mr, buf, mtu + 1, 17, 0);
  s = one(ca, 5000);
  CHECK("a datagram over the port's active MTU: IBV_WC_LOC_LEN_ERR", rc == 0 && s.status == IBV_WC_LOC_LEN_ERR,
        "rc %d status %d (mtu %u)", rc, s.status, mtu);

  ibv_destroy_ah(to_b);
  ibv_destroy_ah(back);
  printf("done %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
