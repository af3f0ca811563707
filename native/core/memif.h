// memif: the Memif class and what its files share (memif.cc: construction and the JavaScript
// methods; memif_control.cc: the control channel; memif_rings.cc: the data path;
// memif_socket.cc: socket, eventfd and epoll helpers; memif_raw.cc: raw sockets for tests).
// The design is described at the top of memif.cc.
#pragma once

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
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "ext_table.h"
#include "memif_proto.h"
#include "rx_windows.h"

namespace rg {
namespace memifimpl {

using memif::Desc;
using memif::Msg;

constexpr uint32_t kInvalid = 0xffffffffu;
constexpr uint32_t kMaxChain = 256;                     // descriptors in one received frame
constexpr uint16_t kRxPrefetchAhead = 8;                // copy-mode receive: frames prefetched ahead
constexpr uint64_t kMaxFrame = 256 * 1024;              // bytes in one received frame
constexpr uint32_t kMaxTxSegs = 64;                     // pool segments in one transmitted frame
constexpr uint32_t kBusyControlEvery = 1024;            // busy rx polls between control-channel checks
constexpr uint32_t kIdleControlEvery = 256;             // empty polls (interrupts still off) between checks
constexpr uint32_t kIdleReclaimEvery = 16;              // those between zero-copy reclaims (no syscall)
constexpr uint64_t kIdleNsDefault = 50 * 1000;          // empty this long: interrupts back on (option idleUs)
constexpr long kRetryNs = 250 * 1000 * 1000;            // client reconnect interval
constexpr size_t kMaxPending = 8;                       // accepted connections waiting for INIT, per socket
constexpr uint64_t kPendingNs = 2000ull * 1000 * 1000;  // how long one may wait for INIT

// Indices into the shared state array (a Uint32Array JavaScript reads after each call; its
// drivers take them, kStateLen and kMaxFrame from core.memifLayout(), memif.cc).
enum State : uint32_t {
  kStStash = 0,    // buffers in the stash
  kStDone = 1,     // entries of `done` JavaScript must free
  kStGen = 2,      // bumped at every connect and disconnect
  kStLink = 3,     // 1 while connected
  kStOrphans = 4,  // buffers waiting for memifReclaim after a disconnect
  kStExt = 5,      // 1 while connected in copy mode with an ExtTable bound: transmit reads EXT segments
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
      throw RangeErr(env, where +
                              ": socket must be a path or an abstract name (\"@name\" or \"abstract:name\") of 1 to " +
                              std::to_string(max) + " bytes, got \"" + s + "\"");
    }
    return a;
  }
};

int MakeSeqpacket();

// mkdir -p of the parent of `path` (mode 0755 for what it creates). 0 or an errno.
int MakeParents(const std::string& path);

// Sends `len` bytes as one message, with `fd` in SCM_RIGHTS when >= 0. Returns 0, or an errno.
int SendBytes(int sock, const void* data, size_t len, int fd);
// The same with `n` descriptors (at most kMaxPassFds: the verbs socket's REG_MR pieces).
constexpr size_t kMaxPassFds = 64;
int SendFds(int sock, const void* data, size_t len, const int* fds, size_t n);

inline int SendMsg(int sock, const Msg& m, int fd) { return SendBytes(sock, &m, sizeof m, fd); }

// Receives one message into buf (up to cap bytes). Returns the length (0: peer closed), or
// -errno. *fd gets the first descriptor passed with it (others are closed), or -1.
ssize_t RecvMsg(int sock, void* buf, size_t cap, int* fd);

void CopyName(uint8_t* dst, size_t cap, const std::string& s);

std::string NameOf(const uint8_t* p, size_t cap);

// The interrupt eventfds are shared with the peer: SCM_RIGHTS shares the open file
// description, O_NONBLOCK included, so the peer can make one blocking at any moment, and a
// pipe or a socket could be sent in its place. ADD_RING takes only eventfds (IsEventfd) and
// sets O_NONBLOCK; reads and writes never block (eventfd.cc: preadv2 RWF_NOWAIT, and a timer
// guard around a write, since the peer can clear O_NONBLOCK and fill the counter between any
// check and the write), and a peer found to have cleared O_NONBLOCK is disconnected
// (EventWrite returns -1).
bool IsEventfd(int fd);

bool PollFd(int fd, short ev);

// Takes the counter if there is one; true when it was non-zero.
bool EventRead(int fd);

// Adds 1; 1 when written, 0 when there was no room, -1 when the fd was made blocking.
int EventWrite(int fd);

void EpollAdd(int ep, int fd);
void EpollDel(int ep, int fd);

