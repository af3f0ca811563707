/*
 * librdmagraph-verbs.so: libibverbs' entry points for an unmodified verbs program, loaded with
 * LD_PRELOAD (`rdma-graph exec -- PROGRAM`). It exports the libibverbs symbols it implements
 * with libibverbs' own symbol versions (verbs.map), so the program's calls bind here first.
 *
 * ibv_get_device_list asks the daemon at $RDMA_GRAPH_SOCKET (default run/verbs-7070.sock, the default daemon's) for its
 * interfaces, one device per interface with an IPv4 address (rg_<ifname>, Ethernet link
 * layer, GID 0 = ::ffff:<IPv4>, dev_name uverbsN: probes.c makes /dev/infiniband and
 * /sys/class/infiniband show them); the daemon is one the program trusts (check_peer), and every
 * size or handle it answers is checked before anything is sized from it (rg_refuse); ibv_open_device opens a connection
 * of its own (the control path: one request, one answer) and hands the daemon a doorbell eventfd; query
 * device/port/gid/pkey answer from what the daemon said; PDs, MRs (reg_mr moves the pages onto a
 * memfd the daemon maps), CQs, completion channels, RC QPs and SRQs are the daemon's objects.
 *
 * The data path (ring.c) is rings in memfds both sides map: post_send/post_recv write
 * WQEs the daemon's verbs-input node polls, poll_cq reads the CQEs the daemon writes; no
 * syscall unless the daemon asked for a doorbell before it slept, or a completion channel is
 * armed. What is not supported (UD/UC QPs, AH, memory windows, extended verbs) fails cleanly
 * with EOPNOTSUPP and says so once on stderr, rather than reaching the real libibverbs with a
 * context it does not know.
 *
 * The control messages (proto.h) and what the daemon answers to each: docs/VERBS-PROTOCOL.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* RDMA_GRAPH_SOCKET (rdma-graph exec sets it), else the default daemon's socket from its
   directory: run/verbs-PORT.sock with its API port 7070 (config/load.ts names it so). */
static const char* socket_path(void) {
  const char* p = getenv("RDMA_GRAPH_SOCKET");
  return p != NULL && p[0] != '\0' ? p : "run/verbs-7070.sock";
}

void rg_say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("rdma-graph verbs: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void distrust(struct rg_context* c) {
  if (c == NULL || __atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) return;
  shutdown(c->sock, SHUT_RDWR); /* the daemon sees the end of the connection: it releases what it holds */
  rg_forsake(c,
             "the daemon is not trusted any more: the posted work requests are flushed (IBV_WC_WR_FLUSH_ERR), later "
             "verbs fail with ECONNRESET");
}

void rg_refuse(struct rg_context* c, const char* fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  rg_say("the daemon answered %s: refused", what);
  distrust(c);
  errno = EPROTO;
}

int rg_check_size(struct rg_context* c, const char* what, uint32_t got, uint32_t asked, uint32_t most) {
  if (got >= asked && got <= most) return 0;
  rg_refuse(c, "%s %u for %u asked (at most %u)", what, got, asked, most);
  return -1;
}

/*
 * Whom the library trusts to be its daemon (SO_PEERCRED of the connected socket): root, this
 * program's own (effective) uid, the uid in RDMA_GRAPH_DAEMON_UID, or the owner of the socket
 * file when the directory holding it can be written by nobody else (its owner is root or that
 * same uid, and it has no group or other write bit: no one else can have put a socket there). An abstract
 * name ("@name") has no file: anyone can bind one first, so only the uids above are trusted.
 * Anyone else is refused with a line saying which check failed: 0, or -1 + EPERM.
 */
static int check_peer(int fd, const char* path) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof cr) {
    rg_say("the daemon at %s: its credentials cannot be read (SO_PEERCRED): refused", path);
    errno = EPERM;
    return -1;
  }
  const char* env = secure_getenv("RDMA_GRAPH_DAEMON_UID"); /* not from whoever ran a set-uid program */
  long conf = -1;
  char conf_text[64] = "unset";
  if (env != NULL && env[0] != '\0') {
    char* end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno == 0 && *end == '\0' && env[0] >= '0' && env[0] <= '9' && v <= (long)UINT32_MAX) {
      conf = v;
      snprintf(conf_text, sizeof conf_text, "%ld", v);
    } else {
      snprintf(conf_text, sizeof conf_text, "\"%.32s\" is not a uid", env);
    }
  }
  /* The effective uid: a set-uid program must not trust the user who ran it. */
  if (cr.uid == 0 || cr.uid == geteuid() || (conf >= 0 && (long)cr.uid == conf)) return 0;
  char why[PATH_MAX + 128];
  if (path[0] == '@') {
    snprintf(why, sizeof why, "an abstract socket has no owner to check");
  } else {
    struct stat st, dst;
    char dir[PATH_MAX];
    const char* slash = strrchr(path, '/');
    if (slash == NULL)
      snprintf(dir, sizeof dir, ".");
    else
      snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (lstat(path, &st) != 0)
      snprintf(why, sizeof why, "its socket file cannot be checked: %s", strerror(errno));
    else if (!S_ISSOCK(st.st_mode))
      snprintf(why, sizeof why, "%s is not a socket file (a symbolic link is not followed)", path);
    else if (st.st_uid != cr.uid)
      snprintf(why, sizeof why, "the socket file is uid %u's", (unsigned)st.st_uid);
    else if (stat(dir, &dst) != 0)
      snprintf(why, sizeof why, "its directory %s cannot be checked: %s", dir, strerror(errno));
    else if ((dst.st_mode & (S_IWGRP | S_IWOTH)) != 0)
      snprintf(why, sizeof why, "its directory %s is writable by others", dir);
    else if (dst.st_uid != 0 && dst.st_uid != st.st_uid)
      snprintf(why, sizeof why, "its directory %s is uid %u's", dir, (unsigned)dst.st_uid);
    else
      return 0; /* the socket file's owner, in a directory only it (or root) can write */
  }
  rg_say(
      "the daemon at %s is uid %u (pid %d): not root, not this program's uid %u, not RDMA_GRAPH_DAEMON_UID (%s), and "
      "%s: refused",
      path, (unsigned)cr.uid, (int)cr.pid, (unsigned)geteuid(), conf_text, why);
  errno = EPERM;
  return -1;
}

