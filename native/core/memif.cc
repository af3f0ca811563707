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
// See memif_proto.h for the wire format, native/addons.ts (Memif) for the JavaScript view and
// drivers/memif.ts for the driver built on it.
#include "memif.h"

namespace rg {
namespace memifimpl {

thread_local std::vector<Memif*> t_memifs;
thread_local std::vector<Listener*> t_listeners;

std::string OptStr(Napi::Object o, const char* key, const char* fn, const std::string& def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsString()) throw TypeErr(o.Env(), std::string(fn) + ": " + key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

PoolView ParsePool(Napi::Env env, Napi::Object o, const char* fn, uint32_t min_done,
                   std::vector<Napi::Reference<Napi::Value>>* refs) {
  const std::string f = fn;
  Napi::Value memv = o.Get("memory");
  if (!memv.IsArrayBuffer()) throw TypeErr(env, f + ": memory must be an ArrayBuffer");
  Napi::ArrayBuffer mem = memv.As<Napi::ArrayBuffer>();
  PoolView p;
  p.mem = static_cast<uint8_t*>(mem.Data());
  p.mem_len = mem.ByteLength();
  if (p.mem == nullptr || p.mem_len == 0) throw RangeErr(env, f + ": memory is empty or detached");
  Napi::Value fdv = o.Get("fd");
  p.fd = fdv.IsNumber() ? fdv.As<Napi::Number>().Int32Value() : -1;
  if (p.fd >= 0 && !IsOwnedFd(p.fd)) p.fd = -1;  // only memory from allocMemory() can be shared
  p.first_offset = OptU32(o, "firstOffset", fn, 0, 0, 4294967295.0);
  p.stride = OptU32(o, "stride", fn, 0, 64, 1u << 20);
  p.headroom = OptU32(o, "headroom", fn, 0, 0, 65535);
  p.data_size = OptU32(o, "dataSize", fn, 0, 64, 1u << 20);
  p.count = OptU32(o, "count", fn, 0, 1, 4294967294.0);
  if (p.stride < p.headroom + p.data_size) throw RangeErr(env, f + ": stride < headroom + dataSize");
  if (uint64_t{p.first_offset} + uint64_t{p.count} * p.stride > p.mem_len) {
    throw RangeErr(env, f + ": the buffers do not fit in the memory");
  }
  if (uint64_t{p.first_offset} + uint64_t{p.count} * p.stride > 0xffffffffull) p.fd = -1;  // offsets are u32
  p.offset = U32ArrayArg(env, o.Get("offset"), fn, "offset", p.count);
  p.length = U32ArrayArg(env, o.Get("length"), fn, "length", p.count);
  p.flags = U32ArrayArg(env, o.Get("flags"), fn, "flags", p.count);
  p.next = U32ArrayArg(env, o.Get("next"), fn, "next", p.count);
  size_t cap = 0;
  p.stash = U32ArrayArg(env, o.Get("stash"), fn, "stash", 1, &cap);
  p.stash_cap = static_cast<uint32_t>(cap);
  p.done = U32ArrayArg(env, o.Get("done"), fn, "done", 1, &cap);
  p.done_cap = static_cast<uint32_t>(cap);
  if (p.done_cap < min_done) {
    throw RangeErr(env, f + ": done must hold at least " + std::to_string(min_done) + " indices");
  }
  p.state = U32ArrayArg(env, o.Get("state"), fn, "state", kStateLen);
  p.f_next = OptU32(o, "flagNext", fn, 0, 1, 4294967295.0);
  refs->clear();
  for (const char* k : {"memory", "offset", "length", "flags", "next", "stash", "done", "state"}) {
    refs->push_back(Napi::Persistent(o.Get(k)));
  }
  // External payload segments (optional).
  const ExtBinding eb = ParseExtBinding(env, o, fn, p.f_next, p.count, refs);
  p.ext = eb.ext;
  p.ext_id = eb.ext_id;
  p.f_ext = eb.f_ext;
  std::memset(p.state, 0, kStateLen * sizeof(uint32_t));
  return p;
}

// bindPool({memory, fd, firstOffset, stride, headroom, dataSize, count, offset, length, flags,
//           next, stash, done, state, flagNext, ext?, extId?, flagExt?, windows?})
Napi::Value Memif::BindPool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (released_) throw Napi::Error::New(env, "Memif.bindPool: interface " + name_ + " is closed");
  if (pool_bound_) throw Napi::Error::New(env, "Memif.bindPool: a pool is already bound to " + name_);
  if (!info[0].IsObject()) throw TypeErr(env, "Memif.bindPool: expects an object");
  Napi::Object o = info[0].As<Napi::Object>();
  pool_ = ParsePool(env, o, "Memif.bindPool", (1u << log2_) + 256, &refs_);
  // Received payload left in the client's memory (a server's own queues): optional.
  Napi::Value wv = o.Get("windows");
  win_ = nullptr;
  if (!wv.IsUndefined() && !wv.IsNull()) {
    RxWindows* w = RxWindows::FromValue(env, wv, "Memif.bindPool");
    if (!w->SamePool(pool_.mem, pool_.count, pool_.flags))
      throw RangeErr(env, "Memif.bindPool: windows are another pool's");
    if ((w->f_peer() | w->f_peer_chain()) & (pool_.f_next | pool_.f_ext))
      throw RangeErr(env, "Memif.bindPool: the windows' flags are flagNext's or flagExt's");
    w->Reserve();
    win_ = w;
    refs_.push_back(Napi::Persistent(wv));
  }
  own_.pool = &pool_;
  own_.orphans = &orphans_;
  pool_bound_ = true;
  ResetRun();
  Poll();
  return env.Undefined();
}

const char* Memif::PhaseName(Phase ph) {
  switch (ph) {
    case Phase::kIdle:
      return "idle";
    case Phase::kWaitHello:
      return "hello";
    case Phase::kHandshake:
      return "handshake";
    case Phase::kConnected:
      return "connected";
  }
  return "?";
}

Napi::Value Memif::Info(const Napi::CallbackInfo& info) {
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
  for (Ring& r : rx_)
    if (r.present) ring_size = r.size;
  for (Ring& r : tx_)
    if (r.present && ring_size == 0) ring_size = r.size;
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
  o.Set("lastConnectError",
        last_connect_errno_ ? Napi::Value(Napi::String::New(env, std::strerror(last_connect_errno_))) : env.Null());
  return o;
}

Napi::Value Memif::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  auto set = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
  // This thread's queues only: a queue another worker polls (MemifLane) is counted by its lane,
  // and the worker facade adds the workers' counts up (dataplane/workers/facade.ts).
  uint64_t c[Lane::kCounters] = {};
  own_.AddCounters(c);
  for (int i = 0; i < Lane::kCounters; i++) set(Lane::kCounterNames[i], static_cast<double>(c[i]));
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
Napi::Value Memif::Close(const Napi::CallbackInfo& info) {
  if (!released_) Disconnect("Interface closed", true, true);
  Release();
  return info.Env().Undefined();
}

void Memif::Listen(Napi::Env env, const std::string& where) {
  for (Listener* l : t_listeners) {
    if (l->addr == addr_) {
      for (Memif* x : l->members) {
        if (x->id_ == id_) {
          throw RangeErr(env, where + ": interface id " + std::to_string(id_) + " is already served on socket " +
                                  addr_.Text() + " by " + x->name_);
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

void Memif::LeaveListener() {
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
    if (stat(l->addr.name.c_str(), &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
      unlink(l->addr.name.c_str());
  }
  t_listeners.erase(std::remove(t_listeners.begin(), t_listeners.end(), l), t_listeners.end());
  delete l;
}

void Memif::Release() {
  if (released_) return;
  released_ = true;
  if (shared_ != nullptr) {
    // Lanes see m == null from now on and let go; the rings go below.
    for (auto& mu : shared_->mu) mu.lock();
    shared_->m = nullptr;
    std::fill(shared_->ready.begin(), shared_->ready.end(), 0);
    for (auto& mu : shared_->mu) mu.unlock();
    UnpublishShared(lane_key_, shared_.get());
  }
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
  if (shared_ != nullptr && shared_->fault_fd >= 0) {
    close(shared_->fault_fd);
    shared_->fault_fd = -1;
  }
  if (pool_.state != nullptr) {
    pool_.state[kStLink] = 0;
    pool_.state[kStExt] = 0;
    pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
  }
}

void InitMemifRaw(Napi::Env env, Napi::Object exports);
void InitMemifLane(Napi::Env env, Napi::Object exports);

// memifLayout(): the layout of what JavaScript shares with the data path (bindPool's `state`
// array: its length and the index of each word; the largest frame received), which
// drivers/memif.ts and drivers/memif-lane.ts take from here rather than keep copies.
Napi::Value Layout(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object state = Napi::Object::New(env);
  state.Set("stash", Napi::Number::New(env, kStStash));
  state.Set("done", Napi::Number::New(env, kStDone));
  state.Set("gen", Napi::Number::New(env, kStGen));
  state.Set("link", Napi::Number::New(env, kStLink));
  state.Set("orphans", Napi::Number::New(env, kStOrphans));
  state.Set("ext", Napi::Number::New(env, kStExt));
  Napi::Object o = Napi::Object::New(env);
  o.Set("state", state);
  o.Set("stateLength", Napi::Number::New(env, kStateLen));
  o.Set("maxFrame", Napi::Number::New(env, static_cast<double>(kMaxFrame)));
  return o;
}

// memifRx(handle, queue, out, max) and memifTx(handle, queue, bufs, off, n), the per-burst
// calls (every polling pass makes one): raw Node-API functions with the fewest engine calls the
// arguments allow. Through node-addon-api's checked wrappers a call cost ~220 ns here before
// any work, more than a burst of one frame.
static bool U32Args(napi_env env, const napi_value* a, const int* which, int n, uint32_t* out) {
  for (int i = 0; i < n; i++) {
    if (napi_get_value_uint32(env, a[which[i]], &out[i]) != napi_ok) return false;
  }
  return true;
}

static bool U32Array(napi_env env, napi_value v, uint32_t** data, size_t* length) {
  napi_typedarray_type type;
  void* p = nullptr;
  if (napi_get_typedarray_info(env, v, &type, length, &p, nullptr, nullptr) != napi_ok || type != napi_uint32_array)
    return false;
  *data = static_cast<uint32_t*>(p);
  return true;
}

static Memif* ByNumber(uint32_t h) { return h < t_memifs.size() ? t_memifs[h] : nullptr; }

static napi_value Uint32Result(napi_env env, uint32_t n) {
  napi_value r = nullptr;
  napi_create_uint32(env, n, &r);
  return r;
}

static napi_value RawRx(napi_env env, napi_callback_info cbi) {
  size_t argc = 4;
  napi_value a[4];
  if (napi_get_cb_info(env, cbi, &argc, a, nullptr, nullptr) != napi_ok) return nullptr;
  static const int kNums[] = {0, 1, 3};
  uint32_t v[3];  // handle, queue, max
  uint32_t* out = nullptr;
  size_t length = 0;
  // Most polls of a busy-polling engine find the ring as they left it: answered before `out` and
  // `max` are converted (napi_get_typedarray_info alone was ~5 % of such a poll).
  if (argc == 4 && U32Args(env, a, kNums, 2, v)) {
    Memif* m = ByNumber(v[0]);
    if (m != nullptr && m->RxQuickEmpty(v[1])) return Uint32Result(env, 0);
  }
  if (argc < 4 || !U32Args(env, a, kNums, 3, v)) {
    napi_throw_type_error(env, nullptr, "memifRx(handle, queue, out, max): handle, queue and max must be numbers");
    return nullptr;
  }
  if (!U32Array(env, a[2], &out, &length)) {
    napi_throw_type_error(env, nullptr, "memifRx: out must be a Uint32Array");
    return nullptr;
  }
  Memif* m = ByNumber(v[0]);
  if (m == nullptr) return Uint32Result(env, 0);
  const uint32_t max = v[2] > length ? static_cast<uint32_t>(length) : v[2];
  return Uint32Result(env, m->RxBurst(v[1], out, max));
}

static napi_value RawTx(napi_env env, napi_callback_info cbi) {
  size_t argc = 5;
  napi_value a[5];
  if (napi_get_cb_info(env, cbi, &argc, a, nullptr, nullptr) != napi_ok) return nullptr;
  static const int kNums[] = {0, 1, 3, 4};
  uint32_t v[4];  // handle, queue, off, n
  uint32_t* bufs = nullptr;
  size_t length = 0;
  if (argc < 5 || !U32Args(env, a, kNums, 4, v)) {
    napi_throw_type_error(env, nullptr,
                          "memifTx(handle, queue, bufs, off, n): handle, queue, off and n must be numbers");
    return nullptr;
  }
  if (!U32Array(env, a[2], &bufs, &length)) {
    napi_throw_type_error(env, nullptr, "memifTx: bufs must be a Uint32Array");
    return nullptr;
  }
  if (uint64_t{v[2]} + v[3] > length) {
    napi_throw_range_error(env, nullptr, "memifTx: off + n beyond bufs");
    return nullptr;
  }
  Memif* m = ByNumber(v[0]);
  if (m == nullptr) return Uint32Result(env, 0);
  return Uint32Result(env, m->TxBurst(v[1], bufs + v[2], v[3]));
}

}  // namespace memifimpl

void InitMemif(Napi::Env env, Napi::Object exports) {
  using namespace memifimpl;
  exports.Set("Memif", Memif::Define(env));
  for (const auto& [name, fn] : {std::pair<const char*, napi_callback>{"memifRx", RawRx}, {"memifTx", RawTx}}) {
    napi_value f;
    if (napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, nullptr, &f) != napi_ok) throw Napi::Error::New(env);
    exports.Set(name, Napi::Value(env, f));
  }
  exports.Set("memifReclaim", Napi::Function::New(env, ByHandle<&Memif::ReclaimJs>, "memifReclaim"));
  exports.Set("memifPoll", Napi::Function::New(env, ByHandle<&Memif::PollNow>, "memifPoll"));
  exports.Set("memifLayout", Napi::Function::New(env, Layout, "memifLayout"));
  InitMemifRaw(env, exports);
  InitMemifLane(env, exports);
}

}  // namespace rg
