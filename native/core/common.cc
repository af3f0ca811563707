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

Napi::TypeError TypeErr(Napi::Env env, const std::string& msg) { return Napi::TypeError::New(env, msg); }

Napi::RangeError RangeErr(Napi::Env env, const std::string& msg) { return Napi::RangeError::New(env, msg); }

static std::string Describe(const Napi::Value& v) {
  switch (v.Type()) {
    case napi_undefined:
      return "undefined";
    case napi_null:
      return "null";
    case napi_boolean:
      return "a boolean";
    case napi_number:
      return "the number " + v.ToString().Utf8Value();
    case napi_string:
      return "a string";
    case napi_symbol:
      return "a symbol";
    case napi_object:
      return "an object";
    case napi_function:
      return "a function";
    case napi_external:
      return "an external";
    case napi_bigint:
      return "a bigint";
  }
  return "an unknown value";
}

double ArgInteger(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* arg, double min, double max) {
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

uint32_t OptU32(Napi::Object o, const char* key, const char* fn, uint32_t def, double min, double max) {
  Napi::Env env = o.Env();
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsNumber()) throw TypeErr(env, std::string(fn) + ": " + key + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= min && d <= max) || d != static_cast<double>(static_cast<uint64_t>(d))) {
    throw RangeErr(env, std::string(fn) + ": " + key + " must be an integer in [" +
                            std::to_string(static_cast<uint64_t>(min)) + ", " +
                            std::to_string(static_cast<uint64_t>(max)) + "], got " + v.ToString().Utf8Value());
  }
  return static_cast<uint32_t>(d);
}

uint32_t* U32ArrayArg(Napi::Env env, Napi::Value v, const char* fn, const char* what, size_t min_len, size_t* len_out) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    throw TypeErr(env, std::string(fn) + ": " + what + " must be a Uint32Array");
  }
  Napi::Uint32Array a = v.As<Napi::Uint32Array>();
  if (a.ElementLength() < min_len) {
    throw RangeErr(env, std::string(fn) + ": " + what + " has " + std::to_string(a.ElementLength()) +
                            " elements, need " + std::to_string(min_len));
  }
  if (len_out) *len_out = a.ElementLength();
  return a.Data();
}

Napi::Error CodedError(Napi::Env env, const std::string& msg, int err, const char* syscall) {
  Napi::Error e = Napi::Error::New(env, msg);
  Napi::Object o = e.Value();
  o.Set("code", Napi::String::New(env, uv_err_name(-err)));
  o.Set("errno", Napi::Number::New(env, -err));
  o.Set("syscall", Napi::String::New(env, syscall));
  return e;
}

int ArgFd(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  return static_cast<int>(ArgInteger(info, i, fn, "fd", 0, 2147483647.0));
}

}  // namespace rg
