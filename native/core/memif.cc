// memif: the shared-memory packet interface of VPP and DPDK (net_memif), both roles.
//
// One Memif object per interface. Everything runs on the thread that owns it, never blocks and
// never starts a thread: sockets are non-blocking, and the control channel is serviced by
// poll(), which the receive path calls itself (on every empty poll of rx queue 0, and every
// 64th busy one). Each rx queue has an epoll fd (waitFd) that the engine sleeps on: it holds
// that queue's interrupt eventfd and, for queue 0, the control socket(s), the listener and the
// client's reconnect timerfd, so the fd the engine watches never changes across reconnections.
//
// Buffers. The receive path takes packet-pool buffers from a "stash" (indices JavaScript
// allocated beforehand, topped up between bursts) and the transmit path reports buffers it is
// done with in a "done" list JavaScript frees, so a burst is one native call. Two data paths:
//   copy       the server always (the client owns the memory), and a client whose pool memory
//              has no fd: descriptors point into region 0 and bytes are copied to/from the pool.
//   zero-copy  a client whose pool memory is a memfd registers that memory itself as region 1:
//              transmitted descriptors point at the pool buffers (held until the server moves
//              tail past them), and receive rings are refilled with empty pool buffers that the
//              server writes into. The peer can then read and write the whole pool memory.
// When the connection goes (DISCONNECT, the peer's socket closing, a protocol error), every
// buffer still in a ring is moved to an orphan list that JavaScript reclaims (memifReclaim).
//
// See memif_proto.h for the wire format, native/load.ts (Memif) for the JavaScript view and
// drivers/memif.ts for the driver built on it.
#include "common.h"
#include "memif_proto.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace rg {

namespace {

using memif::Desc;
using memif::Msg;

constexpr uint32_t kInvalid = 0xffffffffu;
constexpr uint32_t kMaxChain = 256;             // descriptors in one received frame
constexpr uint64_t kMaxFrame = 256 * 1024;      // bytes in one received frame
constexpr uint32_t kMaxTxSegs = 64;             // pool segments in one transmitted frame
constexpr uint32_t kBusyControlEvery = 64;      // busy rx polls between control-channel checks
constexpr uint32_t kIdleControlEvery = 16;      // empty polls (interrupts still off) between checks
constexpr uint64_t kIdleNs = 50 * 1000;         // empty this long: interrupts back on
constexpr long kRetryNs = 250 * 1000 * 1000;    // client reconnect interval
constexpr size_t kMaxPending = 8;               // accepted connections waiting for INIT, per socket
constexpr uint64_t kPendingNs = 2000ull * 1000 * 1000;  // how long one may wait for INIT

// Indices into the shared state array (a Uint32Array JavaScript reads after each call).
enum State : uint32_t {
  kStStash = 0,    // buffers in the stash
  kStDone = 1,     // entries of `done` JavaScript must free
  kStGen = 2,      // bumped at every connect and disconnect
  kStLink = 3,     // 1 while connected
  kStOrphans = 4,  // buffers waiting for memifReclaim after a disconnect
  kStateLen = 8,
};

inline uint16_t Load16Acquire(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_ACQUIRE);
}
inline uint16_t Load16Relaxed(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_RELAXED);
}
inline void Store16Release(uint8_t* p, uint16_t v) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), v, __ATOMIC_RELEASE);
}
inline void Store16Relaxed(uint8_t* p, uint16_t v) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), v, __ATOMIC_RELAXED);
}

// A socket address: a filesystem path, or a name in the abstract namespace ("@name" or
// "abstract:name"; bound with its exact length, as DPDK 22.11 and VPP do).
struct Address {
  bool abstract = false;
  std::string name;

  std::string Text() const { return abstract ? "@" + name : name; }
  bool operator==(const Address& o) const { return abstract == o.abstract && name == o.name; }

  socklen_t Fill(sockaddr_un* sa) const {
    std::memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (abstract) {
      std::memcpy(sa->sun_path + 1, name.data(), name.size());
      return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    }
    std::memcpy(sa->sun_path, name.data(), name.size());
    return static_cast<socklen_t>(sizeof *sa);
  }

  // Throws a RangeError naming what is wrong.
  static Address Parse(Napi::Env env, const std::string& where, const std::string& s) {
    Address a;
    if (s.rfind("abstract:", 0) == 0) {
      a.abstract = true;
      a.name = s.substr(9);
    } else if (!s.empty() && s[0] == '@') {
      a.abstract = true;
      a.name = s.substr(1);
    } else {
      a.name = s;
    }
    const size_t max = sizeof(sockaddr_un::sun_path) - 1;
    if (a.name.empty() || a.name.size() > max || a.name.find('\0') != std::string::npos) {
      throw RangeErr(env, where + ": socket must be a path or an abstract name (\"@name\" or \"abstract:name\") of 1 to " +
                              std::to_string(max) + " bytes, got \"" + s + "\"");
    }
    return a;
  }
};

int MakeSeqpacket() {
  return socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

// mkdir -p of the parent of `path` (mode 0755 for what it creates). 0 or an errno.
int MakeParents(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return 0;
  std::string dir = path.substr(0, slash);
  for (size_t i = 1; i <= dir.size(); i++) {
    if (i == dir.size() || dir[i] == '/') {
      std::string part = dir.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return errno;
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  return 0;
}

// Sends `len` bytes as one message, with `fd` in SCM_RIGHTS when >= 0. Returns 0, or an errno.
int SendBytes(int sock, const void* data, size_t len, int fd) {
  struct iovec iov = {const_cast<void*>(data), len};
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(ctl, 0, sizeof ctl);
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(len)) return 0;
    if (r < 0 && errno == EINTR) continue;
    return r < 0 ? errno : EMSGSIZE;
  }
}

int SendMsg(int sock, const Msg& m, int fd) { return SendBytes(sock, &m, sizeof m, fd); }

// Receives one message into buf (up to cap bytes). Returns the length (0: peer closed), or
// -errno. *fd gets the first descriptor passed with it (others are closed), or -1.
ssize_t RecvMsg(int sock, void* buf, size_t cap, int* fd) {
  *fd = -1;
  struct iovec iov = {buf, cap};
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 8)];
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  ssize_t r;
  do {
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return -errno;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*fd < 0) *fd = f;
      else close(f);
    }
  }
  if (mh.msg_flags & MSG_TRUNC) return static_cast<ssize_t>(cap) + 1;  // longer than a message
  return r;
}

void CopyName(uint8_t* dst, size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(cap - 1, s.size()));
}

std::string NameOf(const uint8_t* p, size_t cap) {
  size_t n = 0;
  while (n < cap && p[n] != 0) n++;
  return std::string(reinterpret_cast<const char*>(p), n);
}

// The interrupt eventfds are shared with the peer: SCM_RIGHTS shares the open file
// description, O_NONBLOCK included, so the peer can make one blocking at any moment, and a
// pipe or a socket could be sent in its place. ADD_RING takes only eventfds (IsEventfd) and
// sets O_NONBLOCK; reads never block (preadv2 RWF_NOWAIT, or poll first on kernels without
// it); writes go only when poll says there is room, and a peer found to have cleared
// O_NONBLOCK is disconnected (EventWrite returns -1).
bool IsEventfd(int fd) {
  char path[40], link[40];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  return std::strcmp(link, "anon_inode:[eventfd]") == 0;
}

bool PollFd(int fd, short ev) {
  pollfd p = {fd, ev, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & ev) != 0;
}

// Takes the counter if there is one; true when it was non-zero.
bool EventRead(int fd) {
  uint64_t v;
  iovec io = {&v, sizeof v};
  const ssize_t r = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
  if (r == static_cast<ssize_t>(sizeof v)) return true;
  if (r < 0 && errno == EOPNOTSUPP) return PollFd(fd, POLLIN) && read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
  return false;
}

// Adds 1; 1 when written, 0 when there was no room, -1 when the fd was made blocking.
int EventWrite(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || !(fl & O_NONBLOCK)) return -1;
  if (!PollFd(fd, POLLOUT)) return 0;
  uint64_t one = 1;
  return write(fd, &one, sizeof one) == static_cast<ssize_t>(sizeof one) ? 1 : 0;
}

void EpollAdd(int ep, int fd) {
  struct epoll_event ev;
  std::memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}
void EpollDel(int ep, int fd) {
  if (ep >= 0 && fd >= 0) epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
}

class Memif;
struct Listener;

// One control channel (a connected SOCK_SEQPACKET socket). A server's accepted connection has
// no owner until its INIT names an interface id.
struct Conn {
  int fd = -1;
  uint64_t since = 0;            // when accepted (pending connections time out)
  Memif* owner = nullptr;
  Listener* listener = nullptr;  // server side only
  int watch_ep = -1;             // the epoll fd it is registered in
  struct Out {
    Msg msg;
    int fd;
  };
  std::deque<Out> out;  // messages the socket could not take yet
};

// A server socket, shared by every server interface of this thread bound to the same address
// (each with its own interface id), as VPP and DPDK share one socket between interfaces.
struct Listener {
  Address addr;
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<Memif*> members;
  std::vector<Conn*> pending;  // accepted, waiting for INIT (at most kMaxPending)
  int reserve_fd = -1;         // an fd held back so accept() can drain a connection on EMFILE
  uint64_t refused = 0;        // connections closed unserved (too many pending, timed out, no fd)
};

thread_local std::vector<Listener*> t_listeners;
thread_local std::vector<Memif*> t_memifs;

struct Region {
  int fd = -1;
  uint8_t* addr = nullptr;
  uint64_t size = 0;
  bool owns_map = false;  // false: the pool memory (zero-copy region 1)
};

// One ring as this side uses it.
struct Ring {
  uint8_t* base = nullptr;
  Desc* desc = nullptr;
  uint32_t log2 = 0, size = 0;
  uint16_t mask = 0;
  int fd = -1;              // interrupt eventfd
  uint16_t head = 0;        // our copy of what we publish (head or tail) and what we consumed
  uint16_t last = 0;
  std::vector<uint32_t> shadow;  // zero-copy: pool buffer held by each slot
  uint32_t buffers = 0;     // client copy mode: offset of this ring's buffers in region 0
  bool masked = false;      // receive ring: MASK_INT currently set by us
  uint64_t empty_since = 0; // receive ring: when polls started finding it empty (0: not empty)
  bool present = false;
  uint16_t region = 0;
  uint32_t offset = 0;