/* A SOCK_SEQPACKET connection to the daemon (a leading '@': the abstract namespace); -1 + errno. */
static int connect_daemon(void) {
  const char* path = socket_path();
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') sa.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0}; /* a daemon that stops answering: an error, not a hang */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  if (connect(fd, (struct sockaddr*)&sa, len) != 0 || check_peer(fd, path) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Once per process: the daemon sent a message that answers nothing (it is dropped). */
static void say_unsolicited(const void* msg, ssize_t n) {
  static int said;
  const struct rgv_hdr* h = msg;
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
  if (n >= (ssize_t)sizeof *h)
    rg_say("the daemon sent a message nobody asked for (op %u, %zd bytes): ignored", h->op, n);
  else
    rg_say("the daemon sent a message nobody asked for (%zd bytes): ignored", n);
}

void rg_drain_unsolicited(struct rg_context* c) {
  uint8_t buf[sizeof(struct rgv_hdr) + 64];
  /* Under the request lock: a thread waiting for its answer reads its own (and skips this). */
  pthread_mutex_lock(&c->ctx.mutex);
  ssize_t r = recv(c->sock, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
  pthread_mutex_unlock(&c->ctx.mutex);
  if (r > 0) say_unsolicited(buf, r);
}

/* The longest request body: REG_MR with all its pieces. */
#define RG_MAX_BODY (sizeof(struct rgv_reg_mr) + RGV_MAX_MR_PIECES * sizeof(struct rgv_mr_piece))

/*
 * One request (the header, `len` bytes of `req`, and the `npass` fds of `pass`), one response of
 * up to `cap` bytes; the response's length, or -1 + errno (the daemon's errno when it refused).
 */
static ssize_t call_fds(int fd, uint16_t op, const void* req, size_t len, const int* pass, size_t npass, void* resp,
                        size_t cap) {
  static uint32_t seq;
  uint8_t msg[sizeof(struct rgv_hdr) + RG_MAX_BODY];
  if (len > RG_MAX_BODY || npass > RGV_MAX_MR_PIECES) {
    errno = EINVAL;
    return -1;
  }
  struct rgv_hdr q = {
      .magic = RGV_MAGIC, .op = op, .status = 0, .seq = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED), .count = 0};
  memcpy(msg, &q, sizeof q);
  if (len > 0) memcpy(msg + sizeof q, req, len);
  struct iovec iov = {.iov_base = msg, .iov_len = sizeof q + len};
  union {
    char buf[CMSG_SPACE(sizeof(int) * RGV_MAX_MR_PIECES)];
    struct cmsghdr align;
  } ctl;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (npass > 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * npass);
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * npass);
    memcpy(CMSG_DATA(c), pass, sizeof(int) * npass);
  }
  if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)iov.iov_len) return -1;
  struct rgv_hdr* h = resp;
  ssize_t r;
  /* The answer: what carries this request's op and seq. Anything before it is the late answer
     to a request that timed out (an earlier seq: dropped) or a message nobody asked for (the
     protocol has none): taken and said, a few at most. */
  for (int stray = 0;; stray++) {
    r = recv(fd, resp, cap, 0);
    if (r == 0) {
      errno = ECONNRESET; /* the daemon went away */
      return -1;
    }
    if (r < 0) return -1; /* EAGAIN: no answer within SO_RCVTIMEO; a late one is dropped by its seq */
    const int whole = r >= (ssize_t)sizeof *h && h->magic == RGV_MAGIC;
    if (whole && h->op == op && h->seq == q.seq) break;
    if (whole && (int32_t)(q.seq - h->seq) > 0) {
      static int said_late;
      if (!__atomic_exchange_n(&said_late, 1, __ATOMIC_RELAXED))
        rg_say("the daemon answered a request that had timed out (op %u): dropped", h->op);
    } else {
      say_unsolicited(resp, r);
    }
    if (stray == 8) {
      errno = EPROTO;
      return -1;
    }
  }
  if (h->status != 0) {
    /* A refusal may say why after the header (a connection over the daemon's limits): shown,
       printable bytes only (the text is the daemon's: no terminal escapes through us). */
    if (r > (ssize_t)sizeof *h) {
      char why[RGV_MAX_REASON + 1];
      size_t n = (size_t)r - sizeof *h;
      if (n > sizeof why - 1) n = sizeof why - 1;
      const uint8_t* t = (const uint8_t*)(h + 1);
      for (size_t k = 0; k < n; k++) why[k] = t[k] >= 0x20 && t[k] < 0x7f ? (char)t[k] : '?';
      why[n] = '\0';
      rg_say("the daemon at %s refused: %s", socket_path(), why);
    }
    errno = -h->status;
    return -1;
  }
  return r;
}

static ssize_t call_with(int fd, uint16_t op, const void* req, size_t len, int pass_fd, void* resp, size_t cap) {
  return call_fds(fd, op, req, len, &pass_fd, pass_fd >= 0 ? 1 : 0, resp, cap);
}

static ssize_t call(int fd, uint16_t op, void* resp, size_t cap) { return call_with(fd, op, NULL, 0, -1, resp, cap); }

