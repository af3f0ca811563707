// eventfd(2) wake-ups (memif interrupt mode, cross-thread kicks) and closing descriptors.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>

#include "common.h"

namespace rg {

// ---------------------------------------------------------------- eventfds a peer shares
//
// SCM_RIGHTS shares the open file description, O_NONBLOCK included: the process that passed an
// eventfd (a verbs program's doorbell or completion channel, a memif peer's interrupt fd) can
// make it blocking and fill its counter at any moment, between any check of ours and our write,
// and a blocking write to a full eventfd sleeps until someone reads it: the daemon's thread
// would stop. Checking the flags first only narrows that window. So a write to such an fd is
// guarded: a one-shot timer of this thread (timer_create, SIGEV_THREAD_ID) armed around it
// delivers a signal whose handler does nothing and is installed without SA_RESTART, so a write
// that blocks returns EINTR after kGuardNs instead. Reads need no guard where the kernel takes
// RWF_NOWAIT for eventfds (5.12 and later); before, they are guarded the same way.

namespace {

constexpr long kGuardNs = 2'000'000;  // 2 ms: a write that has not returned by then is blocked

int g_guard_signal = 0;  // 0: no real-time signal was free (then the writes are unguarded)
std::once_flag g_guard_once;

void GuardHandler(int) {}

// A real-time signal nobody handles, from the top (glibc and the runtime take the low ones).
void InstallGuardSignal() {
  for (int sig = SIGRTMAX - 1; sig >= SIGRTMIN + 8; sig--) {
    struct sigaction old;
    if (sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa = {};
    sa.sa_handler = GuardHandler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the interrupted write returns EINTR
    if (sigaction(sig, &sa, nullptr) == 0) {
      g_guard_signal = sig;
      return;
    }
  }
}

// This thread's guard timer, made on first use, deleted when the thread ends.
struct GuardTimer {
  timer_t timer{};
  bool ok = false;
  GuardTimer() {
    std::call_once(g_guard_once, InstallGuardSignal);
    if (g_guard_signal == 0) return;
    struct sigevent ev = {};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = g_guard_signal;
    ev._sigev_un._tid = gettid();  // sigev_notify_thread_id, which glibc 2.36 does not name
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, g_guard_signal);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // a thread started with signals blocked
    ok = true;
  }
  ~GuardTimer() {
    if (ok) timer_delete(timer);
  }
  void Set(long ns) {
    struct itimerspec its = {};
    its.it_value.tv_nsec = ns;
    timer_settime(timer, 0, &its, nullptr);
  }
};

thread_local GuardTimer tl_guard;

// read or write of the 8-byte counter with the guard armed; the syscall's result, errno kept.
ssize_t Guarded(bool write_it, int fd, uint64_t* v) {
  GuardTimer& g = tl_guard;
  if (g.ok) g.Set(kGuardNs);
  const ssize_t r = write_it ? write(fd, v, sizeof *v) : read(fd, v, sizeof *v);
  const int err = errno;
  if (g.ok) g.Set(0);
  errno = err;
  return r;
}

}  // namespace

int EventfdAddNoBlock(int fd, bool race_for_test) {
  struct pollfd p = {fd, POLLOUT, 0};
  if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) return 0;  // full: readable already
  if (race_for_test) {
    // The peer, inside the window: takes the counter, fills it (2^64 - 2), makes the fd blocking.
    uint64_t v = 0;
    if (read(fd, &v, sizeof v) < 0) v = 0;
    v = 0xfffffffffffffffeull;
    if (write(fd, &v, sizeof v) < 0) return -1;
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return -1;
  }
  uint64_t one = 1;
  const ssize_t w = Guarded(true, fd, &one);
  if (w == static_cast<ssize_t>(sizeof one)) return 1;
  if (w < 0 && errno == EAGAIN) return 0;
  return -1;  // EINTR: it blocked until the guard fired (the peer raced us), or it failed
}

bool EventfdTakeNoBlock(int fd, uint64_t* v) {
  *v = 0;
  struct iovec io = {v, sizeof *v};
  const ssize_t r = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
  if (r == static_cast<ssize_t>(sizeof *v)) return true;
  if (r >= 0 || errno != EOPNOTSUPP) return false;
  struct pollfd p = {fd, POLLIN, 0};  // a kernel without RWF_NOWAIT for eventfds
  if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) return false;
  return Guarded(false, fd, v) == static_cast<ssize_t>(sizeof *v);
}

