/*
 * Async events (ibv_get_async_event, ibv_ack_async_event). The context's async_fd is an eventfd
 * the daemon writes (ASYNC_FD, docs/VERBS-PROTOCOL.md) when one of the connection's QPs goes to
 * ERROR, one of its CQs overflows or its interface's link changes, and this library writes when
 * the daemon goes away; a
 * program may wait on it with poll/epoll, as UCX and Open MPI do, or block in
 * ibv_get_async_event. The events themselves are read from the rings' own words, which the
 * daemon keeps current:
 *
 *   IBV_EVENT_QP_LAST_WQE_REACHED  a QP on an SRQ is in ERROR (a failure, or the program's own
 *                                  ibv_modify_qp: the drain before ibv_destroy_qp)
 *   IBV_EVENT_CQ_ERR               a CQ's overflow word is set
 *   IBV_EVENT_DEVICE_FATAL         the daemon went away (or is no longer trusted)
 *
 *   IBV_EVENT_PORT_ACTIVE / _ERR   the context's interface's link came up / went down (the
 *                                  daemon writes the fd; the device list says which)
 *
 * Each is returned once. Not delivered: IBV_EVENT_QP_FATAL (a QP's transport errors, a peer's
 * Terminate or FIN, are reported through its completions, as a NIC reports them; a ring the
 * daemon refuses shows in the QP's state), path migration, SRQ limit, communication established.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "lib.h"

static uint32_t word(const struct rg_ring* r, size_t off) {
  return __atomic_load_n((const uint32_t*)(r->mem + off), __ATOMIC_ACQUIRE);
}

/* The next event the rings say, if any (under c->objs). */
static int next_event(struct rg_context* c, struct ibv_async_event* ev) {
  if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) {
    if (c->fatal_told) return 0;
    c->fatal_told = 1;
    ev->event_type = IBV_EVENT_DEVICE_FATAL;
    ev->element.port_num = 1;
    return 1;
  }
  /* A QP on an SRQ in ERROR (a failure, or the program's own modify: the drain before destroy):
     no more receives will be taken from the SRQ for it. */
  for (struct rg_qp* q = c->qps; q != NULL; q = q->next) {
    if (q->qp.srq == NULL || q->last_wqe_told || q->ring.mem == NULL || word(&q->ring, RGV_QP_STATE) != RGV_QPS_ERR)
      continue;
    q->last_wqe_told = 1;
    ev->event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
    ev->element.qp = &q->qp;
    return 1;
  }
  for (struct rg_cq* q = c->cqs; q != NULL; q = q->next) {
    if (q->overflow_told || word(&q->ring, RGV_CQ_OVERFLOW) == 0) continue;
    q->overflow_told = 1;
    ev->event_type = IBV_EVENT_CQ_ERR;
    ev->element.cq = &q->cq;
    return 1;
  }
  return 0;
}

/*
 * The daemon wrote the fd and the rings say nothing: a link went up or down. The device list
 * (a connection of its own, as ibv_get_device_list's) says how the context's interface is now;
 * ibv_query_port answers from it after this.
 */
static int port_event(struct rg_context* c, struct ibv_async_event* ev) {
  struct rgv_device infos[RGV_MAX_DEVICES];
  int n = rg_query_devices(infos);
  for (int i = 0; i < n; i++) {
    if (strncmp(infos[i].ifname, c->dev.info.ifname, sizeof infos[i].ifname) != 0) continue;
    if (!infos[i].link_up == !c->dev.info.link_up) return 0;
    c->dev.info.link_up = infos[i].link_up;
    ev->event_type = infos[i].link_up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    ev->element.port_num = 1;
    return 1;
  }
  return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context* context, struct ibv_async_event* event) {
  struct rg_context* c = rg_ctx(context);
  for (;;) {
    uint64_t v = 0;
    /* Drain first: a write after this point makes the fd readable again. */
    if (read(context->async_fd, &v, sizeof v) < 0 && errno != EAGAIN) return -1;
    pthread_mutex_lock(&c->objs);
    int got = next_event(c, event);
    pthread_mutex_unlock(&c->objs);
    if (!got && v > 0 && !c->dead) got = port_event(c, event);
    if (got) {
      uint64_t one = 1;                                     /* there may be more: the next call looks again */
      if (write(context->async_fd, &one, sizeof one) < 0) { /* counter full: readable already */
      }
      return 0;
    }
    if (fcntl(context->async_fd, F_GETFL) & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    /* Until the daemon writes the fd, or its socket says it went away. */
    struct pollfd p[2] = {{.fd = context->async_fd, .events = POLLIN}, {.fd = c->sock, .events = POLLIN}};
    if (rg_block_poll(p, c->dead ? 1 : 2) < 0) return -1;
    if (p[1].revents != 0 && !rg_daemon_gone(c)) rg_drain_unsolicited(c);
  }
}

EXPORT void ibv_ack_async_event(struct ibv_async_event* event) { (void)event; }

void rg_async_attach(struct rg_context* c) {
  /* An older daemon without ASYNC_FD: no events but the daemon going away (said once). */
  if (rg_ctx_call(&c->ctx, RGV_OP_ASYNC_FD, NULL, 0, c->ctx.async_fd, NULL, 0) != 0)
    rg_say("the daemon does not deliver async events (ASYNC_FD: %s): QP and CQ errors show in completions only",
           strerror(errno));
}
