// Port: one Ethernet port of an RDMA NIC driven through RAW_PACKET queues, in one of two modes:
//
//   ibv  receive: ibv_poll_cq + ibv_post_wq_recv; transmit: ibv_post_send (one signaled WR per
//        burst) and ibv_poll_cq to reap. Works on any device with RAW_PACKET QPs.
//   dv   (mlx5) the same queues, but the rings mlx5dv_init_obj returns are read and written in
//        memory: CQEs parsed by mlx5_format.h (compressed sessions included), receive WQEs
//        refilled with a doorbell record store, send WQEs built in place and rung with the
//        BlueFlame register. Legacy RQ (one buffer per WQE) or striding RQ (8 strides per WQE,
//        one pool buffer per stride) when the device can.
//
// Order at open (as VPP's rdma plugin, for the reason it gives: rx first would receive our own
// broadcasts): PD, MR over the whole buffer pool memory (zero copy both ways), the transmit
// queues, then per rx queue a CQ and an IBV_WQT_RQ work queue, an indirection table over them,
// one RSS RAW_PACKET QP (Toeplitz over IPv4 addresses and UDP ports), and flow rules on it:
// our MAC, broadcast and IPv4 multicast (both DONT_TRAP: the kernel keeps its copy), or
// everything when promiscuous.
//
// Buffers, as the memif driver: receive takes pool buffers from a stash JavaScript tops up
// between bursts; buffers we are done with (sent, or a receive completion in error) go to a
// `done` list JavaScript frees after each call. Every index read from the device (wr_id,
// wqe_counter, stride counts) is checked against our own ring state before use.
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "mlx5_format.h"
#include "verbs.h"

