/*
 * The daemon's warm-up (bin/main.ts runs it against its own verbs socket after start, with
 * librdmagraph-verbs.so preloaded): traffic through the data plane's own code before the first
 * program's, so that V8 has compiled that code when the first real job comes (a fresh daemon's
 * first thousands of round trips run several times slower than later ones).
 *
 * On the first device the daemon serves (or the one named), two RC QPs connected to each other
 * (loopback: ip4-loopback, never the interface's driver) and two UD QPs: SEND ping-pong (inline
 * and not), and every 8th round a 64 KiB WRITE, a 64 KiB READ, a WRITE with immediate, a
 * fetch-and-add and a 4 KiB SEND; every 4th round a UD SEND through an address handle, answered through one made
 * from the completion. The kinds are mixed from the first round to the last: V8 compiles each
 * function once it is hot, from the types it has seen by then, and throws that code away when
 * another kind shows up. A UD phase after the RC rounds did that to the RC path (trpInput,
 * completeSq, postSend, onAck...), which the first job then ran unoptimised for thousands of
 * round trips. Stops after `rounds` rounds or `budget_ms`, whichever comes first; prints one
 * line ("warm-up: ...") and exits 0, or prints why it failed and exits 1.
 *
 * Usage: verbs-warm-up ROUNDS BUDGET_MS [DEVICE] (DEVICE: its hca_id, e.g. rg_memif1; default: the
 * first; the line then ends "on DEVICE")
 *
 * verbs-warm-up pair a|b ROUNDS BUDGET_MS: one side of the wire warm-up (dataplane/wire-warm-up.ts
 * runs both, each against a data plane of its own, the two joined by a link): an RC and a UD QP on
 * the first device; it prints "peer RC_QPN UD_QPN RKEY ADDR GID" and reads the other side's such
 * line on stdin; then B posts its receives and says "ready", which A waits for. A drives the rounds above across the
 * link (SENDs it waits for the answer to, and every 8th round the WRITEs, READs, WRITE with immediate, fetch-and-add
 * and 4 KiB SEND; every 4th a UD datagram); B answers each SEND with a SEND and each datagram through an address handle
 * made from its completion, until A's last SEND (with immediate PAIR_DONE) or the budget. A prints "wire warm-up: ..."
 * and B "wire warm-up answered: ..."; each exits 0, or 1 after saying why.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs-tool.h"

#define BIG 65536
#define SMALL 64
#define MID 4096
#define QKEY 0x11111111u
#define GRH 40
#define WINDOW 12
#define WRAP_PSN 0xffffff80u
#define PAIR_DONE 0x0d0e0d0eu /* A's last SEND's immediate: B stops */
#define PAIR_RECVS 8          /* receives B keeps posted on its RC QP */
/* B waits for A's last SEND this long past A's budget (A's last round may run late under load) */
#define PAIR_B_GRACE_MS 8000
#define PAIR_REAP_MS 5000

static struct ibv_cq* cq;
static struct timespec t0;
/* How long a completion may take (reap_status, ud_one, reap_flushed): longer in pair mode, where
   two data planes and two programs share the CPUs with whatever else runs at start. */
static double reap_ms = 2000;

static double elapsed_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
}

static int fail(const char* what) {
  printf("warm-up failed: %s\n", what);
  return 1;
}

/* `n` completions, each of status `want`, within reap_ms; 0 or -1. */
static int reap_status(int n, enum ibv_wc_status want) {
  struct ibv_wc wc[8];
  double until = elapsed_ms() + reap_ms;
  while (n > 0) {
    int got = ibv_poll_cq(cq, n < 8 ? n : 8, wc);
    if (got < 0) return -1;
    for (int i = 0; i < got; i++)
      if (wc[i].status != want) {
        printf("warm-up failed: completion %s (wr_id %llu), not %s\n", ibv_wc_status_str(wc[i].status),
               (unsigned long long)wc[i].wr_id, ibv_wc_status_str(want));
        return -1;
      }
    n -= got;
    if (got == 0 && elapsed_ms() > until) {
      printf("warm-up failed: no completion within %.0f ms\n", reap_ms);
      return -1;
    }
  }
  return 0;
}