/* The daemon's devices into out[]; their number, or -1 + errno. */
static int query_devices(int fd, struct rgv_device* out) {
  static __thread uint8_t buf[sizeof(struct rgv_hdr) + RGV_MAX_DEVICES * sizeof(struct rgv_device)];
  ssize_t r = call(fd, RGV_OP_DEVICES, buf, sizeof buf);
  if (r < 0) return -1;
  struct rgv_hdr* h = (struct rgv_hdr*)buf;
  if (h->count > RGV_MAX_DEVICES || (uint64_t)r != sizeof *h + (uint64_t)h->count * sizeof(struct rgv_device)) {
    rg_refuse(NULL, "%u devices in %zd bytes", h->count, r - (ssize_t)sizeof *h);
    return -1;
  }
  memcpy(out, buf + sizeof *h, h->count * sizeof(struct rgv_device));
  for (uint32_t i = 0; i < h->count; i++) {
    struct rgv_device* d = &out[i];
    d->name[sizeof d->name - 1] = '\0';
    d->ifname[sizeof d->ifname - 1] = '\0';
    d->fw_ver[sizeof d->fw_ver - 1] = '\0';
    /* The name becomes paths (probes.c) and UCX's device names: short, of [A-Za-z0-9_-], unique. */
    size_t len = strlen(d->name), ok = len >= 1 && len <= RG_MAX_NAME;
    for (size_t k = 0; ok && k < len; k++) {
      const char ch = d->name[k];
      ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    }
    for (uint32_t j = 0; ok && j < i; j++) ok = strcmp(out[j].name, d->name) != 0;
    if (!ok) {
      rg_refuse(NULL, "device %u named \"%.*s\" (1 to %d of [A-Za-z0-9_-], each name once)", i, RG_MAX_NAME + 1,
                d->name, RG_MAX_NAME);
      return -1;
    }
    for (char* t = d->fw_ver; *t != '\0'; t++)
      if (*t < 0x20 || *t > 0x7e) *t = '?'; /* ibv_devinfo prints it: no terminal escapes through us */
    /* What the program sizes its queues by (and ibv_create_* checks against): bounded; the rest
       fits the ints of struct ibv_device_attr. */
    const struct {
      const char* what;
      uint32_t v, least, most;
    } f[] = {{"mtu", d->mtu, 0, RG_MAX_MTU},
             {"max_qp", d->max_qp, 0, RG_MAX_QP},
             {"max_qp_wr", d->max_qp_wr, 0, RG_MAX_WR},
             {"max_sge", d->max_sge, 0, RG_MAX_SGE},
             {"max_cqe", d->max_cqe, 0, RG_MAX_CQE},
             {"max_rd_atom", d->max_rd_atom, 0, RG_MAX_RD_ATOM},
             {"max_srq_wr", d->max_srq_wr, 0, RG_MAX_WR},
             {"max_srq_sge", d->max_srq_sge, 0, RG_MAX_SGE},
             {"max_sge_rd", d->max_sge_rd, 0, RG_MAX_SGE},
             {"max_inline", d->max_inline, 0, RG_MAX_INLINE},
             {"max_cq", d->max_cq, 0, INT_MAX},
             {"max_mr", d->max_mr, 0, INT_MAX},
             {"max_pd", d->max_pd, 0, INT_MAX},
             {"max_srq", d->max_srq, 0, INT_MAX},
             {"max_res_rd_atom", d->max_res_rd_atom, 0, INT_MAX},
             {"max_mcast_grp", d->max_mcast_grp, 0, INT_MAX},
             {"max_mcast_qp_attach", d->max_mcast_qp_attach, 0, INT_MAX},
             {"max_total_mcast_qp_attach", d->max_total_mcast_qp_attach, 0, INT_MAX},
             {"max_mtu", d->max_mtu, IBV_MTU_256, IBV_MTU_4096},
             {"active_mtu", d->active_mtu, IBV_MTU_256, IBV_MTU_4096}};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
      if (f[k].v < f[k].least || f[k].v > f[k].most) {
        rg_refuse(NULL, "%s %u for device %s (%u to %u)", f[k].what, f[k].v, d->name, f[k].least, f[k].most);
        return -1;
      }
  }
  return (int)h->count;
}

/* Device `index` of the list, with the kernel's names and paths for it (probes.c answers them). */
static void fill_device(struct rg_device* d, const struct rgv_device* info, int index) {
  memset(d, 0, sizeof *d);
  d->info = *info;
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;
  _Static_assert(sizeof d->dev.name >= sizeof info->name, "device name fits");
  memcpy(d->dev.name, info->name, sizeof info->name); /* NUL-terminated by query_devices */
  snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", index);
  snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d", index);
  snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%.*s", RG_MAX_NAME, info->name);
}

int rg_query_devices(struct rgv_device* out) {
  int fd = connect_daemon();
  int n = fd < 0 ? -1 : query_devices(fd, out);
  int e = errno;
  if (fd >= 0) close(fd);
  errno = e;
  return n;
}

/* ------------------------------------------------------------------ devices */

/*
 * The devices handed out, kept for the process's life as libibverbs keeps its own: a device
 * pointer from one ibv_get_device_list is the same in the next while the daemon still has that
 * device (same name and node GUID). librdmacm compares the lists by pointer when it looks for a
 * device again (sync_devices_list): new pointers each time made it take its devices for removed
 * and replaced, and open new contexts the program's PDs did not belong to (libfabric's MSG
 * endpoints: rdma_create_qp EINVAL).
 */
#define RG_DEVICE_CACHE 64
static struct rg_device* device_cache[RG_DEVICE_CACHE];
static int device_cached;
static pthread_mutex_t device_lock = PTHREAD_MUTEX_INITIALIZER;

/* The cached device for `info` (updated to it), a new one, or NULL (cache full, or no memory). */
static struct rg_device* cached_device(const struct rgv_device* info, int index) {
  for (int k = 0; k < device_cached; k++) {
    struct rg_device* d = device_cache[k];
    if (strcmp(d->info.name, info->name) == 0 && memcmp(d->info.node_guid, info->node_guid, 8) == 0) {
      fill_device(d, info, index);
      return d;
    }
  }
  if (device_cached == RG_DEVICE_CACHE) return NULL;
  struct rg_device* d = malloc(sizeof *d);
  if (d == NULL) return NULL;
  fill_device(d, info, index);
  device_cache[device_cached++] = d;
  return d;
}

EXPORT struct ibv_device** ibv_get_device_list(int* num_devices) {
  if (num_devices != NULL) *num_devices = 0;
  struct rgv_device infos[RGV_MAX_DEVICES];
  int n = rg_query_devices(infos);
  int e = errno;
  if (n < 0) {
    if (e == EPERM || e == EPROTO)
      rg_say("no devices: the daemon at %s is refused", socket_path()); /* said why above */
    else
      rg_say("no devices: the daemon at %s: %s (start rdma-graph with verbs.socket, or set RDMA_GRAPH_SOCKET)",
             socket_path(), strerror(e));
    n = 0;
  }
  rg_probes_devices(infos, n); /* what /dev/infiniband and /sys/class/infiniband show (probes.c) */
  struct ibv_device** list = calloc((size_t)n + 1, sizeof *list);
  if (list == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&device_lock);
  for (int i = 0; i < n; i++) {
    struct rg_device* d = cached_device(&infos[i], i);
    if (d == NULL) {
      pthread_mutex_unlock(&device_lock);
      rg_say("no devices: more than %d different devices in this process's life", RG_DEVICE_CACHE);
      free(list);
      errno = ENOMEM;
      return NULL;
    }
    list[i] = &d->dev;
  }
  pthread_mutex_unlock(&device_lock);
  if (num_devices != NULL) *num_devices = n;
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device** list) {
  free(list); /* the devices stay: the next list hands out the same ones */
}

EXPORT const char* ibv_get_device_name(struct ibv_device* device) { return device->name; }

/* The daemon's node GUID (the EUI-64 of the interface's MAC), big-endian. */
static __be64 guid_of(const struct rg_device* d) {
  __be64 v;
  memcpy(&v, d->info.node_guid, 8);
  return v;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device* device) { return guid_of((struct rg_device*)device); }

EXPORT int ibv_get_device_index(struct ibv_device* device) {
  (void)device;
  return -1; /* no kernel device index */
}

