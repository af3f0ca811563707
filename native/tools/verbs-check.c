/*
 * A small libibverbs program for test/verbs-lib.test.ts: registers an unaligned buffer it filled
 * and then answers commands on stdin, so the test can check that the daemon sees the program's
 * memory and the program the daemon's writes, and drive a QP through its states. Linked against
 * libibverbs like any verbs program; run with librdmagraph-verbs.so preloaded.
 *
 *   stdout, once registered:  "mr HANDLE stag STAG offset OFF length LEN pd PD"
 *   stdin:  "show OFF LEN" -> the bytes as hex; "dereg" -> "dereg 0"; "dealloc" -> "dealloc 0";
 *           "pd" -> "pd HANDLE" or "pd failed ERRNO" (another ibv_alloc_pd);
 *           "query" -> "query rc 0 state S dest QPN rqpsn R sqpsn P ird I ord O mtu M gid A.B.C.D send W recv W"
 *           "qp A.B.C.D QPN PSN" -> a CQ and an RC QP taken to RTS towards that peer:
 *           "qp QPN rts rc 0" (or the failing step and its errno); "post" -> "post RC" (ibv_post_recv);
 *           "send LKEY DELTA" -> a signaled 16-byte SEND from buf + DELTA with that lkey, then its
 *           completion: "send rc RC wc STATUS opcode OP wr_id ID qp QPN" (or "send rc RC" / "send timeout");
 *           "ex" -> "ex query_device_ex RC max_qp N create_cq_ex ERRNO create_qp_ex ERRNO" (the
 *           extended verbs a program may probe, through verbs.h's inline helpers: 0 when they
 *           work; the QP is asked without CQs, so EINVAL); "exit" -> ends it (status 0)
 *           "isend LEN" -> a signaled SEND of LEN bytes from buf, inline when the QP's max_inline_data
 *           (as ibv_query_qp reports it, the way ibv_rc_pingpong decides) allows: "isend rc RC inline I ..."
 *           as "send" says it;
 *           "event" -> a completion channel and a CQ on it, armed, then ibv_get_cq_event (blocks until
 *           the daemon signals or goes away), then ibv_req_notify_cq again:
 *           "event rc RC notify RC2" (or "event channel ERRNO" / "event cq ERRNO");
 *           "edges N" -> "edges BEFORE AFTER": the N (<= 100) bytes just before buf and just after
 *           buf + len, as hex (filled with 0xa5 before the registration; nothing may write them)
 *   stdout, after the mr line: "buf ADDR" (buf's virtual address, decimal: a peer's remote_addr).
 *   -x: a command that fails (an errno, a bad completion, a timeout) ends the program with status 1
 *   after its line, as a program that checks its verbs does.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int strict; /* -x */

/* A command failed: with -x the program stops here, with status 1. */
static void failed(void) {
  if (strict) exit(1);
}

