/*
 * The data path of librdmagraph-verbs.so: CQs, completion channels, QP and SRQ rings, and the
 * context ops verbs.h's inline ibv_post_send / ibv_post_recv / ibv_post_srq_recv / ibv_poll_cq /
 * ibv_req_notify_cq call. Layouts in proto.h; the rings, indices, doorbells and the sleep
 * handshake: docs/VERBS-PROTOCOL.md section 4.
 *
 * Every ring is a memfd (sealed against shrinking and growing) mapped here and in the daemon.
 * A post writes WQEs and publishes the producer index; the daemon's verbs-input node polls it.
 * When the daemon is about to sleep it sets need_kick in the QP's ring first and checks again;
 * a post that sees need_kick after publishing writes the context's doorbell eventfd (the two
 * sides order store-then-load with full fences, so one of them sees the other). A poll reads
 * CQEs the daemon wrote and publishes the consumer index. A completion channel is one end of a
 * stream socketpair; the daemon holds the other and sends a byte there when it adds a CQE to a CQ
 * armed by ibv_req_notify_cq.
 *
 * The daemon going away (its socket's end of file): the first poll or wait that notices flushes
 * every posted, unfinished WQE of the context's QPs into their CQs (IBV_WC_WR_FLUSH_ERR) and
 * signals their channels; later verbs fail with ECONNRESET.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

#define LOAD(p) __atomic_load_n((uint32_t*)(p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((uint32_t*)(p), (v), __ATOMIC_RELEASE)
#define U32(r, off) ((uint32_t*)((r)->mem + (off)))

/* Empty polls of a CQ between two checks that the daemon is still there (one recv each). */
#define ALIVE_CHECK_POLLS 4096u
/*
 * Empty polls between two sched_yield()s: the work a spinning program waits for is done by the
 * daemon, a process that may need this very core (more busy pollers than cores). A yield with
 * nobody else runnable costs a system call (well under a microsecond) every this many polls.
 */
#define YIELD_POLLS 64u
/*
 * At such a point a CQ whose send queues hold at least NAP_BYTES behind their next completion
 * (sq_pending_bytes: a bandwidth run; ib_write_bw keeps 128 x 64 KiB posted, one completion
 * asked per 100) sleeps NAP_NS instead of yielding. The daemons have that much to move before
 * the program could post more (1 MiB: ~200 us at 40 Gbit/s; the nap is ~60-170 us here with
 * the timer's slack and wake-up), and a yield leaves this process runnable, taking half of a core
 * the daemons need. Two daemons and perftest on two cores: ib_write_bw 64 KiB x1.2-1.5, 4 KiB
 * unchanged. A CQ with less queued (a ping-pong: one message; a 1 MiB transfer as one WR) keeps
 * spinning, so its latency does not pay a timer's wake-up. RDMA_GRAPH_NAP_US sets the nap (0:
 * never; a program that also waits on something else between CQ polls, on a core of its own).
 */
#define NAP_BYTES (1024u * 1024u)
#define NAP_NS 50000L
#define NAP_MAX_US 1000000L
/*
 * With RDMA_GRAPH_SLEEP_US set (the longest sleep; 0, the default: never), any other CQ found
 * empty at such a point for SPIN_NS with no completion taken from any CQ of the context and no
 * post to any of its queues (a program idle, or waiting for a peer that is slow to answer; a
 * ping-pong's reply comes sooner, and its program posts between waits) sleeps in a futex wait,
 * at most that long at a time, when every CQ of the context is empty: the daemon wakes it when
 * it writes a completion to any of them (RGV_CQ_SLEEPERS, RGV_CQ_WAKE), so a completion is not
 * late by the sleep, and an idle program stops taking a core from the daemons. Not the default:
 * a program whose traffic goes elsewhere while it polls the CQ (UCX's shared-memory transports
 * beside rc_verbs) looks idle here and would see that traffic late by the sleep (UCP tag_lat
 * with UCX's defaults: 0.27 us typical became 167 us). RDMA_GRAPH_SPIN_US sets SPIN_NS.
 */
#define SPIN_NS 200000L
#define SLEEP_NS 0L
/*
 * ibv_get_cq_event with nothing to report looks again for up to EVENT_SPIN_NS before it sleeps
 * in poll() (yielding every YIELD_POLLS looks): a reply that comes within it costs the program no
 * sleep and wake-up, the part of a round trip the 2-core VM made longest. ib_send_lat -e 64 B
 * with one daemon, p50 of three alternated runs each: 40.7/34.0/36.2 us sleeping at once,
 * 15.3/15.8/13.8 with this look; with two daemons 26.8/24.0/20.0 against 27.5/28.4/18.1, no gain
 * there. ib_send_bw -e 64 KiB moved as much either way (within the runs' noise).
 * The look follows the channel's waits (look_ns): a wait that ended within EVENT_SPIN_NS, looking
 * or asleep, sets the next look to the most; one longer than EVENT_FAR times that halves it (one
 * in between leaves it: a round trip that took longer because its program slept). So a program
 * whose events come further apart (a server with a request every millisecond) stops spending a
 * look on each wait after a few, and one whose events come soon keeps it.
 * RDMA_GRAPH_EVENT_SPIN_US sets the most (0: sleep at once). A notification the look finds is
 * taken at once, its byte perhaps still on its way: taking the last one waits for that byte
 * before it empties the fd (byte_sent), so the fd is not left readable after the last.
 */
#define EVENT_SPIN_NS 50000L
/* How long taking the last notification waits for its byte (byte_sent): the daemon sends it
   within the pass that counted it; one that never says it did costs this, and a spurious
   wake-up. */
#define BYTE_WAIT_NS 10000000L
/* A wait longer than this many looks of the most halves the look (EVENT_SPIN_NS's comment). */
#define EVENT_FAR 4u
/* sq_bytes[slot]: the WQE's data bytes (at most SQ_BYTES_MAX), and whether it completes. */
#define SQ_BYTES_SIGNALED 0x80000000u
#define SQ_BYTES_MAX 0x7fffffffu
static void idle_point(struct rg_cq* q);

static uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n && p < (1u << 30)) p <<= 1;
  return p;
}

int rg_ring_create(struct rg_ring* r, size_t bytes) {
  r->mem = NULL;
  r->bytes = bytes;
  int fd = memfd_create("rdma-graph-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  void* m = MAP_FAILED;
  if (ftruncate(fd, (off_t)bytes) != 0 ||
      (m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    if (m != MAP_FAILED) munmap(m, bytes);
    close(fd);
    errno = e;
    return -1;
  }
  r->mem = m;
  return fd;
}

void rg_ring_free(struct rg_ring* r) {
  if (r->mem != NULL) munmap(r->mem, r->bytes);
  r->mem = NULL;
}

/* ------------------------------------------------------------------ the daemon going away */

/* Adds 1 to a channel's eventfd (blocking: the program may wait on it) only if there is room: a
   full counter, which whoever shares the fd can make, is readable already. */
static void add_one(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  uint64_t one = 1;
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) && write(fd, &one, sizeof one) < 0) {
  }
}