EXPORT struct ibv_context* ibv_open_device(struct ibv_device* device) {
  struct rg_context* c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->dev = *(struct rg_device*)device;
  c->sock = connect_daemon();
  if (c->sock < 0) {
    int e = errno;
    rg_say("ibv_open_device(%s): the daemon at %s: %s", device->name, socket_path(), strerror(e));
    free(c);
    errno = e;
    return NULL;
  }
  c->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct rgv_attach at;
  _Static_assert(sizeof at.ifname == sizeof c->dev.info.ifname, "ATTACH names the device's interface");
  memcpy(at.ifname, c->dev.info.ifname, sizeof at.ifname);
  if (c->doorbell < 0 || call_with(c->sock, RGV_OP_ATTACH, &at, sizeof at, c->doorbell,
                                   (uint8_t[sizeof(struct rgv_hdr)]){0}, sizeof(struct rgv_hdr)) < 0) {
    int e = errno;
    rg_say("ibv_open_device(%s): attaching to the daemon at %s: %s", device->name, socket_path(), strerror(e));
    if (c->doorbell >= 0) close(c->doorbell);
    close(c->sock);
    free(c);
    errno = e;
    return NULL;
  }
  pthread_mutex_init(&c->objs, NULL);
  c->ctx.device = &c->dev.dev;
  c->ctx.cmd_fd = c->sock;
  c->ctx.async_fd = eventfd(0, EFD_CLOEXEC); /* the daemon writes it (async.c); blocking unless the program says */
  c->ctx.num_comp_vectors = 1;
  /* An extended context: verbs.h's inline helpers (ibv_query_device_ex, ibv_create_cq_ex,
     ibv_create_qp_ex, ibv_open_xrcd, ...) find these; the ones left NULL fail with EOPNOTSUPP. */
  c->ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->v.sz = sizeof c->v;
  c->v.query_device_ex = rg_query_device_ex;
  c->v.create_cq_ex = rg_create_cq_ex;
  c->v.create_qp_ex = rg_create_qp_ex;
  rg_set_ops(&c->ctx.ops);
  rg_set_unsupported(c);
  pthread_mutex_init(&c->ctx.mutex, NULL);
  if (c->ctx.async_fd >= 0) rg_async_attach(c);
  return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context* context) {
  struct rg_context* c = rg_ctx(context);
  if (c->sock >= 0) close(c->sock);
  if (c->doorbell >= 0) close(c->doorbell);
  if (c->ctx.async_fd >= 0) close(c->ctx.async_fd);
  pthread_mutex_destroy(&c->objs);
  pthread_mutex_destroy(&c->ctx.mutex);
  free(c);
  return 0;
}

/* ------------------------------------------------------------------ queries */

EXPORT int ibv_query_device(struct ibv_context* context, struct ibv_device_attr* a) {
  const struct rg_context* c = rg_ctx(context);
  const struct rgv_device* d = &c->dev.info;
  /* Every figure the daemon's (its device view: GET /v1/devices, rdmactl show device), checked by query_devices. */
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "%s", d->fw_ver);
  a->node_guid = guid_of(&c->dev);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = d->max_mr_size;
  a->page_size_cap = d->page_size_cap;
  a->vendor_id = d->vendor_id;
  a->vendor_part_id = d->vendor_part_id;
  a->hw_ver = d->hw_ver;
  a->max_qp = (int)d->max_qp;
  a->max_qp_wr = (int)d->max_qp_wr;
  a->max_sge = (int)d->max_sge;
  a->max_sge_rd = (int)d->max_sge_rd;
  a->max_cq = (int)d->max_cq;
  a->max_cqe = (int)d->max_cqe;
  a->max_mr = (int)d->max_mr;
  a->max_mw = (int)d->max_mr; /* windows and MRs share the daemon's STag table */
  a->device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a->max_pd = (int)d->max_pd;
  a->max_qp_rd_atom = (int)d->max_rd_atom;
  a->max_qp_init_rd_atom = (int)d->max_rd_atom;
  a->max_res_rd_atom = (int)d->max_res_rd_atom;
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_srq = (int)d->max_srq;
  a->max_srq_wr = (int)d->max_srq_wr;
  a->max_srq_sge = (int)d->max_srq_sge;
  a->max_mcast_grp = (int)d->max_mcast_grp;
  a->max_mcast_qp_attach = (int)d->max_mcast_qp_attach;
  a->max_total_mcast_qp_attach = (int)d->max_total_mcast_qp_attach;
  a->max_pkeys = 1;
  a->phys_port_cnt = 1;
  return 0;
}

EXPORT int ibv_query_port(struct ibv_context* context, uint8_t port_num, struct _compat_ibv_port_attr* out) {
  const struct rg_context* c = rg_ctx(context);
  if (port_num != 1) return EINVAL;
  /* The compat layout is struct ibv_port_attr up to link_layer; fill only that much. */
  struct ibv_port_attr a;
  memset(&a, 0, sizeof a);
  a.state = c->dev.info.link_up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a.max_mtu = (enum ibv_mtu)c->dev.info.max_mtu; /* the daemon's: 1..5, checked by query_devices */
  a.active_mtu = (enum ibv_mtu)c->dev.info.active_mtu;
  a.gid_tbl_len = 1;
  a.max_msg_sz = c->dev.info.max_msg_sz;
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;
  a.active_width = 1;  /* 1X */
  a.active_speed = 32; /* EDR (25 Gb/s per lane), as rxe reports */
  a.phys_state = c->dev.info.link_up ? 5 /* LinkUp */ : 3 /* Disabled */;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  memcpy(out, &a, offsetof(struct ibv_port_attr, link_layer) + 1);
  return 0;
}

static void gid_of(const struct rg_context* c, union ibv_gid* gid) {
  memset(gid, 0, sizeof *gid);
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  memcpy(&gid->raw[12], c->dev.info.ipv4, 4);
}

EXPORT int ibv_query_gid(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  gid_of(rg_ctx(context), gid);
  return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context* context, uint32_t port_num, uint32_t gid_index,
                             struct ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size < sizeof *entry) return EINVAL;
  if (port_num != 1 || gid_index != 0) return ENODATA;
  memset(entry, 0, sizeof *entry);
  gid_of(rg_ctx(context), &entry->gid);
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context* context, struct ibv_gid_entry* entries, size_t max_entries,
                                    uint32_t flags, size_t entry_size) {
  if (max_entries == 0) return -EINVAL;
  int r = _ibv_query_gid_ex(context, 1, 0, entries, flags, entry_size);
  return r == 0 ? 1 : -r;
}

/* libibverbs' private (IBVERBS_PRIVATE_34) query ibv_devinfo uses: 1 = RoCE v2 (UDP/IP). */
EXPORT int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  (void)context;
  if (port_num != 1 || index != 0) return -1;
  *type = 1;
  return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  (void)context;
  if (port_num != 1 || index != 0) return -1;
  *pkey = 0xffff;
  return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context* context, uint8_t port_num, __be16 pkey) {
  (void)context;
  return port_num == 1 && pkey == 0xffff ? 0 : -1;
}

