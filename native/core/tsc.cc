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

// The dispatch loop reads the counter at every node dispatch, empty passes too: a double
// returned to JavaScript is a new heap number each time. rdtscStore() writes it into the
// Float64Array tscInto() was given instead, and returns nothing: no allocation. One slot per
// environment (the main thread and each worker load the addon apart), held by a reference.
struct TscSlot {
  double* slot = nullptr;
  napi_ref ref = nullptr;
};

static napi_value RdtscStore(napi_env env, napi_callback_info info) {
  void* data = nullptr;
  napi_get_cb_info(env, info, nullptr, nullptr, nullptr, &data);
  auto* ts = static_cast<TscSlot*>(data);
  if (ts->slot != nullptr) *ts->slot = static_cast<double>(ReadTsc());
  return nullptr;
}

static Napi::Value TscInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsTypedArray() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      info[0].As<Napi::TypedArray>().ElementLength() < 1) {
    throw Napi::TypeError::New(env, "tscInto(slot): slot must be a Float64Array of at least one element");
  }
  auto* ts = static_cast<TscSlot*>(info.Data());
  Napi::Float64Array slot = info[0].As<Napi::Float64Array>();
  if (ts->ref != nullptr) napi_delete_reference(env, ts->ref);
  napi_create_reference(env, slot, 1, &ts->ref);  // kept alive: the pointer below is into it
  ts->slot = slot.Data();
  return env.Undefined();
}

void InitTsc(Napi::Env env, Napi::Object exports) {
  napi_value fn;
  if (napi_create_function(env, "rdtsc", NAPI_AUTO_LENGTH, Rdtsc, nullptr, &fn) != napi_ok) {
    throw Napi::Error::New(env);
  }
  exports.Set("rdtsc", Napi::Value(env, fn));
  auto* ts = new TscSlot();
  napi_add_env_cleanup_hook(
      env, [](void* p) { delete static_cast<TscSlot*>(p); }, ts);
  napi_value store;
  if (napi_create_function(env, "rdtscStore", NAPI_AUTO_LENGTH, RdtscStore, ts, &store) != napi_ok) {
    throw Napi::Error::New(env);
  }
  exports.Set("rdtscStore", Napi::Value(env, store));
  exports.Set("tscInto", Napi::Function::New(env, TscInto, "tscInto", ts));
  exports.Set("tscSource", Napi::Function::New(env, TscSource, "tscSource"));
}

}  // namespace rg
