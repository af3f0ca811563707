// Shared helpers of core.node: argument checking and errno-carrying errors.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace rg {

// The bytes a receive burst takes at most (it ends after the frame that reaches them): one pass
// of the graph places what one burst took before the transport acknowledges it (an ACK per
// pass), so a burst of a whole 1 MiB window of 32 KiB frames left the sender idle while we
// placed it all, and us idle while it sent the next. 128 KiB: WRITE 64 KiB x 16 between two
// processes over memif 13.6-16.9 against 6.5 Gbit/s without a limit (alternated); at 1500-byte
// frames a burst still takes ~88 of them.
constexpr uint64_t kRxBurstBytes = 128 * 1024;

// Module init of each concern (one per source file), called from addon.cc.
void InitTsc(Napi::Env env, Napi::Object exports);
void InitMemory(Napi::Env env, Napi::Object exports);
void InitEventfd(Napi::Env env, Napi::Object exports);
void InitFutex(Napi::Env env, Napi::Object exports);
void InitWaiter(Napi::Env env, Napi::Object exports);
void InitAfPacket(Napi::Env env, Napi::Object exports);
void InitMemif(Napi::Env env, Napi::Object exports);
void InitAffinity(Napi::Env env, Napi::Object exports);
void InitExec(Napi::Env env, Napi::Object exports);
void InitVerbsSocket(Napi::Env env, Napi::Object exports);
void InitExtTable(Napi::Env env, Napi::Object exports);
void InitChainCopy(Napi::Env env, Napi::Object exports);
void InitRxWindows(Napi::Env env, Napi::Object exports);

// An Error whose message is "<what>: <strerror(err)>", with .code ("EBADF"), .errno and
// .syscall set like Node's own system errors.
Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err, const char* syscall);

Napi::TypeError TypeErr(Napi::Env env, const std::string& msg);
Napi::RangeError RangeErr(Napi::Env env, const std::string& msg);

// info[i] as a file descriptor: an integer in [0, INT32_MAX]; throws TypeError/RangeError
// naming fn and what is wrong.
int ArgFd(const Napi::CallbackInfo& info, size_t i, const char* fn);

// info[i] as an integral number in [min, max]; throws TypeError/RangeError naming fn and arg.
double ArgInteger(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* arg, double min, double max);

// opts[key] as an integer in [min, max], or def when absent; throws naming fn and key.
uint32_t OptU32(Napi::Object opts, const char* key, const char* fn, uint32_t def, double min, double max);

// v as a Uint32Array of at least min_len elements (its length in *len_out); throws naming fn
// and what.
uint32_t* U32ArrayArg(Napi::Env env, Napi::Value v, const char* fn, const char* what, size_t min_len,
                      size_t* len_out = nullptr);

// An Error with .code/.errno/.syscall like ErrnoError, but with a message of our own.
Napi::Error CodedError(Napi::Env env, const std::string& msg, int err, const char* syscall);

// True for a descriptor owned by an allocMemory() buffer: closeFd() refuses those, since the
// buffer's finalizer closes them (closing early would let the number be reused, then closed
// a second time by the finalizer).
bool IsOwnedFd(int fd);

// An eventfd another process shares with us (eventfd.cc): add 1 without ever blocking, whatever
// the peer does to its flags or counter meanwhile: 1 written, 0 no room (it is readable
// already), -1 the write would have blocked (the peer made the fd blocking and full) or failed.
// race_for_test: the peer's moves made inside the window (tests).
int EventfdAddNoBlock(int fd, bool race_for_test = false);

// Take its counter without ever blocking: true with *v when it was non-zero.
bool EventfdTakeNoBlock(int fd, uint64_t* v);

}  // namespace rg