/* ------------------------------------------------------------------ PD and MR */

struct rg_pd {
  struct ibv_pd pd;
};

/* A request on the context's connection with a reply of out_len bytes (or none: out NULL); 0 or -1 + errno. */
int rg_ctx_call_fds(struct ibv_context* context, uint16_t op, const void* req, size_t len, const int* pass,
                    size_t npass, void* out, size_t out_len) {
  uint8_t buf[sizeof(struct rgv_hdr) + sizeof(struct rgv_ucma_reply)]; /* the longest reply */
  if (__atomic_load_n(&rg_ctx(context)->dead, __ATOMIC_ACQUIRE)) {
    errno = ECONNRESET; /* gone, or not trusted any more */
    return -1;
  }
  pthread_mutex_lock(&context->mutex); /* one request at a time on the connection */
  ssize_t r = call_fds(rg_ctx(context)->sock, op, req, len, pass, npass, buf, sizeof buf);
  pthread_mutex_unlock(&context->mutex);
  if (r < 0) return -1;
  if ((size_t)r != sizeof(struct rgv_hdr) + out_len) {
    errno = EPROTO;
    return -1;
  }
  if (out_len > 0) memcpy(out, buf + sizeof(struct rgv_hdr), out_len);
  return 0;
}

int rg_ctx_call(struct ibv_context* context, uint16_t op, const void* req, size_t len, int pass_fd, void* out,
                size_t out_len) {
  return rg_ctx_call_fds(context, op, req, len, &pass_fd, pass_fd >= 0 ? 1 : 0, out, out_len);
}

/* A request whose body is one handle (the destroys), no reply payload; 0 or -1 + errno. */
int rg_handle_call(struct ibv_context* context, uint16_t op, uint32_t handle) {
  const struct rgv_handle q = {.handle = handle};
  return rg_ctx_call(context, op, &q, sizeof q, -1, NULL, 0);
}

EXPORT struct ibv_pd* ibv_alloc_pd(struct ibv_context* context) {
  struct rgv_handle r;
  if (rg_ctx_call(context, RGV_OP_ALLOC_PD, NULL, 0, -1, &r, sizeof r) != 0) return NULL;
  struct rg_pd* p = calloc(1, sizeof *p);
  if (p == NULL) return NULL; /* the daemon frees it with the connection */
  p->pd.context = context;
  p->pd.handle = r.handle;
  return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd* pd) {
  /* The daemon gone (or not trusted): what it held is released with the connection. */
  if (!rg_ctx(pd->context)->dead && rg_handle_call(pd->context, RGV_OP_DEALLOC_PD, pd->handle) != 0) return errno;
  free(pd);
  return 0;
}

enum {
  KNOWN_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                 IBV_ACCESS_MW_BIND
};

/* An MR and the pages it shares (regions.c). */
struct rg_mr {
  struct ibv_mr mr; /* first: the program holds a struct ibv_mr * */
  uintptr_t start, end;
  uint32_t access; /* as registered (ibv_rereg_mr keeps it when not changed) */
};

/*
 * The registered pages are shared with the daemon through memfds mapped at the same address
 * (regions.c: pages registered before stay where they are, the others move onto a new memfd,
 * their contents copied first), and the daemon maps the same memfds: DDP places into what the
 * program reads, sends read what it wrote, nothing copied per operation. Caveats: the pages are
 * the whole pages around the buffer; a thread writing to them while the registration runs can
 * lose that write.
 */
static struct ibv_mr* reg_mr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  if (access & IBV_ACCESS_ON_DEMAND) {
    rg_not_yet("ibv_reg_mr with IBV_ACCESS_ON_DEMAND (on-demand paging)");
    return NULL;
  }
  if (access & IBV_ACCESS_ZERO_BASED) {
    rg_not_yet("ibv_reg_mr with IBV_ACCESS_ZERO_BASED");
    return NULL;
  }
  /* Relaxed ordering is a hint (ours is in order). */
  access &= ~IBV_ACCESS_RELAXED_ORDERING;
  if (access & ~KNOWN_ACCESS) {
    errno = EINVAL;
    return NULL;
  }
  if (length == 0 || addr == NULL || length > (1ull << 31)) {
    errno = EINVAL;
    return NULL;
  }
  if (rg_ctx(pd->context)->dead) {
    errno = ECONNRESET;
    return NULL;
  }
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t start = (uintptr_t)addr & ~(page - 1), end = ((uintptr_t)addr + length + page - 1) & ~(page - 1);
  struct rg_mr* mr = calloc(1, sizeof *mr);
  if (mr == NULL) return NULL;
  struct rgv_mr r;
  /* System V shared memory stays the segment's: the daemon attaches it (REG_SHM). */
  uint32_t shmid;
  uint64_t offset;
  const int sysv = rg_pages_sysv(start, end, &shmid, &offset);
  if (sysv != 0) {
    struct rgv_reg_shm q = {.pd = pd->handle,
                            .access = (uint32_t)(access & KNOWN_ACCESS),
                            .span = end - start,
                            .start = start,
                            .addr = (uintptr_t)addr,
                            .length = length,
                            .offset = offset,
                            .shmid = shmid};
    if (sysv < 0 || rg_ctx_call(pd->context, RGV_OP_REG_SHM, &q, sizeof q, -1, &r, sizeof r) != 0) {
      free(mr);
      return NULL;
    }
    goto made;
  }
  static __thread struct rg_pieces pieces;
  if (rg_pages_share(start, end, &pieces) != 0) {
    free(mr);
    return NULL;
  }
  struct {
    struct rgv_reg_mr q;
    struct rgv_mr_piece p[RGV_MAX_MR_PIECES];
  } req = {.q = {.pd = pd->handle,
                 .access = (uint32_t)(access & KNOWN_ACCESS),
                 .span = end - start,
                 .start = start,
                 .addr = (uintptr_t)addr,
                 .length = length,
                 .pieces = pieces.n}};
  memcpy(req.p, pieces.p, pieces.n * sizeof pieces.p[0]);
  int rc = rg_ctx_call_fds(pd->context, RGV_OP_REG_MR, &req, sizeof req.q + pieces.n * sizeof req.p[0], pieces.fds,
                           pieces.nfds, &r, sizeof r);
  int e = errno;
  rg_pages_done(start, end, rc == 0);
  if (rc != 0) {
    free(mr);
    errno = e;
    return NULL;
  }