/* Makes the channel's fd readable, as the daemon does: a byte to the other end (a full socket is
   readable already). */
static void wake_channel(struct rg_channel* ch) {
  const char one = 1;
  (void)send(ch->wake, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void signal_cq(struct rg_cq* q) {
  const uint32_t n = __atomic_add_fetch(U32(&q->ring, RGV_CQ_EVENTS), 1, __ATOMIC_SEQ_CST);
  if (q->channel != NULL) wake_channel(q->channel);
  __atomic_store_n(U32(&q->ring, RGV_CQ_SIGNALLED), n, __ATOMIC_RELEASE);
}

/* Append a flush CQE as the daemon would have (the daemon is gone: nobody else writes the ring). */
static void flush_cqe(struct rg_cq* q, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t qpn) {
  uint32_t prod = LOAD(U32(&q->ring, RGV_CQ_PROD)), cons = LOAD(U32(&q->ring, RGV_CQ_CONS));
  if (prod - cons >= q->entries) {
    STORE(U32(&q->ring, RGV_CQ_OVERFLOW), 1);
    return;
  }
  struct rgv_cqe* e = (struct rgv_cqe*)(q->ring.mem + RGV_RING_HDR) + (prod & (q->entries - 1));
  memset(e, 0, sizeof *e);
  e->wr_id = wr_id;
  e->status = IBV_WC_WR_FLUSH_ERR;
  e->opcode = op;
  e->qp_num = qpn;
  STORE(U32(&q->ring, RGV_CQ_PROD), prod + 1);
}

static enum ibv_wc_opcode wc_opcode_of(uint32_t wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    default:
      return IBV_WC_SEND;
  }
}

void rg_forsake(struct rg_context* c, const char* why) {
  pthread_mutex_lock(&c->objs);
  if (!c->dead) {
    for (struct rg_qp* q = c->qps; q != NULL; q = q->next) {
      struct rg_cq* scq = (struct rg_cq*)q->qp.send_cq;
      struct rg_cq* rcq = (struct rg_cq*)q->qp.recv_cq;
      pthread_spin_lock(&q->sq_lock);
      pthread_spin_lock(&scq->lock);
      for (uint32_t s = LOAD(U32(&q->ring, RGV_QP_SQ_DONE)), k = 0; s != q->sq_prod && k < q->sq_entries; s++, k++) {
        const struct rgv_send_wqe* w =
            (const struct rgv_send_wqe*)(q->ring.mem + RGV_RING_HDR + (size_t)(s & (q->sq_entries - 1)) * q->sq_stride);
        flush_cqe(scq, w->wr_id, wc_opcode_of(w->opcode), q->qp.qp_num);
      }
      pthread_spin_unlock(&scq->lock);
      pthread_spin_unlock(&q->sq_lock);
      if (q->qp.srq == NULL) {
        pthread_spin_lock(&q->rq_lock);
        pthread_spin_lock(&rcq->lock);
        const uint8_t* rq = q->ring.mem + RGV_RING_HDR + (size_t)q->sq_entries * q->sq_stride;
        for (uint32_t s = LOAD(U32(&q->ring, RGV_QP_RQ_DONE)), k = 0; s != q->rq_prod && k < q->rq_entries; s++, k++) {
          const struct rgv_recv_wqe* w =
              (const struct rgv_recv_wqe*)(rq + (size_t)(s & (q->rq_entries - 1)) * q->rq_stride);
          flush_cqe(rcq, w->wr_id, IBV_WC_RECV, q->qp.qp_num);
        }
        pthread_spin_unlock(&rcq->lock);
        pthread_spin_unlock(&q->rq_lock);
      }
      q->qp.state = IBV_QPS_ERR;
    }
    for (struct rg_cq* q = c->cqs; q != NULL; q = q->next) signal_cq(q);
    __atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
    add_one(c->ctx.async_fd); /* IBV_EVENT_DEVICE_FATAL for a program waiting on the async fd */
    rg_say("%s", why);
  }
  pthread_mutex_unlock(&c->objs);
}

/*
 * Is the daemon still there? A recv that peeks: end of file means it closed the connection (it
 * stopped, or died). The first caller that finds it gone flushes the context's QPs.
 */
int rg_daemon_gone(struct rg_context* c) {
  if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) return 1;
  char b;
  ssize_t r = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) return 0;
  rg_forsake(c, "the daemon closed the connection: the posted work requests are flushed (IBV_WC_WR_FLUSH_ERR)");
  return 1;
}

int rg_block_poll(struct pollfd* p, nfds_t n) {
  if (poll(p, n, -1) >= 0) return 0;
  if (errno != EINTR) return -1;
  /* Which signal it was is not known here: any caught, unblocked one without SA_RESTART may be. */
  sigset_t blocked;
  pthread_sigmask(SIG_SETMASK, NULL, &blocked);
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction a;
    if (sig == SIGKILL || sig == SIGSTOP || sigismember(&blocked, sig) == 1 || sigaction(sig, NULL, &a) != 0) continue;
    const int caught =
        (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != NULL : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
    if (caught && !(a.sa_flags & SA_RESTART)) {
      for (nfds_t k = 0; k < n; k++) p[k].revents = 0;
      errno = EINTR;
      return -1;
    }
  }
  for (nfds_t k = 0; k < n; k++) p[k].revents = 0;
  return 0;
}

/* ------------------------------------------------------------------ completion channels */

static uint32_t event_look_most(void);

EXPORT struct ibv_comp_channel* ibv_create_comp_channel(struct ibv_context* context) {
  struct rg_channel* ch = calloc(1, sizeof *ch);
  if (ch == NULL) return NULL;
  ch->ch.context = context;
  /* A socketpair, not an eventfd: the daemon signals with a send that MSG_DONTWAIT keeps from
     blocking whatever the program does to the file, where an eventfd write (which may block) needs
     a guard timer armed around it (docs/VERBS-PROTOCOL.md 4.7). */
  int sv[2];
  struct rgv_handle r;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    free(ch);
    return NULL;
  }
  ch->ch.fd = sv[0];
  ch->wake = sv[1];
  ch->look_ns = event_look_most();
  if (rg_ctx_call(context, RGV_OP_CREATE_CHANNEL, NULL, 0, ch->wake, &r, sizeof r) != 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    free(ch);
    errno = e;
    return NULL;
  }
  if (r.handle == RGV_NONE) { /* "no channel" in CREATE_CQ: a CQ on it would never be signalled */
    rg_refuse(rg_ctx(context), "channel handle %u (not a handle)", r.handle);
    close(sv[0]);
    close(sv[1]);
    free(ch);
    return NULL;
  }
  ch->handle = r.handle;
  return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel* channel) {
  struct rg_channel* ch = (struct rg_channel*)channel;
  if (channel->refcnt > 0) return EBUSY;
  if (!rg_ctx(channel->context)->dead && rg_handle_call(channel->context, RGV_OP_DESTROY_CHANNEL, ch->handle) != 0)
    return errno;
  close(channel->fd);
  close(ch->wake);
  free(ch);
  return 0;
}

/* A CQ of this channel with a notification not yet reported, or NULL; `claim`: counted as reported
   (*seen: the CQ's count of reported ones then). */
