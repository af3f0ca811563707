// FdWaiter: lets the dispatch loop sleep on its env's libuv loop until one of a set of fds is
// readable or a timeout passes, then calls back exactly once; and runs its turns (onTurn/soon:
// a uv_check handle calls back in the loop's check phase, a uv_idle one keeps the poll phase
// from blocking meanwhile).
//
// The uv handles live in a WaiterCore that outlives the JS object when it has to: uv_close() is
// asynchronous, so the core is deleted only once the JS object is gone, every handle's close
// callback has run and the env cleanup hook is removed. Handles are inactive (stopped) whenever
// no wait is pending, so an idle FdWaiter does not keep the process alive; a pending wait does.
#include <fcntl.h>
#include <uv.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <string>

#include "common.h"

namespace rg {

namespace {

class WaiterCore;

struct PollHandle {
  uv_poll_t handle;
  int fd;
  WaiterCore* core;
};

Napi::Error UvError(Napi::Env env, const std::string& what, int uv_err) {
  Napi::Error e = Napi::Error::New(env, what + ": " + uv_strerror(uv_err));
  e.Set("code", Napi::String::New(env, uv_err_name(uv_err)));
  e.Set("errno", Napi::Number::New(env, uv_err));
  return e;
}

class WaiterCore {
 public:
  WaiterCore(napi_env env, uv_loop_t* loop) : env_(env), loop_(loop) {}

  bool waiting() const { return waiting_; }
  bool closed() const { return closed_; }

  void Add(Napi::Env env, int fd) {
    CheckOpen(env, "add");
    if (polls_.count(fd)) {
      throw Napi::Error::New(env, "FdWaiter.add: fd " + std::to_string(fd) + " is already added");
    }
    auto* p = new PollHandle();
    p->fd = fd;
    p->core = this;
    int r = uv_poll_init(loop_, &p->handle, fd);
    if (r < 0) {
      delete p;
      throw UvError(env, "FdWaiter.add: cannot poll fd " + std::to_string(fd), r);
    }
    p->handle.data = p;
    polls_[fd] = p;
    if (waiting_) {
      r = uv_poll_start(&p->handle, UV_READABLE, OnPoll);
      if (r < 0) {
        ClosePoll(p);
        polls_.erase(fd);
        throw UvError(env, "FdWaiter.add: cannot poll fd " + std::to_string(fd), r);
      }
    }
  }

  void Remove(Napi::Env env, int fd) {
    CheckOpen(env, "remove");
    auto it = polls_.find(fd);
    if (it == polls_.end()) {
      throw Napi::Error::New(env, "FdWaiter.remove: fd " + std::to_string(fd) + " was not added");
    }
    ClosePoll(it->second);
    polls_.erase(it);
  }

  void Wait(Napi::Env env, double timeout_ms, Napi::Function cb, Napi::Object self) {
    CheckOpen(env, "wait");
    if (waiting_) {
      throw Napi::Error::New(env, "FdWaiter.wait: already waiting (cancel() the pending wait first)");
    }
    // Negative or infinite: no timeout. Beyond 2^53 ms (285 millennia) is the same thing.
    const bool timed = timeout_ms >= 0 && timeout_ms < 9007199254740992.0;
    if (!timed && polls_.empty()) {
      throw Napi::Error::New(env, "FdWaiter.wait: nothing to wait for (no fd added and no timeout)");
    }
    // libuv aborts the process if epoll_ctl() fails on an fd that was closed behind its back,
    // so check every fd before arming.
    for (auto& [fd, p] : polls_) {
      if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
        throw Napi::Error::New(
            env, "FdWaiter.wait: fd " + std::to_string(fd) + " was closed without FdWaiter.remove() first");
      }
    }
    for (auto it = polls_.begin(); it != polls_.end(); ++it) {
      int r = uv_poll_start(&it->second->handle, UV_READABLE, OnPoll);
      if (r < 0) {
        for (auto jt = polls_.begin(); jt != it; ++jt) uv_poll_stop(&jt->second->handle);
        throw UvError(env, "FdWaiter.wait: cannot poll fd " + std::to_string(it->first), r);
      }
    }
    if (timed) {
      if (!timer_) {
        timer_ = new uv_timer_t();
        uv_timer_init(loop_, timer_);
        timer_->data = this;
      }
      // Measure from now, not from the loop's cached time (which may be stale by a whole pass).
      uv_update_time(loop_);
      uv_timer_start(timer_, OnTimer, static_cast<uint64_t>(std::ceil(timeout_ms)), 0);
    }
    cb_ = Napi::Persistent(cb);
    self_ = Napi::Persistent(self);  // keeps the FdWaiter alive while the wait is pending
    waiting_ = true;
  }