  uint8_t* flags_p() const { return base + memif::kRingFlags; }
  uint8_t* head_p() const { return base + memif::kRingHead; }
  uint8_t* tail_p() const { return base + memif::kRingTail; }
};

struct PoolView {
  uint8_t* mem = nullptr;
  size_t mem_len = 0;
  uint32_t first_offset = 0, stride = 0, headroom = 0, data_size = 0, count = 0;
  uint32_t *offset = nullptr, *length = nullptr, *flags = nullptr, *next = nullptr;
  uint32_t* stash = nullptr;
  uint32_t stash_cap = 0;
  uint32_t* done = nullptr;
  uint32_t done_cap = 0;
  uint32_t* state = nullptr;
  uint32_t f_next = 0;
  int fd = -1;
  uint32_t DataStart(uint32_t bi) const { return first_offset + bi * stride + headroom; }
};

enum class Phase { kIdle, kWaitHello, kHandshake, kConnected };

std::string OptStr(Napi::Object o, const char* key, const char* fn, const std::string& def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsString()) throw TypeErr(o.Env(), std::string(fn) + ": " + key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

class Memif : public Napi::ObjectWrap<Memif> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Memif",
                       {
                           InstanceMethod<&Memif::BindPool>("bindPool"),
                           InstanceMethod<&Memif::PollJs>("poll"),
                           InstanceMethod<&Memif::Info>("info"),
                           InstanceMethod<&Memif::Stats>("stats"),
                           InstanceMethod<&Memif::ReclaimJs>("reclaim"),
                           InstanceMethod<&Memif::Close>("close"),
                       });
  }

  // new Memif({name, socket, role, id, secret, log2RingSize, bufferSize, rxQueues, txQueues})
  explicit Memif(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Memif>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw TypeErr(env, "Memif: expects an options object");
    Napi::Object o = info[0].As<Napi::Object>();
    name_ = OptStr(o, "name", "Memif", "memif");
    const std::string where = "memif interface " + name_;
    addr_ = Address::Parse(env, where, OptStr(o, "socket", "Memif", ""));
    const std::string role = OptStr(o, "role", "Memif", "");
    if (role != "server" && role != "client") throw RangeErr(env, where + ": role must be 'server' or 'client', got '" + role + "'");
    server_ = role == "server";
    id_ = OptU32(o, "id", "Memif", 0, 0, 4294967295.0);
    secret_ = OptStr(o, "secret", "Memif", "");
    if (secret_.size() > memif::kSecretSize) throw RangeErr(env, where + ": secret is longer than 24 bytes");
    log2_ = OptU32(o, "log2RingSize", "Memif", 10, 1, memif::kMaxLog2RingSize);
    buffer_size_ = OptU32(o, "bufferSize", "Memif", 2048, 128, 65535);
    nrx_ = OptU32(o, "rxQueues", "Memif", 1, 1, 255);
    ntx_ = OptU32(o, "txQueues", "Memif", nrx_, 1, 255);

    for (uint32_t q = 0; q < nrx_; q++) {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      if (ep < 0) {
        int err = errno;
        Release();
        throw ErrnoError(env, where + ": epoll_create1", err, "epoll_create1");
      }
      ep_.push_back(ep);
      int hold = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (hold < 0) {
        int err = errno;
        Release();
        throw ErrnoError(env, where + ": eventfd", err, "eventfd");
      }
      hold_.push_back(hold);
      hold_set_.push_back(0);
      EpollAdd(ep, hold);
    }
    try {
      if (server_) {
        Listen(env, where);
      } else {
        timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (timer_fd_ < 0) throw ErrnoError(env, where + ": timerfd_create", errno, "timerfd_create");
        EpollAdd(ep_[0], timer_fd_);
      }
    } catch (...) {
      Release();
      throw;
    }

    handle_ = 0;
    while (handle_ < t_memifs.size() && t_memifs[handle_] != nullptr) handle_++;
    if (handle_ == t_memifs.size()) t_memifs.push_back(nullptr);
    t_memifs[handle_] = this;
    registered_ = true;

    Napi::Object self = info.This().As<Napi::Object>();
    self.Set("handle", Napi::Number::New(env, handle_));
    Napi::Array fds = Napi::Array::New(env, ep_.size());
    for (uint32_t q = 0; q < ep_.size(); q++) fds.Set(q, Napi::Number::New(env, ep_[q]));
    self.Set("waitFds", fds);
  }

  ~Memif() override { Release(); }

  bool server() const { return server_; }
  uint32_t id() const { return id_; }
  bool connected() const { return phase_ == Phase::kConnected; }
  bool busy() const { return phase_ != Phase::kIdle; }
  int control_ep() const { return ep_.empty() ? -1 : ep_[0]; }

  // ---------------------------------------------------------------- server side of INIT

  // A pending connection's INIT named this interface: take it or refuse with a reason.
  const char* Adopt(Conn* c, const memif::Init& in) {
    if (busy()) return "Already connected";
    if (in.version != memif::kVersion) return "Incompatible memif version";
    if (in.mode != memif::kModeEthernet) return "Only ethernet mode supported";
    if (!secret_.empty()) {
      if (in.secret[0] == 0) return "Secret required";
      uint8_t mine[memif::kSecretSize] = {0};
      std::memcpy(mine, secret_.data(), secret_.size());
      if (std::memcmp(mine, in.secret, memif::kSecretSize) != 0) return "Incorrect secret";
    }
    if (!pool_bound_) return "Interface not ready";
    conn_ = c;
    c->owner = this;
    MoveConn(c, ep_[0]);
    phase_ = Phase::kHandshake;
    remote_name_ = NameOf(in.name, memif::kNameSize);
    ResetRun();
    Send(memif::kMsgAck, nullptr, 0, -1);
    return nullptr;
  }

  static void MoveConn(Conn* c, int ep) {
    if (c->watch_ep == ep) return;
    EpollDel(c->watch_ep, c->fd);
    EpollAdd(ep, c->fd);
    c->watch_ep = ep;
  }

  // ---------------------------------------------------------------- control channel

  // Services the listener, pending connections, our connection and the reconnect timer.
  void Poll() {
    if (released_ || !pool_bound_) return;
    if (server_) {
      if (listener_ != nullptr) PollListener(listener_, ep_[0]);
    } else if (phase_ == Phase::kIdle) {
      uint64_t ticks;
      bool due = read(timer_fd_, &ticks, sizeof ticks) == static_cast<ssize_t>(sizeof ticks);
      if (due || !tried_) TryConnect();
    }
    if (conn_ != nullptr) ServiceConn(conn_);
    if (conn_ != nullptr) Flush(conn_);
  }

  static void PollListener(Listener* l, int ep) {
    const uint64_t now = NowNs();
    // Connections that never sent INIT go first: they make room for new ones.
    for (size_t i = 0; i < l->pending.size();) {
      Conn* c = l->pending[i];
      if (now - c->since < kPendingNs) {
        i++;
        continue;
      }
      SendDisconnect(c->fd, "Timed out waiting for INIT", 0);
      l->refused++;
      ClosePending(l, c);
    }
    for (;;) {
      int fd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && l->reserve_fd >= 0) {
          // Out of descriptors: the listener would stay readable and the engine spin. Give back
          // the reserve, take the connection off the queue and close it, keep the reserve again.
          close(l->reserve_fd);
          l->reserve_fd = -1;
          int lost = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (lost >= 0) {
            close(lost);
            l->refused++;
          }
          l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (lost >= 0) continue;
        }
        break;
      }
      if (l->pending.size() >= kMaxPending) {
        SendDisconnect(fd, "Too many connections waiting for INIT", 0);
        close(fd);
        l->refused++;
        continue;
      }
      Conn* c = new Conn();
      c->fd = fd;
      c->since = now;
      c->listener = l;
      EpollAdd(ep, fd);
      c->watch_ep = ep;
      l->pending.push_back(c);
      Msg m;
      std::memset(&m, 0, sizeof m);
      m.type = memif::kMsgHello;
      CopyName(m.hello.name, memif::kNameSize, std::string("rdma-graph ") + RDMA_GRAPH_VERSION);
      m.hello.min_version = memif::kVersion;
      m.hello.max_version = memif::kVersion;
      m.hello.max_region = memif::kMaxRegions - 1;
      // Ring limits of the interface a client may name are only known at INIT: offer the
      // largest of the members; ADD_RING is checked against the interface itself.
      uint16_t s2m = 0, m2s = 0;
      uint8_t lg = 1;
      for (Memif* x : l->members) {
        s2m = std::max<uint16_t>(s2m, x->nrx_ - 1);
        m2s = std::max<uint16_t>(m2s, x->ntx_ - 1);
        lg = std::max<uint8_t>(lg, x->log2_);
      }
      m.hello.max_s2m_ring = s2m;
      m.hello.max_m2s_ring = m2s;
      m.hello.max_log2_ring_size = lg;
      if (SendMsg(fd, m, -1) != 0) {
        ClosePending(l, c);
        continue;
      }
    }
    // Pending connections: wait for INIT.
    for (size_t i = 0; i < l->pending.size();) {
      Conn* c = l->pending[i];
      Msg m;
      int afd = -1;
      ssize_t r = RecvMsg(c->fd, &m, sizeof m, &afd);
      if (afd >= 0) close(afd);
      if (r == -EAGAIN || r == -EWOULDBLOCK) {
        i++;
        continue;
      }
      if (r <= 0) {
        ClosePending(l, c);
        continue;
      }
      const char* reason = nullptr;
      Memif* target = nullptr;
      if (r != static_cast<ssize_t>(memif::kMsgSize)) {
        reason = "Invalid message size";
      } else if (m.type != memif::kMsgInit) {
        reason = "Unexpected message";
      } else {
        for (Memif* x : l->members) {
          if (x->id_ == m.init.id) target = x;
        }
        if (target == nullptr) reason = "ID not found";
        else reason = target->Adopt(c, m.init);
      }
      l->pending.erase(l->pending.begin() + i);
      if (reason != nullptr) {
        SendDisconnect(c->fd, reason, 0);
        EpollDel(c->watch_ep, c->fd);
        close(c->fd);
        delete c;
        if (target != nullptr) {
          target->refused_++;
          target->last_refusal_ = reason;
          target->last_refused_peer_ = NameOf(m.init.name, memif::kNameSize);
        }
        continue;
      }
      // The rest of the handshake (often already queued behind INIT) goes to the interface.
      target->ServiceConn(c);
      if (target->conn_ != nullptr) target->Flush(target->conn_);
    }
  }

  static void ClosePending(Listener* l, Conn* c) {
    auto it = std::find(l->pending.begin(), l->pending.end(), c);
    if (it != l->pending.end()) l->pending.erase(it);
    EpollDel(c->watch_ep, c->fd);
    close(c->fd);
    delete c;
  }

  static void SendDisconnect(int fd, const std::string& reason, uint32_t code) {
    Msg m;
    std::memset(&m, 0, sizeof m);
    m.type = memif::kMsgDisconnect;
    m.disconnect.code = code;
    CopyName(m.disconnect.string, memif::kReasonSize, reason);
    SendMsg(fd, m, -1);
  }

  void TryConnect() {
    tried_ = true;
    int fd = MakeSeqpacket();
    if (fd < 0) {
      last_connect_errno_ = errno;
      ArmRetry();
      return;
    }
    sockaddr_un sa;
    socklen_t len = addr_.Fill(&sa);
    int r;
    do {
      r = connect(fd, reinterpret_cast<sockaddr*>(&sa), len);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      last_connect_errno_ = errno;
      close(fd);
      connect_failures_++;
      ArmRetry();
      return;
    }
    last_connect_errno_ = 0;
    Conn* c = new Conn();
    c->fd = fd;
    c->owner = this;
    EpollAdd(ep_[0], fd);
    c->watch_ep = ep_[0];
    conn_ = c;
    phase_ = Phase::kWaitHello;
  }

  void ArmRetry() {
    if (timer_fd_ < 0) return;
    struct itimerspec its;
    std::memset(&its, 0, sizeof its);
    its.it_value.tv_sec = kRetryNs / 1000000000;
    its.it_value.tv_nsec = kRetryNs % 1000000000;
    timerfd_settime(timer_fd_, 0, &its, nullptr);
  }

  // Queues (or sends) one message on our connection.
  void Send(uint16_t type, const void* body, size_t len, int fd) {
    if (conn_ == nullptr) return;
    Conn::Out o;
    std::memset(&o.msg, 0, sizeof o.msg);
    o.msg.type = type;
    if (len) std::memcpy(o.msg.raw, body, len);
    o.fd = fd;
    conn_->out.push_back(o);
    Flush(conn_);
  }

  void Flush(Conn* c) {
    while (!c->out.empty()) {
      int err = SendMsg(c->fd, c->out.front().msg, c->out.front().fd);
      if (err == EAGAIN || err == EWOULDBLOCK) {
        if (timer_fd_ >= 0) ArmSoon();
        return;
      }
      c->out.pop_front();
      if (err != 0) {
        // A peer that refused us (a taken id, a wrong secret) sent DISCONNECT and closed while our
        // handshake messages were on their way: its reason is more use than "Broken pipe".
        uint32_t code = 0;
        std::string why = (err == EPIPE || err == ECONNRESET) ? LeftDisconnect(c->fd, &code) : std::string();
        if (!why.empty()) Disconnect(why, false, false, code, true);
        else Disconnect(std::string("control socket send failed: ") + std::strerror(err), false, false);
        return;
      }
    }
  }

  // The reason of a DISCONNECT among the messages a closed peer left unread on `fd`, or "".
  // Reads at most kLeftMessages (the peer decides how many it sent, we decide how many we read).
  static std::string LeftDisconnect(int fd, uint32_t* code) {
    constexpr int kLeftMessages = 64;
    bool reset = false;
    for (int i = 0; i < kLeftMessages; i++) {
      Msg m;
      int afd = -1;
      ssize_t r = RecvMsg(fd, &m, sizeof m, &afd);
      if (afd >= 0) close(afd);
      if (r == -ECONNRESET && !reset) {
        reset = true;
        continue;
      }
      if (r != static_cast<ssize_t>(memif::kMsgSize)) return std::string();
      if (m.type == memif::kMsgDisconnect) {
        *code = m.disconnect.code;
        return NameOf(m.disconnect.string, memif::kReasonSize);
      }
    }
    return std::string();
  }

  void ArmSoon() {
    struct itimerspec its;
    std::memset(&its, 0, sizeof its);
    its.it_value.tv_nsec = 1000 * 1000;
    timerfd_settime(timer_fd_, 0, &its, nullptr);
  }

  void ServiceConn(Conn* c) {
    bool reset = false;
    while (conn_ == c) {
      Msg m;
      int afd = -1;
      ssize_t r = RecvMsg(c->fd, &m, sizeof m, &afd);
      if (r == -ECONNRESET && !reset) {
        // The peer closed with our messages unread (it refused us): Linux reports that before
        // the messages it sent last, its DISCONNECT among them. Read those first.
        reset = true;
        continue;
      }
      if ((r == -EAGAIN || r == -EWOULDBLOCK) && !reset) return;
      if (r == 0 || r == -ECONNRESET || r == -EAGAIN || r == -EWOULDBLOCK) {
        if (afd >= 0) close(afd);
        Disconnect("peer closed the control socket", false, false);
        return;
      }
      if (r < 0) {
        Disconnect(std::string("control socket receive failed: ") + std::strerror(static_cast<int>(-r)), false, false);
        return;
      }
      if (r != static_cast<ssize_t>(memif::kMsgSize)) {
        if (afd >= 0) close(afd);
        Disconnect("Invalid message size", true, true);
        return;
      }
      msgs_received_++;
      const char* err = server_ ? ServerMsg(m, afd) : ClientMsg(m, afd);
      if (err != nullptr) {
        Disconnect(err, true, true);
        return;
      }
    }
  }

  // Handles one message on the server; returns a disconnect reason or nullptr. Takes afd.
  const char* ServerMsg(const Msg& m, int afd) {
    switch (m.type) {
      case memif::kMsgAck:
        if (afd >= 0) close(afd);
        return nullptr;
      case memif::kMsgAddRegion: {
        if (phase_ != Phase::kHandshake) return CloseAnd(afd, "Unexpected message");
        if (afd < 0) return "Missing region fd";
        const memif::AddRegion& ar = m.add_region;
        if (ar.index != regions_.size() || ar.index >= memif::kMaxRegions) return CloseAnd(afd, "Invalid region index");
        if (ar.size == 0 || ar.size > (uint64_t{1} << 40)) return CloseAnd(afd, "Invalid region size");
        // A region the client could shrink after we map it would kill us with SIGBUS on the next
        // access: it must be sealed against shrinking (memfd F_SEAL_SHRINK, as libmemif, DPDK
        // and our own client do), and as large as it claims.
        const int seals = fcntl(afd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK)) return CloseAnd(afd, "Region not sealed against shrinking (F_SEAL_SHRINK)");
        struct stat st;
        if (fstat(afd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ar.size) return CloseAnd(afd, "Region fd smaller than the region");
        Region reg;
        reg.fd = afd;
        reg.size = ar.size;
        regions_.push_back(reg);
        Send(memif::kMsgAck, nullptr, 0, -1);
        return nullptr;
      }
      case memif::kMsgAddRing: {
        if (phase_ != Phase::kHandshake) return CloseAnd(afd, "Unexpected message");
        if (afd < 0) return "Missing interrupt fd";
        const memif::AddRing& ar = m.add_ring;
        const bool c2s = (ar.flags & memif::kAddRingFlagC2S) != 0;
        std::vector<Ring>& rings = c2s ? rx_ : tx_;
        const uint32_t limit = c2s ? nrx_ : ntx_;
        if (ar.index >= limit || rings[ar.index].present) return CloseAnd(afd, "Invalid ring index");
        if (ar.log2_ring_size == 0 || ar.log2_ring_size > log2_) return CloseAnd(afd, "Invalid ring size");
        if (ar.private_hdr_size != 0) return CloseAnd(afd, "Private headers not supported");
        if (!IsEventfd(afd)) return CloseAnd(afd, "Interrupt fd is not an eventfd");
        const int fl = fcntl(afd, F_GETFL);
        if (fl < 0 || fcntl(afd, F_SETFL, fl | O_NONBLOCK) != 0) return CloseAnd(afd, "Interrupt fd cannot be made non-blocking");
        Ring& r = rings[ar.index];
        r.present = true;
        r.fd = afd;
        r.log2 = ar.log2_ring_size;
        r.region = ar.region;
        r.offset = ar.offset;
        Send(memif::kMsgAck, nullptr, 0, -1);
        return nullptr;
      }
      case memif::kMsgConnect: {
        if (afd >= 0) close(afd);
        if (phase_ != Phase::kHandshake) return "Unexpected message";
        remote_if_name_ = NameOf(m.connect.if_name, memif::kNameSize);
        const char* err = MapAndConnect();
        if (err != nullptr) return err;
        memif::Connect body;
        CopyName(body.if_name, memif::kNameSize, name_);
        Send(memif::kMsgConnected, &body, sizeof body, -1);
        return nullptr;
      }
      case memif::kMsgDisconnect:
        if (afd >= 0) close(afd);
        Disconnect(NameOf(m.disconnect.string, memif::kReasonSize), false, false, m.disconnect.code, true);
        return nullptr;
      default:
        return CloseAnd(afd, "Unexpected message");
    }
  }

  static const char* CloseAnd(int fd, const char* reason) {
    if (fd >= 0) close(fd);
    return reason;
  }

  // Handles one message on the client; returns a disconnect reason or nullptr. Takes afd.
  const char* ClientMsg(const Msg& m, int afd) {
    if (afd >= 0) close(afd);  // a server never passes descriptors
    switch (m.type) {
      case memif::kMsgHello:
        if (phase_ != Phase::kWaitHello) return "Unexpected message";
        return OnHello(m.hello);
      case memif::kMsgAck:
        if (phase_ != Phase::kHandshake) return "Unexpected message";
        return nullptr;
      case memif::kMsgConnected:
        if (phase_ != Phase::kHandshake) return "Unexpected message";
        remote_if_name_ = NameOf(m.connected.if_name, memif::kNameSize);
        OnConnected();
        return nullptr;
      case memif::kMsgDisconnect:
        Disconnect(NameOf(m.disconnect.string, memif::kReasonSize), false, false, m.disconnect.code, true);
        return nullptr;
      default:
        return "Unexpected message";
    }
  }

  // Client: the server's limits are known; build the regions and rings and send them.
  const char* OnHello(const memif::Hello& h) {
    if (h.min_version > memif::kVersion || h.max_version < memif::kVersion) return "Incompatible memif version";
    remote_name_ = NameOf(h.name, memif::kNameSize);
    ResetRun();
    const uint32_t nc2s = std::min<uint32_t>(ntx_, uint32_t{h.max_s2m_ring} + 1);
    const uint32_t ns2c = std::min<uint32_t>(nrx_, uint32_t{h.max_m2s_ring} + 1);
    const uint32_t log2 = std::min<uint32_t>(log2_, h.max_log2_ring_size);
    if (log2 == 0) return "Server offers no ring size";
    zc_ = pool_.fd >= 0 && h.max_region >= 1 && pool_.mem_len <= 0xffffffffull;
    const uint64_t ring_bytes = memif::RingBytes(log2);
    uint64_t size = ring_bytes * (nc2s + ns2c);
    const uint64_t buffers_at = (size + 63) & ~uint64_t{63};
    if (!zc_) size = buffers_at + uint64_t{buffer_size_} * (uint64_t{1} << log2) * (nc2s + ns2c);
    if (size > 0xffffffffull) return "Regions too large for 32-bit offsets (smaller ring or buffer size)";
    Region r0;
    r0.fd = memfd_create("memif-region-0", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (r0.fd < 0) return LocalError("memfd_create");
    if (ftruncate(r0.fd, static_cast<off_t>(size)) != 0) {
      close(r0.fd);
      return LocalError("ftruncate");
    }
    fcntl(r0.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, r0.fd, 0);
    if (a == MAP_FAILED) {
      close(r0.fd);
      return LocalError("mmap");
    }
    r0.addr = static_cast<uint8_t*>(a);
    r0.size = size;
    r0.owns_map = true;
    regions_.push_back(r0);
    if (zc_) {
      Region r1;
      r1.fd = pool_.fd;  // not ours: the pool memory's memfd
      r1.addr = pool_.mem;
      r1.size = pool_.mem_len;
      regions_.push_back(r1);
    }
    // Rings: C2S (our tx) first, then S2C (our rx), back to back in region 0.
    uint32_t slot_base = 0;
    for (uint32_t k = 0; k < nc2s + ns2c; k++) {
      const bool c2s = k < nc2s;
      Ring& r = c2s ? tx_[k] : rx_[k - nc2s];
      r.present = true;
      r.region = 0;
      r.offset = static_cast<uint32_t>(ring_bytes * k);
      r.log2 = log2;
      r.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (r.fd < 0) return LocalError("eventfd");
      SetupRing(r);
      std::memset(r.base, 0, ring_bytes);
      *reinterpret_cast<uint32_t*>(r.base + memif::kRingCookie) = memif::kCookie;
      if (!zc_) {
        r.buffers = static_cast<uint32_t>(buffers_at + uint64_t{buffer_size_} * slot_base);
        for (uint32_t s = 0; s < r.size; s++) {
          r.desc[s].region = 0;
          r.desc[s].offset = r.buffers + s * buffer_size_;
          r.desc[s].length = buffer_size_;
        }
      }
      slot_base += r.size;
    }
    memif::Init in;
    std::memset(&in, 0, sizeof in);
    in.version = memif::kVersion;
    in.id = id_;
    in.mode = memif::kModeEthernet;
    std::memcpy(in.secret, secret_.data(), secret_.size());
    CopyName(in.name, memif::kNameSize, std::string("rdma-graph ") + RDMA_GRAPH_VERSION);
    phase_ = Phase::kHandshake;
    Send(memif::kMsgInit, &in, sizeof in, -1);
    for (uint16_t i = 0; i < regions_.size(); i++) {
      memif::AddRegion ar = {i, regions_[i].size};
      Send(memif::kMsgAddRegion, &ar, sizeof ar, regions_[i].fd);
    }
    for (uint32_t k = 0; k < nc2s + ns2c; k++) {
      const bool c2s = k < nc2s;
      Ring& r = c2s ? tx_[k] : rx_[k - nc2s];
      memif::AddRing ar;
      std::memset(&ar, 0, sizeof ar);
      ar.flags = c2s ? memif::kAddRingFlagC2S : 0;
      ar.index = static_cast<uint16_t>(c2s ? k : k - nc2s);
      ar.region = 0;
      ar.offset = r.offset;
      ar.log2_ring_size = static_cast<uint8_t>(log2);
      Send(memif::kMsgAddRing, &ar, sizeof ar, r.fd);
    }
    memif::Connect c;
    CopyName(c.if_name, memif::kNameSize, name_);
    Send(memif::kMsgConnect, &c, sizeof c, -1);
    return nullptr;
  }

  const char* LocalError(const char* what) {
    local_error_ = std::string(what) + ": " + std::strerror(errno);
    return local_error_.c_str();
  }

  void SetupRing(Ring& r) {
    Region& reg = regions_[r.region];
    r.base = reg.addr + r.offset;
    r.desc = reinterpret_cast<Desc*>(r.base + memif::kRingDesc);
    r.size = 1u << r.log2;
    r.mask = static_cast<uint16_t>(r.size - 1);
    r.head = 0;
    r.last = 0;
    r.masked = false;
    r.shadow.assign(zc_ ? r.size : 0, kInvalid);
  }

  // Server, at CONNECT: map what the client gave and check every ring lies inside its region.
  const char* MapAndConnect() {
    for (Region& reg : regions_) {
      void* a = mmap(nullptr, reg.size, PROT_READ | PROT_WRITE, MAP_SHARED, reg.fd, 0);
      if (a == MAP_FAILED) return LocalError("mmap of a region");
      reg.addr = static_cast<uint8_t*>(a);
      reg.owns_map = true;
    }
    bool any_rx = false, any_tx = false;
    for (int dir = 0; dir < 2; dir++) {
      for (Ring& r : dir ? tx_ : rx_) {
        if (!r.present) continue;
        if (r.region >= regions_.size()) return "Ring in an unknown region";
        if (uint64_t{r.offset} + memif::RingBytes(r.log2) > regions_[r.region].size) return "Ring beyond its region";
        if (r.offset % 8 != 0) return "Misaligned ring";
        SetupRing(r);
        if (*reinterpret_cast<volatile uint32_t*>(r.base + memif::kRingCookie) != memif::kCookie) return "Wrong ring";
        (dir ? any_tx : any_rx) = true;
      }
    }
    if (!any_rx && !any_tx) return "No rings";
    // The client initialised both rings to 0 and publishes nothing before CONNECTED.
    for (Ring& r : rx_) if (r.present) { Store16Relaxed(r.head_p(), 0); Store16Relaxed(r.tail_p(), 0); }
    for (Ring& r : tx_) if (r.present) { Store16Relaxed(r.head_p(), 0); Store16Relaxed(r.tail_p(), 0); }
    OnConnected();
    return nullptr;
  }

  void OnConnected() {
    phase_ = Phase::kConnected;
    connects_++;
    for (Ring& r : rx_) {
      if (!r.present) continue;
      Store16Relaxed(r.flags_p(), 0);  // interrupts on until traffic shows up
      r.masked = false;
    }
    nrx_run_ = 0;
    ntx_run_ = 0;
    for (uint32_t q = 0; q < rx_.size(); q++) {
      Ring& r = rx_[q];
      if (!r.present) continue;
      nrx_run_++;
      EpollAdd(ep_[q], r.fd);
      if (!server_) Refill(r);
    }
    for (Ring& r : tx_) if (r.present) ntx_run_++;
    SetLink(true);
  }

  void SetLink(bool up) {
    if (pool_.state != nullptr) {
      pool_.state[kStLink] = up ? 1 : 0;
      pool_.state[kStGen]++;
      pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
    }
  }

  // Forget the run-time configuration (rings, regions) of a finished or refused connection.
  void ResetRun() {
    rx_.assign(nrx_, Ring());
    tx_.assign(ntx_, Ring());
    zc_ = false;
  }

  // Ends the connection: tell the peer why (when `tell`), release rings, regions and fds, move
  // ring-held buffers to the orphan list. The client retries after kRetryNs.
  void Disconnect(const std::string& reason, bool local, bool tell, uint32_t code = 0, bool remote_msg = false) {
    if (conn_ == nullptr && phase_ == Phase::kIdle) return;
    const bool was_up = phase_ == Phase::kConnected;
    if (conn_ != nullptr) {
      if (tell) SendDisconnect(conn_->fd, reason, code);
      EpollDel(conn_->watch_ep, conn_->fd);
      close(conn_->fd);
      delete conn_;
      conn_ = nullptr;
    }
    last_reason_ = reason;
    last_code_ = code;
    last_local_ = local || !remote_msg;
    last_by_peer_ = remote_msg;
    last_was_up_ = was_up;
    disconnects_++;
    for (uint32_t q = 0; q < rx_.size(); q++) {
      Ring& r = rx_[q];
      if (r.fd >= 0) {
        EpollDel(ep_[q], r.fd);
        close(r.fd);
      }
      for (uint32_t& bi : r.shadow) if (bi != kInvalid) { orphans_.push_back(bi); bi = kInvalid; }
    }
    for (Ring& r : tx_) {
      if (r.fd >= 0) close(r.fd);
      for (uint32_t& bi : r.shadow) if (bi != kInvalid) { orphans_.push_back(bi); bi = kInvalid; }
    }
    for (Region& reg : regions_) {
      if (reg.owns_map && reg.addr != nullptr) munmap(reg.addr, reg.size);
      if (reg.owns_map && reg.fd >= 0) close(reg.fd);
      if (!reg.owns_map && reg.fd >= 0 && reg.fd != pool_.fd) close(reg.fd);
    }
    // A server region whose fd arrived but was never mapped (refused before CONNECT).
    regions_.clear();
    ResetRun();
    for (uint32_t q = 0; q < hold_.size(); q++) ClearHold(q);
    nrx_run_ = ntx_run_ = 0;
    phase_ = Phase::kIdle;
    if (!server_ && !released_) ArmRetry();
    if (was_up || !orphans_.empty()) SetLink(false);
    else if (pool_.state != nullptr) pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
  }

  // ---------------------------------------------------------------- data path

  void PushDone(uint32_t bi, uint32_t& done_n) {
    if (done_n < pool_.done_cap) pool_.done[done_n++] = bi;
    else orphans_.push_back(bi);
  }

  // Recycle a buffer we did not hand out: back to the stash, or to `done` when it is full.
  void Recycle(uint32_t bi, uint32_t& stash_n, uint32_t& done_n) {
    PoolView& p = pool_;
    if (stash_n < p.stash_cap) p.stash[stash_n++] = bi;
    else if (done_n < p.done_cap) p.done[done_n++] = bi;
    else orphans_.push_back(bi);
  }

  // Client receive ring: give the server empty buffers (zero-copy: pool buffers from the
  // stash; copy mode: the slot's own buffer in region 0).
  void Refill(Ring& r) {
    uint16_t head = r.head;
    uint32_t room = r.size - static_cast<uint16_t>(head - r.last);
    if (room == 0) return;
    if (zc_) {
      PoolView& p = pool_;
      uint32_t stash_n = p.state[kStStash];
      if (room > stash_n) room = stash_n;
      for (uint32_t k = 0; k < room; k++) {
        const uint32_t bi = p.stash[--stash_n];
        const uint16_t s = head & r.mask;
        r.shadow[s] = bi;
        Desc& d = r.desc[s];
        d.flags = 0;
        d.region = 1;
        d.offset = p.DataStart(bi);
        d.length = p.data_size;
        head++;
      }
      p.state[kStStash] = stash_n;
    } else {
      for (uint32_t k = 0; k < room; k++) {
        const uint16_t s = head & r.mask;
        Desc& d = r.desc[s];
        d.flags = 0;
        d.region = 0;
        d.offset = r.buffers + s * buffer_size_;
        d.length = buffer_size_;
        head++;
      }
    }
    if (head != r.head) {
      r.head = head;
      Store16Release(r.head_p(), head);
    }
  }

  // Validates one descriptor of a copy-mode receive; the address of its bytes or nullptr.
  const uint8_t* DescData(const Desc& d) const {
    if (d.region >= regions_.size()) return nullptr;
    const Region& reg = regions_[d.region];
    if (reg.addr == nullptr || uint64_t{d.offset} + d.length > reg.size) return nullptr;
    return reg.addr + d.offset;
  }

  // The peer owns the descriptors it publishes and may rewrite them at any moment (a double
  // fetch is a hole): each descriptor of a frame is read once, volatile, into chain_, validated
  // there, and only the copy is used afterwards. Stash pops are counted from the copies.
  uint32_t RxRing(Ring& r, uint32_t* out, uint32_t max) {
    PoolView& p = pool_;
    const bool c2s = server_;  // the server receives on C2S rings, the client on S2C rings
    uint16_t cur = r.last;
    const uint16_t last = c2s ? Load16Acquire(r.head_p()) : Load16Acquire(r.tail_p());
    uint16_t avail = static_cast<uint16_t>(last - cur);
    if (avail > r.size) {
      Disconnect("Ring index beyond the ring size", true, true);
      return 0;
    }
    // A client's receive ring holds only the buffers it gave (head); a server publishing its
    // tail past them would hand us slots we never filled.
    if (!c2s && avail > static_cast<uint16_t>(r.head - cur)) {
      Disconnect("Ring tail beyond the buffers given to the peer", true, true);
      return 0;
    }
    if (avail == 0) {
      if (!c2s) Refill(r);
      return 0;
    }
    uint32_t stash_n = p.state[kStStash];
    uint32_t done_n = p.state[kStDone];
    const uint32_t ds = p.data_size;
    uint32_t n = 0;
    uint64_t bytes = 0;
    Desc* const chain = chain_;
    while (n < max && avail > 0) {
      // The frame: descriptors up to one without NEXT, each copied once.
      uint32_t segs = 0;
      uint64_t total = 0;
      bool complete = false, bad = false;
      while (segs < avail && segs < kMaxChain) {
        const volatile Desc& sd = r.desc[(cur + segs) & r.mask];
        Desc& d = chain[segs];
        d.flags = sd.flags;
        d.region = sd.region;
        d.length = sd.length;
        d.offset = sd.offset;
        if (zc_) {
          if (d.length > ds || r.shadow[(cur + segs) & r.mask] == kInvalid) bad = true;
        } else if (DescData(d) == nullptr) {
          bad = true;
        }
        total += d.length;
        segs++;
        if (!(d.flags & memif::kDescFlagNext)) {
          complete = true;
          break;
        }
      }
      if (!complete) {
        // The rest of the frame is not published yet, unless it cannot ever be.
        if (segs < kMaxChain && segs < r.size) break;
        bad = true;
      }
      if (bad || total > kMaxFrame) {
        rx_errors_++;
        for (uint32_t k = 0; k < segs; k++) {
          uint32_t& sh = zc_ ? r.shadow[(cur + k) & r.mask] : dummy_;
          if (zc_ && sh != kInvalid) {
            Recycle(sh, stash_n, done_n);
            sh = kInvalid;
          }
        }
        cur += segs;
        avail -= segs;
        continue;
      }
      if (zc_) {
        // The buffers are the pool's: hand them over as they are.
        uint32_t head = kInvalid, prev = kInvalid;
        for (uint32_t k = 0; k < segs; k++) {
          const uint16_t s = (cur + k) & r.mask;
          const uint32_t bi = r.shadow[s];
          r.shadow[s] = kInvalid;
          p.offset[bi] = p.DataStart(bi);
          p.length[bi] = chain[k].length;
          p.flags[bi] = 0;
          if (prev != kInvalid) {
            p.flags[prev] = p.f_next;
            p.next[prev] = bi;
          } else {
            head = bi;
          }
          prev = bi;
        }
        out[n++] = head;
      } else {
        const uint32_t need = total == 0 ? 1 : static_cast<uint32_t>((total + ds - 1) / ds);
        if (need > stash_n) {
          rx_no_buffers_++;
          break;
        }
        uint32_t bi = p.stash[--stash_n];
        const uint32_t head = bi;
        uint8_t* dst = p.mem + p.DataStart(bi);
        uint32_t w = 0;
        bool dry = false;
        p.offset[bi] = p.DataStart(bi);
        p.flags[bi] = 0;
        for (uint32_t k = 0; k < segs && !dry; k++) {
          const Desc& d = chain[k];
          const uint8_t* src = DescData(d);
          uint32_t len = d.length;
          while (len > 0) {
            if (w == ds) {
              // `need` came from these same lengths, so the stash has them; checked all the same.
              if (stash_n == 0) {
                dry = true;
                break;
              }
              p.length[bi] = w;
              const uint32_t nb = p.stash[--stash_n];
              p.flags[bi] = p.f_next;
              p.next[bi] = nb;
              bi = nb;
              p.offset[bi] = p.DataStart(bi);
              p.flags[bi] = 0;
              dst = p.mem + p.DataStart(bi);
              w = 0;
            }
            uint32_t take = std::min(len, ds - w);
            std::memcpy(dst + w, src, take);
            w += take;
            src += take;
            len -= take;
          }
        }
        p.length[bi] = w;
        p.flags[bi] = 0;
        if (dry) {
          // Give the chain back and drop the frame.
          for (uint32_t b = head;;) {
            const bool more = (p.flags[b] & p.f_next) != 0;
            const uint32_t nx = p.next[b];
            Recycle(b, stash_n, done_n);
            if (!more || b == bi) break;
            b = nx;
          }
          rx_errors_++;
          cur += segs;
          avail -= segs;
          continue;
        }
        out[n++] = head;
      }
      bytes += total;
      if (segs > 1) rx_chained_++;
      cur += segs;
      avail -= segs;
    }
    r.last = cur;
    if (c2s) Store16Release(r.tail_p(), cur);
    p.state[kStStash] = stash_n;
    p.state[kStDone] = done_n;
    if (!c2s) Refill(r);
    rx_packets_ += n;
    rx_bytes_ += bytes;
    return n;
  }

  // memifRx(handle, queue, out, max): one receive burst.
  Napi::Value Rx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (released_ || !pool_bound_) return Napi::Number::New(env, 0);
    const uint32_t q = info[1].As<Napi::Number>().Uint32Value();
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "memifRx: out must be a Uint32Array");
    }
    Napi::Uint32Array outa = info[2].As<Napi::Uint32Array>();
    uint32_t max = info[3].As<Napi::Number>().Uint32Value();
    if (max > outa.ElementLength()) max = static_cast<uint32_t>(outa.ElementLength());
    pool_.state[kStDone] = 0;
    if (q == 0 && (phase_ != Phase::kConnected || ++busy_polls_ >= kBusyControlEvery)) {
      busy_polls_ = 0;
      Poll();
    }
    if (phase_ != Phase::kConnected || q >= rx_.size() || !rx_[q].present) return Napi::Number::New(env, 0);
    Ring& r = rx_[q];
    uint32_t n = RxRing(r, outa.Data(), max);
    if (phase_ != Phase::kConnected) return Napi::Number::New(env, n);
    if (n > 0) {
      r.empty_since = 0;
      if (!r.masked) Mask(q, r);
      return Napi::Number::New(env, n);
    }
    if (r.masked) {
      // Traffic stopped a moment ago: keep polling with interrupts off (the sender need not kick
      // on every burst) for kIdleNs, then switch them on. The hold eventfd keeps the engine
      // from sleeping meanwhile: it must not sleep on a ring whose sender will not kick.
      const uint64_t now = NowNs();
      if (r.empty_since == 0) r.empty_since = now;
      if (now - r.empty_since < kIdleNs) {
        if (q == 0 && ++idle_polls_ >= kIdleControlEvery) {
          idle_polls_ = 0;
          Poll();
          if (zc_ && phase_ == Phase::kConnected) ReclaimAll();
        }
        return Napi::Number::New(env, 0);
      }
      Unmask(q, r);
      // A frame published before the sender saw the flag cleared would otherwise wait for the
      // next kick: look once more.
      n = RxRing(r, outa.Data(), max);
      if (n > 0 && phase_ == Phase::kConnected) {
        r.empty_since = 0;
        Mask(q, r);
      }
    }
    if (phase_ == Phase::kConnected && EventRead(r.fd)) interrupts_++;
    if (q == 0 && n == 0) {
      busy_polls_ = 0;
      Poll();
      if (zc_ && phase_ == Phase::kConnected) ReclaimAll();
    }
    return Napi::Number::New(env, n);
  }

  static uint64_t NowNs() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  }

  // Receiving: no kicks wanted; the queue's hold eventfd turns readable so the engine polls on.
  void Mask(uint32_t q, Ring& r) {
    Store16Relaxed(r.flags_p(), memif::kRingFlagMaskInt);
    r.masked = true;
    if (!hold_set_[q]) {
      uint64_t one = 1;
      if (write(hold_[q], &one, sizeof one) == static_cast<ssize_t>(sizeof one)) hold_set_[q] = 1;
    }
  }

  // Idle: kicks wanted again (the store is ordered before any later read of head/tail), and
  // the engine may sleep.
  void Unmask(uint32_t q, Ring& r) {
    Store16Relaxed(r.flags_p(), 0);
    r.masked = false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ClearHold(q);
  }

  void ClearHold(uint32_t q) {
    if (hold_set_[q]) {
      uint64_t v;
      if (read(hold_[q], &v, sizeof v) >= 0 || errno == EAGAIN) hold_set_[q] = 0;
    }
  }

  // Zero-copy transmit rings: buffers the server has moved tail past go to `done`.
  void Reclaim(Ring& r) {
    PoolView& p = pool_;
    uint32_t done_n = p.state[kStDone];
    const uint16_t tail = Load16Acquire(r.tail_p());
    uint16_t last = r.last;
    if (static_cast<uint16_t>(tail - last) > static_cast<uint16_t>(r.head - last)) return;  // tail beyond head: ignore
    while (last != tail && done_n < p.done_cap) {
      uint32_t& sh = r.shadow[last & r.mask];
      if (sh != kInvalid) {
        p.done[done_n++] = sh;
        sh = kInvalid;
      }
      last++;
    }
    r.last = last;
    p.state[kStDone] = done_n;
  }

  void ReclaimAll() {
    for (Ring& r : tx_) if (r.present) Reclaim(r);
  }

  void Kick(Ring& r) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (Load16Relaxed(r.flags_p()) & memif::kRingFlagMaskInt) return;
    const int w = EventWrite(r.fd);
    if (w > 0) kicks_++;
    else if (w < 0) Disconnect("Interrupt fd made blocking by the peer", true, true);
  }

  // Gathers a pool packet's segments; 0 when the chain is invalid.
  uint32_t Gather(uint32_t head, uint32_t* segs, uint64_t* total) const {
    const PoolView& p = pool_;
    uint32_t bi = head, n = 0;
    uint64_t len = 0;
    for (;;) {
      if (bi >= p.count || n == kMaxTxSegs) return 0;
      if (uint64_t{p.offset[bi]} + p.length[bi] > p.mem_len) return 0;
      segs[n++] = bi;
      len += p.length[bi];
      if (!(p.flags[bi] & p.f_next)) break;
      bi = p.next[bi];
    }
    *total = len;
    return n;
  }

  // memifTx(handle, queue, bufs, off, n): one transmit burst; returns how many were taken.
  Napi::Value Tx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "memifTx: bufs must be a Uint32Array");
    }
    Napi::Uint32Array a = info[2].As<Napi::Uint32Array>();
    const uint32_t off = info[3].As<Napi::Number>().Uint32Value();
    uint32_t n = info[4].As<Napi::Number>().Uint32Value();
    if (uint64_t{off} + n > a.ElementLength()) throw RangeErr(env, "memifTx: off + n beyond bufs");
    if (released_ || !pool_bound_) return Napi::Number::New(env, 0);
    if (n > 256) n = 256;  // one frame's worth per call: `done` always has room
    pool_.state[kStDone] = 0;
    if (phase_ != Phase::kConnected || ntx_run_ == 0 || n == 0) {
      tx_refused_ += n;
      return Napi::Number::New(env, 0);
    }
    uint32_t q = info[1].As<Napi::Number>().Uint32Value();
    // Queues beyond the rings the peer took share them.
    uint32_t k = q % ntx_run_, idx = 0;
    for (; idx < tx_.size(); idx++) {
      if (tx_[idx].present && k-- == 0) break;
    }
    Ring& r = tx_[idx];
    const uint32_t* bufs = a.Data() + off;
    uint32_t taken = zc_ ? TxZeroCopy(r, bufs, n) : TxCopy(r, bufs, n);
    tx_refused_ += n - taken;
    return Napi::Number::New(env, taken);
  }

  uint32_t TxZeroCopy(Ring& r, const uint32_t* bufs, uint32_t n) {
    Reclaim(r);
    PoolView& p = pool_;
    uint16_t slot = r.head;
    uint32_t free = r.size - static_cast<uint16_t>(slot - r.last);
    uint32_t done_n = p.state[kStDone];
    uint32_t taken = 0, sent = 0;
    uint64_t bytes = 0;
    uint32_t segs[kMaxTxSegs];
    for (; taken < n; taken++) {
      uint64_t total = 0;
      const uint32_t ns = Gather(bufs[taken], segs, &total);
      if (ns == 0) {
        tx_errors_++;
        PushDone(bufs[taken], done_n);
        continue;
      }
      if (ns > free) break;
      for (uint32_t s = 0; s < ns; s++) {
        const uint32_t bi = segs[s];
        const uint16_t i = slot & r.mask;
        Desc& d = r.desc[i];
        d.flags = s + 1 < ns ? memif::kDescFlagNext : 0;
        d.region = 1;
        d.length = p.length[bi];
        d.offset = p.offset[bi];
        r.shadow[i] = s == 0 ? bufs[taken] : kInvalid;
        slot++;
      }
      free -= ns;
      bytes += total;
      sent++;
      if (ns > 1) tx_chained_++;
    }
    p.state[kStDone] = done_n;
    if (slot != r.head) {
      r.head = slot;
      Store16Release(r.head_p(), slot);
      Kick(r);
    }
    tx_packets_ += sent;
    tx_bytes_ += bytes;
    return taken;
  }

  uint32_t TxCopy(Ring& r, const uint32_t* bufs, uint32_t n) {
    PoolView& p = pool_;
    // Server: fills the client's empty buffers from tail to head. Client (copy mode): writes
    // into its own slot buffers at head, up to the tail the server published.
    uint16_t slot;
    uint32_t free;
    if (server_) {
      slot = r.head;  // our tail
      uint16_t h = Load16Acquire(r.head_p());
      free = static_cast<uint16_t>(h - slot);
      if (free > r.size) {
        Disconnect("Ring index beyond the ring size", true, true);
        return 0;
      }
    } else {
      slot = r.head;
      free = r.size - static_cast<uint16_t>(slot - Load16Acquire(r.tail_p()));
      if (free > r.size) {
        Disconnect("Ring index beyond the ring size", true, true);
        return 0;
      }
    }
    uint32_t done_n = p.state[kStDone];
    uint32_t taken = 0, sent = 0;
    uint64_t bytes = 0;
    uint32_t segs[kMaxTxSegs];
    bool stop = false;
    for (; taken < n && !stop; taken++) {
      uint64_t total = 0;
      const uint32_t ns = Gather(bufs[taken], segs, &total);
      if (ns == 0) {
        tx_errors_++;
        PushDone(bufs[taken], done_n);
        continue;
      }
      if (free == 0) break;
      const uint16_t saved = slot;
      uint32_t used = 1;
      Desc* d = &r.desc[slot & r.mask];
      uint8_t* dst;
      uint32_t room;
      if (!DescRoom(r, slot, &dst, &room)) return TxFail(r, taken, done_n);
      uint32_t w = 0;
      for (uint32_t s = 0; s < ns && !stop; s++) {
        const uint8_t* src = p.mem + p.offset[segs[s]];
        uint32_t len = p.length[segs[s]];
        while (len > 0) {
          if (w == room) {
            if (used == free) {
              stop = true;  // ring full mid-frame: the frame stays with the caller
              break;
            }
            d->length = w;
            d->flags = memif::kDescFlagNext;
            slot++;
            used++;
            d = &r.desc[slot & r.mask];
            if (!DescRoom(r, slot, &dst, &room)) return TxFail(r, taken, done_n);
            w = 0;
          }
          uint32_t take = std::min(len, room - w);
          std::memcpy(dst + w, src, take);
          w += take;
          src += take;
          len -= take;
        }
      }
      if (stop) {
        slot = saved;
        break;
      }
      d->length = w;
      d->flags = 0;
      slot++;
      free -= used;
      PushDone(bufs[taken], done_n);
      bytes += total;
      sent++;
      if (used > 1) tx_chained_++;
    }
    p.state[kStDone] = done_n;
    if (slot != r.head) {
      r.head = slot;
      Store16Release(server_ ? r.tail_p() : r.head_p(), slot);
      Kick(r);
    }
    tx_packets_ += sent;
    tx_bytes_ += bytes;
    return taken;
  }

  // Where a copy-mode transmit slot's bytes go and how many fit.
  bool DescRoom(Ring& r, uint16_t slot, uint8_t** dst, uint32_t* room) {
    Desc& d = r.desc[slot & r.mask];
    if (!server_) {
      d.region = 0;
      d.offset = r.buffers + (slot & r.mask) * buffer_size_;
      *dst = regions_[0].addr + d.offset;
      *room = buffer_size_;
      return true;
    }
    const uint32_t len = d.length;  // the room the client gave
    Desc copy = d;
    copy.length = len;
    const uint8_t* at = DescData(copy);
    if (at == nullptr || len == 0) return false;
    *dst = const_cast<uint8_t*>(at);
    *room = len;
    return true;
  }

  uint32_t TxFail(Ring& r, uint32_t taken, uint32_t done_n) {
    pool_.state[kStDone] = done_n;
    Disconnect("Invalid descriptor in a receive ring of the client", true, true);
    return taken;
  }

  // memifReclaim(handle): moves up to done_cap orphaned buffers into `done`; returns how many.
  Napi::Value ReclaimJs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!pool_bound_) return Napi::Number::New(env, 0);
    uint32_t n = 0;
    while (!orphans_.empty() && n < pool_.done_cap) {
      pool_.done[n++] = orphans_.back();
      orphans_.pop_back();
    }
    pool_.state[kStDone] = n;
    pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
    return Napi::Number::New(env, n);
  }

  Napi::Value PollNow(const Napi::CallbackInfo& info) {
    if (pool_.state != nullptr) pool_.state[kStDone] = 0;
    Poll();
    if (zc_ && phase_ == Phase::kConnected) ReclaimAll();
    return Napi::Boolean::New(info.Env(), connected());
  }

  // ---------------------------------------------------------------- JS methods

  // bindPool({memory, fd, firstOffset, stride, headroom, dataSize, count, offset, length, flags,
  //           next, stash, done, state, flagNext})
  Napi::Value BindPool(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (released_) throw Napi::Error::New(env, "Memif.bindPool: interface " + name_ + " is closed");
    if (pool_bound_) throw Napi::Error::New(env, "Memif.bindPool: a pool is already bound to " + name_);
    if (!info[0].IsObject()) throw TypeErr(env, "Memif.bindPool: expects an object");
    Napi::Object o = info[0].As<Napi::Object>();
    const char* fn = "Memif.bindPool";
    Napi::Value memv = o.Get("memory");
    if (!memv.IsArrayBuffer()) throw TypeErr(env, "Memif.bindPool: memory must be an ArrayBuffer");
    Napi::ArrayBuffer mem = memv.As<Napi::ArrayBuffer>();
    PoolView p;
    p.mem = static_cast<uint8_t*>(mem.Data());
    p.mem_len = mem.ByteLength();
    if (p.mem == nullptr || p.mem_len == 0) throw RangeErr(env, "Memif.bindPool: memory is empty or detached");
    Napi::Value fdv = o.Get("fd");
    p.fd = fdv.IsNumber() ? fdv.As<Napi::Number>().Int32Value() : -1;
    if (p.fd >= 0 && !IsOwnedFd(p.fd)) p.fd = -1;  // only memory from allocMemory() can be shared
    p.first_offset = OptU32(o, "firstOffset", fn, 0, 0, 4294967295.0);
    p.stride = OptU32(o, "stride", fn, 0, 64, 1u << 20);
    p.headroom = OptU32(o, "headroom", fn, 0, 0, 65535);
    p.data_size = OptU32(o, "dataSize", fn, 0, 64, 1u << 20);
    p.count = OptU32(o, "count", fn, 0, 1, 4294967294.0);
    if (p.stride < p.headroom + p.data_size) throw RangeErr(env, "Memif.bindPool: stride < headroom + dataSize");
    if (uint64_t{p.first_offset} + uint64_t{p.count} * p.stride > p.mem_len) {
      throw RangeErr(env, "Memif.bindPool: the buffers do not fit in the memory");
    }
    if (uint64_t{p.first_offset} + uint64_t{p.count} * p.stride > 0xffffffffull) p.fd = -1;  // offsets are u32
    p.offset = U32ArrayArg(env, o.Get("offset"), "Memif.bindPool", "offset", p.count);
    p.length = U32ArrayArg(env, o.Get("length"), "Memif.bindPool", "length", p.count);
    p.flags = U32ArrayArg(env, o.Get("flags"), "Memif.bindPool", "flags", p.count);
    p.next = U32ArrayArg(env, o.Get("next"), "Memif.bindPool", "next", p.count);
    size_t cap = 0;
    p.stash = U32ArrayArg(env, o.Get("stash"), "Memif.bindPool", "stash", 1, &cap);
    p.stash_cap = static_cast<uint32_t>(cap);
    p.done = U32ArrayArg(env, o.Get("done"), "Memif.bindPool", "done", 1, &cap);
    p.done_cap = static_cast<uint32_t>(cap);
    if (p.done_cap < (1u << log2_) + 256) {
      throw RangeErr(env, "Memif.bindPool: done must hold at least ringSize + 256 indices");
    }
    p.state = U32ArrayArg(env, o.Get("state"), "Memif.bindPool", "state", kStateLen);
    p.f_next = OptU32(o, "flagNext", fn, 0, 1, 4294967295.0);
    refs_.clear();
    for (const char* k : {"memory", "offset", "length", "flags", "next", "stash", "done", "state"}) {
      refs_.push_back(Napi::Persistent(o.Get(k)));
    }
    pool_ = p;
    std::memset(p.state, 0, kStateLen * sizeof(uint32_t));
    pool_bound_ = true;
    ResetRun();
    Poll();
    return env.Undefined();
  }

  Napi::Value PollJs(const Napi::CallbackInfo& info) { return PollNow(info); }

  static const char* PhaseName(Phase ph) {
    switch (ph) {
      case Phase::kIdle: return "idle";
      case Phase::kWaitHello: return "hello";
      case Phase::kHandshake: return "handshake";
      case Phase::kConnected: return "connected";
    }
    return "?";
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", Napi::String::New(env, name_));
    o.Set("role", Napi::String::New(env, server_ ? "server" : "client"));
    o.Set("socket", Napi::String::New(env, addr_.Text()));
    o.Set("abstract", Napi::Boolean::New(env, addr_.abstract));
    o.Set("id", Napi::Number::New(env, id_));
    o.Set("state", Napi::String::New(env, released_ ? "closed" : PhaseName(phase_)));
    o.Set("connected", Napi::Boolean::New(env, connected()));
    o.Set("zeroCopy", Napi::Boolean::New(env, zc_));
    o.Set("remoteName", Napi::String::New(env, remote_name_));
    o.Set("remoteIfName", Napi::String::New(env, remote_if_name_));
    uint32_t ring_size = 0;
    for (Ring& r : rx_) if (r.present) ring_size = r.size;
    for (Ring& r : tx_) if (r.present && ring_size == 0) ring_size = r.size;
    o.Set("ringSize", Napi::Number::New(env, ring_size));
    o.Set("rxRings", Napi::Number::New(env, nrx_run_));
    o.Set("txRings", Napi::Number::New(env, ntx_run_));
    o.Set("regions", Napi::Number::New(env, static_cast<double>(regions_.size())));
    o.Set("bufferSize", Napi::Number::New(env, buffer_size_));
    if (last_reason_.empty()) {
      o.Set("lastDisconnect", env.Null());
    } else {
      Napi::Object d = Napi::Object::New(env);
      d.Set("reason", Napi::String::New(env, last_reason_));
      d.Set("code", Napi::Number::New(env, last_code_));
      d.Set("byPeer", Napi::Boolean::New(env, last_by_peer_));
      d.Set("wasUp", Napi::Boolean::New(env, last_was_up_));
      o.Set("lastDisconnect", d);
    }
    if (last_refusal_.empty()) {
      o.Set("lastRefused", env.Null());
    } else {
      Napi::Object d = Napi::Object::New(env);
      d.Set("reason", Napi::String::New(env, last_refusal_));
      d.Set("peer", Napi::String::New(env, last_refused_peer_));
      o.Set("lastRefused", d);
    }
    o.Set("lastConnectError", last_connect_errno_ ? Napi::Value(Napi::String::New(env, std::strerror(last_connect_errno_))) : env.Null());
    return o;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    auto set = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
    set("rxPackets", static_cast<double>(rx_packets_));
    set("rxBytes", static_cast<double>(rx_bytes_));
    set("rxErrors", static_cast<double>(rx_errors_));
    set("rxNoBuffers", static_cast<double>(rx_no_buffers_));
    set("rxChained", static_cast<double>(rx_chained_));
    set("txPackets", static_cast<double>(tx_packets_));
    set("txBytes", static_cast<double>(tx_bytes_));
    set("txErrors", static_cast<double>(tx_errors_));
    set("txRefused", static_cast<double>(tx_refused_));
    set("txChained", static_cast<double>(tx_chained_));
    set("kicks", static_cast<double>(kicks_));
    set("interrupts", static_cast<double>(interrupts_));
    set("connects", static_cast<double>(connects_));
    set("disconnects", static_cast<double>(disconnects_));
    set("connectFailures", static_cast<double>(connect_failures_));
    set("refused", static_cast<double>(refused_));
    set("socketRefused", static_cast<double>(listener_ != nullptr ? listener_->refused : 0));
    set("controlMessages", static_cast<double>(msgs_received_));
    return o;
  }

  // close(): DISCONNECT to the peer, release everything, remove the socket file (last server
  // interface on it). Ring-held buffers are left in the orphan list for memifReclaim.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (!released_) Disconnect("Interface closed", true, true);
    Release();
    return info.Env().Undefined();
  }

 private:
  void Listen(Napi::Env env, const std::string& where) {
    for (Listener* l : t_listeners) {
      if (l->addr == addr_) {
        for (Memif* x : l->members) {
          if (x->id_ == id_) {
            throw RangeErr(env, where + ": interface id " + std::to_string(id_) + " is already served on socket " + addr_.Text() +
                                    " by " + x->name_);
          }
        }
        l->members.push_back(this);
        listener_ = l;
        EpollAdd(ep_[0], l->fd);
        return;
      }
    }
    int fd = MakeSeqpacket();
    if (fd < 0) throw ErrnoError(env, where + ": socket(AF_UNIX, SOCK_SEQPACKET)", errno, "socket");
    sockaddr_un sa;
    socklen_t len = addr_.Fill(&sa);
    if (!addr_.abstract) {
      int err = MakeParents(addr_.name);
      if (err != 0) {
        close(fd);
        throw ErrnoError(env, where + ": cannot create the directory of socket " + addr_.name, err, "mkdir");
      }
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      int err = errno;
      if (err == EADDRINUSE && !addr_.abstract) {
        // A socket file left by a process that died: replace it unless something listens there.
        int probe = MakeSeqpacket();
        int cr = probe >= 0 ? connect(probe, reinterpret_cast<sockaddr*>(&sa), len) : 0;
        int cerr = errno;
        if (probe >= 0) close(probe);
        if (cr != 0 && cerr == ECONNREFUSED && unlink(addr_.name.c_str()) == 0 &&
            bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
          err = 0;
        }
      }
      if (err != 0) {
        close(fd);
        if (err == EADDRINUSE) {
          throw CodedError(env, where + ": socket " + addr_.Text() + " is in use by another memif server", err, "bind");
        }
        throw ErrnoError(env, where + ": bind to socket " + addr_.Text(), err, "bind");
      }
    }
    if (listen(fd, 16) != 0) {
      int err = errno;
      close(fd);
      if (!addr_.abstract) unlink(addr_.name.c_str());
      throw ErrnoError(env, where + ": listen on socket " + addr_.Text(), err, "listen");
    }
    Listener* l = new Listener();
    l->addr = addr_;
    l->fd = fd;
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (!addr_.abstract && stat(addr_.name.c_str(), &st) == 0) {
      l->dev = st.st_dev;
      l->ino = st.st_ino;
    }
    l->members.push_back(this);
    t_listeners.push_back(l);
    listener_ = l;
    EpollAdd(ep_[0], fd);
  }

  void LeaveListener() {
    Listener* l = listener_;
    if (l == nullptr) return;
    listener_ = nullptr;
    EpollDel(ep_.empty() ? -1 : ep_[0], l->fd);
    l->members.erase(std::remove(l->members.begin(), l->members.end(), this), l->members.end());
    // Pending connections watched through our epoll move to another member's.
    for (Conn* c : l->pending) {
      if (c->watch_ep == ep_[0]) {
        if (l->members.empty()) {
          EpollDel(c->watch_ep, c->fd);
          c->watch_ep = -1;
        } else {
          MoveConn(c, l->members[0]->control_ep());
        }
      }
    }
    if (!l->members.empty()) return;
    for (Conn* c : l->pending) {
      close(c->fd);
      delete c;
    }
    close(l->fd);
    if (l->reserve_fd >= 0) close(l->reserve_fd);
    if (!l->addr.abstract) {
      struct stat st;
      // Remove the socket file only if it is still ours.
      if (stat(l->addr.name.c_str(), &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino) unlink(l->addr.name.c_str());
    }
    t_listeners.erase(std::remove(t_listeners.begin(), t_listeners.end(), l), t_listeners.end());
    delete l;
  }

  void Release() {
    if (released_) return;
    released_ = true;
    if (conn_ != nullptr || phase_ != Phase::kIdle) Disconnect("Interface closed", true, true);
    if (registered_) {
      t_memifs[handle_] = nullptr;
      registered_ = false;
    }
    LeaveListener();
    if (timer_fd_ >= 0) {
      close(timer_fd_);
      timer_fd_ = -1;
    }
    for (int ep : ep_) close(ep);
    ep_.clear();
    for (int h : hold_) close(h);
    hold_.clear();
    hold_set_.clear();
    if (pool_.state != nullptr) {
      pool_.state[kStLink] = 0;
      pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
    }
  }

  std::string name_;
  Address addr_;
  bool server_ = false;
  uint32_t id_ = 0;
  std::string secret_;
  uint32_t log2_ = 10, buffer_size_ = 2048, nrx_ = 1, ntx_ = 1;

  uint32_t handle_ = 0;
  bool registered_ = false;
  bool released_ = false;
  std::vector<int> ep_;
  int timer_fd_ = -1;
  bool tried_ = false;
  Listener* listener_ = nullptr;
  Conn* conn_ = nullptr;
  Phase phase_ = Phase::kIdle;

  std::vector<Region> regions_;
  std::vector<Ring> rx_, tx_;
  uint32_t nrx_run_ = 0, ntx_run_ = 0;
  bool zc_ = false;
  uint32_t busy_polls_ = 0, idle_polls_ = 0;
  std::vector<int> hold_;             // per rx queue: readable while its ring is masked
  std::vector<uint8_t> hold_set_;
  uint32_t dummy_ = kInvalid;
  Desc chain_[kMaxChain];  // RxRing's private copies of one frame's descriptors

  PoolView pool_;
  bool pool_bound_ = false;
  std::vector<Napi::Reference<Napi::Value>> refs_;
  std::vector<uint32_t> orphans_;

  std::string remote_name_, remote_if_name_, last_reason_, local_error_;
  uint32_t last_code_ = 0;
  bool last_local_ = false, last_by_peer_ = false, last_was_up_ = false;
  // The last client this server interface refused (the reason sent in its DISCONNECT).
  std::string last_refusal_, last_refused_peer_;
  int last_connect_errno_ = 0;

 public:
  uint64_t rx_packets_ = 0, rx_bytes_ = 0, rx_errors_ = 0, rx_no_buffers_ = 0, rx_chained_ = 0;
  uint64_t tx_packets_ = 0, tx_bytes_ = 0, tx_errors_ = 0, tx_refused_ = 0, tx_chained_ = 0;
  uint64_t kicks_ = 0, interrupts_ = 0, connects_ = 0, disconnects_ = 0, connect_failures_ = 0, refused_ = 0;
  uint64_t msgs_received_ = 0;
};