static struct rg_cq* pending_cq(struct rg_context* c, struct rg_channel* ch, int claim, int* more, uint32_t* seen) {
  struct rg_cq* found = NULL;
  *more = 0;
  pthread_mutex_lock(&c->objs);
  for (struct rg_cq* q = c->cqs; q != NULL; q = q->next) {
    if (q->channel != ch) continue;
    if (__atomic_load_n(U32(&q->ring, RGV_CQ_EVENTS), __ATOMIC_ACQUIRE) == q->events_seen) continue;
    if (found == NULL)
      found = q;
    else
      *more = 1;
  }
  if (found != NULL && claim) *seen = ++found->events_seen;
  pthread_mutex_unlock(&c->objs);
  return found;
}

/* Takes the bytes the channel's socket holds (4 KiB at most: more stay, a spurious wake-up later),
   without blocking whatever the program made the file. */
static int drain_channel(int fd) {
  char b[256];
  for (int k = 0; k < 16; k++) {
    const ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (r == (ssize_t)sizeof b || (r < 0 && errno == EINTR)) continue;
    /* r 0, the end of file, never comes: this library holds the other end too */
    if (r >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
  return 0;
}

static uint64_t now_ns(void);

/*
 * Before the last notification is reported, the byte the daemon sends for it must be in the fd,
 * or emptying the fd now would leave it readable after the last, when the byte comes. The daemon
 * counts a pass's notifications (RGV_CQ_EVENTS), sends the channel's byte, then says so
 * (RGV_CQ_SIGNALLED); a notification found by its count alone (event_spin) may be taken in
 * between. Waits until the CQ's byte for its `seen`th is sent, yielding (the daemon may want this
 * CPU), BYTE_WAIT_NS at most: a few hundred nanoseconds when it waits at all. A daemon that does
 * not keep the word (one built before it) leaves RGV_CQ_SIGNALLED_UNSET: no wait (the look's
 * stale byte may then be left, as before the word).
 */
static void byte_sent(struct rg_context* c, struct rg_cq* q, uint32_t seen) {
  const uint32_t* s = U32(&q->ring, RGV_CQ_SIGNALLED);
  const uint32_t now = __atomic_load_n(s, __ATOMIC_ACQUIRE);
  if ((int32_t)(now - seen) >= 0 || now == RGV_CQ_SIGNALLED_UNSET) return; /* sent, or not said */
  const uint64_t end = now_ns() + BYTE_WAIT_NS;
  while ((int32_t)(__atomic_load_n(s, __ATOMIC_ACQUIRE) - seen) < 0 && !c->dead && now_ns() < end) sched_yield();
}

/*
 * A notification to report, or NULL (*err set when the socket could not be read). The fd is
 * readable while notifications are left and not after the last: with others left it stays as it
 * is (their bytes are in it); the last one, its byte in (byte_sent), empties it, and makes it
 * readable again if a notification came meanwhile (that read may have taken its byte). Two CQs
 * on a channel (perftest's send and receive CQs) thus cost no syscall for the first event and a
 * recv for the second, not seven.
 */
static struct rg_cq* take_event(struct rg_context* c, struct rg_channel* ch, int* err) {
  int more;
  uint32_t seen = 0;
  struct rg_cq* q = pending_cq(c, ch, 1, &more, &seen);
  *err = 0;
  if (q == NULL || more) return q;
  byte_sent(c, q, seen);
  if (drain_channel(ch->ch.fd) < 0) {
    *err = 1;
    return q;
  }
  if (pending_cq(c, ch, 0, &more, NULL) != NULL) wake_channel(ch);
  return q;
}

static int event_spin(struct rg_context* c, struct rg_channel* ch);
static void event_waited(struct rg_channel* ch, uint64_t ns);

EXPORT int ibv_get_cq_event(struct ibv_comp_channel* channel, struct ibv_cq** cq, void** cq_context) {
  struct rg_channel* ch = (struct rg_channel*)channel;
  struct rg_context* c = rg_ctx(channel->context);
  uint64_t waited_since = 0; /* when this call began to wait (0: it has not) */
  for (int drained = 0, looked = 0;;) {
    int err;
    struct rg_cq* q = take_event(c, ch, &err);
    if (err) return -1;
    if (q != NULL) {
      if (waited_since != 0) event_waited(ch, now_ns() - waited_since);
      *cq = &q->cq;
      *cq_context = q->cq.cq_context;
      return 0;
    }
    /* Nothing to report: a readable fd is stale (what it said was reported). Empty it, then look
       once more: a notification between that look and this read had its byte taken. */
    if (!drained) {
      if (drain_channel(channel->fd) < 0) return -1;
      drained = 1;
      continue;
    }
    if (c->dead) {
      errno = ECONNRESET;
      return -1;
    }
    if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    if (waited_since == 0 && event_look_most() > 0) waited_since = now_ns();
    if (!looked) {
      looked = 1;
      if (event_spin(c, ch)) continue; /* counted: take it (drained stays: no drain before) */
    }
    struct pollfd p[2] = {{.fd = channel->fd, .events = POLLIN}, {.fd = c->sock, .events = POLLIN}};
    if (rg_block_poll(p, 2) < 0) return -1;
    /* The daemon went away (flushes and signals), or sent something nobody asked for: take it,
       or the next poll would return at once, for ever. */
    if (p[1].revents != 0 && !rg_daemon_gone(c)) rg_drain_unsolicited(c);
    drained = 0; /* woken: look first, drain only if that finds nothing */
  }
}

EXPORT void ibv_ack_cq_events(struct ibv_cq* cq, unsigned int nevents) { (void)cq, (void)nevents; }

/* ------------------------------------------------------------------ CQ */

EXPORT struct ibv_cq* ibv_create_cq(struct ibv_context* context, int cqe, void* cq_context,
                                    struct ibv_comp_channel* channel, int comp_vector) {
  struct rg_cq* q = rg_cq_create(context, cqe, cq_context, channel, comp_vector);
  return q == NULL ? NULL : &q->cq;
}

struct rg_cq* rg_cq_create(struct ibv_context* context, int cqe, void* cq_context, struct ibv_comp_channel* channel,
                           int comp_vector) {
  struct rg_context* c = rg_ctx(context);
  if (cqe < 1 || cqe > (int)c->dev.info.max_cqe || comp_vector != 0 ||
      (channel != NULL && channel->context != context)) {
    errno = EINVAL;
    return NULL;
  }
  struct rg_cq* q = calloc(1, sizeof *q);
  if (q == NULL) return NULL;
  q->entries = pow2_at_least((uint32_t)cqe);
  int fd = rg_ring_create(&q->ring, RGV_RING_HDR + (size_t)q->entries * sizeof(struct rgv_cqe));
  if (fd < 0) {
    free(q);
    return NULL;
  }
  STORE(U32(&q->ring, RGV_CQ_SIGNALLED), RGV_CQ_SIGNALLED_UNSET);
  struct rgv_create_cq req = {.entries = q->entries,
                              .channel = channel != NULL ? ((struct rg_channel*)channel)->handle : RGV_NONE,
                              .bytes = q->ring.bytes};
  struct rgv_cq r;
  int rc = rg_ctx_call(context, RGV_OP_CREATE_CQ, &req, sizeof req, fd, &r, sizeof r);
  int e = errno;
  close(fd);
  /* The CQ holds at least what was asked, at most what its ring holds. */
  if (rc == 0 && rg_check_size(c, "cqe", r.entries, (uint32_t)cqe, q->entries) != 0) rc = -1, e = errno;
  if (rc != 0) {
    rg_ring_free(&q->ring);
    free(q);
    errno = e;
    return NULL;
  }
  q->cq.context = context;
  q->cq.channel = channel;
  q->cq.cq_context = cq_context;
  q->cq.handle = r.handle;
  q->cq.cqe = (int)r.entries;
  q->channel = (struct rg_channel*)channel;
  pthread_mutex_init(&q->cq.mutex, NULL);
  pthread_cond_init(&q->cq.cond, NULL);
  pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
  if (channel != NULL) __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&c->objs);
  q->next = c->cqs;
  c->cqs = q;
  pthread_mutex_unlock(&c->objs);
  return q;
}

EXPORT int ibv_destroy_cq(struct ibv_cq* cq) {
  struct rg_cq* q = (struct rg_cq*)cq;
  struct rg_context* c = rg_ctx(cq->context);
  if (!c->dead && rg_handle_call(cq->context, RGV_OP_DESTROY_CQ, cq->handle) != 0) return errno;
  pthread_mutex_lock(&c->objs);
  for (struct rg_cq** p = &c->cqs; *p != NULL; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  pthread_mutex_unlock(&c->objs);
  if (q->channel != NULL) __atomic_sub_fetch(&q->channel->ch.refcnt, 1, __ATOMIC_RELAXED);
  rg_ring_free(&q->ring);
  pthread_spin_destroy(&q->lock);
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  free(q);
  return 0;
}

static int op_poll_cq(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
  struct rg_cq* q = (struct rg_cq*)cq;
  int k = 0;
  pthread_spin_lock(&q->lock);
  const uint32_t prod = LOAD(U32(&q->ring, RGV_CQ_PROD));
  const struct rgv_cqe* ring = (const struct rgv_cqe*)(q->ring.mem + RGV_RING_HDR);
  /* Never more than the ring holds, whatever the producer index says. */
  while (k < n && q->cons != prod && k < (int)q->entries) {
    const struct rgv_cqe* e = &ring[q->cons & (q->entries - 1)];
    struct ibv_wc* w = &wc[k++];
    w->wr_id = e->wr_id;
    w->status = (enum ibv_wc_status)e->status;
    w->opcode = (enum ibv_wc_opcode)e->opcode;
    w->vendor_err = 0;
    w->byte_len = e->byte_len;
    w->imm_data = e->imm;
    w->qp_num = e->qp_num;
    w->src_qp = e->src_qp;
    w->wc_flags = e->wc_flags;
    w->pkey_index = 0;
    w->slid = 0;
    w->sl = rg_wc_sl(e->wc_flags); /* UD: the network header type, as mlx5 */
    w->dlid_path_bits = 0;
    q->cons++;
  }
  if (k > 0) {
    STORE(U32(&q->ring, RGV_CQ_CONS), q->cons);
    rg_cq_busy(q);
  }
  const int check = k == 0 && ++q->empty_polls >= ALIVE_CHECK_POLLS;
  const int yield = k == 0 && (q->empty_polls & (YIELD_POLLS - 1)) == 0;
  if (check) q->empty_polls = 0;
  const int overflow = k == 0 && LOAD(U32(&q->ring, RGV_CQ_OVERFLOW)) != 0;
  pthread_spin_unlock(&q->lock);
  if (overflow) {
    errno = EOVERFLOW; /* the CQ overflowed: completions were lost (the daemon logged it) */
    return -1;
  }
  if (check)
    rg_daemon_gone(rg_ctx(cq->context)); /* flushes into the rings: the next poll sees it */
  else if (yield)
    idle_point(q);
  return k;
}

/*
 * The bytes of send WRs posted to QPs completing into `cq` that stay queued after each QP's
 * next completion (the WRs behind its first signaled one not finished), counted until `enough`:
 * the work that keeps the daemons busy while this thread sleeps past that completion (perftest
 * asks one completion per 100 WRs: a nap long enough for those 100 would starve the pipe if
 * fewer bytes followed). 0 when the context's lists are busy (another thread creating a QP).
 * From our own copy of each WQE's length (sq_bytes), not the shared ring: the loop is bounded by
 * the QPs of the context and each one's send ring, whatever the daemon's done index says.
 */
static uint64_t sq_pending_bytes(struct rg_cq* cq, uint64_t enough) {
  struct rg_context* c = rg_ctx(cq->cq.context);
  uint64_t bytes = 0;
  if (pthread_mutex_trylock(&c->objs) != 0) return 0;
  for (struct rg_qp* q = c->qps; q != NULL && bytes < enough; q = q->next) {
    if ((struct rg_cq*)q->qp.send_cq != cq) continue;
    const uint32_t prod = __atomic_load_n(&q->sq_prod, __ATOMIC_RELAXED), mask = q->sq_entries - 1;
    int behind = 0;
    for (uint32_t s = LOAD(U32(&q->ring, RGV_QP_SQ_DONE)), k = 0; s != prod && k < q->sq_entries && bytes < enough;
         s++, k++) {
      const uint32_t rec = __atomic_load_n(&q->sq_bytes[s & mask], __ATOMIC_RELAXED);
      if (behind)
        bytes += rec & SQ_BYTES_MAX;
      else if (rec & SQ_BYTES_SIGNALED)
        behind = 1;
    }
  }
  pthread_mutex_unlock(&c->objs);
  return bytes;
}

/* The nap's length (RDMA_GRAPH_NAP_US), how long a CQ is polled empty before its poller sleeps
 * (RDMA_GRAPH_SPIN_US) and the longest such sleep (RDMA_GRAPH_SLEEP_US): read once; the defaults
 * when unset or not understood. */
static long nap_ns = NAP_NS;
static long spin_ns = SPIN_NS;
static long sleep_ns = SLEEP_NS;
static long event_spin_ns = EVENT_SPIN_NS;
static pthread_once_t nap_once = PTHREAD_ONCE_INIT;

static long env_us(const char* name, long dflt_ns, const char* what) {
  const char* e = getenv(name);
  if (e == NULL || e[0] == '\0') return dflt_ns;
  char* end = NULL;
  errno = 0;
  const long v = strtol(e, &end, 10);
  if (errno != 0 || end == e || *end != '\0' || v < 0 || v > NAP_MAX_US) {
    rg_say("%s=\"%s\" is not a whole number of microseconds from 0 to %ld: %s of %ld us", name, e, NAP_MAX_US, what,
           dflt_ns / 1000);
    return dflt_ns;
  }
  return v * 1000;
}

static void nap_init(void);

/* The longest look (RDMA_GRAPH_EVENT_SPIN_US, read once): a new channel's first. */
static uint32_t event_look_most(void) {
  pthread_once(&nap_once, nap_init);
  return (uint32_t)event_spin_ns;
}

static void nap_init(void) {
  const int saved = errno;
  nap_ns = env_us("RDMA_GRAPH_NAP_US", NAP_NS, "naps");
  spin_ns = env_us("RDMA_GRAPH_SPIN_US", SPIN_NS, "spins");
  __atomic_store_n(&sleep_ns, env_us("RDMA_GRAPH_SLEEP_US", SLEEP_NS, "sleeps"), __ATOMIC_RELAXED);
  event_spin_ns = env_us("RDMA_GRAPH_EVENT_SPIN_US", EVENT_SPIN_NS, "event spins");
  errno = saved;
}

/* A post or a completion taken: the context's activity (what idle_point's sleep waits out),
 * counted only where sleeping is on: an atomic add on a line every thread of the program shares,
 * for nothing, in every poll that finds completions otherwise. Before the first idle point read
 * the settings none is counted: that point starts the CQ's idle clock anyway. */
static void note_activity(struct rg_context* c) {
  if (__atomic_load_n(&sleep_ns, __ATOMIC_RELAXED) > 0) __atomic_add_fetch(&c->activity, 1u, __ATOMIC_RELAXED);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * ibv_get_cq_event's look before it sleeps (the channel's look_ns): 1 once a CQ of the channel
 * counts a notification not reported yet (the caller takes it; its byte may still be on the way:
 * byte_sent), 0 when the look is over. (A look by poll() on the fd, a system call a look, did not
 * gain on the 2-core VM: two daemons' ib_send_lat -e p50 54.0/32.3/32.2 us against
 * 38.7/27.1/26.5 without.)
 */
static int event_spin(struct rg_context* c, struct rg_channel* ch) {
  const uint32_t look = __atomic_load_n(&ch->look_ns, __ATOMIC_RELAXED);
  if (look == 0) return 0;
  const uint64_t end = now_ns() + look;
  for (uint32_t k = 1;; k++) {
    int more;
    if (pending_cq(c, ch, 0, &more, NULL) != NULL) return 1;
    if (k % YIELD_POLLS == 0) {
      if (c->dead || now_ns() >= end) return 0;
      sched_yield();
    }
  }
}

/* A wait of ibv_get_cq_event's took `ns`: the next look (EVENT_SPIN_NS's comment). Threads of a
   channel race here only over which of their waits sets it. */
static void event_waited(struct rg_channel* ch, uint64_t ns) {
  const uint64_t most = (uint64_t)event_spin_ns;
  const uint32_t look = __atomic_load_n(&ch->look_ns, __ATOMIC_RELAXED);
  uint32_t next = look;
  if (ns <= most)
    next = (uint32_t)most; /* a look of the most would have seen it (or did) */
  else if (ns > EVENT_FAR * most)
    next = look / 2; /* far off: looking would not have helped */
  if (next != look) __atomic_store_n(&ch->look_ns, next, __ATOMIC_RELAXED);
}

/*
 * Whether every CQ of the context is empty: what the daemon produced (RGV_CQ_PROD) is what the
 * program took (the RGV_CQ_CONS it published). Loads sequentially consistent, after the caller's
 * add to RGV_CQ_SLEEPERS. 0 when the context's lists are busy (another thread creating a CQ):
 * the caller then does not sleep. Bounded by the context's own CQ list.
 */
static int context_cqs_empty(struct rg_context* c) {
  if (pthread_mutex_trylock(&c->objs) != 0) return 0;
  int empty = 1;
  for (struct rg_cq* q = c->cqs; q != NULL && empty; q = q->next)
    empty = __atomic_load_n(U32(&q->ring, RGV_CQ_PROD), __ATOMIC_SEQ_CST) ==
            __atomic_load_n(U32(&q->ring, RGV_CQ_CONS), __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&c->objs);
  return empty;
}

/*
 * Sleep until the daemon writes a completion to any CQ of the context, or sleep_ns passes. A
 * program that polls several CQs (UCX: a send and a receive CQ per transport) sleeps at the
 * idle point of whichever it polled, and its next completion may come on another. So the wait
 * is on this CQ's RGV_CQ_WAKE, read first; then the thread is counted in RGV_CQ_SLEEPERS; then
 * every CQ of the context is looked at once more. The daemon, when a pass wrote completions to
 * any CQ of the context, loads every such CQ's RGV_CQ_SLEEPERS after its stores of RGV_CQ_PROD;
 * where one is not 0 it adds 1 to RGV_CQ_WAKE and wakes the word. Either the daemon sees the
 * count, or the look sees the completion; and a wake-up that comes before the wait changed the
 * word the wait compares, so the kernel returns at once: no completion is slept through.
 */
static void sleep_on_context(struct rg_cq* q) {
  uint32_t* sleepers = U32(&q->ring, RGV_CQ_SLEEPERS);
  uint32_t* wake = U32(&q->ring, RGV_CQ_WAKE);
  const uint32_t w = __atomic_load_n(wake, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(sleepers, 1u, __ATOMIC_SEQ_CST);
  if (context_cqs_empty(rg_ctx(q->cq.context))) {
    const struct timespec t = {sleep_ns / 1000000000L, sleep_ns % 1000000000L};
    syscall(SYS_futex, wake, FUTEX_WAIT, w, &t, NULL, 0);
  }
  __atomic_sub_fetch(sleepers, 1u, __ATOMIC_SEQ_CST);
}

/* What a poll that found nothing for YIELD_POLLS polls does: a nap, a sleep or a yield. */
static void idle_point(struct rg_cq* q) {
  pthread_once(&nap_once, nap_init);
  if (nap_ns > 0 && sq_pending_bytes(q, NAP_BYTES) >= NAP_BYTES) {
    const struct timespec nap = {nap_ns / 1000000000L, nap_ns % 1000000000L};
    nanosleep(&nap, NULL);
    return;
  }
  if (sleep_ns > 0) {
    /* Idle since the first idle point after the context's last post or completion taken, on
     * any of its queues: a program that posts is busy, whatever it waits for between its posts
     * (memory a peer WRITEs: UCX's put_lat polls CQs that have nothing for it); one that takes
     * completions from another CQ is too (UCX: a send and a receive CQ per transport). Two
     * threads polling the CQ race here only over when one of them sleeps. */
    const uint64_t now = now_ns(), since = __atomic_load_n(&q->idle_since, __ATOMIC_RELAXED);
    const uint32_t activity = __atomic_load_n(&rg_ctx(q->cq.context)->activity, __ATOMIC_RELAXED);
    if (since == 0 || activity != __atomic_load_n(&q->activity_seen, __ATOMIC_RELAXED)) {
      __atomic_store_n(&q->idle_since, now, __ATOMIC_RELAXED);
      __atomic_store_n(&q->activity_seen, activity, __ATOMIC_RELAXED);
    } else if (now - since >= (uint64_t)spin_ns) {
      sleep_on_context(q);
      return;
    }
  }
  sched_yield(); /* a program spinning on an empty CQ lets the daemon (maybe on this core) run */
}

/*
 * A QP reset or destroyed takes its completions with it, those the program has not polled yet,
 * as hardware does (the IBA's Reset state: the QP's completion queues hold nothing of it; mlx5's
 * provider cleans its CQs at both): a program that polls a CQ other QPs share never sees a
 * completion, flushed or not, of a QP it has reset or freed. The daemon has written the last of
 * them before it answered the verb, so none comes after this. Entries of other QPs move up by
 * the number removed (towards the producer: the daemon writes only beyond it), then the
 * consumer index moves past the freed ones. Bounded by the ring's size whatever the producer
 * index says. Not while an extended poll holds the entry at the consumer index (ibv_start_poll
 * without ibv_end_poll). With `keep_recv`, receive completions stay: an SRQ's receives that the
 * daemon had given this QP come back flushed, for the program to post again.
 */
void rg_cq_clean(struct ibv_cq* cq, uint32_t qpn, int keep_recv) {
  if (cq == NULL) return;
  struct rg_cq* q = (struct rg_cq*)cq;
  pthread_spin_lock(&q->lock);
  const uint32_t prod = LOAD(U32(&q->ring, RGV_CQ_PROD)), mask = q->entries - 1;
  const uint32_t held = prod - q->cons;
  struct rgv_cqe* ring = (struct rgv_cqe*)(q->ring.mem + RGV_RING_HDR);
  uint32_t freed = 0;
  if (!q->current && held <= q->entries) {
    for (uint32_t i = prod; i != q->cons;) {
      i--;
      const struct rgv_cqe* e = &ring[i & mask];
      if (e->qp_num == qpn && !(keep_recv && (e->opcode & RGV_WC_RECV)))
        freed++;
      else if (freed > 0)
        ring[(i + freed) & mask] = *e;
    }
  }
  if (freed > 0) {
    q->cons += freed;
    STORE(U32(&q->ring, RGV_CQ_CONS), q->cons);
  }
  pthread_spin_unlock(&q->lock);
}

void rg_cq_empty(struct rg_cq* q) {
  if (++q->empty_polls >= ALIVE_CHECK_POLLS) {
    q->empty_polls = 0;
    rg_daemon_gone(rg_ctx(q->cq.context)); /* flushes into the rings: the next poll sees it */
  } else if ((q->empty_polls & (YIELD_POLLS - 1)) == 0) {
    idle_point(q);
  }
}

/* A completion taken: activity, which restarts every CQ's idle clock at its next idle point. */
void rg_cq_busy(struct rg_cq* q) {
  q->empty_polls = 0;
  note_activity(rg_ctx(q->cq.context));
}

static int op_req_notify_cq(struct ibv_cq* cq, int solicited_only) {
  struct rg_cq* q = (struct rg_cq*)cq;
  if (q->channel == NULL) return EINVAL;
  /* A daemon found gone: ECONNRESET. Not a recv to find out (a syscall at every arm, twice per
     round trip in perftest -e): ibv_get_cq_event's wait watches the daemon's socket. */
  if (__atomic_load_n(&rg_ctx(cq->context)->dead, __ATOMIC_ACQUIRE)) return ECONNRESET;
  __atomic_store_n(U32(&q->ring, RGV_CQ_ARMED), solicited_only ? RGV_CQ_ARM_SOLICITED : RGV_CQ_ARM_NEXT,
                   __ATOMIC_SEQ_CST);
  return 0;
}

/* ------------------------------------------------------------------ QP rings */

int rg_qp_attach(struct rg_qp* q, const struct ibv_qp_init_attr* attr) {
  (void)attr;
  q->sq_entries = pow2_at_least(q->max_send_wr);
  q->rq_entries = q->qp.srq != NULL ? 1 : pow2_at_least(q->max_recv_wr);
  /* In 64 bits, from sizes already bounded (ibv_create_qp): nothing wraps. */
  const uint64_t sq_stride = rgv_sq_stride(q->max_sge, q->max_inline), rq_stride = rgv_rq_stride(q->max_sge);
  const uint64_t bytes = RGV_RING_HDR + (uint64_t)q->sq_entries * sq_stride + (uint64_t)q->rq_entries * rq_stride;
  if (sq_stride > UINT32_MAX || rq_stride > UINT32_MAX || bytes > RG_MAX_RING_BYTES) {
    rg_refuse(rg_ctx(q->qp.context), "sizes for QP %u whose rings take %llu bytes (at most %llu)", q->qp.qp_num,
              (unsigned long long)bytes, (unsigned long long)RG_MAX_RING_BYTES);
    return -1;
  }
  q->sq_stride = (uint32_t)sq_stride;
  q->rq_stride = (uint32_t)rq_stride;
  q->sq_bytes = calloc(q->sq_entries, sizeof *q->sq_bytes);
  if (q->sq_bytes == NULL) return -1;
  int fd = rg_ring_create(&q->ring, bytes);
  if (fd < 0) {
    free(q->sq_bytes);
    q->sq_bytes = NULL;
    return -1;
  }
  struct rgv_qp_ring req = {.qpn = q->qp.qp_num,
                            .sq_entries = q->sq_entries,
                            .rq_entries = q->rq_entries,
                            .sq_stride = q->sq_stride,
                            .rq_stride = q->rq_stride,
                            .bytes = bytes};
  int rc = rg_ctx_call(q->qp.context, RGV_OP_QP_RING, &req, sizeof req, fd, NULL, 0);
  int e = errno;
  close(fd);
  if (rc != 0) {
    rg_ring_free(&q->ring);
    free(q->sq_bytes);
    q->sq_bytes = NULL;
    errno = e;
    return -1;
  }
  pthread_spin_init(&q->sq_lock, PTHREAD_PROCESS_PRIVATE);
  pthread_spin_init(&q->rq_lock, PTHREAD_PROCESS_PRIVATE);
  struct rg_context* c = rg_ctx(q->qp.context);
  pthread_mutex_lock(&c->objs);
  q->next = c->qps;
  c->qps = q;
  pthread_mutex_unlock(&c->objs);
  return 0;
}

void rg_qp_forget(struct rg_qp* q) {
  struct rg_context* c = rg_ctx(q->qp.context);
  pthread_mutex_lock(&c->objs);
  for (struct rg_qp** p = &c->qps; *p != NULL; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  pthread_mutex_unlock(&c->objs);
  rg_ring_free(&q->ring);
  free(q->sq_bytes);
  q->sq_bytes = NULL;
  pthread_spin_destroy(&q->sq_lock);
  pthread_spin_destroy(&q->rq_lock);
}

/* After publishing a producer index: the doorbell, if the daemon asked for one before it slept. */
static void kick(struct rg_context* c, const struct rg_ring* r, uint32_t need_kick_off) {
  note_activity(c);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(U32(r, need_kick_off), __ATOMIC_RELAXED) != 0) {
    uint64_t one = 1;
    if (write(c->doorbell, &one, sizeof one) < 0) { /* counter full: readable already */
    }
  }
}

static int send_opcode_ok(uint32_t op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
      return 1;
    default: /* TSO, DRIVER1, atomic write, flush */
      return 0;
  }
}

/* One send WR into a WQE: 0, or the errno ibv_post_send returns for it. */
static int write_send_wqe(const struct rg_qp* q, const struct ibv_send_wr* wr, uint8_t* slot) {
  struct rgv_send_wqe* w = (struct rgv_send_wqe*)slot;
  if (!send_opcode_ok(wr->opcode)) return EINVAL;
  if (wr->num_sge < 0) return EINVAL;
  const int atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const int in = (wr->send_flags & IBV_SEND_INLINE) && !atomic && wr->opcode != IBV_WR_RDMA_READ;
  w->wr_id = wr->wr_id;
  w->opcode = wr->opcode;
  w->flags = (uint32_t)wr->send_flags | (q->sig_all ? IBV_SEND_SIGNALED : 0);
  w->imm = wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV ? wr->invalidate_rkey : wr->imm_data;
  w->bind_lkey = 0;
  if (wr->opcode == IBV_WR_BIND_MW) {
    /* The window by its handle, its new rkey, the MR's range and the window's rights (§4). */
    const struct ibv_mw* mw = wr->bind_mw.mw;
    const struct ibv_mw_bind_info* b = &wr->bind_mw.bind_info;
    if (mw == NULL || (b->length > 0 && b->mr == NULL) || (wr->send_flags & IBV_SEND_INLINE)) return EINVAL;
    w->rkey = mw->handle;
    w->imm = wr->bind_mw.rkey;
    w->remote_addr = b->addr;
    w->compare_add = b->length;
    w->swap = b->mw_access_flags;
    w->bind_lkey = b->length > 0 ? b->mr->lkey : 0;
    w->num_sge = w->inline_len = 0;
    return 0;
  }
  if (q->qp.qp_type == IBV_QPT_UD) {
    /* The destination: the AH's IPv4 address, the peer's QPN and Q_Key (proto.h). */
    if (wr->wr.ud.ah == NULL || (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)) return EINVAL;
    w->remote_addr = 0;
    memcpy(&w->remote_addr, ((const struct rg_ah*)wr->wr.ud.ah)->ipv4, 4);
    w->rkey = wr->wr.ud.remote_qpn;
    w->compare_add = wr->wr.ud.remote_qkey;
    w->swap = 0;
  } else if (atomic) {
    w->remote_addr = wr->wr.atomic.remote_addr;
    w->rkey = wr->wr.atomic.rkey;
    w->compare_add = wr->wr.atomic.compare_add;
    w->swap = wr->wr.atomic.swap;
  } else {
    w->remote_addr = wr->wr.rdma.remote_addr;
    w->rkey = wr->wr.rdma.rkey;
    w->compare_add = w->swap = 0;
  }
  uint8_t* data = slot + sizeof *w;
  if (in) {
    size_t total = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      const struct ibv_sge* s = &wr->sg_list[i];
      if (s->length > q->max_inline - total) return ENOMEM; /* too much inline data */
      memcpy(data + total, (const void*)(uintptr_t)s->addr, s->length);
      total += s->length;
    }
    w->num_sge = 0;
    w->inline_len = (uint32_t)total;
    w->flags |= IBV_SEND_INLINE;
  } else {
    if ((uint32_t)wr->num_sge > q->max_sge) return EINVAL;
    memcpy(data, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge)); /* struct ibv_sge is rgv_sge */
    w->num_sge = (uint32_t)wr->num_sge;
    w->inline_len = 0;
    w->flags &= ~(uint32_t)IBV_SEND_INLINE;
  }
  return 0;
}
_Static_assert(sizeof(struct ibv_sge) == sizeof(struct rgv_sge), "ibv_sge is laid out as rgv_sge");