made:
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = r.handle;
  mr->mr.lkey = mr->mr.rkey = r.stag;
  mr->start = start;
  mr->end = end;
  mr->access = (uint32_t)access;
  return &mr->mr;
}

EXPORT struct ibv_mr* ibv_reg_mr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, access);
}

EXPORT struct ibv_mr* ibv_reg_mr_iova(struct ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  if (iova != (uintptr_t)addr) { /* another virtual address for the peer: not supported yet */
    errno = EOPNOTSUPP;
    return NULL;
  }
  return reg_mr(pd, addr, length, access);
}

EXPORT struct ibv_mr* ibv_reg_mr_iova2(struct ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                       unsigned int access) {
  return ibv_reg_mr_iova(pd, addr, length, iova, (int)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr* mr) {
  if (!rg_ctx(mr->context)->dead && rg_handle_call(mr->context, RGV_OP_DEREG_MR, mr->handle) != 0) return errno;
  struct rg_mr* m = (struct rg_mr*)mr;
  /* The pages stay on their memfd mappings (the program's memory is unchanged); the regions no
     live MR covers any more are forgotten. */
  rg_pages_release(m->start, m->end);
  free(m);
  return 0;
}

/*
 * A new translation, PD or access for an MR: registered anew (the same pages stay one memory,
 * regions.c), then the old registration dropped, the program's struct ibv_mr updated in place
 * with the new keys. On failure the MR is as it was (IBV_REREG_MR_ERR_CMD, errno set).
 */
EXPORT int ibv_rereg_mr(struct ibv_mr* mr, int flags, struct ibv_pd* pd, void* addr, size_t length, int access) {
  const int known = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (flags == 0 || (flags & ~known) ||
      ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == NULL || pd->context != mr->context))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  struct rg_mr* m = (struct rg_mr*)mr;
  struct ibv_pd* npd = flags & IBV_REREG_MR_CHANGE_PD ? pd : mr->pd;
  void* naddr = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? addr : mr->addr;
  size_t nlen = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? length : mr->length;
  int nacc = flags & IBV_REREG_MR_CHANGE_ACCESS ? access : (int)m->access;
  struct ibv_mr* n = reg_mr(npd, naddr, nlen, nacc);
  if (n == NULL) return IBV_REREG_MR_ERR_CMD;
  struct rg_mr* nm = (struct rg_mr*)n;
  if (rg_handle_call(mr->context, RGV_OP_DEREG_MR, mr->handle) != 0) {
    int e = errno;
    ibv_dereg_mr(n);
    errno = e;
    return IBV_REREG_MR_ERR_CMD;
  }
  rg_pages_release(m->start, m->end);
  /* The new registration's fields into the program's struct; its own freed. */
  mr->pd = npd;
  mr->addr = naddr;
  mr->length = nlen;
  mr->handle = n->handle;
  mr->lkey = n->lkey;
  mr->rkey = n->rkey;
  m->start = nm->start;
  m->end = nm->end;
  m->access = nm->access;
  free(nm);
  return 0;
}

/*
 * An address handle: the program's own object holding the destination, which a UD QP's sends
 * name (RC programs make one to check a path, UCX's rc_verbs does on connect). Its destination
 * must be an IPv4-mapped GID (RoCE v2 over IPv4) on port 1. ibv_create_ah_from_wc and
 * ibv_init_ah_from_wc (libibverbs') build the attributes from a UD receive's GRH and reach here.
 */
EXPORT struct ibv_ah* ibv_create_ah(struct ibv_pd* pd, struct ibv_ah_attr* attr) {
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (attr == NULL || attr->port_num != 1 || !attr->is_global ||
      memcmp(attr->grh.dgid.raw, v4mapped, sizeof v4mapped) != 0) {
    errno = EINVAL;
    return NULL;
  }
  struct rg_ah* ah = calloc(1, sizeof *ah);
  if (ah == NULL) return NULL;
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  memcpy(ah->ipv4, &attr->grh.dgid.raw[12], 4);
  return &ah->ah;
}

/*
 * The AH that answers a UD receive: its GRH area holds the datagram's IPv4 header in its last 20
 * bytes (RoCE v2 for IPv4, ud-input.ts), checked (version 4, IHL 5, its checksum) before its
 * source becomes the destination GID (IPv4-mapped); hop limit and traffic class from TTL and TOS.
 */
EXPORT int ibv_init_ah_from_wc(struct ibv_context* c, uint8_t port_num, struct ibv_wc* wc, struct ibv_grh* grh,
                               struct ibv_ah_attr* ah_attr) {
  (void)c;
  if (wc == NULL || grh == NULL || ah_attr == NULL || port_num != 1 || !(wc->wc_flags & IBV_WC_GRH)) return EINVAL;
  const uint8_t* ip = (const uint8_t*)grh + 20;
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t)ip[i] << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  if (ip[0] != 0x45 || sum != 0xffff) return EINVAL; /* not an IPv4 header we wrote */
  memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->port_num = port_num;
  ah_attr->is_global = 1;
  ah_attr->grh.dgid.raw[10] = ah_attr->grh.dgid.raw[11] = 0xff;
  memcpy(&ah_attr->grh.dgid.raw[12], ip + 12, 4); /* the sender's address */
  ah_attr->grh.hop_limit = ip[8];
  ah_attr->grh.traffic_class = ip[1];
  ah_attr->grh.sgid_index = 0;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  return 0;
}

EXPORT struct ibv_ah* ibv_create_ah_from_wc(struct ibv_pd* pd, struct ibv_wc* wc, struct ibv_grh* grh,
                                            uint8_t port_num) {
  struct ibv_ah_attr a;
  int rc = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a);
  if (rc != 0) {
    errno = rc;
    return NULL;
  }
  return ibv_create_ah(pd, &a);
}

/*
 * Multicast: a UD QP joins an IPv4 multicast group, named by its IPv4-mapped GID (RoCE v2's
 * form; the LID is not used on Ethernet). The daemon attaches the QP (nodes/rdma/multicast.ts);
 * datagrams to the group then reach it, and a send to an AH with the group's GID and remote QPN
 * 0xFFFFFF goes to the group. EINVAL for another GID or QP type, as a NIC answers.
 */
static int mcast_call(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t op) {
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (qp == NULL || gid == NULL) return EINVAL;
  if (qp->qp_type != IBV_QPT_UD || memcmp(gid->raw, v4mapped, sizeof v4mapped) != 0 || (gid->raw[12] >> 4) != 0xe)
    return EINVAL;
  struct rgv_mcast m = {.qpn = qp->qp_num};
  memcpy(m.group, &gid->raw[12], 4);
  return rg_ctx_call(qp->context, op, &m, sizeof m, -1, NULL, 0) != 0 ? errno : 0;
}