template <Napi::Value (Memif::*M)(const Napi::CallbackInfo&)>
Napi::Value ByHandle(const Napi::CallbackInfo& info) {
  uint32_t h = info[0].As<Napi::Number>().Uint32Value();
  if (h >= t_memifs.size() || t_memifs[h] == nullptr) return Napi::Number::New(info.Env(), 0);
  return (t_memifs[h]->*M)(info);
}

// ---------------------------------------------------------------- raw control sockets (tests)

// A non-blocking SOCK_SEQPACKET socket connected to (listen: bound to and listening on) info[0].
template <bool kListen>
Napi::Value RawSocket(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* fn = kListen ? "memifRawListen" : "memifRawConnect";
  if (!info[0].IsString()) throw TypeErr(env, std::string(fn) + ": socket must be a string");
  Address a = Address::Parse(env, fn, info[0].As<Napi::String>().Utf8Value());
  int fd = MakeSeqpacket();
  if (fd < 0) throw ErrnoError(env, std::string(fn) + ": socket", errno, "socket");
  sockaddr_un sa;
  socklen_t len = a.Fill(&sa);
  const sockaddr* sp = reinterpret_cast<sockaddr*>(&sa);
  if (kListen ? bind(fd, sp, len) != 0 || listen(fd, 4) != 0 : connect(fd, sp, len) != 0) {
    int err = errno;
    close(fd);
    throw ErrnoError(env, std::string(fn) + ": " + a.Text(), err, kListen ? "bind" : "connect");
  }
  return Napi::Number::New(env, fd);
}

