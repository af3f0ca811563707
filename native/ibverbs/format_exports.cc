// The mlx5 format functions (mlx5_format.h) exported for test/mlx5-format.test.ts: the same
// code the mlx5dv data path runs, over byte fixtures instead of a NIC's rings. Not a data path
// (it returns objects); every buffer and index is checked before use.
#include <infiniband/mlx5dv.h>

#include <cstddef>

#include "mlx5_format.h"
#include "verbs.h"

namespace rg {
namespace {

using namespace mlx5;

// The offsets mlx5_format.h uses are rdma-core's structs: the build fails if they ever differ.
static_assert(sizeof(struct mlx5_cqe64) == kCqeSize, "CQE size");
static_assert(offsetof(struct mlx5_cqe64, hds_ip_ext) == kCqeFlags, "CQE flags word");
static_assert(offsetof(struct mlx5_cqe64, byte_cnt) == kCqeByteCnt, "CQE byte_cnt");
static_assert(offsetof(struct mlx5_cqe64, wqe_counter) == kCqeWqeCounter, "CQE wqe_counter");
static_assert(offsetof(struct mlx5_cqe64, op_own) == kCqeOpOwn, "CQE op_own");
static_assert(offsetof(struct mlx5_err_cqe, vendor_err_synd) == kErrVendorSyndrome, "err CQE vendor syndrome");
static_assert(offsetof(struct mlx5_err_cqe, syndrome) == kErrSyndrome, "err CQE syndrome");
static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16 && offsetof(struct mlx5_wqe_ctrl_seg, fm_ce_se) == 11 &&
                  offsetof(struct mlx5_wqe_ctrl_seg, imm) == 12,
              "ctrl segment");
static_assert(sizeof(struct mlx5_wqe_eth_seg) == 32 && offsetof(struct mlx5_wqe_eth_seg, cs_flags) == 4 &&
                  offsetof(struct mlx5_wqe_eth_seg, inline_hdr_sz) == 12 &&
                  offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) == 14,
              "eth segment");
static_assert(sizeof(struct mlx5_wqe_data_seg) == kDataSeg, "data segment");
static_assert(offsetof(struct mlx5_wqe_srq_next_seg, next_wqe_index) == 2, "srq next segment");
static_assert(MLX5_OPCODE_SEND == kOpcodeSend && MLX5_WQE_CTRL_CQ_UPDATE == kCtrlCqUpdate, "send opcode / CQ update");
static_assert(MLX5_ETH_WQE_L3_CSUM == kEthL3Csum && MLX5_ETH_WQE_L4_CSUM == kEthL4Csum, "eth checksum flags");
static_assert(MLX5_CQE_REQ_ERR == kOpcodeReqErr && MLX5_CQE_RESP_ERR == kOpcodeRespErr &&
                  MLX5_CQE_INVALID == kOpcodeInvalid && MLX5_CQE_RESP_SEND == (kOpRespSend >> 4),
              "CQE opcodes");

uint8_t* Bytes(const Napi::CallbackInfo& info, size_t i, const char* fn, size_t min, size_t* len) {
  if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(info.Env(),
                               std::string(fn) + ": argument " + std::to_string(i) + " must be a Uint8Array");
  Napi::Uint8Array a = info[i].As<Napi::Uint8Array>();
  if (a.ElementLength() < min)
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": buffer of " + std::to_string(a.ElementLength()) +
                                                " bytes, needs " + std::to_string(min));
  if (len) *len = a.ElementLength();
  return a.Data();
}

uint32_t U32(const Napi::CallbackInfo& info, size_t i, const char* fn, uint32_t max) {
  if (!info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": argument " + std::to_string(i) + " must be a number");
  const double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= max) || d != static_cast<double>(static_cast<uint64_t>(d)))
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": argument " + std::to_string(i) +
                                                " must be an integer 0.." + std::to_string(max));
  return static_cast<uint32_t>(d);
}

// state: Uint32Array [ci, zip_total, zip_done, zip_flags, broken, broken_op, error_cqes]
constexpr size_t kStateLen = 7;
uint32_t* State(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
      info[i].As<Napi::Uint32Array>().ElementLength() < kStateLen)
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": state must be a Uint32Array of 7");
  return info[i].As<Napi::Uint32Array>().Data();
}

