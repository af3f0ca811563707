/*
 * A completion channel shared by two CQs, as event-driven programs use one (perftest -e, rping,
 * libfabric): test/verbs-channel.test.ts runs it against one daemon (librdmagraph-verbs.so
 * preloaded). Two RC QPs of one device connected to each other (loopback), A's send CQ and B's
 * receive CQ on the same channel, both armed; one SEND completes on both. Then: the channel's fd
 * is readable, ibv_get_cq_event reports one CQ, the fd stays readable while the other is still
 * to be reported (a program may poll or epoll it before each call), the second call reports the
 * other CQ, the fd is then not readable and a non-blocking call says EAGAIN; re-armed, the next
 * SEND wakes a blocked call again, and ROUNDS more times (argv[1], default 200): the fd is never
 * readable after the last (the library's look before it sleeps takes a notification the daemon
 * has counted and not yet signalled: RGV_CQ_SIGNALLED). Each check prints "ok NAME" or
 * "FAIL NAME: why"; the program ends with "done N failures" and exits 0 when none failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs-tool.h"

/* Whether the channel's fd is readable within `ms`. */
static int readable(struct ibv_comp_channel* ch, int ms) {
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static int send_one(struct ibv_qp* a, struct ibv_qp* b, struct ibv_mr* mr, char* buf) {
  struct ibv_sge rs = {.addr = (uintptr_t)(buf + 64), .length = 64, .lkey = mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
  struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
  struct ibv_send_wr sw = {.wr_id = 1,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  return ibv_post_recv(b, &rw, &rbad) || ibv_post_send(a, &sw, &sbad);
}

/* Both CQs' completions polled (within 5 s of polling each); 0 when both came and succeeded. */
static int reap(struct ibv_cq* x, struct ibv_cq* y) {
  struct ibv_cq* cqs[2] = {x, y};
  for (int i = 0; i < 2; i++) {
    struct ibv_wc wc;
    int got = 0;
    for (long k = 0; k < 50000000 && got == 0; k++) got = ibv_poll_cq(cqs[i], 1, &wc);
    if (got != 1 || wc.status != IBV_WC_SUCCESS) return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 200;
  const char* why = NULL;
  struct ibv_context* ctx = open_first_device(&why);
  if (ctx == NULL) return fprintf(stderr, "%s\n", why), 2;
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  /* A's send CQ and B's receive CQ on the channel; the other two without one. */
  struct ibv_cq* a_send = ibv_create_cq(ctx, 8, (void*)"a-send", ch, 0);
  struct ibv_cq* b_recv = ibv_create_cq(ctx, 8, (void*)"b-recv", ch, 0);
  struct ibv_cq* a_recv = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  struct ibv_cq* b_send = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  char* buf = calloc(1, 4096);
  struct ibv_mr* mr = pd && buf ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (!ch || !a_send || !b_recv || !a_recv || !b_send || !mr) return fprintf(stderr, "setup: errno %d\n", errno), 4;
  struct ibv_qp_init_attr ia = {.send_cq = a_send,
                                .recv_cq = a_recv,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  struct ibv_qp* a = ibv_create_qp(pd, &ia);
  ia.send_cq = b_send;
  ia.recv_cq = b_recv;
  struct ibv_qp* b = ibv_create_qp(pd, &ia);
  int up = a && b && !connect_rc(a, b->qp_num, &gid, 1) && !connect_rc(b, a->qp_num, &gid, 1);
  CHECK("two QPs connected (loopback), a CQ of each on one channel", up, "errno %d", errno);
  if (!up) return 5;

  CHECK("both CQs armed", ibv_req_notify_cq(a_send, 0) == 0 && ibv_req_notify_cq(b_recv, 0) == 0, "errno %d", errno);
  CHECK("no event yet: the fd is not readable", !readable(ch, 0), "readable before any completion");
  CHECK("a SEND completes on both CQs", send_one(a, b, mr, buf) == 0 && reap(a_send, b_recv) == 0, "errno %d", errno);
  CHECK("the fd is readable", readable(ch, 2000), "not within 2 s");
  /* Both events counted before the first call: the daemon counts them when its pass ends, just
     after it wrote the completions polled above. */
  usleep(20000);
  struct ibv_cq* got1 = NULL;
  void* ctx1 = NULL;
  int r1 = ibv_get_cq_event(ch, &got1, &ctx1);
  CHECK("ibv_get_cq_event reports one of the two CQs, with its context",
        r1 == 0 && (got1 == a_send || got1 == b_recv) && ctx1 == got1->cq_context, "rc %d errno %d cq %p", r1, errno,
        (void*)got1);
  CHECK("the fd stays readable while the other CQ's event is left", readable(ch, 0), "not readable");
  struct ibv_cq* got2 = NULL;
  void* ctx2 = NULL;
  int r2 = ibv_get_cq_event(ch, &got2, &ctx2);
  CHECK("the second call reports the other CQ", r2 == 0 && got2 != NULL && got2 != got1 && ctx2 == got2->cq_context,
        "rc %d errno %d cq %p (first %p)", r2, errno, (void*)got2, (void*)got1);
  CHECK("then the fd is not readable", !readable(ch, 0), "still readable");
  int fl = fcntl(ch->fd, F_GETFL);
  fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
  struct ibv_cq* got3 = NULL;
  void* ctx3 = NULL;
  errno = 0;
  int r3 = ibv_get_cq_event(ch, &got3, &ctx3);
  CHECK("a non-blocking call with nothing left: EAGAIN", r3 == -1 && errno == EAGAIN, "rc %d errno %d", r3, errno);
  fcntl(ch->fd, F_SETFL, fl);
  ibv_ack_cq_events(a_send, 1);
  ibv_ack_cq_events(b_recv, 1);

  /* Re-armed: a blocked call is woken by the next completion, and reports both again. */
  CHECK("re-armed", ibv_req_notify_cq(a_send, 0) == 0 && ibv_req_notify_cq(b_recv, 0) == 0, "errno %d", errno);
  CHECK("the next SEND completes", send_one(a, b, mr, buf) == 0, "errno %d", errno);
  struct ibv_cq *g1 = NULL, *g2 = NULL;
  void* c;
  int w1 = ibv_get_cq_event(ch, &g1, &c);
  int w2 = ibv_get_cq_event(ch, &g2, &c);
  CHECK("two blocking calls report the two CQs", w1 == 0 && w2 == 0 && g1 != g2 && g1 && g2, "rc %d %d errno %d", w1,
        w2, errno);
  CHECK("their completions are there", reap(a_send, b_recv) == 0, "missing");
  CHECK("and the fd is not readable after the last", !readable(ch, 0), "still readable");
  ibv_ack_cq_events(a_send, 1);
  ibv_ack_cq_events(b_recv, 1);

  /* The same, many times: each round's two events come a pass apart or in one, and the second
     call may find the second by its count, its byte still to come. */
  long bad = 0, lost = 0, stale = 0;
  for (long r = 0; r < rounds && bad == 0; r++) {
    if (ibv_req_notify_cq(a_send, 0) || ibv_req_notify_cq(b_recv, 0) || send_one(a, b, mr, buf)) {
      bad++;
      break;
    }
    struct ibv_cq *x = NULL, *y = NULL;
    if (ibv_get_cq_event(ch, &x, &c) || ibv_get_cq_event(ch, &y, &c) || x == y) lost++;
    if (reap(a_send, b_recv)) bad++;
    if (readable(ch, 2)) stale++; /* a byte still to come has 2 ms; the next call drains it */
    ibv_ack_cq_events(a_send, 1);
    ibv_ack_cq_events(b_recv, 1);
  }
  CHECK("more rounds: each reports both CQs", bad == 0 && lost == 0, "%ld rounds failed, %ld lost an event of %ld", bad,
        lost, rounds);
  CHECK("and the fd is never readable after the last", stale == 0, "readable after %ld of %ld rounds", stale, rounds);

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_cq(a_send);
  ibv_destroy_cq(b_recv);
  ibv_destroy_cq(a_recv);
  ibv_destroy_cq(b_send);
  CHECK("the channel is destroyed once its CQs are", ibv_destroy_comp_channel(ch) == 0, "errno %d", errno);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(buf);
  printf("done %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
