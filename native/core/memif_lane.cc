// MemifLane: one queue pair of a memif interface, polled by a worker thread other than the one
// that owns the interface (cpu.workers with rx-queues spread over workers, VPP's rx-placement).
//
// The owner (a Memif made with laneKey) runs the control channel and maps the regions; it
// publishes a Shared under the key. A lane finds it by key, registers its own Lane (its thread's
// pool, counters and scratch) for queue q and from then on receives and transmits on queue q's
// rings, holding shared->mu[q] for each burst. The owner takes that mutex, and clears ready[q],
// before it tears the rings down (disconnect, close) and sets ready[q] after it set them up, so
// a lane never sees a ring half made or unmapped. Such an interface runs in copy mode: the
// lane's buffers live in its own thread's pool, which the peer never sees.
//
// Until it is attached (the owner has not started yet, or was restarted after a crash) the lane
// looks again every 10 ms: its wait fd is an epoll fd holding a timerfd until then, and the
// owner's epoll fd of queue q (interrupt eventfd and hold eventfd) afterwards.
#include <map>

#include "memif.h"

namespace rg {
namespace memifimpl {

namespace {
std::mutex g_registry_mu;
std::map<std::string, std::weak_ptr<Shared>>& Registry() {
  static auto* r = new std::map<std::string, std::weak_ptr<Shared>>();  // never destroyed: threads may outlive exit
  return *r;
}
constexpr long kAttachRetryNs = 10 * 1000 * 1000;
}  // namespace

void PublishShared(const std::string& key, const std::shared_ptr<Shared>& sh) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  Registry()[key] = sh;
}

void UnpublishShared(const std::string& key, const Shared* sh) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  auto it = Registry().find(key);
  if (it == Registry().end()) return;
  auto cur = it->second.lock();
  if (cur == nullptr || cur.get() == sh) Registry().erase(it);
}

std::shared_ptr<Shared> FindShared(const std::string& key) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  auto it = Registry().find(key);
  return it == Registry().end() ? nullptr : it->second.lock();
}

