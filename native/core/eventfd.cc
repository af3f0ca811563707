// eventfd(2) wake-ups (memif interrupt mode, cross-thread kicks) and closing descriptors.
#include "common.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <climits>

#include <cerrno>
#include <cstdint>
#include <string>

namespace rg {

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
      throw ErrnoError(env, "eventfdWrite(" + std::to_string(fd) + "): counter would overflow", err,
                       "write");
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
// be blocking, or its counter full, so every access first asks poll() whether it would block.

// eventfdSignal(fd): add 1 if that cannot block; true if it did.
Napi::Value EventfdSignal(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "eventfdSignal");
  struct pollfd p = {fd, POLLOUT, 0};
  bool done = false;
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) {
    uint64_t one = 1;
    ssize_t w;
    do {
      w = write(fd, &one, sizeof one);
    } while (w < 0 && errno == EINTR);
    done = w == static_cast<ssize_t>(sizeof one);
  }
  return Napi::Boolean::New(info.Env(), done);
}

// eventfdDrain(fd): read and reset the counter if it is readable; the value, or 0.
Napi::Value EventfdDrain(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "eventfdDrain");
  struct pollfd p = {fd, POLLIN, 0};
  uint64_t v = 0;
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
    if (read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) v = 0;
  }
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