namespace rg {
namespace {

constexpr uint32_t kBurst = 256;
constexpr uint32_t kMaxTxSegs = 8;  // a chained frame: at most this many buffers
constexpr uint32_t kStateLen = 2;   // [stash count, done count]; errors: stats().error
constexpr uint32_t kLogStridesPerWqe = 3;
constexpr uint32_t kInvalidLkey = 0x100;  // MLX5_INVALID_LKEY: a null data segment

// Toeplitz key (any 40 bytes work; this is the well-known Microsoft RSS verification key).
const uint8_t kRssKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                             0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                             0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

struct Pool {
  uint8_t* mem = nullptr;
  size_t mem_len = 0;
  uint32_t first_offset = 0, stride = 0, headroom = 0, data_size = 0, count = 0;
  uint32_t *offset = nullptr, *length = nullptr, *flags = nullptr, *next = nullptr;
  uint32_t *stash = nullptr, *done = nullptr, *state = nullptr;
  uint32_t stash_cap = 0, done_cap = 0;
  uint32_t f_next = 0, f_ip4_ok = 0, f_l4_ok = 0, f_tx_ip4 = 0, f_tx_udp = 0;
  uint32_t DataStart(uint32_t bi) const { return first_offset + bi * stride + headroom; }
  bool Take(uint32_t* bi) {
    if (state[0] == 0) return false;
    *bi = stash[--state[0]];
    return *bi < count;
  }
  void Give(uint32_t bi) {
    if (state[1] < done_cap) done[state[1]++] = bi;
  }
};

struct RxQ {
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;
  ibv_wq* wq = nullptr;
  uint32_t size = 0, mask = 0;  // buffers in the ring
  std::vector<uint32_t> bufs;
  uint32_t head = 0, tail = 0;  // buffers consumed / posted (free-running)
  // dv
  uint8_t* cqes = nullptr;
  uint8_t* cq_db = nullptr;
  mlx5::RxCq cqs;
  uint8_t* wqes = nullptr;
  uint8_t* wq_db = nullptr;
  uint32_t wqe_cnt = 0, wqe_stride = 0, wqe_tail = 0;
  bool striding = false;
  uint32_t stride_bytes = 0;
  uint64_t packets = 0, bytes = 0, errors = 0, no_buffers = 0, fillers = 0;
};

struct TxQ {
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;
  ibv_qp* qp = nullptr;
  uint32_t size = 0, mask = 0;  // packet slots
  std::vector<uint32_t> pkts;   // buffer (head of chain) per packet slot
  uint32_t head = 0, tail = 0;  // packets completed / posted
  // dv
  uint8_t* sq = nullptr;
  uint32_t bb_cnt = 0, bb_mask = 0, pi = 0, sq_ci = 0;
  uint8_t* db = nullptr;
  volatile uint64_t* bf = nullptr;
  uint8_t* cqes = nullptr;
  uint8_t* cq_db = nullptr;
  mlx5::RxCq cqs;
  std::vector<uint32_t> tail_at;  // per BB of a signaled WQE: packet tail after it
  std::vector<uint32_t> end_at;   // per BB of a signaled WQE: pi after it
  uint32_t qpn = 0;
  uint64_t packets = 0, bytes = 0, errors = 0, refused = 0, recoveries = 0;
};

std::string Errno(const char* what) { return std::string(what) + ": " + strerror(errno); }

class Port : public Napi::ObjectWrap<Port> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Port",
        {InstanceMethod<&Port::Rx>("rx"), InstanceMethod<&Port::Tx>("tx"), InstanceMethod<&Port::LinkUp>("linkUp"),
         InstanceMethod<&Port::Stats>("stats"), InstanceMethod<&Port::Info>("info"),
         InstanceMethod<&Port::Close>("close"), InstanceMethod<&Port::Reclaim>("reclaim")});
  }

  explicit Port(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Port>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw Napi::TypeError::New(env, "verbs Port: expects an options object");
    try {
      Open(env, info[0].As<Napi::Object>());
    } catch (...) {
      Teardown();
      throw;
    }
  }
  ~Port() override { Teardown(); }

 private:
  // ------------------------------------------------------------------ open

  uint32_t Opt(Napi::Object o, const char* k, uint32_t def) {
    Napi::Value v = o.Get(k);
    return v.IsNumber() ? v.As<Napi::Number>().Uint32Value() : def;
  }
  uint32_t* U32s(Napi::Env env, Napi::Object o, const char* k, size_t min, uint32_t* cap = nullptr) {
    Napi::Value v = o.Get(k);
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
        v.As<Napi::Uint32Array>().ElementLength() < min)
      throw Napi::TypeError::New(
          env, std::string("verbs Port: ") + k + " must be a Uint32Array of at least " + std::to_string(min));
    refs_.push_back(Napi::Persistent(v));
    if (cap) *cap = static_cast<uint32_t>(v.As<Napi::Uint32Array>().ElementLength());
    return v.As<Napi::Uint32Array>().Data();
  }

  void Fail(Napi::Env env, const std::string& msg) { throw Napi::Error::New(env, msg); }

  void Open(Napi::Env env, Napi::Object o) {
    const std::string dev = o.Get("device").ToString().Utf8Value();
    port_ = static_cast<uint8_t>(Opt(o, "port", 1));
    dv_ = o.Get("mode").ToString().Utf8Value() == "dv";
    const uint32_t nrx = Opt(o, "rxQueues", 1), ntx = Opt(o, "txQueues", 1);
    const uint32_t rx_size = Opt(o, "rxQueueSize", 1024), tx_size = Opt(o, "txQueueSize", 1024);
    promisc_ = o.Get("promisc").ToBoolean().Value();
    const bool want_striding = o.Get("striding").ToBoolean().Value();
    const bool want_zip = o.Get("cqeCompression").ToBoolean().Value();
    Napi::Value macv = o.Get("mac");
    if (!macv.IsTypedArray() || macv.As<Napi::Uint8Array>().ElementLength() != 6)
      throw Napi::TypeError::New(env, "verbs Port: mac must be a Uint8Array of 6");
    std::memcpy(mac_, macv.As<Napi::Uint8Array>().Data(), 6);
    auto pow2 = [](uint32_t v) { return v >= 64 && v <= 32768 && (v & (v - 1)) == 0; };
    if (!pow2(rx_size) || !pow2(tx_size)) Fail(env, "queue sizes must be powers of two between 64 and 32768");
    if (nrx < 1 || nrx > 64 || ntx < 1 || ntx > 64) Fail(env, "1..64 rx and tx queues");

    // The pool.
    Napi::Object p = o.Get("pool").As<Napi::Object>();
    Napi::Value memv = p.Get("memory");
    if (!memv.IsArrayBuffer()) throw Napi::TypeError::New(env, "verbs Port: pool.memory must be an ArrayBuffer");
    refs_.push_back(Napi::Persistent(memv));
    pool_.mem = static_cast<uint8_t*>(memv.As<Napi::ArrayBuffer>().Data());
    pool_.mem_len = memv.As<Napi::ArrayBuffer>().ByteLength();
    pool_.first_offset = Opt(p, "firstOffset", 0);
    pool_.stride = Opt(p, "stride", 0);
    pool_.headroom = Opt(p, "headroom", 0);
    pool_.data_size = Opt(p, "dataSize", 0);
    pool_.count = Opt(p, "count", 0);
    if (pool_.mem == nullptr || pool_.count == 0 || pool_.stride < pool_.headroom + pool_.data_size ||
        uint64_t{pool_.first_offset} + uint64_t{pool_.count} * pool_.stride > pool_.mem_len)
      Fail(env, "verbs Port: the pool geometry does not fit its memory");
    pool_.offset = U32s(env, p, "offset", pool_.count);
    pool_.length = U32s(env, p, "length", pool_.count);
    pool_.flags = U32s(env, p, "flags", pool_.count);
    pool_.next = U32s(env, p, "next", pool_.count);
    pool_.stash = U32s(env, p, "stash", 1, &pool_.stash_cap);
    pool_.done = U32s(env, p, "done", tx_size * ntx + rx_size * nrx + kBurst, &pool_.done_cap);
    pool_.state = U32s(env, p, "state", kStateLen);
    pool_.f_next = Opt(p, "flagNext", 0);
    pool_.f_ip4_ok = Opt(p, "flagIp4Ok", 0);
    pool_.f_l4_ok = Opt(p, "flagL4Ok", 0);
    pool_.f_tx_ip4 = Opt(p, "flagTxIp4", 0);
    pool_.f_tx_udp = Opt(p, "flagTxUdp", 0);
    std::memset(pool_.state, 0, kStateLen * 4);

    // The device.
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) Fail(env, Errno("ibv_get_device_list"));
    ibv_device* d = nullptr;
    for (int i = 0; i < n; i++)
      if (dev == ibv_get_device_name(list[i])) d = list[i];
    if (d == nullptr) {
      ibv_free_device_list(list);
      Fail(env, "no RDMA device named \"" + dev + "\"");
    }
    if (dv_ && !mlx5dv_is_supported(d)) {
      ibv_free_device_list(list);
      Fail(env, "device " + dev + " is not an mlx5 device: mlx5dv mode needs one (use driver: ibverbs)");
    }
    ctx_ = ibv_open_device(d);
    ibv_free_device_list(list);
    if (ctx_ == nullptr) Fail(env, Errno(("ibv_open_device " + dev).c_str()));
    dev_name_ = dev;
    if (ibv_query_device(ctx_, &dattr_) != 0) Fail(env, Errno("ibv_query_device"));
    if (port_ < 1 || port_ > dattr_.phys_port_cnt)
      Fail(env, "device " + dev + " has ports 1.." + std::to_string(dattr_.phys_port_cnt) + ", not " +
                    std::to_string(port_));
    ibv_port_attr pa{};
    if (ibv_query_port(ctx_, port_, &pa) != 0) Fail(env, Errno("ibv_query_port"));
    if (pa.link_layer != IBV_LINK_LAYER_ETHERNET)
      Fail(env, "device " + dev + " port " + std::to_string(port_) +
                    " is not Ethernet (RAW_PACKET QPs need an Ethernet port)");
    link_up_ = pa.state == IBV_PORT_ACTIVE;
    const int fl = fcntl(ctx_->async_fd, F_GETFL);
    if (fl >= 0) fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
    csum_ = (dattr_.device_cap_flags & IBV_DEVICE_RAW_IP_CSUM) != 0;

    if (dv_) {
      mlx5dv_context c{};
      c.comp_mask = MLX5DV_CONTEXT_MASK_STRIDING_RQ | MLX5DV_CONTEXT_MASK_CQE_COMPRESION;
      if (mlx5dv_query_device(ctx_, &c) != 0) Fail(env, Errno("mlx5dv_query_device"));
      dv_flags_ = c.flags;
      dv_version_ = c.version;
      if (!(c.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1)) Fail(env, "device " + dev + ": mlx5dv mode needs CQE version 1");
      // One pool buffer per stride: the stride is the largest power of two in the data size.
      uint32_t log_stride = 31 - __builtin_clz(pool_.data_size);
      const auto& sc = c.striding_rq_caps;
      striding_ = want_striding && (c.comp_mask & MLX5DV_CONTEXT_MASK_STRIDING_RQ) &&
                  (sc.supported_qpts & (1u << IBV_QPT_RAW_PACKET)) &&
                  log_stride >= sc.min_single_stride_log_num_of_bytes &&
                  log_stride <= sc.max_single_stride_log_num_of_bytes &&
                  kLogStridesPerWqe >= sc.min_single_wqe_log_num_of_strides &&
                  kLogStridesPerWqe <= sc.max_single_wqe_log_num_of_strides;
      log_stride_ = log_stride;
      if ((c.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION) && want_zip && c.cqe_comp_caps.max_num > 0) {
        const uint32_t want = striding_ ? MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX : MLX5DV_CQE_RES_FORMAT_HASH;
        if (c.cqe_comp_caps.supported_format & want) zip_format_ = want;
      }
    }

    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) Fail(env, Errno("ibv_alloc_pd"));
    mr_ = ibv_reg_mr(pd_, pool_.mem, pool_.mem_len, IBV_ACCESS_LOCAL_WRITE);
    if (mr_ == nullptr) Fail(env, Errno("ibv_reg_mr over the buffer pool"));
    lkey_ = mr_->lkey;

    tx_.resize(ntx);
    for (uint32_t q = 0; q < ntx; q++) OpenTx(env, tx_[q], tx_size);
    rx_.resize(nrx);
    for (uint32_t q = 0; q < nrx; q++) OpenRx(env, rx_[q], rx_size);
    OpenRss(env);
    for (RxQ& r : rx_) Refill(r);
  }

  ibv_cq* MakeCq(Napi::Env env, uint32_t cqe, bool zip, ibv_cq_ex** cqx) {
    if (!dv_) {
      ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(cqe), nullptr, nullptr, 0);
      if (cq == nullptr) Fail(env, Errno("ibv_create_cq"));
      return cq;
    }
    ibv_cq_init_attr_ex a{};
    a.cqe = cqe;
    mlx5dv_cq_init_attr m{};
    m.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
    m.cqe_size = 64;  // DPDK in the same process may set MLX5_CQE_SIZE=128: ours are 64 B
    if (zip && zip_format_ != 0) {
      m.comp_mask |= MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;
      m.cqe_comp_res_format = static_cast<uint8_t>(zip_format_);
    }
    *cqx = mlx5dv_create_cq(ctx_, &a, &m);
    if (*cqx == nullptr) Fail(env, Errno("mlx5dv_create_cq"));
    return ibv_cq_ex_to_cq(*cqx);
  }

  void DvCq(Napi::Env env, ibv_cq* cq, uint8_t** cqes, uint8_t** db, mlx5::RxCq& s) {
    mlx5dv_cq out{};
    mlx5dv_obj obj{};
    obj.cq.in = cq;
    obj.cq.out = &out;
    if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) != 0) Fail(env, Errno("mlx5dv_init_obj (CQ)"));
    if (out.cqe_size != mlx5::kCqeSize || (out.cqe_cnt & (out.cqe_cnt - 1)) != 0)
      Fail(env, "mlx5 CQ of " + std::to_string(out.cqe_cnt) + " CQEs of " + std::to_string(out.cqe_size) +
                    " B: need 2^n of 64 B");
    *cqes = static_cast<uint8_t*>(out.buf);
    *db = reinterpret_cast<uint8_t*>(out.dbrec);
    s = mlx5::RxCq{};
    s.log_size = 31 - __builtin_clz(out.cqe_cnt);
    mlx5::InitCqRing(*cqes, s.log_size);
  }

  void QpToRts(Napi::Env env, ibv_qp* qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port_;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) != 0) Fail(env, Errno("ibv_modify_qp INIT"));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) Fail(env, Errno("ibv_modify_qp RTR"));
    a = {};
    a.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) Fail(env, Errno("ibv_modify_qp RTS"));
  }

  void OpenTx(Napi::Env env, TxQ& t, uint32_t size) {
    t.size = size;
    t.mask = size - 1;
    t.pkts.assign(size, 0);
    t.cq = MakeCq(env, size, false, &t.cqx);
    ibv_qp_init_attr a{};
    a.send_cq = t.cq;
    a.recv_cq = t.cq;
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.cap.max_send_wr = size;
    a.cap.max_send_sge = kMaxTxSegs;
    a.sq_sig_all = 0;
    t.qp = ibv_create_qp(pd_, &a);
    if (t.qp == nullptr)
      Fail(env, Errno("ibv_create_qp RAW_PACKET (needs CAP_NET_RAW, and a device that has RAW_PACKET QPs)"));
    QpToRts(env, t.qp);
    if (!dv_) return;
    mlx5dv_qp out{};
    mlx5dv_obj obj{};
    obj.qp.in = t.qp;
    obj.qp.out = &out;
    if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) != 0) Fail(env, Errno("mlx5dv_init_obj (QP)"));
    if (out.sq.stride != mlx5::kWqeBb || (out.sq.wqe_cnt & (out.sq.wqe_cnt - 1)) != 0)
      Fail(env, "mlx5 SQ of " + std::to_string(out.sq.wqe_cnt) + " WQEs of " + std::to_string(out.sq.stride) +
                    " B: need 2^n of 64 B");
    t.sq = static_cast<uint8_t*>(out.sq.buf);
    t.bb_cnt = out.sq.wqe_cnt;
    t.bb_mask = t.bb_cnt - 1;
    t.db = reinterpret_cast<uint8_t*>(out.dbrec);
    t.bf = static_cast<volatile uint64_t*>(out.bf.reg);
    t.qpn = t.qp->qp_num;
    t.tail_at.assign(t.bb_cnt, 0);
    t.end_at.assign(t.bb_cnt, 0);
    DvCq(env, t.cq, &t.cqes, &t.cq_db, t.cqs);
  }

  void OpenRx(Napi::Env env, RxQ& r, uint32_t size) {
    r.size = size;
    r.mask = size - 1;
    r.bufs.assign(size, 0);
    r.striding = striding_;
    r.cq = MakeCq(env, size, true, &r.cqx);
    ibv_wq_init_attr a{};
    a.wq_type = IBV_WQT_RQ;
    a.max_wr = r.striding ? size >> kLogStridesPerWqe : size;
    a.max_sge = r.striding ? (1u << kLogStridesPerWqe) : 1;
    a.pd = pd_;
    a.cq = r.cq;
    if (dv_ && r.striding) {
      mlx5dv_wq_init_attr m{};
      m.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ;
      m.striding_rq_attrs.single_stride_log_num_of_bytes = log_stride_;
      m.striding_rq_attrs.single_wqe_log_num_of_strides = kLogStridesPerWqe;
      m.striding_rq_attrs.two_byte_shift_en = 0;
      r.wq = mlx5dv_create_wq(ctx_, &a, &m);
      if (r.wq == nullptr) Fail(env, Errno("mlx5dv_create_wq (striding RQ)"));
    } else {
      r.wq = ibv_create_wq(ctx_, &a);
      if (r.wq == nullptr) Fail(env, Errno("ibv_create_wq"));
    }
    ibv_wq_attr m{};
    m.attr_mask = IBV_WQ_ATTR_STATE;
    m.wq_state = IBV_WQS_RDY;
    if (ibv_modify_wq(r.wq, &m) != 0) Fail(env, Errno("ibv_modify_wq RDY"));
    if (!dv_) return;
    DvCq(env, r.cq, &r.cqes, &r.cq_db, r.cqs);
    mlx5dv_rwq out{};
    mlx5dv_obj obj{};
    obj.rwq.in = r.wq;
    obj.rwq.out = &out;
    if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_RWQ) != 0) Fail(env, Errno("mlx5dv_init_obj (RWQ)"));
    r.wqes = static_cast<uint8_t*>(out.buf);
    r.wq_db = reinterpret_cast<uint8_t*>(out.dbrec);
    r.wqe_cnt = out.wqe_cnt;
    r.wqe_stride = out.stride;
    const uint32_t want = r.striding ? size >> kLogStridesPerWqe : size;
    const uint32_t need_stride = r.striding ? 16 * (1 + (1u << kLogStridesPerWqe)) : 16;
    if (r.wqe_cnt != want || r.wqe_stride < need_stride)
      Fail(env, "mlx5 RQ of " + std::to_string(r.wqe_cnt) + " WQEs of " + std::to_string(r.wqe_stride) +
                    " B, expected " + std::to_string(want) + " of at least " + std::to_string(need_stride));
    r.stride_bytes = 1u << log_stride_;
    if (r.striding) {
      // Null segments after the 8 strides: the NIC stops at the first.
      for (uint32_t w = 0; w < r.wqe_cnt; w++)
        for (uint32_t s = 1 + (1u << kLogStridesPerWqe); s < r.wqe_stride / 16; s++)
          mlx5::DataSeg(r.wqes + w * r.wqe_stride + s * 16, 0, kInvalidLkey, 0);
    }
  }

  void OpenRss(Napi::Env env) {
    uint32_t log = 0;
    while ((1u << log) < rx_.size()) log++;
    std::vector<ibv_wq*> tbl(1u << log);
    for (uint32_t i = 0; i < tbl.size(); i++) tbl[i] = rx_[i % rx_.size()].wq;
    ibv_rwq_ind_table_init_attr ia{};
    ia.log_ind_tbl_size = log;
    ia.ind_tbl = tbl.data();
    ind_ = ibv_create_rwq_ind_table(ctx_, &ia);
    if (ind_ == nullptr) Fail(env, Errno("ibv_create_rwq_ind_table"));
    ibv_qp_init_attr_ex qa{};
    qa.qp_type = IBV_QPT_RAW_PACKET;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    qa.pd = pd_;
    qa.rwq_ind_tbl = ind_;
    qa.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    qa.rx_hash_conf.rx_hash_key_len = sizeof kRssKey;
    qa.rx_hash_conf.rx_hash_key = const_cast<uint8_t*>(kRssKey);
    qa.rx_hash_conf.rx_hash_fields_mask =
        IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
    rss_ = ibv_create_qp_ex(ctx_, &qa);
    if (rss_ == nullptr) Fail(env, Errno("ibv_create_qp_ex (RSS RAW_PACKET)"));
    static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t mcast[6] = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x00};
    static const uint8_t mcast_mask[6] = {0xff, 0xff, 0xff, 0x80, 0x00, 0x00};
    static const uint8_t exact[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t none[6] = {0, 0, 0, 0, 0, 0};
    if (promisc_) {
      Flow(env, none, none, false, "everything (promiscuous)");
    } else {
      Flow(env, mac_, exact, false, "our MAC");
      Flow(env, bcast, exact, true, "broadcast");
      Flow(env, mcast, mcast_mask, true, "IPv4 multicast");
    }
  }

  void Flow(Napi::Env env, const uint8_t* dst, const uint8_t* mask, bool dont_trap, const char* what) {
    // One attribute header followed at once by one Ethernet spec (no padding between).
    alignas(8) uint8_t buf[sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth)] = {};
    ibv_flow_attr attr{};
    attr.type = IBV_FLOW_ATTR_NORMAL;
    attr.size = sizeof buf;
    attr.num_of_specs = 1;
    attr.port = port_;
    attr.flags = dont_trap ? IBV_FLOW_ATTR_FLAGS_DONT_TRAP : 0;
    ibv_flow_spec_eth eth{};
    eth.type = IBV_FLOW_SPEC_ETH;
    eth.size = sizeof eth;
    std::memcpy(eth.val.dst_mac, dst, 6);
    std::memcpy(eth.mask.dst_mac, mask, 6);
    std::memcpy(buf, &attr, sizeof attr);
    std::memcpy(buf + sizeof attr, &eth, sizeof eth);
    ibv_flow* fl = ibv_create_flow(rss_, reinterpret_cast<ibv_flow_attr*>(buf));
    if (fl == nullptr) Fail(env, Errno((std::string("ibv_create_flow (") + what + ")").c_str()));
    flows_.push_back(fl);
  }

  // ------------------------------------------------------------------ receive

  // Post fresh buffers: up to a burst, never beyond the ring; striding in whole WQEs of 8.
  void Refill(RxQ& r) {
    const uint32_t unit = r.striding ? 1u << kLogStridesPerWqe : 1;
    uint32_t room = r.size - (r.tail - r.head);
    if (room > kBurst) room = kBurst;
    room -= room % unit;
    if (room == 0 || pool_.state[0] < unit) return;
    if (!dv_) {
      ibv_recv_wr wr[kBurst];
      ibv_sge sge[kBurst];
      uint32_t k = 0;
      while (k < room) {
        uint32_t bi;
        if (!pool_.Take(&bi)) break;
        r.bufs[(r.tail + k) & r.mask] = bi;
        pool_.offset[bi] = pool_.DataStart(bi);
        sge[k] = {reinterpret_cast<uint64_t>(pool_.mem + pool_.DataStart(bi)), pool_.data_size, lkey_};
        wr[k] = {};
        wr[k].wr_id = r.tail + k;
        wr[k].sg_list = &sge[k];
        wr[k].num_sge = 1;
        wr[k].next = &wr[k + 1];
        k++;
      }
      if (k == 0) return;
      wr[k - 1].next = nullptr;
      ibv_recv_wr* bad = nullptr;
      uint32_t posted = k;
      if (ibv_post_wq_recv(r.wq, wr, &bad) != 0 && bad != nullptr) posted = static_cast<uint32_t>(bad - wr);
      for (uint32_t i = posted; i < k; i++) pool_.Give(r.bufs[(r.tail + i) & r.mask]);
      r.tail += posted;
      return;
    }
    uint32_t k = 0;
    uint32_t got[1u << kLogStridesPerWqe];
    while (k + unit <= room && pool_.state[0] >= unit) {
      // A WQE's buffers first: a stash index past the pool stops the refill (the ring keeps
      // only valid buffers; the good ones taken go back through `done`).
      uint32_t ok = 0;
      while (ok < unit && pool_.Take(&got[ok])) ok++;
      if (ok < unit) {
        for (uint32_t j = 0; j < ok; j++) pool_.Give(got[j]);
        break;
      }
      for (uint32_t j = 0; j < unit; j++) {
        const uint32_t bi = got[j];
        const uint32_t slot = (r.tail + k + j) & r.mask;
        r.bufs[slot] = bi;
        pool_.offset[bi] = pool_.DataStart(bi);
        const uint64_t addr = reinterpret_cast<uint64_t>(pool_.mem + pool_.DataStart(bi));
        if (r.striding) {
          uint8_t* w = r.wqes + ((slot >> kLogStridesPerWqe) & (r.wqe_cnt - 1)) * r.wqe_stride;
          if (j == 0) mlx5::SrqNextSeg(w, static_cast<uint16_t>(((slot >> kLogStridesPerWqe) + 1) & (r.wqe_cnt - 1)));
          mlx5::DataSeg(w + 16 * (1 + j), r.stride_bytes, lkey_, addr);
        } else {
          mlx5::DataSeg(r.wqes + slot * r.wqe_stride, pool_.data_size, lkey_, addr);
        }
      }
      k += unit;
    }
    if (k == 0) return;
    r.tail += k;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (r.striding) {
      r.wqe_tail += k >> kLogStridesPerWqe;
      mlx5::RqDoorbell(r.wq_db, r.wqe_tail);
    } else {
      mlx5::RqDoorbell(r.wq_db, r.tail);
    }
  }

  void Deliver(uint32_t bi, uint32_t bytes, bool ip4ok, bool l4ok, uint32_t* out, uint32_t& n) {
    pool_.length[bi] = bytes;
    pool_.flags[bi] = (ip4ok ? pool_.f_ip4_ok : 0) | (l4ok ? pool_.f_l4_ok : 0);
    out[n++] = bi;
  }

  // rx(queue, out, max) -> packets written to out
  Napi::Value Rx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (closed_) return Napi::Number::New(env, 0);
    const uint32_t q = info[0].As<Napi::Number>().Uint32Value();
    Napi::Uint32Array outa = info[1].As<Napi::Uint32Array>();
    uint32_t max = info[2].As<Napi::Number>().Uint32Value();
    if (q >= rx_.size()) throw Napi::RangeError::New(env, "verbs rx: no queue " + std::to_string(q));
    if (max > outa.ElementLength()) max = static_cast<uint32_t>(outa.ElementLength());
    if (max > kBurst) max = kBurst;
    pool_.state[1] = 0;
    RxQ& r = rx_[q];
    uint32_t* out = outa.Data();
    uint32_t n = 0;
    if (!dv_) {
      ibv_wc wc[kBurst];
      const int got = ibv_poll_cq(r.cq, static_cast<int>(max), wc);
      for (int i = 0; i < got; i++) {
        // Completions come in posting order; a wr_id that is not our head means the ring is not
        // what we think: stop taking from it.
        if (wc[i].wr_id != r.head || r.head == r.tail) {
          r.errors++;
          error_ = "receive completion for WR " + std::to_string(wc[i].wr_id) + ", expected " + std::to_string(r.head);
          break;
        }
        const uint32_t bi = r.bufs[r.head++ & r.mask];
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len > pool_.data_size) {
          r.errors++;
          pool_.Give(bi);
          continue;
        }
        const bool ok = (wc[i].wc_flags & IBV_WC_IP_CSUM_OK) != 0;
        r.bytes += wc[i].byte_len;
        Deliver(bi, wc[i].byte_len, ok, ok, out, n);
      }
    } else {
      mlx5::RxCompletion c[kBurst];
      const uint32_t got = mlx5::PollRxCq(r.cqes, r.cqs, c, max);
      for (uint32_t i = 0; i < got; i++) {
        const uint16_t f = c[i].flags;
        if (!r.striding) {
          if (r.head == r.tail) break;  // more completions than posted WQEs: impossible, stop
          const uint32_t bi = r.bufs[r.head++ & r.mask];
          if (c[i].syndrome != 0 || c[i].bc > pool_.data_size) {
            r.errors++;
            pool_.Give(bi);
            continue;
          }
          r.bytes += c[i].bc;
          Deliver(bi, c[i].bc, mlx5::CsumIp4Ok(f), mlx5::CsumL4Ok(f), out, n);
          continue;
        }
        const mlx5::StridingBc b = mlx5::DecodeStridingBc(c[i].bc);
        const uint32_t strides = c[i].syndrome != 0 ? 1 : b.strides;
        if (strides == 0 || strides > (1u << kLogStridesPerWqe) || r.tail - r.head < strides ||
            (!b.filler && c[i].syndrome == 0 && b.bytes > strides * r.stride_bytes)) {
          r.errors++;
          error_ = "striding RQ completion of " + std::to_string(strides) + " strides / " + std::to_string(b.bytes) +
                   " bytes";
          break;
        }
        if (b.filler || c[i].syndrome != 0) {
          if (b.filler)
            r.fillers++;
          else
            r.errors++;
          for (uint32_t s = 0; s < strides; s++) pool_.Give(r.bufs[r.head++ & r.mask]);
          continue;
        }
        // One packet over `strides` consecutive buffers: a chain.
        const uint32_t first = r.bufs[r.head & r.mask];
        uint32_t left = b.bytes, prev = first;
        for (uint32_t s = 0; s < strides; s++) {
          const uint32_t bi = r.bufs[r.head++ & r.mask];
          const uint32_t len = left < r.stride_bytes ? left : r.stride_bytes;
          pool_.length[bi] = len;
          pool_.flags[bi] = 0;
          left -= len;
          if (s > 0) {
            pool_.next[prev] = bi;
            pool_.flags[prev] |= pool_.f_next;
          }
          prev = bi;
        }
        const uint32_t first_len = pool_.length[first];
        r.bytes += b.bytes;
        pool_.flags[first] |= (mlx5::CsumIp4Ok(f) ? pool_.f_ip4_ok : 0) | (mlx5::CsumL4Ok(f) ? pool_.f_l4_ok : 0);
        pool_.length[first] = first_len;
        out[n++] = first;
      }
      if (got > 0) mlx5::CqDoorbell(r.cq_db, r.cqs.ci);
      if (r.cqs.broken && error_.empty()) {
        error_ = "receive CQE with opcode/format byte 0x" + Hex(r.cqs.broken_op);
      }
    }
    r.packets += n;
    Refill(r);
    return Napi::Number::New(env, n);
  }

  static std::string Hex(uint8_t v) {
    static const char* d = "0123456789abcdef";
    return std::string{d[v >> 4], d[v & 15]};
  }

  // ------------------------------------------------------------------ transmit

  // Completed sends: buffers from head up to the packet tail the completion names.
  void Reap(TxQ& t) {
    if (!dv_) {
      ibv_wc wc[32];
      const int got = ibv_poll_cq(t.cq, 32, wc);
      for (int i = 0; i < got; i++) {
        const uint32_t upto = static_cast<uint32_t>(wc[i].wr_id);
        if (upto - t.head > t.tail - t.head) {  // not between head and tail: ignore it
          t.errors++;
          continue;
        }
        if (wc[i].status != IBV_WC_SUCCESS) t.errors += upto - t.head;
        while (t.head != upto) FreeChain(t.pkts[t.head++ & t.mask]);
        if (wc[i].status != IBV_WC_SUCCESS) RecoverTx(t);
      }
      return;
    }
    mlx5::TxCompletion c[32];
    const uint32_t got = mlx5::PollTxCq(t.cqes, t.cqs, c, 32);
    bool failed = false;
    for (uint32_t i = 0; i < got; i++) {
      const uint32_t w = c[i].wqe_counter & t.bb_mask;
      const uint32_t upto = t.tail_at[w], end = t.end_at[w];
      if (upto - t.head > t.tail - t.head || end - t.sq_ci > t.pi - t.sq_ci) {
        t.errors++;
        continue;
      }
      if (c[i].syndrome != 0) {
        t.errors += upto - t.head;
        failed = true;
      }
      while (t.head != upto) FreeChain(t.pkts[t.head++ & t.mask]);
      t.sq_ci = end;
    }
    if (got > 0) mlx5::CqDoorbell(t.cq_db, t.cqs.ci);
    if (failed || t.cqs.broken) RecoverTx(t);
  }

  void FreeChain(uint32_t bi) {
    for (uint32_t k = 0; k < kMaxTxSegs && bi < pool_.count; k++) {
      const bool more = pool_.flags[bi] & pool_.f_next;
      const uint32_t nx = pool_.next[bi];
      pool_.Give(bi);
      if (!more) break;
      bi = nx;
    }
  }

  // A send queue in error: every outstanding packet is dropped (counted), the QP goes back
  // through RESET to RTS, and the rings start again at zero.
  void RecoverTx(TxQ& t) {
    while (t.head != t.tail) FreeChain(t.pkts[t.head++ & t.mask]);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    ibv_modify_qp(t.qp, &a, IBV_QP_STATE);
    a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port_;
    bool ok = ibv_modify_qp(t.qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    ok = ok && ibv_modify_qp(t.qp, &a, IBV_QP_STATE) == 0;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    ok = ok && ibv_modify_qp(t.qp, &a, IBV_QP_STATE) == 0;
    t.pi = t.sq_ci = 0;
    t.cqs.broken = false;
    t.recoveries++;
    if (!ok) {
      error_ = "send queue recovery failed: " + std::string(strerror(errno));
    }
  }

  // Gather a chain: segment buffers, total bytes; 0 when the chain is invalid or too long.
  uint32_t Chain(uint32_t bi, uint32_t* segs, uint32_t* total) {
    uint32_t n = 0, len = 0;
    for (;;) {
      if (bi >= pool_.count || n == kMaxTxSegs) return 0;
      if (uint64_t{pool_.offset[bi]} + pool_.length[bi] > pool_.mem_len) return 0;
      segs[n++] = bi;
      len += pool_.length[bi];
      if (!(pool_.flags[bi] & pool_.f_next)) break;
      bi = pool_.next[bi];
    }
    *total = len;
    return n;
  }

  // tx(queue, bufs, off, n) -> how many were taken
  Napi::Value Tx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const uint32_t q = info[0].As<Napi::Number>().Uint32Value();
    Napi::Uint32Array a = info[1].As<Napi::Uint32Array>();
    const uint32_t off = info[2].As<Napi::Number>().Uint32Value();
    uint32_t n = info[3].As<Napi::Number>().Uint32Value();
    if (uint64_t{off} + n > a.ElementLength()) throw Napi::RangeError::New(env, "verbs tx: off + n beyond bufs");
    pool_.state[1] = 0;
    if (closed_ || q >= tx_.size()) return Napi::Number::New(env, 0);
    TxQ& t = tx_[q];
    Reap(t);
    if (n > kBurst) n = kBurst;
    const uint32_t room = t.size - (t.tail - t.head);
    if (n > room) n = room;
    const uint32_t* bufs = a.Data() + off;
    uint32_t taken = dv_ ? TxDv(t, bufs, n) : TxIbv(t, bufs, n);
    return Napi::Number::New(env, taken);
  }

  uint32_t TxIbv(TxQ& t, const uint32_t* bufs, uint32_t n) {
    ibv_send_wr wr[kBurst];
    ibv_sge sge[kBurst][kMaxTxSegs];
    uint32_t k = 0, taken = 0;
    for (; taken < n; taken++) {
      uint32_t segs[kMaxTxSegs], total = 0;
      const uint32_t ns = Chain(bufs[taken], segs, &total);
      if (ns == 0) {
        // A bad chain: refused (the caller keeps it and counts it), and so is the rest.
        t.refused++;
        break;
      }
      for (uint32_t s = 0; s < ns; s++)
        sge[k][s] = {reinterpret_cast<uint64_t>(pool_.mem + pool_.offset[segs[s]]), pool_.length[segs[s]], lkey_};
      wr[k] = {};
      wr[k].sg_list = sge[k];
      wr[k].num_sge = static_cast<int>(ns);
      wr[k].opcode = IBV_WR_SEND;
      if (csum_ && (pool_.flags[segs[0]] & (pool_.f_tx_ip4 | pool_.f_tx_udp))) wr[k].send_flags |= IBV_SEND_IP_CSUM;
      wr[k].next = &wr[k + 1];
      t.pkts[(t.tail + k) & t.mask] = bufs[taken];
      t.bytes += total;
      k++;
    }
    if (k == 0) return 0;
    wr[k - 1].next = nullptr;
    wr[k - 1].send_flags |= IBV_SEND_SIGNALED;
    wr[k - 1].wr_id = t.tail + k;
    ibv_send_wr* bad = nullptr;
    uint32_t posted = k;
    // The ones before `bad` went out unsignaled: the next burst's signaled WR names a tail past
    // them, so its completion frees them too. The caller keeps the rest.
    if (ibv_post_send(t.qp, wr, &bad) != 0 && bad != nullptr) posted = static_cast<uint32_t>(bad - wr);
    t.tail += posted;
    t.packets += posted;
    return posted;
  }

  uint32_t TxDv(TxQ& t, const uint32_t* bufs, uint32_t n) {
    uint32_t taken = 0;
    uint8_t* last = nullptr;
    for (; taken < n; taken++) {
      uint32_t segs[kMaxTxSegs], total = 0;
      const uint32_t ns = Chain(bufs[taken], segs, &total);
      if (ns == 0 || (ns > 1 && pool_.length[segs[0]] < mlx5::kInlineHdr)) {
        t.refused++;
        break;
      }
      // 16-byte units: ctrl, eth (2), then a data segment per buffer (none if all inline).
      const uint32_t ds = total <= mlx5::kInlineHdr ? 3 : 3 + ns;
      const uint32_t bbs = (ds + 3) / 4;
      if (t.bb_cnt - (t.pi - t.sq_ci) < bbs + 1) break;  // keep one BB spare
      uint8_t* w = t.sq + (t.pi & t.bb_mask) * mlx5::kWqeBb;
      const uint32_t b0 = segs[0];
      const uint8_t* frame = pool_.mem + pool_.offset[b0];
      const uint8_t cs = (csum_ && (pool_.flags[b0] & pool_.f_tx_ip4) ? mlx5::kEthL3Csum : 0) |
                         (csum_ && (pool_.flags[b0] & pool_.f_tx_udp) ? mlx5::kEthL4Csum : 0);
      mlx5::BuildSendWqe(w, static_cast<uint16_t>(t.pi), t.qpn, frame, ns == 1 ? total : pool_.length[b0], lkey_,
                         reinterpret_cast<uint64_t>(frame), cs, false, 0);
      if (ns > 1) {
        // The first segment's data after the inline part, then the others, across BBs.
        const uint32_t l0 = pool_.length[b0] - mlx5::kInlineHdr;
        uint32_t unit = 3;
        for (uint32_t s = 0; s < ns; s++, unit++) {
          uint8_t* seg = t.sq + ((t.pi + unit / 4) & t.bb_mask) * mlx5::kWqeBb + (unit % 4) * 16;
          if (s == 0)
            mlx5::DataSeg(seg, l0, lkey_, reinterpret_cast<uint64_t>(frame + mlx5::kInlineHdr));
          else
            mlx5::DataSeg(seg, pool_.length[segs[s]], lkey_,
                          reinterpret_cast<uint64_t>(pool_.mem + pool_.offset[segs[s]]));
        }
        mlx5::PutBe32(w + 4, (t.qpn & 0xffffff) << 8 | ds);
      }
      t.pkts[t.tail & t.mask] = b0;
      t.tail++;
      t.bytes += total;
      last = w;
      const uint32_t at = t.pi & t.bb_mask;
      t.pi += bbs;
      t.tail_at[at] = t.tail;
      t.end_at[at] = t.pi;
    }
    if (last == nullptr) return taken;
    last[11] = mlx5::kCtrlCqUpdate;  // the burst's last WQE makes the CQE
    __atomic_thread_fence(__ATOMIC_RELEASE);
    mlx5::SqDoorbell(t.db, t.pi);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t ctrl;
    std::memcpy(&ctrl, last, 8);
    *t.bf = ctrl;  // BlueFlame / doorbell register: the first 8 bytes of the last WQE
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    t.packets += taken;
    return taken;
  }

  // ------------------------------------------------------------------ state

  // linkUp(): drains the async events (port active/error, device fatal).
  Napi::Value LinkUp(const Napi::CallbackInfo& info) {
    if (!closed_ && ctx_ != nullptr) {
      ibv_async_event ev;
      for (int k = 0; k < 64 && ibv_get_async_event(ctx_, &ev) == 0; k++) {
        switch (ev.event_type) {
          case IBV_EVENT_PORT_ACTIVE:
            if (ev.element.port_num == port_) link_up_ = true;
            break;
          case IBV_EVENT_PORT_ERR:
            if (ev.element.port_num == port_) link_up_ = false;
            break;
          case IBV_EVENT_DEVICE_FATAL:
            link_up_ = false;
            error_ = "device fatal error (IBV_EVENT_DEVICE_FATAL)";
            break;
          default:
            break;
        }
        events_++;
        ibv_ack_async_event(&ev);
      }
    }
    return Napi::Boolean::New(info.Env(), !closed_ && link_up_);
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    uint64_t rp = 0, rb = 0, re = 0, tp = 0, tb = 0, te = 0, tr = 0, rec = 0, zs = 0, zc = 0, fill = 0;
    for (const RxQ& r : rx_) {
      rp += r.packets;
      rb += r.bytes;
      re += r.errors;
      zs += r.cqs.zipped_sessions;
      zc += r.cqs.zipped_cqes;
      fill += r.fillers;
    }
    for (const TxQ& t : tx_) {
      tp += t.packets;
      tb += t.bytes;
      te += t.errors;
      tr += t.refused;
      rec += t.recoveries;
    }
    o.Set("rxPackets", static_cast<double>(rp));
    o.Set("rxBytes", static_cast<double>(rb));
    o.Set("rxErrors", static_cast<double>(re));
    o.Set("txPackets", static_cast<double>(tp));
    o.Set("txBytes", static_cast<double>(tb));
    o.Set("txErrors", static_cast<double>(te));
    o.Set("txRefused", static_cast<double>(tr));
    o.Set("txRecoveries", static_cast<double>(rec));
    o.Set("cqeZippedSessions", static_cast<double>(zs));
    o.Set("cqeZipped", static_cast<double>(zc));
    o.Set("stridingFillers", static_cast<double>(fill));
    o.Set("asyncEvents", static_cast<double>(events_));
    o.Set("error", error_.empty() ? env.Null() : Napi::String::New(env, error_));
    return o;
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("device", dev_name_);
    o.Set("port", port_);
    o.Set("mode", dv_ ? "dv" : "ibv");
    o.Set("fwVer", dattr_.fw_ver);
    o.Set("vendorPartId", dattr_.vendor_part_id);
    o.Set("rxQueues", static_cast<double>(rx_.size()));
    o.Set("txQueues", static_cast<double>(tx_.size()));
    o.Set("rxQueueSize", rx_.empty() ? 0 : rx_[0].size);
    o.Set("txQueueSize", tx_.empty() ? 0 : tx_[0].size);
    o.Set("txChecksum", csum_);
    o.Set("striding", striding_);
    o.Set("strideBytes", striding_ ? 1u << log_stride_ : 0);
    o.Set("cqeCompression", zip_format_ == 0                            ? "off"
                            : zip_format_ == MLX5DV_CQE_RES_FORMAT_HASH ? "hash"
                                                                        : "csum-stridx");
    o.Set("mlx5Version", dv_version_);
    std::string f;
    if (dv_flags_ & MLX5DV_CONTEXT_FLAGS_CQE_V1) f += " cqe-v1";
    if (dv_flags_ & MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED) f += " mpw-allowed";
    if (dv_flags_ & MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW) f += " enhanced-mpw";
    if (dv_flags_ & MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP) f += " cqe-128b-comp";
    if (dv_flags_ & MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD) f += " cqe-128b-pad";
    o.Set("deviceFlags", f.empty() ? "" : f.substr(1));
    o.Set("promisc", promisc_);
    return o;
  }

  // close(): everything released; the buffers still in rings wait for reclaim().
  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (!closed_) {
      for (RxQ& r : rx_)
        while (r.head != r.tail) orphans_.push_back(r.bufs[r.head++ & r.mask]);
      for (TxQ& t : tx_)
        while (t.head != t.tail) {
          uint32_t bi = t.pkts[t.head++ & t.mask];
          for (uint32_t k = 0; k < kMaxTxSegs && bi < pool_.count; k++) {
            orphans_.push_back(bi);
            if (!(pool_.flags[bi] & pool_.f_next)) break;
            bi = pool_.next[bi];
          }
        }
      Teardown();
    }
    return info.Env().Undefined();
  }

  // reclaim(): moves up to done's capacity of orphaned buffers into done; returns how many.
  Napi::Value Reclaim(const Napi::CallbackInfo& info) {
    uint32_t k = 0;
    while (!orphans_.empty() && k < pool_.done_cap) {
      pool_.done[k++] = orphans_.back();
      orphans_.pop_back();
    }
    return Napi::Number::New(info.Env(), k);
  }

  void Teardown() {
    closed_ = true;
    for (ibv_flow* f : flows_) ibv_destroy_flow(f);
    flows_.clear();
    if (rss_) ibv_destroy_qp(rss_);
    rss_ = nullptr;
    if (ind_) ibv_destroy_rwq_ind_table(ind_);
    ind_ = nullptr;
    for (RxQ& r : rx_) {
      if (r.wq) ibv_destroy_wq(r.wq);
      if (r.cq) ibv_destroy_cq(r.cq);
      r.wq = nullptr;
      r.cq = nullptr;
    }
    for (TxQ& t : tx_) {
      if (t.qp) ibv_destroy_qp(t.qp);
      if (t.cq) ibv_destroy_cq(t.cq);
      t.qp = nullptr;
      t.cq = nullptr;
    }
    if (mr_) ibv_dereg_mr(mr_);
    mr_ = nullptr;
    if (pd_) ibv_dealloc_pd(pd_);
    pd_ = nullptr;
    if (ctx_) ibv_close_device(ctx_);
    ctx_ = nullptr;
  }

  Pool pool_;
  std::vector<Napi::Reference<Napi::Value>> refs_;
  ibv_context* ctx_ = nullptr;
  ibv_device_attr dattr_{};
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint32_t lkey_ = 0;
  ibv_rwq_ind_table* ind_ = nullptr;
  ibv_qp* rss_ = nullptr;
  std::vector<ibv_flow*> flows_;
  std::vector<RxQ> rx_;
  std::vector<TxQ> tx_;
  std::vector<uint32_t> orphans_;
  std::string dev_name_, error_;
  uint8_t port_ = 1;
  uint8_t mac_[6] = {};
  bool dv_ = false, promisc_ = false, striding_ = false, csum_ = false, link_up_ = false, closed_ = false;
  uint32_t log_stride_ = 11, zip_format_ = 0, dv_version_ = 0;
  uint64_t dv_flags_ = 0, events_ = 0;
};

}  // namespace

void InitPort(Napi::Env env, Napi::Object exports) { exports.Set("Port", Port::Define(env)); }

}  // namespace rg