  void Cancel() {
    if (!waiting_) return;
    Disarm();
    ReleaseWait();
  }

  // The function soon() calls (once per soon(), from the loop's check phase, as setImmediate's
  // callbacks are, but with no object made per call).
  void OnTurn(Napi::Env env, Napi::Function fn, Napi::Object self) {
    CheckOpen(env, "onTurn");
    if (check_ == nullptr) {
      check_ = new uv_check_t();
      idle_ = new uv_idle_t();
      uv_check_init(loop_, check_);
      uv_idle_init(loop_, idle_);
      check_->data = this;
      idle_->data = this;
    }
    // Weak: an armed turn does not keep the FdWaiter or its function alive (a dropped graph
    // is collected; its turn then finds nothing to call). The handle scope of Turn() keeps them
    // alive through the call.
    turn_cb_ = Napi::Weak(fn);
    turn_self_ = Napi::Weak(self);
  }

  // Arms one turn (a second soon() before it runs is the same turn).
  void Soon(Napi::Env env) {
    CheckOpen(env, "soon");
    if (check_ == nullptr) throw Napi::Error::New(env, "FdWaiter.soon: no onTurn() function");
    if (turn_armed_) return;
    turn_armed_ = true;
    uv_check_start(check_, OnCheck);
    uv_idle_start(idle_, OnIdle);
  }

  // Stops everything and closes all handles; idempotent. The cleanup hook is removed once the
  // last close callback has run.
  void CloseAll() {
    if (closed_) return;
    closed_ = true;
    Cancel();
    for (auto& [fd, p] : polls_) ClosePoll(p);
    polls_.clear();
    if (timer_) {
      ++pending_closes_;
      uv_close(reinterpret_cast<uv_handle_t*>(timer_), OnTimerClosed);
      timer_ = nullptr;
    }
    if (check_) {
      turn_armed_ = false;
      pending_closes_ += 2;
      uv_close(reinterpret_cast<uv_handle_t*>(check_), OnCheckClosed);
      uv_close(reinterpret_cast<uv_handle_t*>(idle_), OnIdleClosed);
      check_ = nullptr;
      idle_ = nullptr;
    }
    turn_cb_.Reset();
    turn_self_.Reset();
    if (callback_depth_ == 0) DestroyAsyncContext();
    if (pending_closes_ == 0) RemoveHook();
  }

  // Called from the JS object's destructor. May delete this.
  void OwnerGone() {
    owner_alive_ = false;
    CloseAll();
    MaybeDelete();
  }

  napi_async_context* async_slot() { return &async_; }
  napi_async_cleanup_hook_handle* hook_slot() { return &hook_; }

  static void OnEnvCleanup(napi_async_cleanup_hook_handle, void* arg) { static_cast<WaiterCore*>(arg)->CloseAll(); }

 private:
  void CheckOpen(Napi::Env env, const char* method) {
    if (closed_) throw Napi::Error::New(env, std::string("FdWaiter.") + method + ": the waiter is closed");
  }

  void Disarm() {
    for (auto& [fd, p] : polls_) uv_poll_stop(&p->handle);
    if (timer_) uv_timer_stop(timer_);
  }

  void ReleaseWait() {
    waiting_ = false;
    cb_.Reset();
    self_.Reset();
  }

  void ClosePoll(PollHandle* p) {
    ++pending_closes_;
    uv_close(reinterpret_cast<uv_handle_t*>(&p->handle), OnPollClosed);
  }

  void DestroyAsyncContext() {
    if (async_) {
      napi_async_destroy(env_, async_);
      async_ = nullptr;
    }
  }

  void RemoveHook() {
    if (hook_) {
      napi_remove_async_cleanup_hook(hook_);
      hook_ = nullptr;
    }
  }