class Memif;
struct Listener;

// One control channel (a connected SOCK_SEQPACKET socket). A server's accepted connection has
// no owner until its INIT names an interface id.
struct Conn {
  int fd = -1;
  uint64_t since = 0;  // when accepted (pending connections time out)
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

extern thread_local std::vector<Listener*> t_listeners;
extern thread_local std::vector<Memif*> t_memifs;

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
  int fd = -1;        // interrupt eventfd
  uint16_t head = 0;  // our copy of what we publish (head or tail) and what we consumed
  uint16_t last = 0;
  std::vector<uint32_t> shadow;  // zero-copy: pool buffer held by each slot
  uint32_t buffers = 0;          // client copy mode: offset of this ring's buffers in region 0
  bool masked = false;           // receive ring: MASK_INT currently set by us
  uint64_t empty_since = 0;      // receive ring: when polls started finding it empty (0: not empty)
  bool present = false;
  uint16_t region = 0;
  uint32_t offset = 0;
  // Server receive ring: buffers of the last burst whose bytes were left in the peer's memory
  // (RxWindows); until they are copied in or gone, the tail (the slots' return) is not published.
  std::vector<uint32_t> held;
  bool holding = false;

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
  // External payload (graph/ext-memory.ts): a segment flagged f_ext has its bytes in memory
  // ext_id[bi] of `ext` at offset[bi], not in the pool. MemifLanes have the bit, no table.
  const ExtTable* ext = nullptr;
  uint32_t* ext_id = nullptr;
  uint32_t f_ext = 0;
  int fd = -1;
  uint32_t DataStart(uint32_t bi) const { return first_offset + bi * stride + headroom; }
};

// One data-path context: the pool its buffers come from, its counters and scratch. The owner
// thread's (Memif::own_) covers the queues it polls; a queue another worker thread polls
// (MemifLane, memif_lane.cc) has its own, over that thread's pool.
struct Lane {
  PoolView* pool = nullptr;
  std::vector<uint32_t>* orphans = nullptr;  // buffers `done` had no room for
  Desc chain[kMaxChain];                     // RxRing's private copies of one frame's descriptors
  uint64_t rx_packets = 0, rx_bytes = 0, rx_errors = 0, rx_no_buffers = 0, rx_chained = 0, rx_deferred = 0;
  uint64_t tx_packets = 0, tx_bytes = 0, tx_errors = 0, tx_refused = 0, tx_chained = 0, tx_gathered = 0;
  uint64_t kicks = 0, interrupts = 0;
  // A protocol error found on the data path (the peer broke a ring): the owner disconnects.
  const char* fault = nullptr;

  // The counters as stats() names them (this lane's alone), added into `c` (kCounterNames order).
  static constexpr int kCounters = 14;
  static constexpr const char* kCounterNames[kCounters] = {
      "rxPackets", "rxBytes",   "rxErrors",  "rxNoBuffers", "rxChained",  "txPackets",  "txBytes",
      "txErrors",  "txRefused", "txChained", "kicks",       "interrupts", "rxDeferred", "txGathered"};
  void AddCounters(uint64_t* c) const {
    const uint64_t v[kCounters] = {rx_packets, rx_bytes,   rx_errors,   rx_no_buffers, rx_chained,
                                   tx_packets, tx_bytes,   tx_errors,   tx_refused,    tx_chained,
                                   kicks,      interrupts, rx_deferred, tx_gathered};
    for (int i = 0; i < kCounters; i++) c[i] += v[i];
  }
};

class Memif;

// What the owner of an interface whose queues are spread over worker threads (option laneKey)
// shares with the MemifLanes of the other threads, found by key (FindShared). Queue q's rings
// are touched by one lane at a time: the owner takes mu[q] before it sets up or tears down the
// rings (ready[q]), a lane holds it for each burst. Kept alive by whoever holds it: m is null
// once the owner is gone.
struct Shared {
  explicit Shared(uint32_t nq) : mu(nq), txmu(nq), ready(nq, 0), lanes(nq, nullptr) {}
  std::vector<std::mutex> mu;
  // Per transmit ring, taken for each burst: several threads' queues map to one ring when the
  // peer took fewer rings than there are queues. Taken after mu[q] (lanes), never before.
  std::vector<std::mutex> txmu;
  Memif* m = nullptr;
  std::vector<uint8_t> ready;
  std::vector<Lane*> lanes;                 // the lane attached to each queue, or null (owner's)
  std::atomic<const char*> fault{nullptr};  // a lane's protocol error, for the owner
  int fault_fd = -1;                        // eventfd in the owner's queue-0 epoll: a lane found a fault
  uint64_t generation = 0;                  // bumped (under every mu) at each connect and disconnect
};