int rg_sq_write(struct rg_qp* q, const struct ibv_send_wr* wr) {
  /* The daemon's done index is read only when the last one read says full (once per burst, as a
     rule, not once per WR). */
  if (q->sq_prod - q->sq_done_seen >= q->max_send_wr) {
    q->sq_done_seen = LOAD(U32(&q->ring, RGV_QP_SQ_DONE));
    if (q->sq_prod - q->sq_done_seen >= q->max_send_wr) return ENOMEM; /* the send queue is full */
  }
  uint8_t* slot = q->ring.mem + RGV_RING_HDR + (size_t)(q->sq_prod & (q->sq_entries - 1)) * q->sq_stride;
  int err = write_send_wqe(q, wr, slot);
  if (err == 0) {
    /* The data bytes, from the program's WR (what write_send_wqe took from it), not from the
       slot: the ring is the daemon's to scribble on too. */
    uint64_t bytes = 0;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
      bytes = 8;
    else if (wr->opcode != IBV_WR_BIND_MW)
      for (int i = 0; i < wr->num_sge; i++) bytes += wr->sg_list[i].length;
    const int signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->sig_all;
    const uint32_t rec = (bytes > SQ_BYTES_MAX ? SQ_BYTES_MAX : (uint32_t)bytes) | (signaled ? SQ_BYTES_SIGNALED : 0);
    __atomic_store_n(&q->sq_bytes[q->sq_prod & (q->sq_entries - 1)], rec, __ATOMIC_RELAXED);
    q->sq_prod++;
  }
  return err;
}