static int reap(int n) { return reap_status(n, IBV_WC_SUCCESS); }

static int post_recv(struct ibv_qp* qp, struct ibv_mr* mr, char* at, uint32_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)at, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(qp, &wr, &bad);
}

static int post(struct ibv_qp* qp, struct ibv_mr* mr, enum ibv_wr_opcode op, char* at, uint32_t len, unsigned flags,
                uint64_t remote, uint32_t rkey) {
  struct ibv_sge sge = {.addr = (uintptr_t)at, .length = len, .lkey = mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 2,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED | flags},
                     *bad;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  }
  /* Above 2^31 (an immediate is any u32; a program's may have the high bit set): a completion's
   * imm field is then a double from the warm-up on, and such a job does not change its map. */
  if (op == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = 0x80000007u;
  return ibv_post_send(qp, &wr, &bad);
}

static struct ibv_qp* make_qp(struct ibv_pd* pd, enum ibv_qp_type type) {
  struct ibv_qp_init_attr a = {
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = SMALL},
      .qp_type = type};
  return ibv_create_qp(pd, &a);
}

/* UD QP to RTS with Q_Key QKEY. */
static int ud_ready(struct ibv_qp* qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return -1;
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return -1;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int ud_send(struct ibv_qp* qp, struct ibv_ah* ah, uint32_t qpn, struct ibv_mr* mr, char* at) {
  struct ibv_sge sge = {.addr = (uintptr_t)at, .length = SMALL, .lkey = mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 3,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = QKEY;
  return ibv_post_send(qp, &wr, &bad);
}

/* The receive completion of a UD datagram on `qp` (reap_ms at most), its send's too; -1 if none. */
static int ud_one(struct ibv_wc* recv) {
  int need = 2;
  double until = elapsed_ms() + reap_ms;
  while (need > 0) {
    struct ibv_wc wc;
    int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return -1;
    if (got == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        fail(ibv_wc_status_str(wc.status));
        return -1;
      }
      if (wc.opcode == IBV_WC_RECV) *recv = wc;
      need--;
    } else if (elapsed_ms() > until) {
      fail("no UD completion in time");
      return -1;
    }
  }
  return 0;
}

/* A datagram from ua to ub through `ah`, answered through an address handle made from its completion. */
static int ud_round_trip(struct ibv_pd* pd, struct ibv_qp* ua, struct ibv_qp* ub, struct ibv_ah* ah, struct ibv_mr* mr,
                         char* a, char* b) {
  struct ibv_wc wc;
  if (post_recv(ub, mr, b, GRH + SMALL) || ud_send(ua, ah, ub->qp_num, mr, a) || ud_one(&wc)) return -1;
  struct ibv_ah* back = ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh*)b, 1);
  if (back == NULL) return fail("ibv_create_ah_from_wc");
  int bad = post_recv(ua, mr, a + BIG, GRH + SMALL) || ud_send(ub, back, wc.src_qp, mr, b + GRH) || ud_one(&wc);
  ibv_destroy_ah(back);
  return bad ? -1 : 0;
}

/* What the sessions share, and what they did. */
struct session {
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  union ibv_gid gid;
  enum ibv_mtu mtu;
  char *a, *b;
  long rounds, ops, ud;
};

/*
 * RC and UD QPs made, `rounds` rounds (while within the budget), then destroyed, as a program's
 * are: an extra receive left posted on each RC QP. 0, or 1 after printing why.
 */
