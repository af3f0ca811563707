/*
 * rdma_cm inside a program run with `rdma-graph exec`: librdmacm's kernel interface answered
 * here, so Debian's unmodified librdmacm.so (and rsockets and what is built on it) runs on the
 * daemon's connection manager. librdmacm opens /dev/infiniband/rdma_cm (probes.c sends that open
 * here), writes the ucma commands of <rdma/rdma_user_cm.h> to it and polls it for events:
 *
 * - the open is an eventfd of ours, passed to the daemon as a channel (UCMA_CHANNEL): the daemon
 *   keeps it readable exactly while the channel holds events, so poll, epoll and O_NONBLOCK work
 *   as on the kernel's device; fstat shows a character device (librdmacm checks);
 * - write() on such an fd is one command: its header and body checked (a short or malformed one
 *   fails with EINVAL, as the kernel's does; nothing reaches the daemon), converted to one UCMA
 *   request (proto.h) on a connection of the library's own, and its response written where the
 *   command says (process_vm_writev: a bad address is EFAULT, not a crash); GET_EVENT waits for
 *   an event unless the fd is non-blocking. write() on any other fd goes to libc after one
 *   relaxed load (no rdma_cm open) or one table lookup;
 * - close() of it closes the channel with every id on it;
 * - the daemon going away: a waiting GET_EVENT returns DEVICE_REMOVAL once for each id of its
 *   channel (the ids are known from the commands' answers), then fails with ENODEV.
 *
 * Served: CREATE_ID (port spaces TCP and IB with RC; UDP with UD: datagram service requests, the
 * events' param.ud), DESTROY_ID, BIND_IP/BIND (IPv4, or IPv4-mapped
 * IPv6), RESOLVE_IP/RESOLVE_ADDR, RESOLVE_ROUTE, QUERY_ROUTE, QUERY (address, GID, path),
 * CONNECT, LISTEN, ACCEPT, REJECT, DISCONNECT, INIT_QP_ATTR, GET_EVENT, MIGRATE_ID, and for UD
 * ids JOIN_IP_MCAST/JOIN_MCAST/LEAVE_MCAST (IPv4 groups: librdmacm attaches the QP itself with
 * ibv_attach_mcast when the join's event comes). Refused with
 * a line: the IPoIB port space (EOPNOTSUPP), AF_IB and other IPv6
 * addresses (EAFNOSUPPORT), options but REUSEADDR and AFONLY (what the daemon does anyway), and
 * NOTIFY (ENOSYS).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lib.h"

#define UCMA_MAX_FD 4096 /* an rdma_cm open gets an fd below this (else EMFILE) */
#define UCMA_MAJOR 10    /* a misc character device, as the kernel's rdma_cm */
#define UCMA_MINOR 58
#define AF_IB_FAMILY 27

int __fxstat(int ver, int fd, struct stat* st);
int __fxstat64(int ver, int fd, struct stat64* st);

/* Channel handle (the daemon's) of each rdma_cm fd; 0: not one. */
static uint32_t chan_of[UCMA_MAX_FD];
static int n_open; /* rdma_cm fds open: 0 is write()'s fast path */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context* ucma_ctx; /* the library's own connection for the commands */

static uint32_t channel_of(int fd) {
  if (__atomic_load_n(&n_open, __ATOMIC_RELAXED) == 0 || fd < 0 || fd >= UCMA_MAX_FD) return 0;
  return __atomic_load_n(&chan_of[fd], __ATOMIC_ACQUIRE);
}

/* The connection the commands go on (one per process, made at the first open). */
static struct ibv_context* ctx(void) {
  pthread_mutex_lock(&ctx_lock);
  if (ucma_ctx == NULL) {
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (list != NULL && n > 0)
      ucma_ctx = ibv_open_device(list[0]);
    else
      errno = ENODEV;
    if (list != NULL) ibv_free_device_list(list);
  }
  struct ibv_context* c = ucma_ctx;
  pthread_mutex_unlock(&ctx_lock);
  return c;
}

/*
 * The ids the program has, by channel: what DEVICE_REMOVAL is told to when the daemon goes away
 * (the daemon cannot say it then). Kept from the commands' answers: CREATE_ID, CONNECT_REQUEST's
 * new ids, ACCEPT's uid, MIGRATE_ID, DESTROY_ID. At most UCMA_MAX_IDS (more are not told).
 */