void rg_sq_publish(struct rg_qp* q) {
  STORE(U32(&q->ring, RGV_QP_SQ_PROD), q->sq_prod);
  kick(rg_ctx(q->qp.context), &q->ring, RGV_QP_NEED_KICK);
}

static int op_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  struct rg_qp* q = (struct rg_qp*)qp;
  struct rg_context* c = rg_ctx(qp->context);
  int err = 0;
  if (c->dead)
    err = ECONNRESET;
  else if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD && qp->state != IBV_QPS_ERR)
    err = EINVAL;
  if (err != 0) {
    *bad = wr;
    return err;
  }
  pthread_spin_lock(&q->sq_lock);
  const uint32_t first = q->sq_prod;
  for (; wr != NULL; wr = wr->next)
    if ((err = rg_sq_write(q, wr)) != 0) break;
  if (q->sq_prod != first) rg_sq_publish(q);
  pthread_spin_unlock(&q->sq_lock);
  if (err != 0) *bad = wr;
  return err;
}

static int write_recv_wqe(uint32_t max_sge, const struct ibv_recv_wr* wr, uint8_t* slot) {
  if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) return EINVAL;
  struct rgv_recv_wqe* w = (struct rgv_recv_wqe*)slot;
  w->wr_id = wr->wr_id;
  w->num_sge = (uint32_t)wr->num_sge;
  w->pad = 0;
  memcpy(slot + sizeof *w, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
  return 0;
}