static int session(struct session* w, long rounds, double budget) {
  struct ibv_pd* pd = w->pd;
  struct ibv_mr* mr = w->mr;
  char *a = w->a, *b = w->b;
  struct ibv_qp *qa = make_qp(pd, IBV_QPT_RC), *qb = make_qp(pd, IBV_QPT_RC);
  if (qa == NULL || qb == NULL) return fail("ibv_create_qp (RC)");
  /* UD: what UCX's wire-up and ud_verbs use. */
  struct ibv_qp *ua = make_qp(pd, IBV_QPT_UD), *ub = make_qp(pd, IBV_QPT_UD);
  if (ua == NULL || ub == NULL || ud_ready(ua) || ud_ready(ub)) return fail("UD QPs");
  struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = w->gid, .hop_limit = 64}};
  struct ibv_ah* ah = ibv_create_ah(pd, &aa);
  if (ah == NULL) return fail("ibv_create_ah");
  /* PSNs start above 2^31 and wrap to 0 within the first rounds, as a peer's random 32-bit
   * initial PSN (rdma_cm) does: the code compiled here has then seen both. */
  if (connect_rc_mtu(qa, qb->qp_num, &w->gid, WRAP_PSN, w->mtu) ||
      connect_rc_mtu(qb, qa->qp_num, &w->gid, WRAP_PSN, w->mtu))
    return fail("connecting the RC QPs");
  long r = 0;
  for (; r < rounds && elapsed_ms() < budget; r++) {
    if (r % 4 == 3) {
      if (ud_round_trip(pd, ua, ub, ah, mr, a, b)) return 1;
      w->ud++;
    }
    unsigned inl = (r & 1) ? IBV_SEND_INLINE : 0;
    if (post_recv(qb, mr, b, MID) || post(qa, mr, IBV_WR_SEND, a, SMALL, inl, 0, 0) || reap(2))
      return fail("SEND A to B");
    if (post_recv(qa, mr, a, MID) || post(qb, mr, IBV_WR_SEND, b, SMALL, inl, 0, 0) || reap(2))
      return fail("SEND B to A");
    w->ops += 2;
    if (r % 8 != 7) continue;
    uint64_t rb = (uintptr_t)b;
    /* Bursts, as bulk transfers post them: full vectors through every node. */
    for (int k = 0; k < WINDOW; k++)
      if (post(qa, mr, IBV_WR_RDMA_WRITE, a, BIG, 0, rb, mr->rkey)) return fail("WRITE");
    if (reap(WINDOW)) return fail("WRITE");
    for (int k = 0; k < 4; k++)
      if (post(qa, mr, IBV_WR_RDMA_READ, a + BIG, BIG, 0, rb, mr->rkey)) return fail("READ");
    if (reap(4)) return fail("READ");
    if (post_recv(qb, mr, b, MID) || post(qa, mr, IBV_WR_RDMA_WRITE_WITH_IMM, a, SMALL, 0, rb + BIG, mr->rkey) ||
        reap(2))
      return fail("WRITE with immediate");
    if (post(qa, mr, IBV_WR_ATOMIC_FETCH_AND_ADD, a + 2 * BIG - 8, 8, 0, rb + 2 * BIG - 8, mr->rkey) || reap(1))
      return fail("fetch-and-add");
    if (post_recv(qb, mr, b, MID) || post(qa, mr, IBV_WR_SEND, a, MID, 0, 0, 0) || reap(2)) return fail("SEND 4 KiB");
    w->ops += WINDOW + 7;
  }
  ibv_destroy_ah(ah);
  ibv_destroy_qp(ua);
  ibv_destroy_qp(ub);
  /* A receive left on each, flushed as a program's are when its QPs go (to ERROR: its
   * completions, in error, are the daemon's other completion path). Then both to RESET:
   * destroyed from RTS, the first would send the second a last ACK, which would find the
   * second's port closed (a "no listener" warning in show errors). */
  struct ibv_qp_attr error = {.qp_state = IBV_QPS_ERR}, reset = {.qp_state = IBV_QPS_RESET};
  if (post_recv(qa, mr, a, MID) || post_recv(qb, mr, b, MID) || ibv_modify_qp(qa, &error, IBV_QP_STATE) ||
      ibv_modify_qp(qb, &error, IBV_QP_STATE) || reap_status(2, IBV_WC_WR_FLUSH_ERR))
    return fail("flushing a receive");
  ibv_modify_qp(qa, &reset, IBV_QP_STATE);
  ibv_modify_qp(qb, &reset, IBV_QP_STATE);
  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  w->rounds += r;
  return 0;
}

