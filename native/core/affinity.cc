// CPU placement of the calling thread (cpu.main-core, cpu.corelist-workers): setThreadAffinity
// pins the thread that calls it (a worker pins itself) with pthread_setaffinity_np;
// currentCpu says where it runs now (sched_getcpu); yieldCpu gives the CPU up (sched_yield).
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "common.h"

namespace rg {
namespace {

// setThreadAffinity(cpus: number[]): the calling thread may run only on these CPUs.
Napi::Value SetThreadAffinity(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw TypeErr(env, "setThreadAffinity: expects an array of CPU numbers");
  Napi::Array a = info[0].As<Napi::Array>();
  if (a.Length() == 0) throw RangeErr(env, "setThreadAffinity: no CPU given");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value v = a.Get(i);
    const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0 && d < CPU_SETSIZE) || d != static_cast<double>(static_cast<int>(d)))
      throw RangeErr(env, "setThreadAffinity: CPU numbers are integers 0.." + std::to_string(CPU_SETSIZE - 1));
    CPU_SET(static_cast<int>(d), &set);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) throw ErrnoError(env, "setThreadAffinity", rc, "pthread_setaffinity_np");
  return env.Undefined();
}

// yieldCpu(): sched_yield(): another runnable thread of this CPU (a verbs program spinning on
// its CQ, the peer data plane) runs now rather than at the end of our time slice.
Napi::Value YieldCpu(const Napi::CallbackInfo& info) {
  sched_yield();
  return info.Env().Undefined();
}

// currentCpu(): the CPU the calling thread runs on now.
Napi::Value CurrentCpu(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), sched_getcpu()); }

}  // namespace

void InitAffinity(Napi::Env env, Napi::Object exports) {
  exports.Set("setThreadAffinity", Napi::Function::New(env, SetThreadAffinity, "setThreadAffinity"));
  exports.Set("currentCpu", Napi::Function::New(env, CurrentCpu, "currentCpu"));
  exports.Set("yieldCpu", Napi::Function::New(env, YieldCpu, "yieldCpu"));
}

}  // namespace rg