void PublishShared(const std::string& key, const std::shared_ptr<Shared>& sh);
void UnpublishShared(const std::string& key, const Shared* sh);
std::shared_ptr<Shared> FindShared(const std::string& key);

// Parses a bindPool object (Memif.bindPool, MemifLane.bindPool); `done` must hold min_done.
PoolView ParsePool(Napi::Env env, Napi::Object o, const char* fn, uint32_t min_done,
                   std::vector<Napi::Reference<Napi::Value>>* refs);

enum class Phase { kIdle, kWaitHello, kHandshake, kConnected };

std::string OptStr(Napi::Object o, const char* key, const char* fn, const std::string& def);

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
    if (role != "server" && role != "client")
      throw RangeErr(env, where + ": role must be 'server' or 'client', got '" + role + "'");
    server_ = role == "server";
    id_ = OptU32(o, "id", "Memif", 0, 0, 4294967295.0);
    secret_ = OptStr(o, "secret", "Memif", "");
    if (secret_.size() > memif::kSecretSize) throw RangeErr(env, where + ": secret is longer than 24 bytes");
    log2_ = OptU32(o, "log2RingSize", "Memif", 10, 1, memif::kMaxLog2RingSize);
    buffer_size_ = OptU32(o, "bufferSize", "Memif", 2048, 128, 65535);
    nrx_ = OptU32(o, "rxQueues", "Memif", 1, 1, 255);
    ntx_ = OptU32(o, "txQueues", "Memif", nrx_, 1, 255);
    {
      Napi::Value v = o.Get("idleUs");
      if (!v.IsUndefined()) {
        const double us = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
        if (!(us >= 0 && us <= 3.6e9))
          throw RangeErr(env, where + ": idleUs must be a number of microseconds in 0..3.6e9");
        idle_ns_ = static_cast<uint64_t>(us * 1000.0);
      }
    }

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
    lane_key_ = OptStr(o, "laneKey", "Memif", "");
    if (!lane_key_.empty()) {
      // Queues other threads poll: copy mode only (their buffers are in their own pools), and a
      // fault eventfd in queue 0's epoll through which a lane tells us to disconnect.
      shared_ = std::make_shared<Shared>(std::max(nrx_, ntx_));
      shared_->m = this;
      shared_->fault_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (shared_->fault_fd < 0) {
        int err = errno;
        Release();
        throw ErrnoError(env, where + ": eventfd", err, "eventfd");
      }
      EpollAdd(ep_[0], shared_->fault_fd);
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
    if (shared_ != nullptr) PublishShared(lane_key_, shared_);

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
  const char* Adopt(Conn* c, const memif::Init& in);

  static void MoveConn(Conn* c, int ep);

  // ---------------------------------------------------------------- control channel

  // Services the listener, pending connections, our connection and the reconnect timer.
  void Poll();

  static void PollListener(Listener* l, int ep);

  static void ClosePending(Listener* l, Conn* c);

  static void SendDisconnect(int fd, const std::string& reason, uint32_t code);

  void TryConnect();

  void ArmRetry();

  // Queues (or sends) one message on our connection.
  void Send(uint16_t type, const void* body, size_t len, int fd);

  void Flush(Conn* c);

  // The reason of a DISCONNECT among the messages a closed peer left unread on `fd`, or "".
  // Reads at most kLeftMessages (the peer decides how many it sent, we decide how many we read).
  static std::string LeftDisconnect(int fd, uint32_t* code);

  void ArmSoon();

  void ServiceConn(Conn* c);

  // Handles one message on the server; returns a disconnect reason or nullptr. Takes afd.
  const char* ServerMsg(const Msg& m, int afd);

  static const char* CloseAnd(int fd, const char* reason);

  // Handles one message on the client; returns a disconnect reason or nullptr. Takes afd.
  const char* ClientMsg(const Msg& m, int afd);

  // Client: the server's limits are known; build the regions and rings and send them.
  const char* OnHello(const memif::Hello& h);

  const char* LocalError(const char* what);

  void SetupRing(Ring& r);

  // Server, at CONNECT: map what the client gave and check every ring lies inside its region.
  const char* MapAndConnect();

  void OnConnected();

  void SetLink(bool up);

  // Forget the run-time configuration (rings, regions) of a finished or refused connection.
  void ResetRun();

  // Ends the connection: tell the peer why (when `tell`), release rings, regions and fds, move
  // ring-held buffers to the orphan list. The client retries after kRetryNs.
  void Disconnect(const std::string& reason, bool local, bool tell, uint32_t code = 0, bool remote_msg = false);

  // ---------------------------------------------------------------- data path

  void PushDone(Lane& L, uint32_t bi, uint32_t& done_n);

  // Recycle a buffer we did not hand out: back to the stash, or to `done` when it is full.
  void Recycle(Lane& L, uint32_t bi, uint32_t& stash_n, uint32_t& done_n);

  // Client receive ring: give the server empty buffers (zero-copy: pool buffers from the
  // stash; copy mode: the slot's own buffer in region 0).
  void Refill(Lane& L, Ring& r);

  // Validates one descriptor of a copy-mode receive; the address of its bytes or nullptr.
  const uint8_t* DescData(const Desc& d) const;
  void PrefetchAhead(const PoolView& p, const Ring& r, uint16_t cur, uint32_t stash_n) const;

  // The peer owns the descriptors it publishes and may rewrite them at any moment (a double
  // fetch is a hole): each descriptor of a frame is read once, volatile, into chain_, validated
  // there, and only the copy is used afterwards. Stash pops are counted from the copies.
  uint32_t RxRing(Lane& L, Ring& r, uint32_t* out, uint32_t max);

  // One receive / transmit burst on queue q with lane L's buffers (the caller owns q's rings:
  // the owner thread, or a MemifLane holding shared_->mu[q]).
  uint32_t RxQueue(Lane& L, uint32_t q, uint32_t* out, uint32_t max);
  uint32_t TxQueue(Lane& L, uint32_t q, const uint32_t* bufs, uint32_t n);
  void TakeFault();
  // Lanes may (true) or may no longer (false) touch the rings.
  void LanesReady(bool up);
  int wait_ep(uint32_t q) const { return q < ep_.size() ? ep_[q] : -1; }
  bool has_rx(uint32_t q) const { return q < rx_.size() && rx_[q].present; }

  // memifRx(handle, queue, out, max)'s body: one receive burst on queue q, at most max into out.
  uint32_t RxBurst(uint32_t q, uint32_t* out, uint32_t max);
  // An empty poll RxBurst would answer 0 to with nothing else to do (ring masked and empty for
  // less than idle_ns_, a client's ring full of buffers, no control-channel look or reclaim due):
  // counted as that poll, and memifRx answers 0 before it converts its other arguments.
  bool RxQuickEmpty(uint32_t q);

  static uint64_t NowNs();
  bool RingEmpty(Ring& r);

  // Receiving: no kicks wanted; the queue's hold eventfd turns readable so the engine polls on.
  void Mask(uint32_t q, Ring& r);

  // Idle: kicks wanted again (the store is ordered before any later read of head/tail), and
  // the engine may sleep.
  void Unmask(uint32_t q, Ring& r);

  void ClearHold(uint32_t q);

  // A server receive ring's held windows copied in (those still in use) and its slots returned.
  void Settle(Ring& r);

  // A frame of a server's receive left in the client's memory past its first bytes (RxWindows);
  // false when it is not such a frame or the stash lacks buffers (*dry then).
  bool RxDefer(Lane& L, Ring& r, uint32_t segs, uint64_t total, uint32_t& stash_n, uint32_t* head, bool* dry);

  // Zero-copy transmit rings: buffers the server has moved tail past go to `done`.
  void Reclaim(Lane& L, Ring& r);

  void ReclaimAll();

  void Kick(Lane& L, Ring& r);

  // Gathers a pool packet's segments; 0 when the chain is invalid. *ext: one of them is external.
  uint32_t Gather(const PoolView& p, uint32_t head, uint32_t* segs, const uint8_t** src, uint64_t* total, bool ext_ok,
                  bool* ext = nullptr) const;

  // memifTx(handle, queue, bufs, off, n)'s body: one transmit burst of n buffers; how many were taken.
  uint32_t TxBurst(uint32_t q, const uint32_t* bufs, uint32_t n);

  uint32_t TxZeroCopy(Lane& L, Ring& r, const uint32_t* bufs, uint32_t n);

  uint32_t TxCopy(Lane& L, Ring& r, const uint32_t* bufs, uint32_t n);

  // Copies a gathered frame into transmit slots from `slot` on, at most `free` of them: how many
  // it used; 0 when they are too few (nothing published) or a slot was invalid (*bad).
  uint32_t CopyFrame(Ring& r, uint16_t slot, uint32_t free, const PoolView& p, const uint32_t* segs,
                     const uint8_t* const* srcs, uint32_t ns, bool* bad);

  // Where a copy-mode transmit slot's bytes go and how many fit.
  bool DescRoom(Ring& r, uint16_t slot, uint8_t** dst, uint32_t* room);

  uint32_t TxFail(Lane& L, uint32_t taken, uint32_t done_n);

  // memifReclaim(handle): moves up to done_cap orphaned buffers into `done`; returns how many.
  Napi::Value ReclaimJs(const Napi::CallbackInfo& info);

  Napi::Value PollNow(const Napi::CallbackInfo& info);

  // ---------------------------------------------------------------- JS methods

  // bindPool({memory, fd, firstOffset, stride, headroom, dataSize, count, offset, length, flags,
  //           next, stash, done, state, flagNext})
  Napi::Value BindPool(const Napi::CallbackInfo& info);

  Napi::Value PollJs(const Napi::CallbackInfo& info) { return PollNow(info); }

  static const char* PhaseName(Phase ph);

  Napi::Value Info(const Napi::CallbackInfo& info);

  Napi::Value Stats(const Napi::CallbackInfo& info);

  // close(): DISCONNECT to the peer, release everything, remove the socket file (last server
  // interface on it). Ring-held buffers are left in the orphan list for memifReclaim.
  Napi::Value Close(const Napi::CallbackInfo& info);

 private:
  void Listen(Napi::Env env, const std::string& where);

  void LeaveListener();

  void Release();

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
  uint32_t busy_polls_ = 0, idle_polls_ = 0, reclaim_polls_ = 0;
  std::vector<int> hold_;  // per rx queue: readable while its ring is masked
  std::vector<uint8_t> hold_set_;
  uint32_t dummy_ = kInvalid;

  PoolView pool_;
  bool pool_bound_ = false;
  // Received payload left in the peer's memory (a server's own queues; RDMA_GRAPH_MEMIF_RX_DEFER=0
  // when the interface is opened turns it off).
  RxWindows* win_ = nullptr;
  const bool defer_env_ = [] {
    const char* v = getenv("RDMA_GRAPH_MEMIF_RX_DEFER");
    return v == nullptr || strcmp(v, "0") != 0;
  }();
  // A zero-copy client copies a frame with a payload sent from an MR in place (f_ext segments)
  // into slot buffers of its own (region 0, transmit rings only) instead of having the tx node
  // copy it into the pool first (RDMA_GRAPH_MEMIF_TX_GATHER=0 when the interface is opened turns
  // it off).
  const bool gather_env_ = [] {
    const char* v = getenv("RDMA_GRAPH_MEMIF_TX_GATHER");
    return v == nullptr || strcmp(v, "0") != 0;
  }();
  bool zc_gather_ = false;  // this connection: a zero-copy client with transmit slot buffers
  std::vector<Napi::Reference<Napi::Value>> refs_;
  std::vector<uint32_t> orphans_;
  Lane own_;  // this thread's queues
  std::string lane_key_;
  std::shared_ptr<Shared> shared_;  // queues spread over threads (laneKey), else null

  std::string remote_name_, remote_if_name_, last_reason_, local_error_;
  uint32_t last_code_ = 0;
  bool last_local_ = false, last_by_peer_ = false, last_was_up_ = false;
  // The last client this server interface refused (the reason sent in its DISCONNECT).
  std::string last_refusal_, last_refused_peer_;
  int last_connect_errno_ = 0;

 public:
  // Test hook (RDMA_GRAPH_MEMIF_RX_GAP_US when the interface is opened): microseconds between
  // draining a queue's interrupt and looking at its ring.
  const uint32_t rx_gap_us_ = [] {
    const char* v = getenv("RDMA_GRAPH_MEMIF_RX_GAP_US");
    return v != nullptr ? static_cast<uint32_t>(strtoul(v, nullptr, 10) % 100000) : 0u;
  }();
  uint64_t idle_ns_ = kIdleNsDefault;  // after traffic stops, this long with kicks off
  uint64_t connects_ = 0, disconnects_ = 0, connect_failures_ = 0, refused_ = 0;
  uint64_t msgs_received_ = 0;
};

template <Napi::Value (Memif::*M)(const Napi::CallbackInfo&)>
Napi::Value ByHandle(const Napi::CallbackInfo& info) {
  uint32_t h = info[0].As<Napi::Number>().Uint32Value();
  if (h >= t_memifs.size() || t_memifs[h] == nullptr) return Napi::Number::New(info.Env(), 0);
  return (t_memifs[h]->*M)(info);
}

}  // namespace memifimpl
}  // namespace rg