/* The other side's numbers (say_peer's line on stdin); 0 or -1. */
struct peer {
  uint32_t rc, ud, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static void say_peer(const struct peer* p) {
  printf("peer %" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu64 " ", p->rc, p->ud, p->rkey, p->addr);
  for (int k = 0; k < 16; k++) printf("%02x", p->gid.raw[k]);
  printf("\n");
  fflush(stdout);
}

static int read_peer(struct peer* p) {
  char line[256], hex[33];
  if (fgets(line, sizeof line, stdin) == NULL) return -1;
  if (sscanf(line, "peer %" SCNu32 " %" SCNu32 " %" SCNu32 " %" SCNu64 " %32s", &p->rc, &p->ud, &p->rkey, &p->addr,
             hex) != 5 ||
      strlen(hex) != 32)
    return -1;
  for (int k = 0; k < 16; k++) {
    unsigned v;
    if (sscanf(hex + 2 * k, "%2x", &v) != 1) return -1;
    p->gid.raw[k] = (uint8_t)v;
  }
  return 0;
}

/* B: answers until A's PAIR_DONE or the budget; 0, or 1 after saying why. */
static int pair_b(struct ibv_pd* pd, struct ibv_qp* rc, struct ibv_qp* ud, struct ibv_mr* mr, char* mem,
                  double budget) {
  char *in = mem, *out = mem + BIG, *grh = mem + BIG + MID;
  long sends = 0, datagrams = 0;
  if (post_recv(ud, mr, grh, GRH + SMALL)) return fail("UD receive");
  for (;;) {
    struct ibv_wc wc[8];
    int got = ibv_poll_cq(cq, 8, wc);
    if (got < 0) return fail("ibv_poll_cq");
    if (got == 0 && elapsed_ms() > budget) return fail("A's last SEND did not come within the budget");
    for (int i = 0; i < got; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) return fail(ibv_wc_status_str(wc[i].status));
      if (wc[i].opcode == IBV_WC_RECV && wc[i].qp_num == ud->qp_num) {
        struct ibv_ah* back = ibv_create_ah_from_wc(pd, &wc[i], (struct ibv_grh*)grh, 1);
        if (back == NULL) return fail("ibv_create_ah_from_wc");
        int bad = ud_send(ud, back, wc[i].src_qp, mr, out) || post_recv(ud, mr, grh, GRH + SMALL);
        ibv_destroy_ah(back);
        if (bad) return fail("UD answer");
        datagrams++;
      } else if (wc[i].opcode == IBV_WC_RECV || wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        if (wc[i].opcode == IBV_WC_RECV && (wc[i].wc_flags & IBV_WC_WITH_IMM) && wc[i].imm_data == htonl(PAIR_DONE)) {
          printf("wire warm-up answered: %ld SENDs, %ld datagrams\n", sends, datagrams);
          return 0;
        }
        if (post_recv(rc, mr, in, MID)) return fail("RC receive");
        if (wc[i].wc_flags & IBV_WC_WITH_IMM) continue; /* a WRITE with immediate: nothing to answer */
        if (post(rc, mr, IBV_WR_SEND, out, SMALL, (sends & 1) ? IBV_SEND_INLINE : 0, 0, 0)) return fail("SEND answer");
        sends++;
      }
    }
  }
}