Napi::Value RawAccept(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "memifRawAccept");
  int c = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  return Napi::Number::New(info.Env(), c < 0 ? -1 : c);
}

// memifRawSend(fd, bytes, passFd = -1): sends bytes as one message; returns 0 or an errno.
Napi::Value RawSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifRawSend");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw TypeErr(env, "memifRawSend: bytes must be a Uint8Array");
  }
  Napi::Uint8Array b = info[1].As<Napi::Uint8Array>();
  int pass = info[2].IsNumber() ? info[2].As<Napi::Number>().Int32Value() : -1;
  return Napi::Number::New(env, SendBytes(fd, b.Data(), b.ByteLength(), pass));
}

// memifRawRecv(fd): null when nothing is waiting; {eof: true} when the peer closed; else
// {data: Uint8Array, fd} (fd: a descriptor passed with the message, or -1).
Napi::Value RawRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifRawRecv");
  uint8_t buf[512];
  int afd = -1;
  ssize_t r = RecvMsg(fd, buf, sizeof buf, &afd);
  if (r == -EAGAIN || r == -EWOULDBLOCK) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  if (r <= 0) {
    o.Set("eof", Napi::Boolean::New(env, true));
    return o;
  }
  Napi::Uint8Array d = Napi::Uint8Array::New(env, static_cast<size_t>(r));
  std::memcpy(d.Data(), buf, static_cast<size_t>(r));
  o.Set("data", d);
  o.Set("fd", Napi::Number::New(env, afd));
  return o;
}