EXPORT int ibv_attach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  (void)lid;
  return mcast_call(qp, gid, RGV_OP_ATTACH_MCAST);
}

EXPORT int ibv_detach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  (void)lid;
  return mcast_call(qp, gid, RGV_OP_DETACH_MCAST);
}

EXPORT int ibv_destroy_ah(struct ibv_ah* ah) {
  free(ah);
  return 0;
}

/* ------------------------------------------------------------------ QP (control path) */

EXPORT struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* attr) {
  struct rg_qp* q = rg_qp_create(pd, attr, 0);
  return q == NULL ? NULL : &q->qp;
}

struct rg_qp* rg_qp_create(struct ibv_pd* pd, struct ibv_qp_init_attr* attr, uint32_t flags) {
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) {
    switch (attr->qp_type) {
      case IBV_QPT_UC:
        rg_not_yet("a UC QP");
        break;
      case IBV_QPT_XRC_SEND:
        rg_not_yet("an XRC send QP");
        break;
      case IBV_QPT_XRC_RECV:
        rg_not_yet("an XRC receive QP");
        break;
      case IBV_QPT_RAW_PACKET:
        rg_not_yet("a raw packet QP");
        break;
      case IBV_QPT_DRIVER:
        rg_not_yet("a driver-specific QP (IBV_QPT_DRIVER)");
        break;
      default:
        rg_say("a QP of type %d is not supported (RC and UD QPs are): EINVAL", (int)attr->qp_type);
        errno = EINVAL;
        return NULL;
    }
    return NULL;
  }
  if (attr->send_cq == NULL || attr->recv_cq == NULL || (attr->srq != NULL && attr->srq->context != pd->context)) {
    errno = EINVAL;
    return NULL;
  }
  if (rg_ctx(pd->context)->dead) {
    errno = ECONNRESET;
    return NULL;
  }
  const struct ibv_qp_cap* c = &attr->cap;
  struct rgv_create_qp q = {
      .pd = pd->handle,
      .send_cq = attr->send_cq->handle,
      .recv_cq = attr->recv_cq->handle,
      .max_send_wr = c->max_send_wr,
      .max_recv_wr = attr->srq != NULL ? 1 : c->max_recv_wr,
      .max_sge = c->max_send_sge > c->max_recv_sge ? c->max_send_sge : c->max_recv_sge,
      .max_inline = c->max_inline_data,
      .srq = attr->srq != NULL ? attr->srq->handle : RGV_NONE,
      .qp_type = (uint32_t)attr->qp_type,
      .flags = flags,
  };
  struct rgv_qp r;
  if (rg_ctx_call(pd->context, RGV_OP_CREATE_QP, &q, sizeof q, -1, &r, sizeof r) != 0) return NULL;
  /* What it got: at least what was asked (0 asks for 1), at most what the device says (itself
     bounded), before anything is sized from it. */
  struct rg_context* cx = rg_ctx(pd->context);
  const struct rgv_device* dev = &cx->dev.info;
  const uint32_t one = 1;
  if (r.qpn == 0 || r.qpn > RG_MAX_QPN) {
    rg_refuse(cx, "QPN %u (QPNs are 24 bits)", r.qpn);
    return NULL;
  }
  if (rg_check_size(cx, "max_send_wr", r.max_send_wr, q.max_send_wr > one ? q.max_send_wr : one, dev->max_qp_wr) != 0 ||
      (attr->srq == NULL && rg_check_size(cx, "max_recv_wr", r.max_recv_wr, q.max_recv_wr > one ? q.max_recv_wr : one,
                                          dev->max_qp_wr) != 0) ||
      rg_check_size(cx, "max_sge", r.max_sge, q.max_sge > one ? q.max_sge : one, dev->max_sge) != 0 ||
      rg_check_size(cx, "max_inline", r.max_inline, q.max_inline, RG_MAX_INLINE) != 0)
    return NULL;
  struct rg_qp* rq = calloc(1, sizeof *rq);
  if (rq == NULL) {
    rg_handle_call(pd->context, RGV_OP_DESTROY_QP, r.qpn);
    errno = ENOMEM;
    return NULL;
  }
  struct ibv_qp* qp = &rq->qp;
  qp->context = pd->context;
  qp->qp_context = attr->qp_context;
  qp->pd = pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = attr->recv_cq;
  qp->srq = attr->srq;
  qp->handle = r.qpn;
  qp->qp_num = r.qpn; /* the QPN is our UDP port */
  qp->state = IBV_QPS_RESET;
  qp->qp_type = attr->qp_type;
  pthread_mutex_init(&qp->mutex, NULL);
  pthread_cond_init(&qp->cond, NULL);
  rq->max_send_wr = r.max_send_wr;
  rq->max_recv_wr = attr->srq != NULL ? 0 : r.max_recv_wr;
  rq->max_sge = r.max_sge;
  rq->max_inline = r.max_inline;
  rq->sig_all = attr->sq_sig_all;
  if (rg_qp_attach(rq, attr) != 0) {
    int e = errno;
    rg_handle_call(pd->context, RGV_OP_DESTROY_QP, r.qpn);
    free(rq);
    errno = e;
    return NULL;
  }
  attr->cap.max_send_wr = r.max_send_wr; /* what it got */
  attr->cap.max_recv_wr = rq->max_recv_wr;
  attr->cap.max_send_sge = attr->cap.max_recv_sge = r.max_sge;
  attr->cap.max_inline_data = r.max_inline;
  return rq;
}

/* A QP reset or destroyed: its completions out of its CQs (rg_cq_clean); an SRQ's receives stay. */
static void clean_cqs(struct ibv_qp* qp) {
  const int srq = qp->srq != NULL;
  rg_cq_clean(qp->send_cq, qp->qp_num, srq && qp->recv_cq == qp->send_cq);
  if (qp->recv_cq != qp->send_cq) rg_cq_clean(qp->recv_cq, qp->qp_num, srq);
}

/*
 * The transitions and the attributes the daemon honours: the state; at RTR the peer (GID 0 of
 * the AV is its IPv4 address, dest_qp_num its QPN), rq_psn, max_dest_rd_atomic (IRD) and
 * path_mtu (the segment size, at most the link's); at RTS sq_psn, max_rd_atomic (ORD); timeout
 * (the initial RTO: 4.096 us x 2^timeout, within rdma.trp's bounds) and retry_cnt
 * (retransmissions before the QP fails). Not applied: access flags, the P_Key, min_rnr_timer
 * and rnr_retry (a Send that finds no receive posted fails the QP, as on iWARP: no RNR NAK).
 * RESET takes the QP's unpolled completions out of its CQs (clean_cqs), as destroy does.
 */