/* Polls cq for one completion, up to 10 s; prints "WHAT rc 0 wc ..." or "WHAT timeout N". */
static void wait_one(const char* what, struct ibv_cq* cq) {
  struct ibv_wc wc;
  int got = 0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do { /* up to 10 s: a send the peer never answers fails after its retries */
    got = ibv_poll_cq(cq, 1, &wc);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (got == 0 && t.tv_sec - t0.tv_sec < 10);
  if (got == 1)
    printf("%s rc 0 wc %d opcode %d wr_id %llu qp %u\n", what, wc.status, wc.opcode, (unsigned long long)wc.wr_id,
           wc.qp_num);
  else
    printf("%s timeout %d\n", what, got);
  if (got != 1 || wc.status != IBV_WC_SUCCESS) failed();
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  strict = argc > 1 && strcmp(argv[1], "-x") == 0;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    fprintf(stderr, "no device\n");
    return 2;
  }
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == NULL) return perror("ibv_open_device"), 3;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == NULL) return perror("ibv_alloc_pd"), 4;
  const size_t len = 10000;
  uint8_t* block = malloc(len + 200);
  uint8_t* buf = block + 100;     /* not page aligned */
  memset(block, 0xa5, len + 200); /* the bytes around buf: outside the MR */
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 7 + 3);
  struct ibv_mr* mr =
      ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == NULL) return perror("ibv_reg_mr"), 5;
  /* The daemon's MR starts at the page that holds buf. */
  unsigned long off = (unsigned long)((uintptr_t)buf & (uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
  for (size_t i = 0; i < len; i++)
    if (buf[i] != (uint8_t)(i * 7 + 3)) return fprintf(stderr, "contents changed by the registration at %zu\n", i), 6;
  printf("mr %u stag %u offset %lu length %zu pd %u\n", mr->handle, mr->rkey, off, len, pd->handle);
  printf("buf %llu\n", (unsigned long long)(uintptr_t)buf);
  struct ibv_cq* cq = NULL;
  struct ibv_qp* qp = NULL;
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long o, l;
    if (strncmp(line, "exit", 4) == 0) {
      break; /* tested before "ex", which it starts with */
    } else if (sscanf(line, "show %lu %lu", &o, &l) == 2 && o + l <= len) {
      for (unsigned long i = 0; i < l; i++) printf("%02x", buf[o + i]);
      printf("\n");
    } else if (strncmp(line, "dereg", 5) == 0) {
      printf("dereg %d\n", ibv_dereg_mr(mr));
    } else if (strncmp(line, "dealloc", 7) == 0) {
      printf("dealloc %d\n", ibv_dealloc_pd(pd));
    } else if (strncmp(line, "qptype ", 7) == 0) {
      /* A QP of another type (ibv_qp_type's number): created, or refused with errno. */
      unsigned t;
      if (sscanf(line, "qptype %u", &t) != 1) continue;
      struct ibv_cq* c2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
      struct ibv_qp_init_attr ia = {.send_cq = c2,
                                    .recv_cq = c2,
                                    .qp_type = (enum ibv_qp_type)t,
                                    .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
      struct ibv_qp* q = c2 == NULL ? NULL : ibv_create_qp(pd, &ia);
      int e = errno;
      printf("qptype %u %s %d\n", t, q != NULL ? "created" : "refused", q != NULL ? 0 : e);
      if (q != NULL) ibv_destroy_qp(q);
      if (c2 != NULL) ibv_destroy_cq(c2);
    } else if (strncmp(line, "qp ", 3) == 0) {
      unsigned a, b, c, d, peer, psn;
      if (sscanf(line, "qp %u.%u.%u.%u %u %u", &a, &b, &c, &d, &peer, &psn) != 6) continue;
      cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
      if (cq == NULL) {
        printf("qp create_cq %d\n", errno);
        failed();
        continue;
      }
      struct ibv_qp_init_attr ia = {.send_cq = cq,
                                    .recv_cq = cq,
                                    .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
      qp = ibv_create_qp(pd, &ia);
      if (qp == NULL) {
        printf("qp create_qp %d\n", errno);
        failed();
        continue;
      }
      struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
                               .pkey_index = 0,
                               .port_num = 1,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
      int rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      if (rc != 0) {
        printf("qp init %d\n", rc);
        failed();
        continue;
      }
      memset(&at, 0, sizeof at);
      at.qp_state = IBV_QPS_RTR;
      at.path_mtu = IBV_MTU_512;
      at.dest_qp_num = peer;
      at.rq_psn = psn;
      at.max_dest_rd_atomic = 4;
      at.min_rnr_timer = 12;
      at.ah_attr.is_global = 1;
      at.ah_attr.port_num = 1;
      at.ah_attr.grh.hop_limit = 1;
      at.ah_attr.grh.dgid.raw[10] = 0xff;
      at.ah_attr.grh.dgid.raw[11] = 0xff;
      at.ah_attr.grh.dgid.raw[12] = (uint8_t)a;
      at.ah_attr.grh.dgid.raw[13] = (uint8_t)b;
      at.ah_attr.grh.dgid.raw[14] = (uint8_t)c;
      at.ah_attr.grh.dgid.raw[15] = (uint8_t)d;
      rc = ibv_modify_qp(qp, &at,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      if (rc != 0) {
        printf("qp rtr %d\n", rc);
        failed();
        continue;
      }
      memset(&at, 0, sizeof at);
      at.qp_state = IBV_QPS_RTS;
      at.timeout = 14;
      at.retry_cnt = 7;
      at.rnr_retry = 7;
      at.sq_psn = psn + 1;
      at.max_rd_atomic = 2;
      rc = ibv_modify_qp(qp, &at,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
      printf("qp %u rts rc %d\n", qp->qp_num, rc);
      if (rc != 0) failed();
    } else if (strncmp(line, "post", 4) == 0 && qp != NULL) {
      struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
      struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
      int rc = ibv_post_recv(qp, &wr, &bad);
      printf("post %d\n", rc);
      if (rc != 0) failed();
    } else if (strncmp(line, "send", 4) == 0 && qp != NULL) {
      unsigned lkey = 0;
      long delta = 0;
      if (sscanf(line + 4, "%u %ld", &lkey, &delta) != 2) continue;
      struct ibv_sge sge = {.addr = (uintptr_t)(buf + delta), .length = 16, .lkey = lkey};
      struct ibv_send_wr wr = {.wr_id = 77,
                               .sg_list = &sge,
                               .num_sge = 1,
                               .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED},
                         *bad = NULL;
      int rc = ibv_post_send(qp, &wr, &bad);
      if (rc != 0) {
        printf("send rc %d\n", rc);
        failed();
        continue;
      }
      wait_one("send", cq);
    } else if (strncmp(line, "isend ", 6) == 0 && qp != NULL) {
      unsigned long n = strtoul(line + 6, NULL, 10);
      if (n > len) continue;
      struct ibv_qp_attr qa;
      struct ibv_qp_init_attr qi;
      memset(&qi, 0, sizeof qi);
      ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi);
      const int in = qi.cap.max_inline_data >= n;
      struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)n, .lkey = mr->lkey};
      struct ibv_send_wr wr = {.wr_id = 78,
                               .sg_list = &sge,
                               .num_sge = 1,
                               .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED | (in ? IBV_SEND_INLINE : 0)},
                         *bad = NULL;
      int rc = ibv_post_send(qp, &wr, &bad);
      if (rc != 0) {
        printf("isend rc %d inline %d\n", rc, in);
        failed();
        continue;
      }
      wait_one(in ? "isend inline 1" : "isend inline 0", cq);
    } else if (strncmp(line, "event", 5) == 0) {
      struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
      if (ch == NULL) {
        printf("event channel %d\n", errno);
        failed();
        continue;
      }
      struct ibv_cq* ecq = ibv_create_cq(ctx, 4, NULL, ch, 0);
      if (ecq == NULL) {
        printf("event cq %d\n", errno);
        failed();
        continue;
      }
      int rc = ibv_req_notify_cq(ecq, 0);
      struct ibv_cq* got_cq = NULL;
      void* got_ctx = NULL;
      if (rc == 0) rc = ibv_get_cq_event(ch, &got_cq, &got_ctx) == 0 ? 0 : errno;
      int rc2 = ibv_req_notify_cq(ecq, 0);
      printf("event rc %d notify %d\n", rc, rc2);
      if (rc != 0 || rc2 != 0) failed();
    } else if (sscanf(line, "edges %lu", &o) == 1 && o <= 100) {
      printf("edges ");
      for (unsigned long i = 0; i < o; i++) printf("%02x", buf[i - o]);
      printf(" ");
      for (unsigned long i = 0; i < o; i++) printf("%02x", buf[len + i]);
      printf("\n");
    } else if (strncmp(line, "ex", 2) == 0) {
      struct ibv_device_attr_ex dx;
      int rc = ibv_query_device_ex(ctx, NULL, &dx);
      struct ibv_cq_init_attr_ex cx = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
      errno = 0;
      struct ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &cx);
      int e1 = cqx == NULL ? errno : 0;
      struct ibv_qp_init_attr_ex qx = {.qp_type = IBV_QPT_RC,
                                       .pd = pd,
                                       .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                       .send_ops_flags = IBV_QP_EX_WITH_SEND};
      errno = 0;
      struct ibv_qp* qpx = ibv_create_qp_ex(ctx, &qx);
      int e2 = qpx == NULL ? errno : 0;
      printf("ex query_device_ex %d max_qp %d create_cq_ex %d create_qp_ex %d\n", rc, dx.orig_attr.max_qp, e1, e2);
    } else if (strncmp(line, "query", 5) == 0 && qp != NULL) {
      struct ibv_qp_attr qa;
      struct ibv_qp_init_attr qi;
      int rc = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &qi);
      printf("query rc %d state %d dest %u rqpsn %u sqpsn %u ird %u ord %u mtu %d gid %u.%u.%u.%u send %u recv %u\n",
             rc, qa.qp_state, qa.dest_qp_num, qa.rq_psn, qa.sq_psn, qa.max_dest_rd_atomic, qa.max_rd_atomic,
             qa.path_mtu, qa.ah_attr.grh.dgid.raw[12], qa.ah_attr.grh.dgid.raw[13], qa.ah_attr.grh.dgid.raw[14],
             qa.ah_attr.grh.dgid.raw[15], qi.cap.max_send_wr, qi.cap.max_recv_wr);
    } else if (strncmp(line, "pd", 2) == 0) {
      struct ibv_pd* p2 = ibv_alloc_pd(ctx);
      if (p2 != NULL)
        printf("pd %u\n", p2->handle);
      else {
        printf("pd failed %d\n", errno);
        failed();
      }
    }
  }
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
