// RxWindows (rx_windows.h): received payload still in a memif peer's memory.
//   new RxWindows({memory, count, flags, next, flagNext, flagPeer, flagPeerChain})
//       over one pool (its ArrayBuffer and per-buffer arrays, kept alive by the object)
//   w.settle(head) -> bytes copied: every buffer of the chain still flagged flagPeer gets its
//       bytes copied in from the peer's memory (flag cleared), and the head loses flagPeerChain;
//       the chain followed for at most `count` buffers
//   w.setPattern({headBytes, minBytes, rules}) / w.setPattern(null): which frames a memif server
//       may receive so: at least minBytes long, the first headBytes (64..256) of them copied and
//       every rule matched, rules a Uint8Array of (offset, mask, value) triples (offset < headBytes)
//   w.counters() -> {copiedIn}: windows copied in late (before the peer got its slot back, or for
//       a node that reads the packet as bytes)
#include "rx_windows.h"

#include <cstring>
#include <string>

#include "common.h"

namespace rg {

namespace {

const napi_type_tag kRxWindowsTag = {0x7264'6d61'6772'6170ull, 0x7278'7769'6e64'6f77ull};

uint32_t OneBit(Napi::Object o, const char* key, const char* fn) {
  const uint32_t v = OptU32(o, key, fn, 0, 1, 4294967295.0);
  if ((v & (v - 1)) != 0) throw RangeErr(o.Env(), std::string(fn) + ": " + key + " must be one bit");
  return v;
}

}  // namespace

Napi::Function RxWindows::Define(Napi::Env env) {
  return DefineClass(env, "RxWindows",
                     {
                         InstanceMethod<&RxWindows::Settle>("settle"),
                         InstanceMethod<&RxWindows::SetPattern>("setPattern"),
                         InstanceMethod<&RxWindows::Counters>("counters"),
                     });
}

RxWindows::RxWindows(const Napi::CallbackInfo& info) : Napi::ObjectWrap<RxWindows>(info) {
  Napi::Env env = info.Env();
  const char* fn = "RxWindows";
  if (info.Length() < 1 || !info[0].IsObject()) throw TypeErr(env, "RxWindows: needs the pool's arrays");
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value memv = o.Get("memory");
  if (!memv.IsArrayBuffer()) throw TypeErr(env, "RxWindows: memory must be an ArrayBuffer");
  Napi::ArrayBuffer mem = memv.As<Napi::ArrayBuffer>();
  mem_ = static_cast<uint8_t*>(mem.Data());
  mem_len_ = mem.ByteLength();
  if (mem_ == nullptr || mem_len_ == 0) throw RangeErr(env, "RxWindows: memory is empty or detached");
  count_ = OptU32(o, "count", fn, 0, 1, 4294967294.0);
  flags_ = U32ArrayArg(env, o.Get("flags"), fn, "flags", count_);
  next_ = U32ArrayArg(env, o.Get("next"), fn, "next", count_);
  f_next_ = OneBit(o, "flagNext", fn);
  f_peer_ = OneBit(o, "flagPeer", fn);
  f_peer_chain_ = OneBit(o, "flagPeerChain", fn);
  if (f_next_ == f_peer_ || f_next_ == f_peer_chain_ || f_peer_ == f_peer_chain_)
    throw RangeErr(env, "RxWindows: flagNext, flagPeer and flagPeerChain must be three different bits");
  for (const char* k : {"memory", "flags", "next"}) refs_.push_back(Napi::Persistent(o.Get(k)));
  napi_type_tag_object(env, info.This(), &kRxWindowsTag);
}

RxWindows* RxWindows::FromValue(Napi::Env env, Napi::Value v, const char* fn) {
  bool ok = false;
  if (v.IsObject()) napi_check_object_type_tag(env, v, &kRxWindowsTag, &ok);
  if (!ok) throw TypeErr(env, std::string(fn) + ": windows must be an RxWindows");
  return Napi::ObjectWrap<RxWindows>::Unwrap(v.As<Napi::Object>());
}

uint32_t RxWindows::CopyIn(uint32_t bi) {
  if (bi >= win_.size() || (flags_[bi] & f_peer_) == 0) return 0;
  Win& w = win_[bi];
  flags_[bi] &= ~f_peer_;
  if (w.src == nullptr || uint64_t{w.base} + w.len > mem_len_) return 0;  // never set so: Set's caller checked
  std::memcpy(mem_ + w.base, w.src, w.len);
  const uint32_t n = w.len;
  w.src = nullptr;
  copied_in_++;
  return n;
}

Napi::Value RxWindows::Settle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t bi = static_cast<uint32_t>(ArgInteger(info, 0, "RxWindows.settle", "head", 0, count_ - 1.0));
  double bytes = 0;
  flags_[bi] &= ~f_peer_chain_;
  for (uint32_t steps = 0; steps < count_; steps++) {
    bytes += CopyIn(bi);
    if ((flags_[bi] & f_next_) == 0) break;
    bi = next_[bi];
    if (bi >= count_) throw RangeErr(env, "RxWindows.settle: a next link leaves the pool");
  }
  return Napi::Number::New(env, bytes);
}

Napi::Value RxWindows::SetPattern(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* fn = "RxWindows.setPattern";
  if (info.Length() < 1 || info[0].IsNull() || info[0].IsUndefined()) {
    head_ = 0;
    min_bytes_ = 0;
    rules_.clear();
    return env.Undefined();
  }
  if (!info[0].IsObject()) throw TypeErr(env, "RxWindows.setPattern: expects an object or null");
  Napi::Object o = info[0].As<Napi::Object>();
  const uint32_t head = OptU32(o, "headBytes", fn, 0, 64, kMaxHead);
  const uint32_t min = OptU32(o, "minBytes", fn, 0, head + 1.0, 1u << 20);
  Napi::Value rv = o.Get("rules");
  if (!rv.IsTypedArray() || rv.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw TypeErr(env, "RxWindows.setPattern: rules must be a Uint8Array of (offset, mask, value) triples");
  Napi::Uint8Array u8 = rv.As<Napi::Uint8Array>();
  const size_t n = u8.ElementLength();
  if (n == 0 || n % 3 != 0 || n / 3 > kMaxRules)
    throw RangeErr(env, "RxWindows.setPattern: rules must hold 1.." + std::to_string(kMaxRules) + " triples");
  std::vector<Rule> rules;
  for (size_t i = 0; i < n; i += 3) {
    if (u8[i] >= head)
      throw RangeErr(env, "RxWindows.setPattern: rule " + std::to_string(i / 3) + " reads byte " +
                              std::to_string(u8[i]) + ", beyond headBytes " + std::to_string(head));
    rules.push_back(Rule{u8[i], u8[i + 1], static_cast<uint8_t>(u8[i + 2] & u8[i + 1])});
  }
  rules_ = std::move(rules);
  min_bytes_ = min;
  head_ = head;
  return env.Undefined();
}

Napi::Value RxWindows::Counters(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("copiedIn", Napi::Number::New(env, static_cast<double>(copied_in_)));
  return o;
}

void InitRxWindows(Napi::Env env, Napi::Object exports) { exports.Set("RxWindows", RxWindows::Define(env)); }

}  // namespace rg