#define UCMA_MAX_IDS 4096
static struct known_id {
  uint32_t handle, channel; /* handle 0: a free slot */
  uint64_t uid;
  int told; /* DEVICE_REMOVAL returned */
} known[UCMA_MAX_IDS];
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

static struct known_id* known_find(uint32_t handle) {
  for (int k = 0; k < UCMA_MAX_IDS; k++)
    if (known[k].handle == handle) return &known[k];
  return NULL;
}

/* Id `handle` is on `channel` (uid unchanged when `set_uid` is 0). */
static void known_put(uint32_t handle, uint32_t channel, uint64_t uid, int set_uid) {
  if (handle == 0) return;
  pthread_mutex_lock(&known_lock);
  struct known_id* k = known_find(handle);
  if (k == NULL && (k = known_find(0)) != NULL) *k = (struct known_id){.handle = handle};
  if (k != NULL) {
    if (channel != 0) k->channel = channel;
    if (set_uid) k->uid = uid;
  }
  pthread_mutex_unlock(&known_lock);
}

static void known_drop(uint32_t handle) {
  pthread_mutex_lock(&known_lock);
  struct known_id* k = known_find(handle);
  if (k != NULL && handle != 0) memset(k, 0, sizeof *k);
  pthread_mutex_unlock(&known_lock);
}

/* The daemon went away: the next id of `channel` not told yet, as a DEVICE_REMOVAL event; 0, or -1. */
static int removal_event(uint32_t channel, struct rgv_ucma_reply* r) {
  int found = -1;
  pthread_mutex_lock(&known_lock);
  for (int k = 0; k < UCMA_MAX_IDS && found < 0; k++) {
    if (known[k].handle == 0 || known[k].channel != channel || known[k].told) continue;
    known[k].told = 1;
    memset(r, 0, sizeof *r);
    r->uid_lo = (uint32_t)known[k].uid;
    r->uid_hi = (uint32_t)(known[k].uid >> 32);
    r->id = known[k].handle;
    r->event = RGV_CM_DEVICE_REMOVAL;
    found = 0;
  }
  pthread_mutex_unlock(&known_lock);
  return found;
}

int rg_ucma_open(int flags) {
  if ((flags & O_ACCMODE) != O_RDWR) {
    errno = EACCES; /* as the kernel's: librdmacm opens it read-write */
    return -1;
  }
  struct ibv_context* c = ctx();
  if (c == NULL) return -1;
  const int fd = eventfd(0, (flags & O_CLOEXEC ? EFD_CLOEXEC : 0) | (flags & O_NONBLOCK ? EFD_NONBLOCK : 0));
  if (fd < 0) return -1;
  if (fd >= UCMA_MAX_FD) {
    close(fd);
    rg_say("rdma_cm: no file descriptor below %d for the channel", UCMA_MAX_FD);
    errno = EMFILE;
    return -1;
  }
  struct rgv_handle h;
  if (rg_ctx_call(c, RGV_OP_UCMA_CHANNEL, NULL, 0, fd, &h, sizeof h) != 0 || h.handle == 0) {
    const int e = h.handle == 0 && errno == 0 ? EPROTO : errno;
    close(fd);
    errno = e;
    return -1;
  }
  __atomic_store_n(&chan_of[fd], h.handle, __ATOMIC_RELEASE);
  __atomic_add_fetch(&n_open, 1, __ATOMIC_RELAXED);
  return fd;
}

/* One UCMA request; 0 or -1 + errno. */
static int request(struct rgv_ucma* q, struct rgv_ucma_reply* r) {
  struct ibv_context* c = ctx();
  if (c == NULL) return -1;
  memset(r, 0, sizeof *r);
  return rg_ctx_call(c, RGV_OP_UCMA, q, sizeof *q, -1, r, sizeof *r);
}

