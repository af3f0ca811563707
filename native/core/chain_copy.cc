// ChainCopy: a packet's bytes (a chain of pool buffers) copied into other memory in one call,
// with no view object per buffer (graph/buffer-pool.ts; used by ddp-input to place payloads).
//   new ChainCopy({memory, count, offset, length, flags, next, flagNext})
//       over one pool: its ArrayBuffer and per-buffer arrays (kept alive by the object)
//   copier.toMem(bi, skip, dst, dstOff, len) -> bytes copied
//       len bytes of the chain from buffer bi, starting skip bytes into it, to dst[dstOff..]
//       (a Uint8Array); fewer when the chain ends first. Every index, offset and length is
//       checked against the pool and dst before any byte moves; a chain is followed for at most
//       `count` buffers (a loop in the next links cannot hold the call).
#include <cstring>
#include <vector>

#include "common.h"

namespace rg {

namespace {

class ChainCopy : public Napi::ObjectWrap<ChainCopy> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "ChainCopy", {InstanceMethod<&ChainCopy::ToMem>("toMem")});
  }

  explicit ChainCopy(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ChainCopy>(info) {
    Napi::Env env = info.Env();
    const char* fn = "ChainCopy";
    if (info.Length() < 1 || !info[0].IsObject()) throw TypeErr(env, "ChainCopy: needs the pool's arrays");
    Napi::Object o = info[0].As<Napi::Object>();
    Napi::Value memv = o.Get("memory");
    if (!memv.IsArrayBuffer()) throw TypeErr(env, "ChainCopy: memory must be an ArrayBuffer");
    Napi::ArrayBuffer mem = memv.As<Napi::ArrayBuffer>();
    mem_ = static_cast<uint8_t*>(mem.Data());
    mem_len_ = mem.ByteLength();
    if (mem_ == nullptr || mem_len_ == 0) throw RangeErr(env, "ChainCopy: memory is empty or detached");
    count_ = OptU32(o, "count", fn, 0, 1, 4294967294.0);
    offset_ = U32ArrayArg(env, o.Get("offset"), fn, "offset", count_);
    length_ = U32ArrayArg(env, o.Get("length"), fn, "length", count_);
    flags_ = U32ArrayArg(env, o.Get("flags"), fn, "flags", count_);
    next_ = U32ArrayArg(env, o.Get("next"), fn, "next", count_);
    f_next_ = OptU32(o, "flagNext", fn, 0, 1, 4294967295.0);
    for (const char* k : {"memory", "offset", "length", "flags", "next"}) refs_.push_back(Napi::Persistent(o.Get(k)));
  }

 private:
  Napi::Value ToMem(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const char* fn = "ChainCopy.toMem";
    uint32_t bi = static_cast<uint32_t>(ArgInteger(info, 0, fn, "bi", 0, count_ - 1.0));
    double skip = ArgInteger(info, 1, fn, "skip", 0, 4294967295.0);
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      throw TypeErr(env, "ChainCopy.toMem: dst must be a Uint8Array");
    Napi::Uint8Array dst = info[2].As<Napi::Uint8Array>();
    const double dst_off = ArgInteger(info, 3, fn, "dstOff", 0, 9007199254740991.0);
    const double len = ArgInteger(info, 4, fn, "len", 0, 4294967295.0);
    if (dst_off + len > static_cast<double>(dst.ElementLength()))
      throw RangeErr(env, "ChainCopy.toMem: [dstOff, dstOff + len) is outside dst");
    uint8_t* out = dst.Data() + static_cast<size_t>(dst_off);
    size_t left = static_cast<size_t>(len), done = 0;
    for (uint32_t steps = 0; left > 0 && steps < count_; steps++) {
      const uint32_t l = length_[bi], o = offset_[bi];
      if (uint64_t{o} + l > mem_len_)
        throw RangeErr(env, "ChainCopy.toMem: buffer " + std::to_string(bi) + " lies outside the pool");
      if (skip < l) {
        const size_t s = static_cast<size_t>(skip);
        const size_t take = l - s < left ? l - s : left;
        std::memcpy(out + done, mem_ + o + s, take);
        done += take;
        left -= take;
        skip = 0;
      } else {
        skip -= l;
      }
      if (left == 0 || (flags_[bi] & f_next_) == 0) break;
      bi = next_[bi];
      if (bi >= count_) throw RangeErr(env, "ChainCopy.toMem: a next link leaves the pool");
    }
    return Napi::Number::New(env, static_cast<double>(done));
  }

  uint8_t* mem_ = nullptr;
  size_t mem_len_ = 0;
  uint32_t count_ = 0, f_next_ = 0;
  uint32_t *offset_ = nullptr, *length_ = nullptr, *flags_ = nullptr, *next_ = nullptr;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};

}  // namespace

void InitChainCopy(Napi::Env env, Napi::Object exports) { exports.Set("ChainCopy", ChainCopy::Define(env)); }

}  // namespace rg