/* A receive ring, a QP's or an SRQ's: where its WQEs go and which header words it uses. */
struct recv_ring {
  const struct rg_ring* ring;
  uint8_t* slots;
  uint32_t entries, stride, max_wr, max_sge;
  uint32_t done_off, prod_off, kick_off;
};

/* Receive WRs into ring r from *prod (the caller holds the ring's lock); 0 or the errno, *bad set. */
static int post_recvs(struct rg_context* c, const struct recv_ring* r, uint32_t* prod, struct ibv_recv_wr* wr,
                      struct ibv_recv_wr** bad) {
  int err = 0;
  uint32_t done = LOAD(U32(r->ring, r->done_off));
  const uint32_t first = *prod;
  for (; wr != NULL; wr = wr->next) {
    if (*prod - done >= r->max_wr) {
      done = LOAD(U32(r->ring, r->done_off));
      if (*prod - done >= r->max_wr) {
        err = ENOMEM; /* the queue is full */
        break;
      }
    }
    if ((err = write_recv_wqe(r->max_sge, wr, r->slots + (size_t)(*prod & (r->entries - 1)) * r->stride)) != 0) break;
    (*prod)++;
  }
  if (*prod != first) {
    STORE(U32(r->ring, r->prod_off), *prod);
    kick(c, r->ring, r->kick_off);
  }
  if (err != 0) *bad = wr;
  return err;
}