  void MaybeDelete() {
    if (!owner_alive_ && pending_closes_ == 0 && !hook_) delete this;
  }

  void HandleClosed() {
    --pending_closes_;
    if (pending_closes_ == 0 && closed_) {
      RemoveHook();
      MaybeDelete();
    }
  }

  // The first event of a wait: stop everything, then call back once.
  void Fire(int fd) {
    if (!waiting_) return;
    Disarm();
    napi_env env = env_;
    napi_handle_scope scope;
    if (napi_open_handle_scope(env, &scope) != napi_ok) {
      ReleaseWait();
      return;
    }
    napi_value fn = cb_.Value();
    napi_value recv = self_.Value();
    ReleaseWait();  // before the call, so the callback may wait() again
    napi_value arg;
    napi_create_int32(env, fd, &arg);
    Call(recv, fn, 1, &arg);
    // `recv` in this handle scope keeps the JS object (and so this core) alive until here.
    napi_close_handle_scope(env, scope);
  }

  // fn as a fresh macrotask (microtasks after it); a throw is an uncaught exception, as one in
  // a timer callback is ('uncaughtException', or the process exits).
  void Call(napi_value recv, napi_value fn, size_t argc, const napi_value* argv) {
    napi_value result;
    ++callback_depth_;
    napi_status st = napi_make_callback(env_, async_, recv, fn, argc, argv, &result);
    --callback_depth_;
    if (st == napi_pending_exception) {
      napi_value exc;
      if (napi_get_and_clear_last_exception(env_, &exc) == napi_ok) napi_fatal_exception(env_, exc);
    }
    if (closed_ && callback_depth_ == 0) DestroyAsyncContext();
  }

  static void OnPoll(uv_poll_t* h, int status, int events) {
    // An error status (e.g. the fd became invalid) is reported as the fd being ready: the
    // caller's read then sees the error itself.
    auto* p = static_cast<PollHandle*>(h->data);
    try {
      p->core->Fire(p->fd);
    } catch (...) {
    }
  }

  static void OnTimer(uv_timer_t* h) {
    try {
      static_cast<WaiterCore*>(h->data)->Fire(-1);
    } catch (...) {
    }
  }

  // The armed turn: disarmed first (the function may arm the next one), then called.
  void Turn() {
    if (!turn_armed_) return;
    turn_armed_ = false;
    uv_check_stop(check_);
    uv_idle_stop(idle_);
    napi_env env = env_;
    napi_handle_scope scope;
    if (napi_open_handle_scope(env, &scope) != napi_ok) return;
    Napi::Function fn = turn_cb_.Value();
    Napi::Object recv = turn_self_.Value();
    if (!fn.IsEmpty() && !recv.IsEmpty()) Call(recv, fn, 0, nullptr);
    napi_close_handle_scope(env, scope);
  }

  static void OnCheck(uv_check_t* h) {
    try {
      static_cast<WaiterCore*>(h->data)->Turn();
    } catch (...) {
    }
  }

  static void OnIdle(uv_idle_t*) {}

  static void OnCheckClosed(uv_handle_t* h) {
    auto* core = static_cast<WaiterCore*>(h->data);
    delete reinterpret_cast<uv_check_t*>(h);
    core->HandleClosed();
  }

  static void OnIdleClosed(uv_handle_t* h) {
    auto* core = static_cast<WaiterCore*>(h->data);
    delete reinterpret_cast<uv_idle_t*>(h);
    core->HandleClosed();
  }

  static void OnPollClosed(uv_handle_t* h) {
    auto* p = static_cast<PollHandle*>(h->data);
    WaiterCore* core = p->core;
    delete p;
    core->HandleClosed();
  }

  static void OnTimerClosed(uv_handle_t* h) {
    auto* core = static_cast<WaiterCore*>(h->data);
    delete reinterpret_cast<uv_timer_t*>(h);
    core->HandleClosed();
  }