/* A: the rounds across the link, then PAIR_DONE; 0, or 1 after saying why. */
static int pair_a(struct ibv_pd* pd, struct ibv_qp* rc, struct ibv_qp* ud, struct ibv_mr* mr, char* mem,
                  const struct peer* b, long rounds, double budget) {
  char *a = mem, *grh = mem + 2 * BIG;
  struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = b->gid, .hop_limit = 64}};
  struct ibv_ah* ah = ibv_create_ah(pd, &aa);
  if (ah == NULL) return fail("ibv_create_ah");
  long r = 0, ops = 0, dg = 0;
  for (; r < rounds && elapsed_ms() < budget; r++) {
    if (r % 4 == 3) {
      struct ibv_wc wc;
      if (post_recv(ud, mr, grh, GRH + SMALL) || ud_send(ud, ah, b->ud, mr, a) || ud_one(&wc)) return 1;
      dg++;
    }
    unsigned inl = (r & 1) ? IBV_SEND_INLINE : 0;
    if (post_recv(rc, mr, a + BIG, MID) || post(rc, mr, IBV_WR_SEND, a, SMALL, inl, 0, 0) || reap(2))
      return fail("SEND round trip");
    ops += 2;
    if (r % 8 != 7) continue;
    for (int k = 0; k < WINDOW; k++)
      if (post(rc, mr, IBV_WR_RDMA_WRITE, a, BIG, 0, b->addr, b->rkey)) return fail("WRITE");
    if (reap(WINDOW)) return fail("WRITE");
    for (int k = 0; k < 4; k++)
      if (post(rc, mr, IBV_WR_RDMA_READ, a + BIG, BIG, 0, b->addr, b->rkey)) return fail("READ");
    if (reap(4)) return fail("READ");
    if (post(rc, mr, IBV_WR_RDMA_WRITE_WITH_IMM, a, SMALL, 0, b->addr + BIG, b->rkey) || reap(1))
      return fail("WRITE with immediate");
    if (post(rc, mr, IBV_WR_ATOMIC_FETCH_AND_ADD, a + 2 * BIG - 8, 8, 0, b->addr + 2 * BIG - 8, b->rkey) || reap(1))
      return fail("fetch-and-add");
    if (post_recv(rc, mr, a + BIG, MID) || post(rc, mr, IBV_WR_SEND, a, MID, 0, 0, 0) || reap(2))
      return fail("SEND 4 KiB");
    ops += WINDOW + 7;
  }
  struct ibv_sge sge = {.addr = (uintptr_t)a, .length = SMALL, .lkey = mr->lkey};
  struct ibv_send_wr done = {.wr_id = 4,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(PAIR_DONE)},
                     *bad;
  if (ibv_post_send(rc, &done, &bad) || reap(1)) return fail("the last SEND");
  ibv_destroy_ah(ah);
  printf("wire warm-up: %ld RC rounds (%ld operations), %ld UD round trips in %.0f ms\n", r, ops, dg, elapsed_ms());
  return 0;
}

/* `n` flushed receive completions of QP `qpn` (others skipped: sends still to reap), within reap_ms. */
static int reap_flushed(uint32_t qpn, int n) {
  double until = elapsed_ms() + reap_ms;
  while (n > 0) {
    struct ibv_wc wc;
    int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return -1;
    if (got == 1 && wc.qp_num == qpn && wc.status == IBV_WC_WR_FLUSH_ERR) n--;
    if (got == 0 && elapsed_ms() > until) return -1;
  }
  return 0;
}

/* What both modes open: the device (`device`, or the first), its port 1 and GID 0, a PD, the CQ
   and an MR of 4 x BIG bytes. */
struct base {
  struct ibv_context* ctx;
  struct ibv_port_attr port;
  union ibv_gid gid;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  char* mem;
};

/* 0, or 1 after saying why. */
static int open_base(const char* device, struct base* b) {
  const char* why = NULL;
  b->ctx = device != NULL ? open_device_named(device, &why) : open_first_device(&why);
  if (b->ctx == NULL) return fail(why);
  if (ibv_query_port(b->ctx, 1, &b->port) || ibv_query_gid(b->ctx, 1, 0, &b->gid)) return fail("port 1");
  b->pd = ibv_alloc_pd(b->ctx);
  cq = b->pd ? ibv_create_cq(b->ctx, 64, NULL, NULL, 0) : NULL;
  b->mem = calloc(1, 4 * BIG);
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  b->mr = cq && b->mem ? ibv_reg_mr(b->pd, b->mem, 4 * BIG, access) : NULL;
  return b->mr == NULL ? fail("PD, CQ or MR") : 0;
}