static int op_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  struct rg_qp* q = (struct rg_qp*)qp;
  struct rg_context* c = rg_ctx(qp->context);
  int err = 0;
  if (c->dead)
    err = ECONNRESET;
  else if (qp->srq != NULL || qp->state == IBV_QPS_RESET)
    err = EINVAL;
  if (err != 0) {
    *bad = wr;
    return err;
  }
  pthread_spin_lock(&q->rq_lock);
  const struct recv_ring r = {&q->ring,        q->ring.mem + RGV_RING_HDR + (size_t)q->sq_entries * q->sq_stride,
                              q->rq_entries,   q->rq_stride,
                              q->max_recv_wr,  q->max_sge,
                              RGV_QP_RQ_DONE,  RGV_QP_RQ_PROD,
                              RGV_QP_NEED_KICK};
  err = post_recvs(c, &r, &q->rq_prod, wr, bad);
  pthread_spin_unlock(&q->rq_lock);
  return err;
}

/* ------------------------------------------------------------------ SRQ */

EXPORT struct ibv_srq* ibv_create_srq(struct ibv_pd* pd, struct ibv_srq_init_attr* attr) {
  struct rg_context* c = rg_ctx(pd->context);
  if (c->dead) {
    errno = ECONNRESET;
    return NULL;
  }
  struct rgv_create_srq req = {
      .pd = pd->handle, .max_wr = attr->attr.max_wr, .max_sge = attr->attr.max_sge, .limit = attr->attr.srq_limit};
  struct rgv_srq r;
  if (rg_ctx_call(pd->context, RGV_OP_CREATE_SRQ, &req, sizeof req, -1, &r, sizeof r) != 0) return NULL;
  struct rg_srq* s = calloc(1, sizeof *s);
  if (s == NULL) {
    rg_handle_call(pd->context, RGV_OP_DESTROY_SRQ, r.handle);
    errno = ENOMEM;
    return NULL;
  }
  s->srq.context = pd->context;
  s->srq.srq_context = attr->srq_context;
  s->srq.pd = pd;
  s->srq.handle = r.handle;
  s->max_wr = r.max_wr;
  s->max_sge = r.max_sge;
  s->entries = pow2_at_least(s->max_wr);
  int rc = -1, e = 0, fd = -1;
  /* What the daemon answered: a handle CREATE_QP can name (RGV_NONE is "no SRQ"), at least the
     sizes asked, at most the device's; the ring's bytes in 64 bits. */
  const uint64_t stride = rgv_rq_stride(s->max_sge), bytes = RGV_RING_HDR + (uint64_t)s->entries * stride;
  if (s->srq.handle == RGV_NONE)
    rg_refuse(c, "SRQ handle %u (not a handle)", s->srq.handle);
  else if (rg_check_size(c, "SRQ max_wr", s->max_wr, attr->attr.max_wr > 0 ? attr->attr.max_wr : 1,
                         c->dev.info.max_qp_wr) == 0 &&
           rg_check_size(c, "SRQ max_sge", s->max_sge, attr->attr.max_sge > 0 ? attr->attr.max_sge : 1,
                         c->dev.info.max_sge) == 0) {
    if (bytes > RG_MAX_RING_BYTES)
      rg_refuse(c, "sizes for an SRQ whose ring takes %llu bytes (at most %llu)", (unsigned long long)bytes,
                (unsigned long long)RG_MAX_RING_BYTES);
    else {
      s->stride = (uint32_t)stride;
      fd = rg_ring_create(&s->ring, (size_t)bytes);
    }
  }
  e = errno;
  if (fd >= 0) {
    struct rgv_srq_ring q = {.srq = s->srq.handle, .entries = s->entries, .stride = s->stride, .bytes = s->ring.bytes};
    rc = rg_ctx_call(pd->context, RGV_OP_SRQ_RING, &q, sizeof q, fd, NULL, 0);
    e = errno;
    close(fd);
  }
  if (rc != 0) {
    rg_handle_call(pd->context, RGV_OP_DESTROY_SRQ, s->srq.handle);
    rg_ring_free(&s->ring);
    free(s);
    errno = e;
    return NULL;
  }
  pthread_mutex_init(&s->srq.mutex, NULL);
  pthread_cond_init(&s->srq.cond, NULL);
  pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
  attr->attr.max_wr = s->max_wr;
  attr->attr.max_sge = s->max_sge;
  return &s->srq;
}

