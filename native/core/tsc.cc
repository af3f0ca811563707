// CPU timestamp counter for the dispatch loop's per-node clocks.
//
// rdtsc() is a raw C Node-API function rather than a node-addon-api one: it is called several
// times per dispatch pass, and the C++ wrapper doubles the cost of an empty call (spike: 11 ns
// raw vs 21 ns).
#include <cstdint>
#include <ctime>

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define RG_TSC_SOURCE "rdtsc"
static inline uint64_t ReadTsc() { return __rdtsc(); }
#elif defined(__aarch64__)
#define RG_TSC_SOURCE "cntvct"
static inline uint64_t ReadTsc() {
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
}
#else
#define RG_TSC_SOURCE "clock_monotonic"
static inline uint64_t ReadTsc() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
#endif

namespace rg {

static napi_value Rdtsc(napi_env env, napi_callback_info) {
  napi_value result;
  napi_create_double(env, static_cast<double>(ReadTsc()), &result);
  return result;
}

static Napi::Value TscSource(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), RG_TSC_SOURCE); }

void InitTsc(Napi::Env env, Napi::Object exports) {
  napi_value fn;
  if (napi_create_function(env, "rdtsc", NAPI_AUTO_LENGTH, Rdtsc, nullptr, &fn) != napi_ok) {
    throw Napi::Error::New(env);
  }
  exports.Set("rdtsc", Napi::Value(env, fn));
  exports.Set("tscSource", Napi::Function::New(env, TscSource, "tscSource"));
}

}  // namespace rg
