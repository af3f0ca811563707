/*
 * A program that polls an empty CQ for a while, then gets a completion: test/verbs-cq-sleep.test.ts
 * runs it against one daemon (librdmagraph-verbs.so preloaded) to see what the library does
 * while a CQ stays empty (native/verbs-lib/ring.c SPIN_NS / SLEEP_NS: spin, then sleep until
 * the daemon's wake-up). Two RC QPs of the device connected to each other (loopback); a thread
 * polls the receive CQ (ibv_poll_cq, or ibv_start_poll with "ex") while the main thread waits
 * IDLE_MS, then posts the SEND. With "other", the thread also polls a CQ of the same context
 * that never gets a completion, 64 times per poll of the receive CQ (as UCX polls a send and a
 * receive CQ): its idle points come first, so that is where the thread sleeps. With "event", the
 * thread waits on a completion channel instead (ibv_req_notify_cq, ibv_get_cq_event: the
 * library's look before it sleeps, RDMA_GRAPH_EVENT_SPIN_US); "rounds N" sends N SENDs IDLE_MS
 * apart, each a wait of its own. Prints one line:
 *
 *   idle IDLE_MS ms: cpu C ms, voluntary switches V, completion seen L us after the post
 *
 * C and V are the polling thread's (CLOCK_THREAD_CPUTIME_ID, getrusage(RUSAGE_THREAD)). Exits 0
 * when the completion came, right.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "verbs-tool.h"

static struct ibv_cq* rcq;
static struct ibv_cq_ex* rcq_ex;
static int use_ex;
static int rounds = 1;                   /* "rounds N": N SENDs, IDLE_MS apart, each waited for (event mode) */
static struct ibv_cq* xcq;               /* "other": polled beside rcq, never completes */
static struct ibv_comp_channel* channel; /* "event": rcq's */

struct result {
  int want; /* completions to wait for (event mode; 1 elsewhere) */
  int got;
  enum ibv_wc_status status;
  uint32_t byte_len;
  double cpu_ms;
  long nvcsw;
  struct timespec done;
};

static double ms_of(const struct timespec* t) { return (double)t->tv_sec * 1e3 + (double)t->tv_nsec / 1e6; }

/* Polls the receive CQ until its one completion (or 30 s). */
static void* poller(void* arg) {
  struct result* r = arg;
  struct timespec c0, c1, t0, t;
  struct rusage u0, u1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  getrusage(RUSAGE_THREAD, &u0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint32_t i = 0; channel != NULL;) {
    struct ibv_wc wc;
    /* Poll, arm, poll again (a completion between the first poll and the arming raises no
       event), then wait for the event: the pattern of every program that waits on a channel. */
    int got = ibv_poll_cq(rcq, 1, &wc);
    if (got == 0) {
      if (ibv_req_notify_cq(rcq, 0) != 0) break;
      got = ibv_poll_cq(rcq, 1, &wc);
    }
    if (got == 1) {
      r->status = wc.status;
      r->byte_len = wc.byte_len;
      if (++r->got >= r->want || wc.status != IBV_WC_SUCCESS) break;
      continue;
    }
    struct ibv_cq* ev;
    void* ev_ctx;
    if (got < 0 || ibv_get_cq_event(channel, &ev, &ev_ctx) != 0 || ev != rcq || ++i > 100u + 2u * (uint32_t)r->want)
      break;
    ibv_ack_cq_events(ev, 1);
  }
  for (uint32_t i = 0; channel == NULL; i++) {
    for (int j = 0; xcq != NULL && j < 64; j++) {
      struct ibv_wc wc;
      if (ibv_poll_cq(xcq, 1, &wc) != 0) {
        fprintf(stderr, "the other CQ returned a completion or failed\n");
        exit(10);
      }
    }
    if (use_ex) {
      struct ibv_poll_cq_attr attr = {0};
      if (ibv_start_poll(rcq_ex, &attr) == 0) {
        r->got = 1;
        r->status = rcq_ex->status;
        r->byte_len = ibv_wc_read_byte_len(rcq_ex);
        ibv_end_poll(rcq_ex);
        break;
      }
    } else {
      struct ibv_wc wc;
      if (ibv_poll_cq(rcq, 1, &wc) == 1) {
        r->got = 1;
        r->status = wc.status;
        r->byte_len = wc.byte_len;
        break;
      }
    }
    if ((i & 1023) == 0) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if (t.tv_sec - t0.tv_sec > 30) break;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &r->done);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  getrusage(RUSAGE_THREAD, &u1);
  r->cpu_ms = ms_of(&c1) - ms_of(&c0);
  r->nvcsw = u1.ru_nvcsw - u0.ru_nvcsw;
  return NULL;
}

/* One completion of `cq` within 5 s. */
static int one(struct ibv_cq* cq, struct ibv_wc* wc) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (ibv_poll_cq(cq, 1, wc) == 1) return 1;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec >= 5) return 0;
  }
}