/* `n` bytes of `data` to the program's response buffer (`out` bytes at `addr`); 0 or -1 + errno. */
static int respond(uint64_t addr, uint32_t out, const void* data, size_t n) {
  if (out < n) n = out;
  if (n == 0) return 0;
  if (addr == 0) {
    errno = EFAULT;
    return -1;
  }
  struct iovec local = {.iov_base = (void*)data, .iov_len = n};
  struct iovec remote = {.iov_base = (void*)(uintptr_t)addr, .iov_len = n};
  const ssize_t w = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
  if (w == (ssize_t)n) return 0;
  if (w < 0 && errno == ENOSYS) {
    memcpy(remote.iov_base, data, n); /* no process_vm_writev: as the program asked */
    return 0;
  }
  errno = EFAULT;
  return -1;
}

/* An IPv4 address and port from a sockaddr (AF_INET, or AF_INET6 IPv4-mapped or any); 0 or -1 + errno. */
static int ipv4_of(const void* sa, size_t cap, int allow_none, uint8_t ip[4], uint16_t* port) {
  sa_family_t family;
  memcpy(&family, sa, sizeof family);
  memset(ip, 0, 4);
  *port = 0;
  if (family == AF_INET && cap >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in a;
    memcpy(&a, sa, sizeof a);
    memcpy(ip, &a.sin_addr, 4);
    *port = ntohs(a.sin_port);
    return 0;
  }
  if (family == AF_INET6 && cap >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 a;
    memcpy(&a, sa, sizeof a);
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t any[16];
    *port = ntohs(a.sin6_port);
    if (memcmp(a.sin6_addr.s6_addr, any, 16) == 0) return 0;
    if (memcmp(a.sin6_addr.s6_addr, mapped, 12) == 0) {
      memcpy(ip, a.sin6_addr.s6_addr + 12, 4);
      return 0;
    }
  }
  if (family == 0 && allow_none) return 0;
  if (family == AF_IB_FAMILY) {
    errno = EAFNOSUPPORT; /* librdmacm tries AF_IB once at start (and then takes IPv4): not said */
    return -1;
  }
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    rg_say("rdma_cm: address family %u is not supported (IPv4 and IPv4-mapped IPv6 only)", family);
  errno = EAFNOSUPPORT;
  return -1;
}

static void sockaddr_v4(void* out, size_t cap, const uint8_t ip[4], uint16_t port) {
  struct sockaddr_in a;
  memset(out, 0, cap);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  memcpy(&a.sin_addr, ip, 4);
  memcpy(out, &a, sizeof a < cap ? sizeof a : cap);
}

static void mapped_gid(uint8_t gid[16], const uint8_t ip[4]) {
  memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  memcpy(gid + 12, ip, 4);
}

/* The body of a command, `want` bytes (fewer when an older librdmacm sends fewer: zeroed). */
#define BODY(type, name, min)    \
  type name;                     \
  memset(&name, 0, sizeof name); \
  if (in < (min)) {              \
    errno = EINVAL;              \
    return -1;                   \
  }                              \
  memcpy(&name, body, in < sizeof name ? in : sizeof name)

/* `what` refused with `err`: said once per call site (*said). */
static int not_supported(int* said, const char* what, int err) {
  if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
    rg_say("rdma_cm: %s is not supported (see the README's librdmacm section)", what);
  errno = err;
  return -1;
}

#define REFUSE(what, err)                        \
  do {                                           \
    static int said_;                            \
    return not_supported(&said_, (what), (err)); \
  } while (0)

static int query_route(uint32_t id, uint64_t resp, uint32_t out) {
  struct rgv_ucma q = {.cmd = RGV_UCMA_QUERY, .id = id};
  struct rgv_ucma_reply r;
  if (request(&q, &r) != 0) return -1;
  struct rdma_ucm_query_route_resp a;
  memset(&a, 0, sizeof a);
  memcpy(&a.node_guid, r.node_guid, 8);
  const int have_dst = r.dst_ipv4[0] | r.dst_ipv4[1] | r.dst_ipv4[2] | r.dst_ipv4[3];
  mapped_gid(a.ib_route[0].sgid, r.src_ipv4);
  mapped_gid(a.ib_route[0].dgid, r.dst_ipv4);
  a.ib_route[0].pkey = htons(0xffff);
  a.ib_route[0].mtu = IBV_MTU_4096;
  a.ib_route[0].hop_limit = 64;
  a.ib_route[0].numb_path = 1;
  a.num_paths = have_dst ? 1 : 0;
  a.port_num = a.node_guid ? 1 : 0;
  a.ibdev_index = UINT32_MAX; /* none: librdmacm matches the device by its GUID */
  sockaddr_v4(&a.src_addr, sizeof a.src_addr, r.src_ipv4, r.src_port);
  sockaddr_v4(&a.dst_addr, sizeof a.dst_addr, r.dst_ipv4, r.dst_port);
  return respond(resp, out, &a, sizeof a);
}