EXPORT int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  struct rgv_modify_qp q;
  memset(&q, 0, sizeof q);
  q.qpn = qp->qp_num;
  q.mask = (uint32_t)mask;
  q.state = (uint32_t)attr->qp_state;
  if (mask & IBV_QP_AV) {
    if (!attr->ah_attr.is_global) return EINVAL; /* an Ethernet port needs the GRH: GID 0 of the peer */
    memcpy(q.dgid, attr->ah_attr.grh.dgid.raw, 16);
  }
  q.dest_qpn = attr->dest_qp_num;
  q.rq_psn = attr->rq_psn;
  q.sq_psn = attr->sq_psn;
  q.max_rd_atomic = attr->max_rd_atomic;
  q.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  q.path_mtu = (uint8_t)attr->path_mtu;
  q.timeout = attr->timeout;
  q.retry_cnt = attr->retry_cnt;
  q.rnr_retry = attr->rnr_retry;
  q.qkey = attr->qkey;
  if (rg_ctx_call(qp->context, RGV_OP_MODIFY_QP, &q, sizeof q, -1, NULL, 0) != 0) return errno;
  if (mask & IBV_QP_STATE) {
    struct rg_qp* rq = (struct rg_qp*)qp;
    qp->state = attr->qp_state;
    if (attr->qp_state == IBV_QPS_RESET) {
      rq->last_wqe_told = 0; /* used again */
      clean_cqs(qp);
    }
  }
  return 0;
}

/* Every attribute the QP has, whatever `mask` asks for (libibverbs allows more). */
EXPORT int ibv_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask, struct ibv_qp_init_attr* init) {
  const struct rgv_handle h = {.handle = qp->qp_num};
  struct rgv_qp_attr r;
  if (rg_ctx_call(qp->context, RGV_OP_QUERY_QP, &h, sizeof h, -1, &r, sizeof r) != 0) return errno;
  /* The sizes are the QP's (the rings were made for them): the daemon must say the same. */
  const struct rg_qp* q = (const struct rg_qp*)qp;
  struct rg_context* cx = rg_ctx(qp->context);
  const struct {
    const char* what;
    uint32_t got, has;
  } f[] = {{"max_send_wr", r.max_send_wr, q->max_send_wr},
           {"max_recv_wr", r.max_recv_wr, q->max_recv_wr},
           {"max_sge", r.max_sge, q->max_sge},
           {"max_inline", r.max_inline, q->max_inline}};
  for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
    if (f[k].got != f[k].has) {
      rg_refuse(cx, "%s %u in QUERY_QP for QP %u, made with %u", f[k].what, f[k].got, qp->qp_num, f[k].has);
      return EPROTO;
    }
  if (r.state > IBV_QPS_ERR || r.path_mtu < IBV_MTU_256 || r.path_mtu > IBV_MTU_4096) {
    rg_refuse(cx, "state %u, path_mtu %u in QUERY_QP for QP %u", r.state, r.path_mtu, qp->qp_num);
    return EPROTO;
  }
  memset(attr, 0, sizeof *attr);
  attr->qp_state = attr->cur_qp_state = (enum ibv_qp_state)r.state;
  attr->path_mtu = (enum ibv_mtu)r.path_mtu;
  attr->dest_qp_num = r.dest_qpn;
  attr->rq_psn = r.rq_psn;
  attr->sq_psn = r.sq_psn;
  attr->max_rd_atomic = (uint8_t)r.max_rd_atomic;
  attr->max_dest_rd_atomic = (uint8_t)r.max_dest_rd_atomic;
  attr->port_num = 1;
  attr->cap.max_send_wr = r.max_send_wr;
  attr->cap.max_recv_wr = r.max_recv_wr;
  attr->cap.max_send_sge = attr->cap.max_recv_sge = r.max_sge;
  attr->cap.max_inline_data = r.max_inline;
  attr->qkey = r.qkey;
  if (r.dest_ipv4[0] | r.dest_ipv4[1] | r.dest_ipv4[2] | r.dest_ipv4[3]) {
    attr->ah_attr.is_global = 1;
    attr->ah_attr.port_num = 1;
    attr->ah_attr.grh.dgid.raw[10] = attr->ah_attr.grh.dgid.raw[11] = 0xff;
    memcpy(&attr->ah_attr.grh.dgid.raw[12], r.dest_ipv4, 4);
  }
  if (init != NULL) {
    memset(init, 0, sizeof *init);
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = attr->cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = ((struct rg_qp*)qp)->sig_all;
  }
  return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp* qp) {
  struct rg_qp* q = (struct rg_qp*)qp;
  /* The daemon gone: its QPs are gone with it; what is left to free is ours. */
  if (!rg_ctx(qp->context)->dead && rg_handle_call(qp->context, RGV_OP_DESTROY_QP, qp->qp_num) != 0) return errno;
  clean_cqs(qp);
  rg_qp_forget(q);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  free(q);
  return 0;
}

/* ------------------------------------------------------------------ not supported */

void rg_not_yet(const char* fn) {
  static __thread const char* last;
  if (last != fn)
    rg_say("%s is not supported (RC and UD QPs, SRQs, CQs with channels, PDs and MRs are): EOPNOTSUPP", fn);
  last = fn;
  errno = EOPNOTSUPP;
}

#define NULL_VERB(ret, name, ...) \
  EXPORT ret name(__VA_ARGS__) {  \
    rg_not_yet(#name);            \
    return NULL;                  \
  }
#define ERR_VERB(ret, name, ...) \
  EXPORT ret name(__VA_ARGS__) { \
    rg_not_yet(#name);           \
    return EOPNOTSUPP;           \
  }

NULL_VERB(struct ibv_mr*, ibv_reg_dmabuf_mr, struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
          int access)
ERR_VERB(int, ibv_resize_cq, struct ibv_cq* cq, int cqe)
/* Enhanced connection establishment (a vendor's CM extension): none here. librdmacm asks at
   every connect and takes EOPNOTSUPP as "none", as from a NIC without it: not said. */
EXPORT int ibv_query_ece(struct ibv_qp* qp, struct ibv_ece* ece) { return EOPNOTSUPP; }
EXPORT int ibv_set_ece(struct ibv_qp* qp, struct ibv_ece* ece) { return EOPNOTSUPP; }
NULL_VERB(struct ibv_context*, ibv_import_device, int cmd_fd)
NULL_VERB(struct ibv_pd*, ibv_import_pd, struct ibv_context* c, uint32_t pd_handle)
NULL_VERB(struct ibv_mr*, ibv_import_mr, struct ibv_pd* pd, uint32_t mr_handle)
