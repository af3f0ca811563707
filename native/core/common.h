// Shared helpers of core.node: argument checking and errno-carrying errors.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace rg {

// Module init of each concern (one per source file), called from addon.cc.
void InitTsc(Napi::Env env, Napi::Object exports);
void InitMemory(Napi::Env env, Napi::Object exports);
void InitEventfd(Napi::Env env, Napi::Object exports);
void InitWaiter(Napi::Env env, Napi::Object exports);
void InitAfPacket(Napi::Env env, Napi::Object exports);

// An Error whose message is "<what>: <strerror(err)>", with .code ("EBADF"), .errno and
// .syscall set like Node's own system errors.
Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err, const char* syscall);

Napi::TypeError TypeErr(Napi::Env env, const std::string& msg);
Napi::RangeError RangeErr(Napi::Env env, const std::string& msg);

// info[i] as a file descriptor: an integer in [0, INT32_MAX]; throws TypeError/RangeError
// naming fn and what is wrong.
int ArgFd(const Napi::CallbackInfo& info, size_t i, const char* fn);

// info[i] as an integral number in [min, max]; throws TypeError/RangeError naming fn and arg.
double ArgInteger(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* arg,
                  double min, double max);

// True for a descriptor owned by an allocMemory() buffer: closeFd() refuses those, since the
// buffer's finalizer closes them (closing early would let the number be reused, then closed
// a second time by the finalizer).
bool IsOwnedFd(int fd);

}  // namespace rg