static int query(uint32_t id, uint32_t option, uint64_t resp, uint32_t out) {
  if (option == RDMA_USER_CM_QUERY_PATH) {
    struct rdma_ucm_query_path_resp p = {.num_paths = 0};
    return respond(resp, out, &p, sizeof p);
  }
  if (option != RDMA_USER_CM_QUERY_ADDR && option != RDMA_USER_CM_QUERY_GID) {
    errno = EINVAL;
    return -1;
  }
  struct rgv_ucma q = {.cmd = RGV_UCMA_QUERY, .id = id};
  struct rgv_ucma_reply r;
  if (request(&q, &r) != 0) return -1;
  struct rdma_ucm_query_addr_resp a;
  memset(&a, 0, sizeof a);
  memcpy(&a.node_guid, r.node_guid, 8);
  a.port_num = a.node_guid ? 1 : 0;
  a.pkey = htons(0xffff);
  a.ibdev_index = UINT32_MAX;
  if (option == RDMA_USER_CM_QUERY_ADDR) {
    a.src_size = a.dst_size = sizeof(struct sockaddr_in);
    sockaddr_v4(&a.src_addr, sizeof a.src_addr, r.src_ipv4, r.src_port);
    sockaddr_v4(&a.dst_addr, sizeof a.dst_addr, r.dst_ipv4, r.dst_port);
  } else {
    /* GIDs in an AF_IB sockaddr: family (2 bytes), pkey (2), flowinfo (4), then the GID. */
    uint16_t fam = AF_IB_FAMILY;
    memcpy(&a.src_addr, &fam, 2);
    memcpy(&a.dst_addr, &fam, 2);
    mapped_gid((uint8_t*)&a.src_addr + 8, r.src_ipv4);
    mapped_gid((uint8_t*)&a.dst_addr + 8, r.dst_ipv4);
  }
  return respond(resp, out, &a, sizeof a);
}

static int init_qp_attr(uint32_t id, uint32_t state, uint64_t resp, uint32_t out) {
  struct rgv_ucma q = {.cmd = RGV_UCMA_INIT_QP_ATTR, .id = id, .qpn = state};
  struct rgv_ucma_reply r;
  if (request(&q, &r) != 0) return -1;
  struct ib_uverbs_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_attr_mask = r.mask;
  a.qp_state = state;
  a.port_num = 1;
  if (r.ud) {
    /* A UD id's QP (librdmacm's rdma_create_qp moves it to RTS itself): a Q_Key at INIT. */
    if (state == IBV_QPS_INIT) {
      a.qp_attr_mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      a.qkey = r.qkey;
    }
    return respond(resp, out, &a, sizeof a);
  }
  if (state == IBV_QPS_INIT) {
    a.qp_attr_mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  } else if (state == IBV_QPS_RTR) {
    a.qp_attr_mask |= IBV_QP_MIN_RNR_TIMER;
    a.path_mtu = r.path_mtu;
    a.dest_qp_num = r.qpn;
    a.rq_psn = r.rq_psn;
    a.max_dest_rd_atomic = r.responder_resources;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = 0;
    mapped_gid(a.ah_attr.grh.dgid, r.dst_ipv4);
  } else if (state == IBV_QPS_RTS) {
    a.max_rd_atomic = r.initiator_depth;
    a.timeout = 0; /* the daemon's own retransmission timeout */
    a.retry_cnt = r.retry_count;
    a.rnr_retry = r.rnr_retry_count;
  }
  return respond(resp, out, &a, sizeof a);
}

static void conn_param_out(struct rdma_ucm_conn_param* p, const struct rgv_ucma_reply* r) {
  p->qp_num = r->qpn;
  p->responder_resources = r->responder_resources;
  p->initiator_depth = r->initiator_depth;
  p->retry_count = r->retry_count;
  p->rnr_retry_count = r->rnr_retry_count;
  p->flow_control = 1;
  p->valid = 1;
  p->private_data_len = r->private_data_len;
  _Static_assert(sizeof p->private_data == RGV_UCMA_MAX_PRIVATE_DATA, "the ucma ABI's private data");
  memcpy(p->private_data, r->private_data, r->private_data_len); /* a u8: within the 256 */
}

