// ExtTable (ext_table.h): the external memories of one pool, listed by id for the data path.
//   new ExtTable()     an empty table
//   table.set(id, u8)  lists u8's bytes as memory `id` (u8 kept alive until cleared or replaced)
//   table.clear(id)    unlists it (the reference goes)
#include "ext_table.h"

#include "common.h"

namespace rg {

namespace {

constexpr uint32_t kMaxIds = 1u << 24;
const napi_type_tag kExtTableTag = {0x7264'6d61'6772'6170ull, 0x6578'7474'6162'6c65ull};

}  // namespace

Napi::Function ExtTable::Define(Napi::Env env) {
  return DefineClass(env, "ExtTable",
                     {
                         InstanceMethod<&ExtTable::Set>("set"),
                         InstanceMethod<&ExtTable::Clear>("clear"),
                     });
}

ExtTable::ExtTable(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ExtTable>(info) {
  napi_type_tag_object(info.Env(), info.This(), &kExtTableTag);
}

ExtTable* ExtTable::FromValue(Napi::Env env, Napi::Value v, const char* fn) {
  bool ok = false;
  if (v.IsObject()) napi_check_object_type_tag(env, v, &kExtTableTag, &ok);
  if (!ok) throw TypeErr(env, std::string(fn) + ": ext must be an ExtTable");
  return Napi::ObjectWrap<ExtTable>::Unwrap(v.As<Napi::Object>());
}

Napi::Value ExtTable::Set(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t id = static_cast<uint32_t>(ArgInteger(info, 0, "ExtTable.set", "id", 1, kMaxIds - 1));
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw TypeErr(env, "ExtTable.set: memory must be a Uint8Array");
  Napi::Uint8Array u8 = info[1].As<Napi::Uint8Array>();
  if (id >= entries_.size()) {
    entries_.resize(id + 1);
    refs_.resize(id + 1);
  }
  entries_[id].data = u8.ElementLength() == 0 ? nullptr : u8.Data();
  entries_[id].len = u8.ElementLength();
  refs_[id] = Napi::Persistent(u8.As<Napi::Object>());
  return env.Undefined();
}

Napi::Value ExtTable::Clear(const Napi::CallbackInfo& info) {
  const uint32_t id = static_cast<uint32_t>(ArgInteger(info, 0, "ExtTable.clear", "id", 1, kMaxIds - 1));
  if (id < entries_.size()) {
    entries_[id] = Entry();
    refs_[id].Reset();
  }
  return info.Env().Undefined();
}

ExtBinding ParseExtBinding(Napi::Env env, Napi::Object o, const char* fn, uint32_t f_next, uint32_t count,
                           std::vector<Napi::Reference<Napi::Value>>* refs) {
  ExtBinding b;
  b.f_ext = OptU32(o, "flagExt", fn, 0, 0, 4294967295.0);
  if (b.f_ext != 0 && ((b.f_ext & (b.f_ext - 1)) != 0 || b.f_ext == f_next))
    throw RangeErr(env, std::string(fn) + ": flagExt must be one bit, not flagNext's");
  Napi::Value extv = o.Get("ext");
  if (!extv.IsUndefined() && !extv.IsNull()) {
    if (b.f_ext == 0) throw RangeErr(env, std::string(fn) + ": ext needs flagExt");
    b.ext = ExtTable::FromValue(env, extv, fn);
    b.ext_id = U32ArrayArg(env, o.Get("extId"), fn, "extId", count);
    for (const char* k : {"ext", "extId"}) refs->push_back(Napi::Persistent(o.Get(k)));
  }
  return b;
}

void InitExtTable(Napi::Env env, Napi::Object exports) { exports.Set("ExtTable", ExtTable::Define(env)); }

}  // namespace rg