// memifMapFd(fd, size): maps a region fd received by a test (a client's memfd) as an ArrayBuffer.
Napi::Value MapFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifMapFd");
  size_t size = static_cast<size_t>(ArgInteger(info, 1, "memifMapFd", "size", 1, 1ull << 32));
  void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) throw ErrnoError(env, "memifMapFd: mmap", errno, "mmap");
  struct Holder { void* a; size_t n; };
  Holder* h = new Holder{a, size};
  return Napi::ArrayBuffer::New(env, a, size, [](Napi::Env, void*, Holder* x) { munmap(x->a, x->n); delete x; }, h);
}

}  // namespace

void InitMemif(Napi::Env env, Napi::Object exports) {
  exports.Set("Memif", Memif::Define(env));
  exports.Set("memifRx", Napi::Function::New(env, ByHandle<&Memif::Rx>, "memifRx"));
  exports.Set("memifTx", Napi::Function::New(env, ByHandle<&Memif::Tx>, "memifTx"));
  exports.Set("memifReclaim", Napi::Function::New(env, ByHandle<&Memif::ReclaimJs>, "memifReclaim"));
  exports.Set("memifPoll", Napi::Function::New(env, ByHandle<&Memif::PollNow>, "memifPoll"));
  exports.Set("memifRawConnect", Napi::Function::New(env, RawSocket<false>, "memifRawConnect"));
  exports.Set("memifRawListen", Napi::Function::New(env, RawSocket<true>, "memifRawListen"));
  exports.Set("memifRawAccept", Napi::Function::New(env, RawAccept, "memifRawAccept"));
  exports.Set("memifRawSend", Napi::Function::New(env, RawSend, "memifRawSend"));
  exports.Set("memifRawRecv", Napi::Function::New(env, RawRecv, "memifRawRecv"));
  exports.Set("memifMapFd", Napi::Function::New(env, MapFd, "memifMapFd"));
}

}  // namespace rg
