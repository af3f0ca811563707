// memif control channel: the listener, pending connections, INIT/ADD_REGION/ADD_RING/CONNECT/
// DISCONNECT on either side, reconnecting (the Memif methods declared in memif.h).
#include "memif.h"

namespace rg {
namespace memifimpl {

// A pending connection's INIT named this interface: take it or refuse with a reason.
const char* Memif::Adopt(Conn* c, const memif::Init& in) {
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

void Memif::MoveConn(Conn* c, int ep) {
  if (c->watch_ep == ep) return;
  EpollDel(c->watch_ep, c->fd);
  EpollAdd(ep, c->fd);
  c->watch_ep = ep;
}

// Services the listener, pending connections, our connection and the reconnect timer.
void Memif::Poll() {
  if (released_ || !pool_bound_) return;
  if (shared_ != nullptr) {
    const char* f = shared_->fault.exchange(nullptr);
    if (f != nullptr) {
      EventRead(shared_->fault_fd);
      Disconnect(f, true, true);
    }
  }
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

void Memif::PollListener(Listener* l, int ep) {
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
  // Look before accepting: an accept4 that finds no connection still makes and frees a socket,
  // its inode and file (3.6 us on the 2-core VM, a poll 0.35 us), and an idle server's control
  // check runs at every empty rx poll.
  struct pollfd p = {l->fd, POLLIN, 0};
  const bool waiting = poll(&p, 1, 0) == 1;
  while (waiting) {  // until accept4 finds none
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
      if (target == nullptr)
        reason = "ID not found";
      else
        reason = target->Adopt(c, m.init);
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

void Memif::ClosePending(Listener* l, Conn* c) {
  auto it = std::find(l->pending.begin(), l->pending.end(), c);
  if (it != l->pending.end()) l->pending.erase(it);
  EpollDel(c->watch_ep, c->fd);
  close(c->fd);
  delete c;
}

void Memif::SendDisconnect(int fd, const std::string& reason, uint32_t code) {
  Msg m;
  std::memset(&m, 0, sizeof m);
  m.type = memif::kMsgDisconnect;
  m.disconnect.code = code;
  CopyName(m.disconnect.string, memif::kReasonSize, reason);
  SendMsg(fd, m, -1);
}

void Memif::TryConnect() {
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

void Memif::ArmRetry() {
  if (timer_fd_ < 0) return;
  struct itimerspec its;
  std::memset(&its, 0, sizeof its);
  its.it_value.tv_sec = kRetryNs / 1000000000;
  its.it_value.tv_nsec = kRetryNs % 1000000000;
  timerfd_settime(timer_fd_, 0, &its, nullptr);
}

// Queues (or sends) one message on our connection.
void Memif::Send(uint16_t type, const void* body, size_t len, int fd) {
  if (conn_ == nullptr) return;
  Conn::Out o;
  std::memset(&o.msg, 0, sizeof o.msg);
  o.msg.type = type;
  if (len) std::memcpy(o.msg.raw, body, len);
  o.fd = fd;
  conn_->out.push_back(o);
  Flush(conn_);
}

void Memif::Flush(Conn* c) {
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
      if (!why.empty())
        Disconnect(why, false, false, code, true);
      else
        Disconnect(std::string("control socket send failed: ") + std::strerror(err), false, false);
      return;
    }
  }
}

// The reason of a DISCONNECT among the messages a closed peer left unread on `fd`, or "".
// Reads at most kLeftMessages (the peer decides how many it sent, we decide how many we read).
std::string Memif::LeftDisconnect(int fd, uint32_t* code) {
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

void Memif::ArmSoon() {
  struct itimerspec its;
  std::memset(&its, 0, sizeof its);
  its.it_value.tv_nsec = 1000 * 1000;
  timerfd_settime(timer_fd_, 0, &its, nullptr);
}

void Memif::ServiceConn(Conn* c) {
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
const char* Memif::ServerMsg(const Msg& m, int afd) {
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
      if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return CloseAnd(afd, "Region not sealed against shrinking (F_SEAL_SHRINK)");
      struct stat st;
      if (fstat(afd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ar.size)
        return CloseAnd(afd, "Region fd smaller than the region");
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
      if (fl < 0 || fcntl(afd, F_SETFL, fl | O_NONBLOCK) != 0)
        return CloseAnd(afd, "Interrupt fd cannot be made non-blocking");
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

const char* Memif::CloseAnd(int fd, const char* reason) {
  if (fd >= 0) close(fd);
  return reason;
}

// Handles one message on the client; returns a disconnect reason or nullptr. Takes afd.
const char* Memif::ClientMsg(const Msg& m, int afd) {
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
const char* Memif::OnHello(const memif::Hello& h) {
  if (h.min_version > memif::kVersion || h.max_version < memif::kVersion) return "Incompatible memif version";
  remote_name_ = NameOf(h.name, memif::kNameSize);
  ResetRun();
  const uint32_t nc2s = std::min<uint32_t>(ntx_, uint32_t{h.max_s2m_ring} + 1);
  const uint32_t ns2c = std::min<uint32_t>(nrx_, uint32_t{h.max_m2s_ring} + 1);
  const uint32_t log2 = std::min<uint32_t>(log2_, h.max_log2_ring_size);
  if (log2 == 0) return "Server offers no ring size";
  zc_ = pool_.fd >= 0 && h.max_region >= 1 && pool_.mem_len <= 0xffffffffull && shared_ == nullptr;
  zc_gather_ = zc_ && gather_env_;
  const uint64_t ring_bytes = memif::RingBytes(log2);
  uint64_t size = ring_bytes * (nc2s + ns2c);
  const uint64_t buffers_at = (size + 63) & ~uint64_t{63};
  // Slot buffers: every ring's in copy mode; a zero-copy client's transmit rings' only, for the
  // frames it gathers from MRs (zc_gather_), unless they would not fit 32-bit offsets (then the
  // tx node copies such payloads into the pool, as without them).
  const uint64_t slot_bytes = uint64_t{buffer_size_} << log2;
  if (zc_gather_ && buffers_at + slot_bytes * nc2s > 0xffffffffull) zc_gather_ = false;
  if (!zc_ || zc_gather_) size = buffers_at + slot_bytes * (zc_ ? nc2s : nc2s + ns2c);
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
    if (!zc_ || (zc_gather_ && c2s)) {
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

const char* Memif::LocalError(const char* what) {
  local_error_ = std::string(what) + ": " + std::strerror(errno);
  return local_error_.c_str();
}

void Memif::SetupRing(Ring& r) {
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
const char* Memif::MapAndConnect() {
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
  for (Ring& r : rx_)
    if (r.present) {
      Store16Relaxed(r.head_p(), 0);
      Store16Relaxed(r.tail_p(), 0);
    }
  for (Ring& r : tx_)
    if (r.present) {
      Store16Relaxed(r.head_p(), 0);
      Store16Relaxed(r.tail_p(), 0);
    }
  OnConnected();
  return nullptr;
}

void Memif::OnConnected() {
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
    if (!server_) Refill(own_, r);
  }
  for (Ring& r : tx_)
    if (r.present) ntx_run_++;
  LanesReady(true);
  SetLink(true);
}

void Memif::LanesReady(bool up) {
  if (shared_ == nullptr) return;
  for (uint32_t q = 0; q < shared_->mu.size(); q++) {
    std::lock_guard<std::mutex> g(shared_->mu[q]);
    shared_->ready[q] = up ? 1 : 0;
    shared_->generation++;
  }
}

void Memif::SetLink(bool up) {
  if (pool_.state != nullptr) {
    pool_.state[kStLink] = up ? 1 : 0;
    pool_.state[kStExt] = up && (!zc_ || zc_gather_) && pool_.ext != nullptr ? 1 : 0;
    pool_.state[kStGen]++;
    pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
  }
}

// Forget the run-time configuration (rings, regions) of a finished or refused connection.
void Memif::ResetRun() {
  rx_.assign(nrx_, Ring());
  tx_.assign(ntx_, Ring());
  zc_ = false;
  zc_gather_ = false;
}

// Ends the connection: tell the peer why (when `tell`), release rings, regions and fds, move
// ring-held buffers to the orphan list. The client retries after kRetryNs.
void Memif::Disconnect(const std::string& reason, bool local, bool tell, uint32_t code, bool remote_msg) {
  if (conn_ == nullptr && phase_ == Phase::kIdle) return;
  const bool was_up = phase_ == Phase::kConnected;
  LanesReady(false);  // no other thread touches the rings from here on
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
    if (r.holding) Settle(r);  // the client's memory is about to go: what still lives copies in
    if (r.fd >= 0) {
      EpollDel(ep_[q], r.fd);
      close(r.fd);
    }
    for (uint32_t& bi : r.shadow)
      if (bi != kInvalid) {
        orphans_.push_back(bi);
        bi = kInvalid;
      }
  }
  for (Ring& r : tx_) {
    if (r.fd >= 0) close(r.fd);
    for (uint32_t& bi : r.shadow)
      if (bi != kInvalid) {
        orphans_.push_back(bi);
        bi = kInvalid;
      }
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
  if (was_up || !orphans_.empty())
    SetLink(false);
  else if (pool_.state != nullptr)
    pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
}

}  // namespace memifimpl
}  // namespace rg