namespace {

Napi::Value Eventfd(const Napi::CallbackInfo& info) {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw ErrnoError(info.Env(), "eventfd", errno, "eventfd");
  return Napi::Number::New(info.Env(), fd);
}

// eventfdWrite(fd, n = 1): adds n to the counter.
Napi::Value EventfdWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "eventfdWrite");
  uint64_t n = 1;
  if (!info[1].IsUndefined()) {
    // The counter saturates at 2^64 - 2; anything a double holds exactly is allowed.
    n = static_cast<uint64_t>(ArgInteger(info, 1, "eventfdWrite", "n", 1, 9007199254740991.0));
  }
  ssize_t w;
  do {
    w = write(fd, &n, sizeof n);
  } while (w < 0 && errno == EINTR);
  if (w != static_cast<ssize_t>(sizeof n)) {
    int err = w < 0 ? errno : EIO;
    if (err == EAGAIN) {
      throw ErrnoError(env, "eventfdWrite(" + std::to_string(fd) + "): counter would overflow", err, "write");
    }
    throw ErrnoError(env, "eventfdWrite(" + std::to_string(fd) + ")", err, "write");
  }
  return env.Undefined();
}

// eventfdRead(fd): returns the counter and resets it; 0 when it was already 0.
Napi::Value EventfdRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "eventfdRead");
  uint64_t v = 0;
  ssize_t r;
  do {
    r = read(fd, &v, sizeof v);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Napi::Number::New(env, 0);
  if (r != static_cast<ssize_t>(sizeof v)) {
    throw ErrnoError(env, "eventfdRead(" + std::to_string(fd) + ")", r < 0 ? errno : EINVAL, "read");
  }
  return Napi::Number::New(env, static_cast<double>(v));
}

// An eventfd another process gave us (a verbs program's doorbell or completion channel): it may
// be blocking, or its counter full, or made so at any moment: see EventfdAddNoBlock.

// eventfdSignal(fd, {raceForTest}): add 1 if that cannot block; true if it did. raceForTest
// (tests): play the peer between the checks and the write (the fd made blocking and full).
Napi::Value EventfdSignal(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "eventfdSignal");
  bool race = info[1].IsObject() && info[1].As<Napi::Object>().Get("raceForTest").ToBoolean().Value();
  return Napi::Boolean::New(info.Env(), EventfdAddNoBlock(fd, race) == 1);
}

// eventfdDrain(fd): read and reset the counter without blocking; the value, or 0.
Napi::Value EventfdDrain(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "eventfdDrain");
  uint64_t v = 0;
  if (!EventfdTakeNoBlock(fd, &v)) v = 0;
  return Napi::Number::New(info.Env(), static_cast<double>(v));
}

// isEventfd(fd): whether fd is an eventfd (its /proc/self/fd link is anon_inode:[eventfd]).
Napi::Value IsEventfd(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "isEventfd");
  char path[64], link[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  bool yes = false;
  if (n > 0) {
    link[n] = '\0';
    yes = std::string(link) == "anon_inode:[eventfd]";
  }
  return Napi::Boolean::New(info.Env(), yes);
}

Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "closeFd");
  if (IsOwnedFd(fd)) {
    throw Napi::Error::New(env, "closeFd(" + std::to_string(fd) +
                                    "): the fd belongs to an allocMemory() buffer and is closed "
                                    "when that buffer is garbage-collected");
  }
  // Linux always releases the descriptor, even when close() reports EINTR: never retry.
  if (close(fd) != 0 && errno != EINTR) {
    throw ErrnoError(env, "closeFd(" + std::to_string(fd) + ")", errno, "close");
  }
  return env.Undefined();
}

}  // namespace

void InitEventfd(Napi::Env env, Napi::Object exports) {
  exports.Set("eventfd", Napi::Function::New(env, Eventfd, "eventfd"));
  exports.Set("eventfdWrite", Napi::Function::New(env, EventfdWrite, "eventfdWrite"));
  exports.Set("eventfdRead", Napi::Function::New(env, EventfdRead, "eventfdRead"));
  exports.Set("eventfdSignal", Napi::Function::New(env, EventfdSignal, "eventfdSignal"));
  exports.Set("eventfdDrain", Napi::Function::New(env, EventfdDrain, "eventfdDrain"));
  exports.Set("isEventfd", Napi::Function::New(env, IsEventfd, "isEventfd"));
  exports.Set("closeFd", Napi::Function::New(env, CloseFd, "closeFd"));
}

}  // namespace rg