/* A UD id's event: the serving QP and Q_Key, and the address handle's attributes toward the peer. */
static void ud_param_out(struct rdma_ucm_ud_param* p, const struct rgv_ucma_reply* r) {
  p->qp_num = r->qpn;
  p->qkey = r->qkey;
  p->ah_attr.is_global = 1;
  p->ah_attr.port_num = 1;
  p->ah_attr.grh.hop_limit = 64;
  p->ah_attr.grh.sgid_index = 0;
  mapped_gid(p->ah_attr.grh.dgid, r->dst_ipv4);
  _Static_assert(sizeof p->private_data == RGV_UCMA_MAX_PRIVATE_DATA, "the ucma ABI's UD private data");
  p->private_data_len = r->private_data_len;
  memcpy(p->private_data, r->private_data, r->private_data_len); /* a u8: within the 256 */
}

static void conn_param_in(struct rgv_ucma* q, const struct rdma_ucm_conn_param* p) {
  q->responder_resources = p->responder_resources;
  q->initiator_depth = p->initiator_depth;
  q->retry_count = p->retry_count;
  q->rnr_retry_count = p->rnr_retry_count;
  q->private_data_len = p->private_data_len;
  memcpy(q->private_data, p->private_data, sizeof q->private_data);
}

/*
 * Another thread closed the channel under a waiting GET_EVENT (rping's and others' last moves:
 * the main thread destroys the channel while the event thread waits). The kernel's waits on for
 * good, the file held by the waiting write, until the thread is cancelled or the process exits:
 * so does this one (an error here makes such programs exit with it).
 */
static void closed_while_waiting(void) {
  for (;;) pause();
}

/* GET_EVENT: the channel's next event (waiting for one unless the fd is non-blocking). */
static int get_event(int fd, uint32_t channel, uint64_t resp, uint32_t out) {
  struct rgv_ucma q = {.cmd = RGV_UCMA_GET_EVENT, .channel = channel};
  struct rgv_ucma_reply r;
  for (;;) {
    if (request(&q, &r) == 0) break;
    if (channel_of(fd) != channel) closed_while_waiting();
    if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN) {
      /* The daemon is gone: each id of the channel is told DEVICE_REMOVAL once, then ENODEV. */
      if (removal_event(channel, &r) == 0) break;
      errno = ENODEV;
      return -1;
    }
    if (errno != EAGAIN) return -1;
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    if (fl & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = rg_ctx(ucma_ctx)->sock, .events = POLLRDHUP}};
    if (rg_block_poll(p, 2) < 0) return -1;
    if (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR)) {
      if (removal_event(channel, &r) == 0) break; /* the daemon went away */
      errno = ENODEV;
      return -1;
    }
  }
  if (r.event == RGV_CM_CONNECT_REQUEST) known_put(r.id, channel, 0, 1); /* its uid comes with ACCEPT */
  struct rdma_ucm_event_resp e;
  memset(&e, 0, sizeof e);
  e.uid = (uint64_t)r.uid_hi << 32 | r.uid_lo;
  e.id = r.id;
  e.event = r.event;
  e.status = r.status;
  if (r.ud)
    ud_param_out(&e.param.ud, &r);
  else
    conn_param_out(&e.param.conn, &r);
  return respond(resp, out, &e, sizeof e);
}

/* A JOIN's group (an IPv4 multicast address: AF_INET, or AF_INET6 IPv4-mapped), uid and flags
   into `q`; 0 or -1 + errno (EINVAL: no IPv4 group; the daemon checks it is one). */
static int join(struct rgv_ucma* q, uint64_t uid, const void* addr, size_t cap, uint32_t flags) {
  uint16_t port;
  if (ipv4_of(addr, cap, 0, q->dst_ipv4, &port) != 0) return -1;
  q->uid_lo = (uint32_t)uid;
  q->uid_hi = (uint32_t)(uid >> 32);
  q->backlog = flags;
  return 0;
}

