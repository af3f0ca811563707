// Shared helpers of core.node: errors and argument checks.
#include "common.h"

#include <uv.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace rg {

Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err, const char* syscall) {
  Napi::Error e = Napi::Error::New(env, what + ": " + std::strerror(err));
  Napi::Object o = e.Value();
  o.Set("code", Napi::String::New(env, uv_err_name(-err)));
  o.Set("errno", Napi::Number::New(env, -err));
  o.Set("syscall", Napi::String::New(env, syscall));
  return e;
}

Napi::TypeError TypeErr(Napi::Env env, const std::string& msg) {
  return Napi::TypeError::New(env, msg);
}

Napi::RangeError RangeErr(Napi::Env env, const std::string& msg) {
  return Napi::RangeError::New(env, msg);
}

static std::string Describe(const Napi::Value& v) {
  switch (v.Type()) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return "a boolean";
    case napi_number: return "the number " + v.ToString().Utf8Value();
    case napi_string: return "a string";
    case napi_symbol: return "a symbol";
    case napi_object: return "an object";
    case napi_function: return "a function";
    case napi_external: return "an external";
    case napi_bigint: return "a bigint";
  }
  return "an unknown value";
}

double ArgInteger(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* arg,
                  double min, double max) {
  Napi::Env env = info.Env();
  Napi::Value v = info[i];
  if (!v.IsNumber()) {
    throw TypeErr(env, std::string(fn) + ": " + arg + " must be a number, got " + Describe(v));
  }
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d)) {
    throw RangeErr(env, std::string(fn) + ": " + arg + " must be an integer, got " + Describe(v));
  }
  if (d < min || d > max) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s: %s must be in [%.0f, %.0f], got %.0f", fn, arg, min, max, d);
    throw RangeErr(env, buf);
  }
  return d;
}

int ArgFd(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  return static_cast<int>(ArgInteger(info, i, fn, "fd", 0, 2147483647.0));
}

}  // namespace rg
