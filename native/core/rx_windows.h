// Received payload still in a memif peer's memory (graph/peer-windows.ts): the windows a memif
// server's receive leaves in the client's buffers instead of copying them into the pool, one per
// pool buffer, until the packet is placed (ChainCopy reads them in place) or the ring slots go
// back to the peer (the bytes are copied in first). Also the pattern (set by the RDMA stack:
// wire facts stay out of the driver) that says which frames may be received so.
#pragma once

#include <napi.h>

#include <cstdint>
#include <vector>

namespace rg {

class RxWindows : public Napi::ObjectWrap<RxWindows> {
 public:
  static constexpr uint32_t kMaxHead = 256;  // the most header bytes a pattern may ask for
  static constexpr uint32_t kMaxRules = 32;

  static Napi::Function Define(Napi::Env env);
  explicit RxWindows(const Napi::CallbackInfo& info);

  // This object is an RxWindows (made by this module), checked by its type tag.
  static RxWindows* FromValue(Napi::Env env, Napi::Value v, const char* fn);

  // Whether this table describes the pool whose memory, count and flags these are.
  bool SamePool(const uint8_t* mem, uint32_t count, const uint32_t* flags) const {
    return mem == mem_ && count == count_ && flags == flags_;
  }
  uint32_t f_peer() const { return f_peer_; }
  uint32_t f_peer_chain() const { return f_peer_chain_; }
  // A pattern is set: frames may be received with their payload left where it is.
  bool active() const { return head_ != 0; }
  uint32_t head_bytes() const { return head_; }
  uint64_t min_bytes() const { return min_bytes_; }
  // The frame's first head_bytes() bytes (our copy) match every rule of the pattern.
  bool Matches(const uint8_t* hdr) const {
    for (const Rule& r : rules_)
      if ((hdr[r.off] & r.mask) != r.value) return false;
    return true;
  }
  // Buffer bi's bytes from pool offset `base` on are `len` bytes at src (the peer's memory).
  void Set(uint32_t bi, const uint8_t* src, uint32_t base, uint32_t len) {
    Win& w = win_[bi];
    w.src = src;
    w.base = base;
    w.len = len;
  }
  // Where [o, o + l) of peer buffer bi lies, or nullptr when outside its window.
  const uint8_t* Read(uint32_t bi, uint32_t o, uint32_t l) const {
    if (bi >= win_.size()) return nullptr;
    const Win& w = win_[bi];
    if (w.src == nullptr || o < w.base || uint64_t{o} + l > uint64_t{w.base} + w.len) return nullptr;
    return w.src + (o - w.base);
  }
  // Copies buffer bi's window into the pool (when it is still flagged peer) and clears the
  // flag; the bytes copied.
  uint32_t CopyIn(uint32_t bi);
  // Allocates the per-buffer table (a driver binding it; no-op after the first call).
  void Reserve() {
    if (win_.size() != count_) win_.assign(count_, Win{});
  }

 private:
  struct Win {
    const uint8_t* src = nullptr;
    uint32_t base = 0, len = 0;
  };
  struct Rule {
    uint32_t off;
    uint8_t mask, value;
  };
  Napi::Value Settle(const Napi::CallbackInfo& info);
  Napi::Value SetPattern(const Napi::CallbackInfo& info);
  Napi::Value Counters(const Napi::CallbackInfo& info);

  uint8_t* mem_ = nullptr;
  size_t mem_len_ = 0;
  uint32_t count_ = 0, f_next_ = 0, f_peer_ = 0, f_peer_chain_ = 0;
  uint32_t *flags_ = nullptr, *next_ = nullptr;
  uint32_t head_ = 0;
  uint64_t min_bytes_ = 0;
  std::vector<Rule> rules_;
  std::vector<Win> win_;
  uint64_t copied_in_ = 0;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};

}  // namespace rg