/* A command's body that names an id: read as BODY, and the request for the daemon begun. */
#define ID_BODY(type, name, min, ucma_cmd) \
  BODY(type, name, min);                   \
  q.cmd = (ucma_cmd);                      \
  q.id = name.id

/* One ucma command written to rdma_cm fd `fd` (its channel `channel`): `len` on success. */
static ssize_t command(int fd, uint32_t channel, const void* buf, size_t len) {
  struct rdma_ucm_cmd_hdr h;
  if (len < sizeof h) {
    errno = EINVAL;
    return -1;
  }
  memcpy(&h, buf, sizeof h);
  const size_t in = h.in;
  if (in + sizeof h > len) {
    errno = EINVAL;
    return -1;
  }
  const uint8_t* body = (const uint8_t*)buf + sizeof h;
  struct rgv_ucma q;
  struct rgv_ucma_reply r;
  memset(&q, 0, sizeof q);
  int rc = 0, asked = 0; /* asked: the case made its own requests; else `q` is sent after the switch */
  uint16_t sport;
  switch (h.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: {
      BODY(struct rdma_ucm_create_id, c, offsetof(struct rdma_ucm_create_id, reserved));
      if (c.ps == RDMA_PS_UDP ? c.qp_type != IBV_QPT_UD : c.ps == RDMA_PS_IPOIB || c.qp_type != IBV_QPT_RC)
        REFUSE("RDMA_PS_IPOIB, or a QP type other than RC (UD for RDMA_PS_UDP)", EOPNOTSUPP);
      q.cmd = RGV_UCMA_CREATE_ID;
      q.channel = channel;
      q.ps = c.ps;
      q.qp_type = c.qp_type;
      q.uid_lo = (uint32_t)c.uid;
      q.uid_hi = (uint32_t)(c.uid >> 32);
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      known_put(r.id, channel, c.uid, 1);
      struct rdma_ucm_create_id_resp a = {.id = r.id};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_DESTROY_ID: {
      ID_BODY(struct rdma_ucm_destroy_id, c, offsetof(struct rdma_ucm_destroy_id, reserved), RGV_UCMA_DESTROY_ID);
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      known_drop(c.id);
      struct rdma_ucm_destroy_id_resp a = {.events_reported = r.count};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_BIND_IP: {
      ID_BODY(struct rdma_ucm_bind_ip, c, sizeof c, RGV_UCMA_BIND);
      if (ipv4_of(&c.addr, sizeof c.addr, 0, q.src_ipv4, &q.src_port) != 0) return -1;
      break;
    }
    case RDMA_USER_CM_CMD_BIND: {
      ID_BODY(struct rdma_ucm_bind, c, sizeof c, RGV_UCMA_BIND);
      if (c.addr_size > sizeof c.addr) {
        errno = EINVAL;
        return -1;
      }
      if (ipv4_of(&c.addr, c.addr_size, 0, q.src_ipv4, &q.src_port) != 0) return -1;
      break;
    }
    case RDMA_USER_CM_CMD_RESOLVE_IP: {
      ID_BODY(struct rdma_ucm_resolve_ip, c, sizeof c, RGV_UCMA_RESOLVE_ADDR);
      q.backlog = c.timeout_ms;
      if (ipv4_of(&c.src_addr, sizeof c.src_addr, 1, q.src_ipv4, &sport) != 0 ||
          ipv4_of(&c.dst_addr, sizeof c.dst_addr, 0, q.dst_ipv4, &q.dst_port) != 0)
        return -1;
      break;
    }
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
      ID_BODY(struct rdma_ucm_resolve_addr, c, sizeof c, RGV_UCMA_RESOLVE_ADDR);
      q.backlog = c.timeout_ms;
      if (c.src_size > sizeof c.src_addr || c.dst_size > sizeof c.dst_addr) {
        errno = EINVAL;
        return -1;
      }
      if (ipv4_of(&c.src_addr, c.src_size, 1, q.src_ipv4, &sport) != 0 ||
          ipv4_of(&c.dst_addr, c.dst_size, 0, q.dst_ipv4, &q.dst_port) != 0)
        return -1;
      break;
    }
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
      ID_BODY(struct rdma_ucm_resolve_route, c, sizeof c, RGV_UCMA_RESOLVE_ROUTE);
      break;
    }
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
    case RDMA_USER_CM_CMD_QUERY: {
      BODY(struct rdma_ucm_query, c, sizeof c);
      asked = 1;
      rc = h.cmd == RDMA_USER_CM_CMD_QUERY ? query(c.id, c.option, c.response, h.out)
                                           : query_route(c.id, c.response, h.out);
      break;
    }
    case RDMA_USER_CM_CMD_CONNECT: {
      ID_BODY(struct rdma_ucm_connect, c, offsetof(struct rdma_ucm_connect, reserved), RGV_UCMA_CONNECT);
      q.qpn = c.conn_param.qp_num;
      conn_param_in(&q, &c.conn_param);
      break;
    }
    case RDMA_USER_CM_CMD_LISTEN: {
      ID_BODY(struct rdma_ucm_listen, c, sizeof c, RGV_UCMA_LISTEN);
      q.backlog = c.backlog;
      break;
    }
    case RDMA_USER_CM_CMD_ACCEPT: {
      ID_BODY(struct rdma_ucm_accept, c, offsetof(struct rdma_ucm_accept, reserved), RGV_UCMA_ACCEPT);
      q.qpn = c.conn_param.qp_num;
      q.uid_lo = (uint32_t)c.uid;
      q.uid_hi = (uint32_t)(c.uid >> 32);
      conn_param_in(&q, &c.conn_param);
      if (c.uid != 0) known_put(c.id, 0, c.uid, 1); /* (kept if the ACCEPT fails: harmless) */
      break;
    }
    case RDMA_USER_CM_CMD_REJECT: {
      ID_BODY(struct rdma_ucm_reject, c, sizeof c, RGV_UCMA_REJECT);
      q.private_data_len = c.private_data_len;
      memcpy(q.private_data, c.private_data, sizeof q.private_data);
      break;
    }
    case RDMA_USER_CM_CMD_DISCONNECT: {
      ID_BODY(struct rdma_ucm_disconnect, c, sizeof c, RGV_UCMA_DISCONNECT);
      break;
    }
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
      BODY(struct rdma_ucm_init_qp_attr, c, sizeof c);
      asked = 1;
      rc = init_qp_attr(c.id, c.qp_state, c.response, h.out);
      break;
    }
    case RDMA_USER_CM_CMD_GET_EVENT: {
      BODY(struct rdma_ucm_get_event, c, sizeof c);
      asked = 1;
      rc = get_event(fd, channel, c.response, h.out);
      break;
    }
    case RDMA_USER_CM_CMD_MIGRATE_ID: {
      ID_BODY(struct rdma_ucm_migrate_id, c, sizeof c, RGV_UCMA_MIGRATE_ID);
      if (channel_of((int)c.fd) == 0) {
        errno = EBADF;
        return -1;
      }
      q.channel = channel;
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      known_put(c.id, channel, 0, 0);
      struct rdma_ucm_migrate_resp a = {.events_reported = r.count};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST: {
      ID_BODY(struct rdma_ucm_join_ip_mcast, c, sizeof c, RGV_UCMA_JOIN);
      if (join(&q, c.uid, &c.addr, sizeof c.addr, 0) != 0) return -1;
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      struct rdma_ucm_create_id_resp a = {.id = r.id};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_JOIN_MCAST: {
      ID_BODY(struct rdma_ucm_join_mcast, c, sizeof c, RGV_UCMA_JOIN);
      if (c.addr_size > sizeof c.addr) {
        errno = EINVAL;
        return -1;
      }
      if (join(&q, c.uid, &c.addr, c.addr_size, c.join_flags) != 0) return -1;
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      struct rdma_ucm_create_id_resp a = {.id = r.id};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_LEAVE_MCAST: {
      ID_BODY(struct rdma_ucm_destroy_id, c, offsetof(struct rdma_ucm_destroy_id, reserved), RGV_UCMA_LEAVE);
      asked = 1;
      if (request(&q, &r) != 0) return -1;
      struct rdma_ucm_destroy_id_resp a = {.events_reported = r.count};
      rc = respond(c.response, h.out, &a, sizeof a);
      break;
    }
    case RDMA_USER_CM_CMD_SET_OPTION: {
      BODY(struct rdma_ucm_set_option, c, sizeof c);
      /* SO_REUSEADDR's and IPV6_V6ONLY's: what the daemon does anyway (a port is free again as
         soon as its listener closes; IPv4 only). The others change what the daemon does not. */
      if (c.level == RDMA_OPTION_ID && (c.optname == RDMA_OPTION_ID_REUSEADDR || c.optname == RDMA_OPTION_ID_AFONLY)) {
        if (c.optlen != sizeof(int)) {
          errno = EINVAL;
          return -1;
        }
        return (ssize_t)len;
      }
      REFUSE("rdma_set_option other than RDMA_OPTION_ID_REUSEADDR and RDMA_OPTION_ID_AFONLY", ENOSYS);
    }
    case RDMA_USER_CM_CMD_GET_OPTION:
    case RDMA_USER_CM_CMD_NOTIFY:
      REFUSE("rdma_notify", ENOSYS);
    default:
      errno = EINVAL;
      return -1;
  }
  if (!asked) rc = request(&q, &r);
  return rc == 0 ? (ssize_t)len : -1;
}

/* ------------------------------------------------------------------ the libc calls */

/* libc's definition of `name` (the next after ours), found once into *slot; NULL + ENOSYS if none. */
static void* libc_next(void** slot, const char* name) {
  void* f = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if (f == NULL) {
    f = dlsym(RTLD_NEXT, name);
    __atomic_store_n(slot, f, __ATOMIC_RELAXED);
  }
  if (f == NULL) errno = ENOSYS;
  return f;
}

#define LIBC(fn)                                                           \
  static void* fn##_slot;                                                  \
  __typeof__(fn)* fn##_libc = (__typeof__(fn)*)libc_next(&fn##_slot, #fn); \
  if (fn##_libc == NULL) return -1

EXPORT ssize_t write(int fd, const void* buf, size_t len) {
  const uint32_t ch = channel_of(fd);
  if (ch == 0) {
    LIBC(write);
    return write_libc(fd, buf, len);
  }
  return command(fd, ch, buf, len);
}

EXPORT int close(int fd) {
  LIBC(close);
  const uint32_t ch = channel_of(fd);
  if (ch != 0 && __atomic_compare_exchange_n(&chan_of[fd], &(uint32_t){ch}, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    __atomic_sub_fetch(&n_open, 1, __ATOMIC_RELAXED);
    struct rgv_ucma q = {.cmd = RGV_UCMA_CLOSE, .channel = ch};
    struct rgv_ucma_reply r;
    const int e = errno;
    (void)request(&q, &r);           /* the daemon closes its copy; ours goes now either way */
    pthread_mutex_lock(&known_lock); /* and the ids on it with it */
    for (int k = 0; k < UCMA_MAX_IDS; k++)
      if (known[k].handle != 0 && known[k].channel == ch) memset(&known[k], 0, sizeof known[k]);
    pthread_mutex_unlock(&known_lock);
    errno = e;
  }
  return close_libc(fd);
}

/* A stat of an rdma_cm fd: a character device, as the kernel's (librdmacm checks S_ISCHR). */
#define FIX_FSTAT(fd, st)                              \
  do {                                                 \
    if (channel_of(fd) != 0) {                         \
      (st)->st_mode = S_IFCHR | 0666;                  \
      (st)->st_rdev = makedev(UCMA_MAJOR, UCMA_MINOR); \
    }                                                  \
  } while (0)

EXPORT int fstat(int fd, struct stat* st) {
  LIBC(fstat);
  const int r = fstat_libc(fd, st);
  if (r == 0) FIX_FSTAT(fd, st);
  return r;
}

EXPORT int fstat64(int fd, struct stat64* st) {
  LIBC(fstat64);
  const int r = fstat64_libc(fd, st);
  if (r == 0) FIX_FSTAT(fd, st);
  return r;
}

EXPORT int __fxstat(int ver, int fd, struct stat* st) {
  LIBC(__fxstat);
  const int r = __fxstat_libc(ver, fd, st);
  if (r == 0) FIX_FSTAT(fd, st);
  return r;
}

EXPORT int __fxstat64(int ver, int fd, struct stat64* st) {
  LIBC(__fxstat64);
  const int r = __fxstat64_libc(ver, fd, st);
  if (r == 0) FIX_FSTAT(fd, st);
  return r;
}
