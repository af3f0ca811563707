/*
 * A QP's reset and destroy as a verbs program sees them in a completion queue that other QPs
 * share: test/verbs-reset.test.ts runs it against one daemon (librdmagraph-verbs.so
 * preloaded), with RC QPs of one device connected to each other (loopback). A reset or destroyed
 * QP takes its completions out of the CQ, flushed or successful, those the program has not
 * polled (the IBA's Reset state; rdma-core's mlx5 provider cleans its CQs at both), and another
 * QP's stay in order; a reset QP is used again. Each check prints "ok NAME" or "FAIL NAME: why";
 * the program exits 0 when every check passed.
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs-tool.h"

#define LEN 64

static struct ibv_pd* pd;
static struct ibv_cq* cq;
static struct ibv_mr* mr;
static char* buf;
static union ibv_gid gid;

static struct ibv_qp* make_qp(void) {
  struct ibv_qp_init_attr a = {.send_cq = cq,
                               .recv_cq = cq,
                               .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
                               .qp_type = IBV_QPT_RC};
  return ibv_create_qp(pd, &a);
}

static int post_recv(struct ibv_qp* qp, uint64_t id, int slot) {
  struct ibv_sge s = {.addr = (uintptr_t)buf + slot * LEN, .length = LEN, .lkey = mr->lkey};
  struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
  return ibv_post_recv(qp, &w, &bad);
}

static int post_send(struct ibv_qp* qp, uint64_t id, int slot) {
  struct ibv_sge s = {.addr = (uintptr_t)buf + slot * LEN, .length = LEN, .lkey = mr->lkey};
  struct ibv_send_wr w = {.wr_id = id,
                          .sg_list = &s,
                          .num_sge = 1,
                          .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  return ibv_post_send(qp, &w, &bad);
}

static void pause_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Everything the CQ holds after `ms` (at most 16), in order. */
static int drain(struct ibv_wc* wc, long ms) {
  pause_ms(ms);
  int n = 0;
  while (n < 16 && ibv_poll_cq(cq, 1, &wc[n]) == 1) n++;
  return n;
}

/* The CQ holds what happened to QP `qpn`: -1 when nothing. */
static int find(const struct ibv_wc* wc, int n, uint32_t qpn) {
  for (int i = 0; i < n; i++)
    if (wc[i].qp_num == qpn) return i;
  return -1;
}

int main(void) {
  const char* why = NULL;
  struct ibv_context* ctx = open_first_device(&why);
  if (ctx == NULL) {
    printf("FAIL device: %s\ndone 1 failures\n", why);
    return 1;
  }
  ibv_query_gid(ctx, 1, 0, &gid);
  pd = ibv_alloc_pd(ctx);
  cq = pd ? ibv_create_cq(ctx, 32, NULL, NULL, 0) : NULL;
  buf = calloc(16, LEN);
  mr = cq && buf ? ibv_reg_mr(pd, buf, 16 * LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
  struct ibv_qp *a = mr ? make_qp() : NULL, *b = mr ? make_qp() : NULL, *c = mr ? make_qp() : NULL;
  int up = a && b && c && !connect_rc(a, b->qp_num, &gid, 100) && !connect_rc(b, a->qp_num, &gid, 100);
  CHECK("three RC QPs on one CQ, two connected (loopback)", up, "PD, CQ, MR, QPs or connecting failed");
  if (!up) goto out;

  /* b SENDs to a; a has a second receive posted, b two of its own. Nothing polled. */
  struct ibv_wc wc[16];
  memset(buf, 0x5a, LEN);
  int posted = !post_recv(a, 11, 1) && !post_recv(a, 12, 2) && !post_recv(b, 21, 3) && !post_recv(b, 22, 4) &&
               !post_send(b, 23, 0);
  CHECK("receives and a SEND posted", posted, "a post failed");
  pause_ms(300); /* the SEND done: a's receive and b's send are in the CQ */
  struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
  int rc = ibv_modify_qp(a, &reset, IBV_QP_STATE);
  int n = drain(wc, 100);
  CHECK("RESET: the QP's completions leave the CQ (its received SEND's and its flushed receive's), another QP's stays",
        rc == 0 && n == 1 && wc[0].qp_num == b->qp_num && wc[0].wr_id == 23 && wc[0].status == IBV_WC_SUCCESS &&
            wc[0].opcode == IBV_WC_SEND,
        "modify rc %d, %d completions, the first qp %u wr_id %llu status %s (a is %u, b %u)", rc, n,
        n > 0 ? wc[0].qp_num : 0, n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL,
        n > 0 ? ibv_wc_status_str(wc[0].status) : "-", a->qp_num, b->qp_num);

  /* a used again, now with c; b (its two receives still posted) destroyed meanwhile. */
  up = !connect_rc(a, c->qp_num, &gid, 300) && !connect_rc(c, a->qp_num, &gid, 300);
  memset(buf + 5 * LEN, 0xc3, LEN);
  posted = up && !post_recv(a, 31, 6) && !post_send(c, 32, 5);
  pause_ms(300);
  uint32_t bqpn = b->qp_num;
  rc = ibv_destroy_qp(b);
  n = drain(wc, 100);
  int ra = find(wc, n, a->qp_num), sc = find(wc, n, c->qp_num);
  CHECK("the reset QP connected again: a SEND to it arrives",
        posted && ra >= 0 && wc[ra].status == IBV_WC_SUCCESS && wc[ra].wr_id == 31 && wc[ra].byte_len == LEN &&
            (unsigned char)buf[6 * LEN] == 0xc3,
        "connect %d, posts %d, a's completion at %d (status %s, wr_id %llu, %u bytes, data 0x%02x)", up, posted, ra,
        ra >= 0 ? ibv_wc_status_str(wc[ra].status) : "-", ra >= 0 ? (unsigned long long)wc[ra].wr_id : 0ULL,
        ra >= 0 ? wc[ra].byte_len : 0, (unsigned char)buf[6 * LEN]);
  CHECK("destroy: the QP's flushed receives never reach the CQ, the others' completions do",
        rc == 0 && n == 2 && find(wc, n, bqpn) < 0 && sc >= 0 && wc[sc].wr_id == 32,
        "destroy rc %d, %d completions, b's at %d, c's at %d", rc, n, find(wc, n, bqpn), sc);
  ibv_destroy_qp(c);
  ibv_destroy_qp(a);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
out:
  ibv_close_device(ctx);
  printf("done %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