static void close_base(struct base* b) {
  ibv_dereg_mr(b->mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(b->pd);
  ibv_close_device(b->ctx);
  free(b->mem);
}

/* verbs-warm-up pair a|b ROUNDS BUDGET_MS (the comment at the top). */
static int pair(char side, long rounds, double budget) {
  struct base base;
  if (open_base(NULL, &base)) return 1;
  struct ibv_pd* pd = base.pd;
  struct ibv_mr* mr = base.mr;
  char* mem = base.mem;
  struct peer me = {.gid = base.gid}, other;
  struct ibv_qp *rc = make_qp(pd, IBV_QPT_RC), *ud = make_qp(pd, IBV_QPT_UD);
  if (rc == NULL || ud == NULL || ud_ready(ud)) return fail("the QPs");
  me.rc = rc->qp_num;
  me.ud = ud->qp_num;
  me.rkey = mr->rkey;
  me.addr = (uintptr_t)mem;
  say_peer(&me);
  if (read_peer(&other)) return fail("no peer line on stdin");
  if (connect_rc_mtu(rc, other.rc, &other.gid, WRAP_PSN, base.port.active_mtu)) return fail("connecting the RC QP");
  /* B's receives are posted before A sends (a SEND with none is a Terminate, as in iWARP): B
     says "ready" when they are, and A waits for that line. */
  char line[64];
  if (side == 'b') {
    for (int k = 0; k < PAIR_RECVS; k++)
      if (post_recv(rc, mr, mem, MID)) return fail("RC receive");
    printf("ready\n");
    fflush(stdout);
  } else if (fgets(line, sizeof line, stdin) == NULL || strcmp(line, "ready\n") != 0)
    return fail("B did not say it was ready");
  int r = side == 'a' ? pair_a(pd, rc, ud, mr, mem, &other, rounds, budget)
                      : pair_b(pd, rc, ud, mr, mem, budget + PAIR_B_GRACE_MS);
  /* As the loopback sessions end, and a program's QPs do: one more receive, the QP to ERROR (its
     receives come back flushed: B's PAIR_RECVS, A's one), then RESET. The data plane's code for
     a receive posted to a QP in ERROR is then compiled from the first warm-up on. */
  struct ibv_qp_attr error = {.qp_state = IBV_QPS_ERR}, reset = {.qp_state = IBV_QPS_RESET};
  if (r == 0 && (post_recv(rc, mr, mem, MID) || ibv_modify_qp(rc, &error, IBV_QP_STATE) ||
                 reap_flushed(rc->qp_num, side == 'b' ? PAIR_RECVS : 1)))
    r = fail("flushing the receives");
  ibv_modify_qp(rc, &reset, IBV_QP_STATE);
  ibv_destroy_qp(rc);
  ibv_destroy_qp(ud);
  close_base(&base);
  return r;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "pair") == 0) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reap_ms = PAIR_REAP_MS;
    if (argc != 5 || (argv[2][0] != 'a' && argv[2][0] != 'b'))
      return fail("usage: verbs-warm-up pair a|b ROUNDS BUDGET_MS");
    return pair(argv[2][0], strtol(argv[3], NULL, 10), strtod(argv[4], NULL));
  }
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
  double budget = argc > 2 ? strtod(argv[2], NULL) : 3000;
  (void)failures; /* verbs-tool.h's CHECK counter: not used here */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const char* device = argc > 3 ? argv[3] : NULL;
  struct base base;
  if (open_base(device, &base)) return 1;
  /* A's buffers in the first half, B's in the second. */
  struct session w = {.pd = base.pd,
                      .mr = base.mr,
                      .gid = base.gid,
                      .mtu = base.port.active_mtu,
                      .a = base.mem,
                      .b = base.mem + 2 * BIG};
  /* A short session first, its QPs made, used and destroyed: the first teardown changes what the
   * data plane's QP objects hold (states, emptied queues) and the code compiled before it would
   * be thrown away (measured: serve, postSend, pollQp, trpInput, onAck and completeSq, at the end
   * of a single session), to be compiled again in the first user's job. */
  long first = rounds < 64 ? rounds : 64 + rounds / 16;
  if (session(&w, first, budget) || session(&w, rounds - w.rounds, budget)) return 1;
  close_base(&base);
  printf("warm-up: %ld RC rounds (%ld operations), %ld UD round trips in %.0f ms%s%s\n", w.rounds, w.ops, w.ud,
         elapsed_ms(), device != NULL ? " on " : "", device != NULL ? device : "");
  return 0;
}