static int post(struct ibv_qp* qp, struct ibv_qp* peer, struct ibv_mr* mr, uint8_t* buf, uint32_t len) {
  struct ibv_sge rs = {(uintptr_t)buf + 2048, len, mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *bad_r;
  if (ibv_post_recv(peer, &rw, &bad_r)) return -1;
  struct ibv_sge ss = {(uintptr_t)buf, len, mr->lkey};
  struct ibv_send_wr sw = {.wr_id = 1,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad_s;
  return ibv_post_send(qp, &sw, &bad_s);
}

int main(int argc, char** argv) {
  (void)failures; /* verbs-tool.h's CHECK is not used here */
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* usage = "usage: verbs-idle IDLE_MS [ex | event [rounds N]] [busy] [other]\n";
  if (argc < 2 || atoi(argv[1]) <= 0) return fprintf(stderr, "%s", usage), 2;
  const int idle_ms = atoi(argv[1]);
  int busy = 0, other = 0, event = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "ex") == 0)
      use_ex = 1;
    else if (strcmp(argv[i], "event") == 0)
      event = 1;
    else if (strcmp(argv[i], "rounds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "busy") == 0)
      busy = 1;
    else if (strcmp(argv[i], "other") == 0)
      other = 1;
    else
      return fprintf(stderr, "%s", usage), 2;
  }
  if ((event && (use_ex || other)) || (rounds > 1 && (!event || busy))) return fprintf(stderr, "%s", usage), 2;
  const char* why = NULL;
  struct ibv_context* ctx = open_first_device(&why);
  if (ctx == NULL) return fprintf(stderr, "%s\n", why), 2;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (use_ex) {
    struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
    rcq_ex = ibv_create_cq_ex(ctx, &ca);
    rcq = rcq_ex != NULL ? ibv_cq_ex_to_cq(rcq_ex) : NULL;
  } else {
    if (event && (channel = ibv_create_comp_channel(ctx)) == NULL) return perror("ibv_create_comp_channel"), 4;
    rcq = ibv_create_cq(ctx, 16, NULL, channel, 0);
  }
  if (pd == NULL || scq == NULL || rcq == NULL) return perror("pd/cq"), 4;
  struct ibv_cq* bcq = ibv_create_cq(ctx, 16, NULL, NULL, 0); /* the busy pair's */
  if (bcq == NULL) return perror("ibv_create_cq"), 4;
  if (other && (xcq = ibv_create_cq(ctx, 16, NULL, NULL, 0)) == NULL) return perror("ibv_create_cq"), 4;
  struct ibv_qp* qp[4];
  for (int i = 0; i < 4; i++) {
    struct ibv_qp_init_attr qa = {.send_cq = i < 2 ? scq : bcq,
                                  .recv_cq = i < 2 ? rcq : bcq,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    qp[i] = ibv_create_qp(pd, &qa);
    if (qp[i] == NULL) return perror("ibv_create_qp"), 5;
  }
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  for (int i = 0; i < 4; i += 2)
    if (connect_rc(qp[i], qp[i + 1]->qp_num, &gid, 7) || connect_rc(qp[i + 1], qp[i]->qp_num, &gid, 7))
      return perror("connect"), 6;
  uint8_t* buf = calloc(1, 4096);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  if (buf == NULL || mr == NULL) return perror("ibv_reg_mr"), 7;

  /* A first exchange: the connection works (and the receive CQ has had a completion). */
  struct ibv_wc wc;
  if (post(qp[0], qp[1], mr, buf, 64) || !one(scq, &wc) || wc.status != IBV_WC_SUCCESS)
    return fprintf(stderr, "first send failed\n"), 8;
  struct result r0 = {.want = 1};
  poller(&r0);
  if (!r0.got || r0.status != IBV_WC_SUCCESS) return fprintf(stderr, "first receive failed\n"), 8;

  struct result r = {.want = rounds};
  pthread_t t;
  pthread_create(&t, NULL, poller, &r);
  if (busy) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const struct timespec gap = {0, 50000};
    do {
      if (post(qp[2], qp[3], mr, buf + 1024, 8) || !one(bcq, &wc) || !one(bcq, &wc))
        return fprintf(stderr, "busy exchange failed\n"), 9;
      nanosleep(&gap, NULL);
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((ms_of(&t) - ms_of(&t0)) < idle_ms);
  } else {
    const struct timespec idle = {idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L};
    nanosleep(&idle, NULL);
  }
  memset(buf, 0x5a, 100);
  struct timespec posted;
  /* Rounds before the last: a SEND, its completion, IDLE_MS more (the poller waits for each). */
  for (int k = 1; k < rounds; k++) {
    const struct timespec idle = {idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L};
    if (post(qp[0], qp[1], mr, buf, 100) || !one(scq, &wc) || wc.status != IBV_WC_SUCCESS)
      return fprintf(stderr, "round %d failed\n", k), 9;
    nanosleep(&idle, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &posted);
  const int rc = post(qp[0], qp[1], mr, buf, 100);
  pthread_join(t, NULL);
  const int sent = rc == 0 && one(scq, &wc) && wc.status == IBV_WC_SUCCESS;
  printf("idle %d ms: cpu %.1f ms, voluntary switches %ld, completion seen %.0f us after the post\n", idle_ms, r.cpu_ms,
         r.nvcsw, (ms_of(&r.done) - ms_of(&posted)) * 1e3);
  const int ok = sent && r.got && r.status == IBV_WC_SUCCESS && r.byte_len == 100 && buf[2048 + 99] == 0x5a;
  if (!ok) printf("FAIL: sent %d got %d status %d len %u\n", sent, r.got, r.status, r.byte_len);
  return ok ? 0 : 1;
}
