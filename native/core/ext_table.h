// External payload memory (DPDK's rte_pktmbuf_attach_extbuf, VPP's external buffer data): the
// memories a pool buffer's bytes may live in instead of the pool (graph/ext-memory.ts: an RDMA
// MR a segment is sent from without a copy into the pool), by id, with a strong reference to
// each so that it stays mapped while listed. The memif data path reads them (memif_rings.cc).
#pragma once

#include <napi.h>

#include <cstdint>
#include <vector>

namespace rg {

class ExtTable;

// A driver's view of a pool's external payload segments: the flag bit (0: none expected), and the
// table with each buffer's id in it. The bit without a table: such a segment is a transmit error.
struct ExtBinding {
  const ExtTable* ext = nullptr;
  uint32_t* ext_id = nullptr;
  uint32_t f_ext = 0;
};

// Reads {flagExt, ext, extId} of a bindPool object (`count` buffers; flagExt one bit, not
// `f_next`); the objects it keeps go to `refs`. Throws TypeError/RangeError naming `fn`.
ExtBinding ParseExtBinding(Napi::Env env, Napi::Object o, const char* fn, uint32_t f_next, uint32_t count,
                           std::vector<Napi::Reference<Napi::Value>>* refs);

class ExtTable : public Napi::ObjectWrap<ExtTable> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ExtTable(const Napi::CallbackInfo& info);

  // The bytes [off, off + len) of memory `id`, or nullptr when the id is not listed or the
  // window does not lie inside it.
  const uint8_t* Window(uint32_t id, uint64_t off, uint64_t len) const {
    if (id >= entries_.size()) return nullptr;
    const Entry& e = entries_[id];
    if (e.data == nullptr || off > e.len || len > e.len - off) return nullptr;
    return e.data + off;
  }

  // This object is an ExtTable (made by this module), checked by its type tag.
  static ExtTable* FromValue(Napi::Env env, Napi::Value v, const char* fn);

 private:
  struct Entry {
    const uint8_t* data = nullptr;
    uint64_t len = 0;
  };
  Napi::Value Set(const Napi::CallbackInfo& info);
  Napi::Value Clear(const Napi::CallbackInfo& info);
  std::vector<Entry> entries_;
  std::vector<Napi::ObjectReference> refs_;
};

}  // namespace rg