RxCq LoadCq(const uint32_t* s, uint32_t log_size) {
  RxCq cq;
  cq.log_size = log_size;
  cq.ci = s[0];
  cq.zip_total = s[1];
  cq.zip_done = s[2];
  cq.zip_flags = static_cast<uint16_t>(s[3]);
  cq.broken = s[4] != 0;
  cq.broken_op = static_cast<uint8_t>(s[5]);
  cq.error_cqes = s[6];
  return cq;
}
void StoreCq(uint32_t* s, const RxCq& cq) {
  s[0] = cq.ci;
  s[1] = cq.zip_total;
  s[2] = cq.zip_done;
  s[3] = cq.zip_flags;
  s[4] = cq.broken;
  s[5] = cq.broken_op;
  s[6] = static_cast<uint32_t>(cq.error_cqes);
}

// One poll over a fixture ring: the state in and out, each completion as an object.
template <typename C, typename Poll, typename Put>
Napi::Value PollJs(const Napi::CallbackInfo& info, const char* fn, Poll poll, Put put) {
  const uint32_t log_size = U32(info, 1, fn, 16);
  uint8_t* cqes = Bytes(info, 0, fn, size_t{kCqeSize} << log_size, nullptr);
  uint32_t* s = State(info, 2, fn);
  const uint32_t max = U32(info, 3, fn, 4096);
  RxCq cq = LoadCq(s, log_size);
  std::vector<C> out(max);
  const uint32_t n = poll(cqes, cq, out.data(), max);
  StoreCq(s, cq);
  Napi::Array a = Napi::Array::New(info.Env(), n);
  for (uint32_t i = 0; i < n; i++) {
    Napi::Object o = Napi::Object::New(info.Env());
    put(o, out[i]);
    a.Set(i, o);
  }
  return a;
}

// mlx5PollRx(cqes, logSize, state, max) -> [{bc, flags, syndrome}]
Napi::Value PollRx(const Napi::CallbackInfo& info) {
  return PollJs<RxCompletion>(info, "mlx5PollRx", PollRxCq, [](Napi::Object o, const RxCompletion& c) {
    o.Set("bc", c.bc);
    o.Set("flags", c.flags);
    o.Set("syndrome", c.syndrome);
  });
}

// mlx5PollTx(cqes, logSize, state, max) -> [{wqeCounter, syndrome}]
Napi::Value PollTx(const Napi::CallbackInfo& info) {
  return PollJs<TxCompletion>(info, "mlx5PollTx", PollTxCq, [](Napi::Object o, const TxCompletion& c) {
    o.Set("wqeCounter", c.wqe_counter);
    o.Set("syndrome", c.syndrome);
  });
}

// mlx5InitCq(cqes, logSize)
Napi::Value InitCq(const Napi::CallbackInfo& info) {
  const uint32_t log_size = U32(info, 1, "mlx5InitCq", 16);
  InitCqRing(Bytes(info, 0, "mlx5InitCq", size_t{kCqeSize} << log_size, nullptr), log_size);
  return info.Env().Undefined();
}

// mlx5BuildSendWqe(wqe, index, qpn, frame, lkey, addrHi, addrLo, csFlags, signaled, imm, len) -> ds
Napi::Value BuildSend(const Napi::CallbackInfo& info) {
  const char* fn = "mlx5BuildSendWqe";
  uint8_t* wqe = Bytes(info, 0, fn, kWqeBb, nullptr);
  size_t flen = 0;
  const uint8_t* frame = Bytes(info, 3, fn, 1, &flen);
  const uint32_t len = U32(info, 10, fn, 65535);
  if (len > flen && flen < kInlineHdr)
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": frame shorter than its inline part");
  const uint64_t addr = uint64_t{U32(info, 5, fn, 0xffffffffu)} << 32 | U32(info, 6, fn, 0xffffffffu);
  const uint32_t ds =
      BuildSendWqe(wqe, static_cast<uint16_t>(U32(info, 1, fn, 0xffff)), U32(info, 2, fn, 0xffffff), frame, len,
                   U32(info, 4, fn, 0xffffffffu), addr, static_cast<uint8_t>(U32(info, 7, fn, 255)),
                   info[8].ToBoolean().Value(), U32(info, 9, fn, 0xffffffffu));
  return Napi::Number::New(info.Env(), ds);
}

