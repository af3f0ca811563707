// futexWake: wakes the threads of other processes asleep in a futex wait on a word of memory we
// share with them (a verbs program's CQ ring: the library sleeps on its wake word while the
// program's CQs are empty, and the daemon moves that word and wakes it after writing a completion).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

#include "common.h"

namespace rg {

namespace {

// futexWake(u32, index): FUTEX_WAKE (not private: the word is in a shared mapping) on
// u32[index]; the number of threads woken (0 when none slept, or on an error).
Napi::Value FutexWake(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    throw TypeErr(env, "futexWake: u32 must be a Uint32Array");
  Napi::Uint32Array a = info[0].As<Napi::Uint32Array>();
  const double last = static_cast<double>(a.ElementLength()) - 1;  // -1 for an empty array: nothing fits
  uint32_t* word = a.Data() + static_cast<size_t>(ArgInteger(info, 1, "futexWake", "index", 0, last));
  const long r = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  return Napi::Number::New(env, r < 0 ? 0 : static_cast<double>(r));
}

}  // namespace

void InitFutex(Napi::Env env, Napi::Object exports) {
  exports.Set("futexWake", Napi::Function::New(env, FutexWake, "futexWake"));
}

}  // namespace rg