class MemifLane : public Napi::ObjectWrap<MemifLane> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "MemifLane",
                       {
                           InstanceMethod<&MemifLane::BindPool>("bindPool"),
                           InstanceMethod<&MemifLane::Rx>("rx"),
                           InstanceMethod<&MemifLane::Tx>("tx"),
                           InstanceMethod<&MemifLane::Reclaim>("reclaim"),
                           InstanceMethod<&MemifLane::Info>("info"),
                           InstanceMethod<&MemifLane::Stats>("stats"),
                           InstanceMethod<&MemifLane::Close>("close"),
                       });
  }

  // new MemifLane({name, key, queue})
  explicit MemifLane(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MemifLane>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw TypeErr(env, "MemifLane: expects an options object");
    Napi::Object o = info[0].As<Napi::Object>();
    name_ = OptStr(o, "name", "MemifLane", "memif");
    key_ = OptStr(o, "key", "MemifLane", "");
    if (key_.empty()) throw RangeErr(env, "MemifLane " + name_ + ": key must be a non-empty string");
    // Queue 0 is the owner's: its receive path also runs the control channel.
    q_ = OptU32(o, "queue", "MemifLane", 1, 1, 254);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep_ < 0 || timer_ < 0) {
      const int err = errno;
      Release();
      throw ErrnoError(env, "MemifLane " + name_ + ": epoll/timerfd", err, "epoll_create1");
    }
    EpollAdd(ep_, timer_);
    ArmTimer(true);
    info.This().As<Napi::Object>().Set("waitFd", Napi::Number::New(env, ep_));
  }

  ~MemifLane() override { Release(); }

 private:
  void ArmTimer(bool on) {
    itimerspec its{};
    if (on) {
      its.it_value.tv_nsec = kAttachRetryNs;
      its.it_interval.tv_nsec = kAttachRetryNs;
    }
    timerfd_settime(timer_, 0, &its, nullptr);
  }

  void SetLink(bool up) {
    if (state_ == nullptr) return;
    if ((state_[kStLink] != 0) != up) {
      state_[kStLink] = up ? 1 : 0;
      state_[kStGen]++;
    }
  }

  // Looks for the owner; true when attached to queue q_ (sh_ set).
  bool TryAttach() {
    uint64_t ticks;
    if (read(timer_, &ticks, sizeof ticks) < 0 && errno == EAGAIN && tried_) return false;  // once per 10 ms
    tried_ = true;
    std::shared_ptr<Shared> sh = FindShared(key_);
    if (sh == nullptr) return false;
    if (q_ >= sh->mu.size()) {
      error_ = "the interface has " + std::to_string(sh->mu.size()) + " queue pairs, no queue " + std::to_string(q_);
      return false;
    }
    std::lock_guard<std::mutex> g(sh->mu[q_]);
    if (sh->m == nullptr) return false;
    if (sh->lanes[q_] != nullptr && sh->lanes[q_] != &lane_) {
      error_ = "queue " + std::to_string(q_) + " is polled by another thread already";
      return false;
    }
    sh->lanes[q_] = &lane_;
    owner_ep_ = sh->m->wait_ep(q_);
    if (owner_ep_ >= 0) EpollAdd(ep_, owner_ep_);
    gen_ = sh->generation - 1;  // look at ready[q] on the next burst
    sh_ = std::move(sh);
    error_.clear();
    attaches_++;
    ArmTimer(false);
    return true;
  }

  // The owner is gone (closed, or its thread died): let go and look for the next one.
  void Detach() {
    if (sh_ == nullptr) return;
    {
      std::lock_guard<std::mutex> g(sh_->mu[q_]);
      if (sh_->lanes[q_] == &lane_) sh_->lanes[q_] = nullptr;
    }
    if (owner_ep_ >= 0) epoll_ctl(ep_, EPOLL_CTL_DEL, owner_ep_, nullptr);  // gone already if it was closed
    owner_ep_ = -1;
    sh_.reset();
    SetLink(false);
    if (ep_ >= 0) ArmTimer(true);
  }

  // Called with sh_->mu[q_] held: the owner's connection came or went since the last burst.
  bool Ready() {
    if (sh_->generation != gen_) {
      gen_ = sh_->generation;
      SetLink(sh_->ready[q_] != 0);
    }
    return sh_->ready[q_] != 0;
  }

  // Called with sh_->mu[q_] held: the data path found the peer breaking a ring.
  void Fault() {
    const char* f = lane_.fault;
    lane_.fault = nullptr;
    sh_->ready[q_] = 0;
    SetLink(false);
    const char* none = nullptr;
    sh_->fault.compare_exchange_strong(none, f);
    if (sh_->fault_fd >= 0) EventWrite(sh_->fault_fd);
  }

  Napi::Value BindPool(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (released_) throw Napi::Error::New(env, "MemifLane.bindPool: lane " + name_ + " is closed");
    if (bound_) throw Napi::Error::New(env, "MemifLane.bindPool: a pool is already bound to " + name_);
    if (!info[0].IsObject()) throw TypeErr(env, "MemifLane.bindPool: expects an object");
    pool_ = ParsePool(env, info[0].As<Napi::Object>(), "MemifLane.bindPool", 512, &refs_);
    lane_.pool = &pool_;
    lane_.orphans = &orphans_;
    state_ = pool_.state;
    bound_ = true;
    return env.Undefined();
  }

  // rx(out, max): one receive burst on queue q.
  Napi::Value Rx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "MemifLane.rx: out must be a Uint32Array");
    }
    Napi::Uint32Array outa = info[0].As<Napi::Uint32Array>();
    uint32_t max = info[1].As<Napi::Number>().Uint32Value();
    if (max > outa.ElementLength()) max = static_cast<uint32_t>(outa.ElementLength());
    if (released_ || !bound_) return Napi::Number::New(env, 0);
    state_[kStDone] = 0;
    if (sh_ == nullptr && !TryAttach()) return Napi::Number::New(env, 0);
    uint32_t n = 0;
    bool gone = false;
    {
      std::lock_guard<std::mutex> g(sh_->mu[q_]);
      Memif* m = sh_->m;
      if (m == nullptr) {
        gone = true;
      } else if (Ready() && m->has_rx(q_)) {
        n = m->RxQueue(lane_, q_, outa.Data(), max);
        if (lane_.fault != nullptr) Fault();
      }
    }
    if (gone) Detach();
    return Napi::Number::New(env, n);
  }

  // tx(bufs, off, n): one transmit burst on queue q; how many were taken.
  Napi::Value Tx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "MemifLane.tx: bufs must be a Uint32Array");
    }
    Napi::Uint32Array a = info[0].As<Napi::Uint32Array>();
    const uint32_t off = info[1].As<Napi::Number>().Uint32Value();
    uint32_t n = info[2].As<Napi::Number>().Uint32Value();
    if (uint64_t{off} + n > a.ElementLength()) throw RangeErr(env, "MemifLane.tx: off + n beyond bufs");
    if (released_ || !bound_) return Napi::Number::New(env, 0);
    if (n > 256) n = 256;  // `done` always has room
    state_[kStDone] = 0;
    uint32_t taken = 0;
    bool gone = false;
    if (sh_ != nullptr) {
      std::lock_guard<std::mutex> g(sh_->mu[q_]);
      Memif* m = sh_->m;
      if (m == nullptr) {
        gone = true;
      } else if (Ready()) {
        taken = m->TxQueue(lane_, q_, a.Data() + off, n);
        if (lane_.fault != nullptr) Fault();
      }
    }
    if (gone) Detach();
    if (taken == 0 && n > 0 && (sh_ == nullptr || state_[kStLink] == 0)) lane_.tx_refused += n;
    return Napi::Number::New(env, taken);
  }

  // reclaim(): moves buffers `done` had no room for into `done`; how many.
  Napi::Value Reclaim(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!bound_) return Napi::Number::New(env, 0);
    uint32_t n = 0;
    while (!orphans_.empty() && n < pool_.done_cap) {
      pool_.done[n++] = orphans_.back();
      orphans_.pop_back();
    }
    state_[kStDone] = n;
    return Napi::Number::New(env, n);
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", Napi::String::New(env, name_));
    o.Set("queue", Napi::Number::New(env, q_));
    o.Set("attached", Napi::Boolean::New(env, sh_ != nullptr));
    o.Set("up", Napi::Boolean::New(env, state_ != nullptr && state_[kStLink] != 0));
    o.Set("attaches", Napi::Number::New(env, static_cast<double>(attaches_)));
    o.Set("error", error_.empty() ? env.Null() : Napi::String::New(env, error_));
    return o;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    std::unique_lock<std::mutex> g;
    if (sh_ != nullptr) g = std::unique_lock<std::mutex>(sh_->mu[q_]);
    uint64_t c[Lane::kCounters] = {};
    lane_.AddCounters(c);
    for (int i = 0; i < Lane::kCounters; i++)
      o.Set(Lane::kCounterNames[i], Napi::Number::New(env, static_cast<double>(c[i])));
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Release();
    return info.Env().Undefined();
  }

  void Release() {
    if (released_) return;
    released_ = true;
    Detach();
    SetLink(false);
    if (timer_ >= 0) close(timer_);
    if (ep_ >= 0) close(ep_);
    timer_ = ep_ = -1;
  }

  std::string name_, key_, error_;
  uint32_t q_ = 1;
  int ep_ = -1, timer_ = -1, owner_ep_ = -1;
  bool released_ = false, bound_ = false, tried_ = false;
  std::shared_ptr<Shared> sh_;
  uint64_t gen_ = 0, attaches_ = 0;
  Lane lane_;
  PoolView pool_;
  uint32_t* state_ = nullptr;
  std::vector<uint32_t> orphans_;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};

void InitMemifLane(Napi::Env env, Napi::Object exports) { exports.Set("MemifLane", MemifLane::Define(env)); }

}  // namespace memifimpl
}  // namespace rg