// mlx5ParseSendWqe(wqe) -> {index, opcode, qpn, ds, signaled, csFlags, inlineBytes, dataBytes, lkey, addr}
Napi::Value ParseSend(const Napi::CallbackInfo& info) {
  const SendWqeView v = ParseSendWqe(Bytes(info, 0, "mlx5ParseSendWqe", kWqeBb, nullptr));
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("index", v.index);
  o.Set("opcode", v.opcode);
  o.Set("qpn", v.qpn);
  o.Set("ds", v.ds);
  o.Set("signaled", v.signaled);
  o.Set("csFlags", v.cs_flags);
  o.Set("inlineBytes", v.inline_bytes);
  o.Set("dataBytes", v.data_bytes);
  o.Set("lkey", v.lkey);
  o.Set("addr", Napi::BigInt::New(info.Env(), v.addr));
  return o;
}

// mlx5StridingBc(bc) -> {filler, strides, bytes}
Napi::Value StridingBcJs(const Napi::CallbackInfo& info) {
  const StridingBc b = DecodeStridingBc(U32(info, 0, "mlx5StridingBc", 0xffffffffu));
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("filler", b.filler);
  o.Set("strides", b.strides);
  o.Set("bytes", b.bytes);
  return o;
}

// mlx5Csum(flags) -> {ip4, l4}
Napi::Value CsumJs(const Napi::CallbackInfo& info) {
  const uint16_t f = static_cast<uint16_t>(U32(info, 0, "mlx5Csum", 0xffff));
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("ip4", CsumIp4Ok(f));
  o.Set("l4", CsumL4Ok(f));
  return o;
}

// mlx5Doorbell(kind: 'cq'|'rq'|'sq', value) -> the 8-byte doorbell record it leaves
Napi::Value DoorbellJs(const Napi::CallbackInfo& info) {
  const std::string kind = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  const uint32_t v = U32(info, 1, "mlx5Doorbell", 0xffffffffu);
  Napi::Uint8Array rec = Napi::Uint8Array::New(info.Env(), 8);
  if (kind == "cq")
    CqDoorbell(rec.Data(), v);
  else if (kind == "rq")
    RqDoorbell(rec.Data(), v);
  else if (kind == "sq")
    SqDoorbell(rec.Data(), v);
  else
    throw Napi::TypeError::New(info.Env(), "mlx5Doorbell: kind must be cq, rq or sq");
  return rec;
}

// mlx5DataSeg(seg, bytes, lkey, addrHi, addrLo) / mlx5SrqNextSeg(seg, next)
Napi::Value DataSegJs(const Napi::CallbackInfo& info) {
  const char* fn = "mlx5DataSeg";
  DataSeg(Bytes(info, 0, fn, kDataSeg, nullptr), U32(info, 1, fn, 0xffffffffu), U32(info, 2, fn, 0xffffffffu),
          uint64_t{U32(info, 3, fn, 0xffffffffu)} << 32 | U32(info, 4, fn, 0xffffffffu));
  return info.Env().Undefined();
}
Napi::Value SrqNextJs(const Napi::CallbackInfo& info) {
  SrqNextSeg(Bytes(info, 0, "mlx5SrqNextSeg", 16, nullptr),
             static_cast<uint16_t>(U32(info, 1, "mlx5SrqNextSeg", 0xffff)));
  return info.Env().Undefined();
}

}  // namespace

void InitFormatExports(Napi::Env env, Napi::Object exports) {
  exports.Set("mlx5PollRx", Napi::Function::New(env, PollRx, "mlx5PollRx"));
  exports.Set("mlx5PollTx", Napi::Function::New(env, PollTx, "mlx5PollTx"));
  exports.Set("mlx5InitCq", Napi::Function::New(env, InitCq, "mlx5InitCq"));
  exports.Set("mlx5BuildSendWqe", Napi::Function::New(env, BuildSend, "mlx5BuildSendWqe"));
  exports.Set("mlx5ParseSendWqe", Napi::Function::New(env, ParseSend, "mlx5ParseSendWqe"));
  exports.Set("mlx5StridingBc", Napi::Function::New(env, StridingBcJs, "mlx5StridingBc"));
  exports.Set("mlx5Csum", Napi::Function::New(env, CsumJs, "mlx5Csum"));
  exports.Set("mlx5Doorbell", Napi::Function::New(env, DoorbellJs, "mlx5Doorbell"));
  exports.Set("mlx5DataSeg", Napi::Function::New(env, DataSegJs, "mlx5DataSeg"));
  exports.Set("mlx5SrqNextSeg", Napi::Function::New(env, SrqNextJs, "mlx5SrqNextSeg"));
}

}  // namespace rg
