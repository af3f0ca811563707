// ChainCopy: a packet's bytes (a chain of pool buffers) copied to or from other memory in one
// call, with no view object per buffer (graph/buffer-pool.ts; nodes/rdma/copy.ts: ddp-input
// places received payloads with it, the transport fills segments from an MR with it).
//   new ChainCopy({memory, count, dataSize, offset, length, flags, next, flagNext,
//                  windows?, flagPeer?})
//       over one pool: its ArrayBuffer and per-buffer arrays (kept alive by the object); with
//       `windows` (rx_windows.h), a buffer flagged flagPeer is read where its bytes still are
//       (a memif peer's memory), its window checked
//   copier.toMem(bi, skip, dst, dstOff, len) -> bytes copied
//       len bytes of the chain from buffer bi, starting skip bytes into it, to dst[dstOff..]
//       (a Uint8Array); fewer when the chain ends first. dst's range is checked before any
//       byte moves, each buffer's place in the pool before its own bytes do.
//   copier.fromMem(bi, h, src, srcOff, len) -> the last buffer written
//       len bytes of src[srcOff..] into the chain from buffer bi, h bytes into its data (a
//       header before them), each buffer filled to dataSize and its length set (h + bytes in
//       the first, bytes in the others). The whole chain (links, places in the pool, room for
//       len) and src's range are checked before any byte moves.
// Either follows a chain for at most `count` buffers: a loop in the next links cannot hold it.
#include <cstring>
#include <vector>

#include "common.h"
#include "rx_windows.h"

namespace rg {

namespace {

class ChainCopy : public Napi::ObjectWrap<ChainCopy> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "ChainCopy",
                       {InstanceMethod<&ChainCopy::ToMem>("toMem"), InstanceMethod<&ChainCopy::FromMem>("fromMem")});
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
    data_size_ = OptU32(o, "dataSize", fn, 0, 64, 1u << 20);
    offset_ = U32ArrayArg(env, o.Get("offset"), fn, "offset", count_);
    length_ = U32ArrayArg(env, o.Get("length"), fn, "length", count_);
    flags_ = U32ArrayArg(env, o.Get("flags"), fn, "flags", count_);
    next_ = U32ArrayArg(env, o.Get("next"), fn, "next", count_);
    f_next_ = OptU32(o, "flagNext", fn, 0, 1, 4294967295.0);
    for (const char* k : {"memory", "offset", "length", "flags", "next"}) refs_.push_back(Napi::Persistent(o.Get(k)));
    Napi::Value wv = o.Get("windows");
    if (!wv.IsUndefined() && !wv.IsNull()) {
      win_ = RxWindows::FromValue(env, wv, fn);
      if (!win_->SamePool(mem_, count_, flags_)) throw RangeErr(env, "ChainCopy: windows are another pool's");
      f_peer_ = win_->f_peer();
      refs_.push_back(Napi::Persistent(wv));
    }
  }

 private:
  // info[2] (a Uint8Array), info[3] (an offset in it) and info[4] (a length): the span's first
  // byte, after checking it lies inside; its length in *len.
  static uint8_t* SpanArg(const Napi::CallbackInfo& info, const char* fn, const char* what, size_t* len) {
    Napi::Env env = info.Env();
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      throw TypeErr(env, std::string(fn) + ": " + what + " must be a Uint8Array");
    Napi::Uint8Array a = info[2].As<Napi::Uint8Array>();
    const double off = ArgInteger(info, 3, fn, "offset", 0, 9007199254740991.0);
    const double n = ArgInteger(info, 4, fn, "len", 0, 4294967295.0);
    if (off + n > static_cast<double>(a.ElementLength()))
      throw RangeErr(env, std::string(fn) + ": [offset, offset + len) is outside " + what);
    *len = static_cast<size_t>(n);
    return a.Data() + static_cast<size_t>(off);
  }

  Napi::Value ToMem(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const char* fn = "ChainCopy.toMem";
    uint32_t bi = static_cast<uint32_t>(ArgInteger(info, 0, fn, "bi", 0, count_ - 1.0));
    double skip = ArgInteger(info, 1, fn, "skip", 0, 4294967295.0);
    size_t left = 0, done = 0;
    uint8_t* out = SpanArg(info, fn, "dst", &left);
    for (uint32_t steps = 0; left > 0 && steps < count_; steps++) {
      const uint32_t l = length_[bi], o = offset_[bi];
      const uint8_t* from = mem_ + o;
      if (flags_[bi] & f_peer_) {
        // Still in the peer's memory (f_peer_ is 0 without windows).
        from = win_->Read(bi, o, l);
        if (from == nullptr)
          throw RangeErr(env, "ChainCopy.toMem: buffer " + std::to_string(bi) + " lies outside its peer window");
      } else if (uint64_t{o} + l > mem_len_) {
        throw RangeErr(env, "ChainCopy.toMem: buffer " + std::to_string(bi) + " lies outside the pool");
      }
      if (skip < l) {
        const size_t s = static_cast<size_t>(skip);
        const size_t take = l - s < left ? l - s : left;
        std::memcpy(out + done, from + s, take);
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

  Napi::Value FromMem(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const char* fn = "ChainCopy.fromMem";
    uint32_t bi = static_cast<uint32_t>(ArgInteger(info, 0, fn, "bi", 0, count_ - 1.0));
    const uint32_t h = static_cast<uint32_t>(ArgInteger(info, 1, fn, "h", 0, data_size_));
    size_t len = 0;
    const uint8_t* in = SpanArg(info, fn, "src", &len);
    // The chain must hold it all: checked (links and ranges) before a byte moves.
    {
      uint32_t b = bi, room = data_size_ - h;
      size_t need = len;
      for (uint32_t steps = 0;; steps++) {
        if (uint64_t{offset_[b]} + data_size_ > mem_len_)
          throw RangeErr(env, "ChainCopy.fromMem: buffer " + std::to_string(b) + " lies outside the pool");
        if (need <= room) break;
        need -= room;
        if ((flags_[b] & f_next_) == 0 || steps + 1 >= count_)
          throw RangeErr(env, "ChainCopy.fromMem: the chain is too short for " + std::to_string(len) + " bytes");
        b = next_[b];
        if (b >= count_) throw RangeErr(env, "ChainCopy.fromMem: a next link leaves the pool");
        room = data_size_;
      }
    }
    size_t left = len;
    uint32_t at = offset_[bi] + h, room = data_size_ - h, used = h;
    for (;;) {
      const size_t take = left < room ? left : room;
      std::memcpy(mem_ + at, in, take);
      in += take;
      left -= take;
      length_[bi] = used + static_cast<uint32_t>(take);
      if (left == 0 || (flags_[bi] & f_next_) == 0) break;
      bi = next_[bi];
      at = offset_[bi];
      room = data_size_;
      used = 0;
    }
    return Napi::Number::New(env, bi);
  }

  uint8_t* mem_ = nullptr;
  size_t mem_len_ = 0;
  uint32_t count_ = 0, data_size_ = 0, f_next_ = 0, f_peer_ = 0;
  RxWindows* win_ = nullptr;
  uint32_t *offset_ = nullptr, *length_ = nullptr, *flags_ = nullptr, *next_ = nullptr;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};

}  // namespace

void InitChainCopy(Napi::Env env, Napi::Object exports) { exports.Set("ChainCopy", ChainCopy::Define(env)); }

}  // namespace rg