EXPORT int ibv_modify_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr, int mask) {
  if (mask & IBV_SRQ_MAX_WR) return EINVAL; /* resizing: not supported (as most devices) */
  if (!(mask & IBV_SRQ_LIMIT)) return 0;
  struct rgv_modify_srq q = {.srq = srq->handle, .limit = attr->srq_limit};
  return rg_ctx_call(srq->context, RGV_OP_MODIFY_SRQ, &q, sizeof q, -1, NULL, 0) != 0 ? errno : 0;
}

EXPORT int ibv_query_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr) {
  const struct rg_srq* s = (const struct rg_srq*)srq;
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = 0;
  return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq* srq) {
  struct rg_srq* s = (struct rg_srq*)srq;
  if (!rg_ctx(srq->context)->dead && rg_handle_call(srq->context, RGV_OP_DESTROY_SRQ, srq->handle) != 0) return errno;
  rg_ring_free(&s->ring);
  pthread_spin_destroy(&s->lock);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  free(s);
  return 0;
}

static int op_post_srq_recv(struct ibv_srq* srq, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  struct rg_srq* s = (struct rg_srq*)srq;
  struct rg_context* c = rg_ctx(srq->context);
  if (c->dead) {
    *bad = wr;
    return ECONNRESET;
  }
  pthread_spin_lock(&s->lock);
  const struct recv_ring r = {
      &s->ring,     s->ring.mem + RGV_RING_HDR, s->entries, s->stride, s->max_wr, s->max_sge, RGV_SRQ_DONE,
      RGV_SRQ_PROD, RGV_SRQ_NEED_KICK};
  const int err = post_recvs(c, &r, &s->prod, wr, bad);
  pthread_spin_unlock(&s->lock);
  return err;
}

void rg_set_ops(struct ibv_context_ops* ops) {
  ops->post_send = op_post_send;
  ops->post_recv = op_post_recv;
  ops->post_srq_recv = op_post_srq_recv;
  ops->poll_cq = op_poll_cq;
  ops->req_notify_cq = op_req_notify_cq;
}