  napi_env env_;
  uv_loop_t* loop_;
  std::map<int, PollHandle*> polls_;
  uv_timer_t* timer_ = nullptr;
  uv_check_t* check_ = nullptr;  // turns: run after this loop iteration's poll phase
  uv_idle_t* idle_ = nullptr;    // while a turn is armed: the poll phase does not block
  Napi::FunctionReference turn_cb_;
  Napi::ObjectReference turn_self_;
  bool turn_armed_ = false;
  Napi::FunctionReference cb_;
  Napi::ObjectReference self_;
  napi_async_context async_ = nullptr;
  napi_async_cleanup_hook_handle hook_ = nullptr;
  int pending_closes_ = 0;
  int callback_depth_ = 0;
  bool waiting_ = false;
  bool closed_ = false;
  bool owner_alive_ = true;
};

class FdWaiter : public Napi::ObjectWrap<FdWaiter> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "FdWaiter",
                       {
                           InstanceMethod<&FdWaiter::Add>("add"),
                           InstanceMethod<&FdWaiter::Remove>("remove"),
                           InstanceMethod<&FdWaiter::Wait>("wait"),
                           InstanceMethod<&FdWaiter::Cancel>("cancel"),
                           InstanceMethod<&FdWaiter::OnTurn>("onTurn"),
                           InstanceMethod<&FdWaiter::Soon>("soon"),
                           InstanceMethod<&FdWaiter::Close>("close"),
                           InstanceAccessor<&FdWaiter::Waiting>("waiting"),
                           InstanceAccessor<&FdWaiter::Closed>("closed"),
                       });
  }

  explicit FdWaiter(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FdWaiter>(info) {
    Napi::Env env = info.Env();
    uv_loop_t* loop = nullptr;
    if (napi_get_uv_event_loop(env, &loop) != napi_ok || !loop) {
      throw Napi::Error::New(env, "FdWaiter: cannot get the event loop of this thread");
    }
    auto* core = new WaiterCore(env, loop);
    if (napi_async_init(env, info.This(), Napi::String::New(env, "FdWaiter"), core->async_slot()) != napi_ok) {
      delete core;
      throw Napi::Error::New(env, "FdWaiter: napi_async_init failed");
    }
    if (napi_add_async_cleanup_hook(env, WaiterCore::OnEnvCleanup, core, core->hook_slot()) != napi_ok) {
      napi_async_destroy(env, *core->async_slot());
      delete core;
      throw Napi::Error::New(env, "FdWaiter: napi_add_async_cleanup_hook failed");
    }
    core_ = core;
  }

  ~FdWaiter() override { core_->OwnerGone(); }

 private:
  Napi::Value Add(const Napi::CallbackInfo& info) {
    core_->Add(info.Env(), ArgFd(info, 0, "FdWaiter.add"));
    return info.Env().Undefined();
  }

  Napi::Value Remove(const Napi::CallbackInfo& info) {
    core_->Remove(info.Env(), ArgFd(info, 0, "FdWaiter.remove"));
    return info.Env().Undefined();
  }

  Napi::Value Wait(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsNumber()) {
      throw TypeErr(env, "FdWaiter.wait: timeoutMs must be a number (negative or Infinity: no timeout)");
    }
    double timeout = info[0].As<Napi::Number>().DoubleValue();
    if (std::isnan(timeout)) throw RangeErr(env, "FdWaiter.wait: timeoutMs is NaN");
    if (!info[1].IsFunction()) throw TypeErr(env, "FdWaiter.wait: cb must be a function");
    core_->Wait(env, timeout, info[1].As<Napi::Function>(), info.This().As<Napi::Object>());
    return env.Undefined();
  }

  Napi::Value OnTurn(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsFunction()) throw TypeErr(env, "FdWaiter.onTurn: fn must be a function");
    core_->OnTurn(env, info[0].As<Napi::Function>(), info.This().As<Napi::Object>());
    return env.Undefined();
  }

  Napi::Value Soon(const Napi::CallbackInfo& info) {
    core_->Soon(info.Env());
    return info.Env().Undefined();
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    core_->Cancel();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    core_->CloseAll();
    return info.Env().Undefined();
  }

  Napi::Value Waiting(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), core_->waiting()); }

  Napi::Value Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), core_->closed()); }

  WaiterCore* core_ = nullptr;
};

}  // namespace

void InitWaiter(Napi::Env env, Napi::Object exports) { exports.Set("FdWaiter", FdWaiter::Define(env)); }

}  // namespace rg
