// mlx5 queue formats as pure functions over bytes: completion queue entries (CQEs) and their
// compressed form (mini-CQE arrays), striding-RQ byte counts, receive and send work queue
// entries (WQEs) and doorbell values. No verbs call, no device: the driver (port.cc) runs them
// on the rings mlx5dv_init_obj hands out, and test/mlx5-format.test.ts runs them on byte
// fixtures (through addon.cc's mlx5* exports), so every layout here is checked without a NIC.
//
// Where the layouts come from: the ConnectX PRM ("Completion Queue Entry Format", "Send WQE
// Format", "Receive WQE Format"), as rdma-core 44 transcribes them in <infiniband/mlx5dv.h>
// (struct mlx5_cqe64, mlx5_wqe_ctrl_seg, mlx5_wqe_eth_seg, mlx5_wqe_data_seg,
// mlx5_wqe_srq_next_seg; the offsets are pinned by static_asserts in addon.cc), and VPP's
// src/plugins/rdma/rdma_mlx5dv.h for the fields mlx5dv.h leaves out (the 16-bit CQE flags word
// at 0x1c, the mini-CQE {hash or checksum, byte count}, the striding byte-count fields).
// Everything the NIC reads or writes is big-endian.
#pragma once

#include <cstdint>
#include <cstring>

namespace rg {
namespace mlx5 {

// ---------------------------------------------------------------- byte order

inline uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}
inline void PutBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void PutBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline void PutBe64(uint8_t* p, uint64_t v) {
  PutBe32(p, static_cast<uint32_t>(v >> 32));
  PutBe32(p + 4, static_cast<uint32_t>(v));
}

// ---------------------------------------------------------------- CQE (64 bytes)

constexpr uint32_t kCqeSize = 64;
// Offsets in a 64-byte CQE (struct mlx5_cqe64).
constexpr uint32_t kCqeFlags = 0x1c;       // be16: hds_ip_ext (L2/L3/L4 OK) then l4_hdr_type_etc
constexpr uint32_t kCqeByteCnt = 0x2c;     // be32: bytes; a compressed CQE: its mini-CQE count
constexpr uint32_t kCqeWqeCounter = 0x3c;  // be16: the WQE this completes (send: its index)
constexpr uint32_t kCqeOpOwn = 0x3f;       // opcode (7:4), format (3:2), solicited (1), owner (0)
// struct mlx5_err_cqe: vendor syndrome and syndrome just before wqe_counter.
constexpr uint32_t kErrVendorSyndrome = 0x36;
constexpr uint32_t kErrSyndrome = 0x37;

// The last byte with owner and solicited bits cleared (VPP input.c's two values).
constexpr uint8_t kOpRespSend = 0x20;        // opcode 2 (responder send), format 0
constexpr uint8_t kOpRespSendZipped = 0x2c;  // opcode 2, format 3 (compressed CQE)
constexpr uint8_t kOpcodeReq = 0x0;          // requester (send) completion
constexpr uint8_t kOpcodeReqErr = 0xd;
constexpr uint8_t kOpcodeRespErr = 0xe;
constexpr uint8_t kOpcodeInvalid = 0xf;

// The flags word (host order after Be16 at 0x1c): PRM bit positions as VPP names them.
constexpr uint16_t kFlagL2Ok = 1u << 8;
constexpr uint16_t kFlagL3Ok = 1u << 9;
constexpr uint16_t kFlagL4Ok = 1u << 10;
constexpr uint16_t kFlagIpFrag = 1u << 7;
constexpr uint32_t kL4TypeShift = 4, kL4TypeMask = 0x7u << 4;  // 1 TCP, 2 UDP, 3/4 TCP+ACK
constexpr uint32_t kL3TypeShift = 2, kL3TypeMask = 0x3u << 2;  // 1 IPv6, 2 IPv4
constexpr uint16_t kL3Ip4 = 2, kL4Udp = 2, kL4TcpMax = 4;

// Striding-RQ byte count (a CQE's byte_cnt in a multi-packet RQ): filler bit, strides used, bytes.
constexpr uint32_t kBcFiller = 1u << 31;
constexpr uint32_t kBcStridesShift = 16, kBcStridesMask = 0x3fffu << 16;
constexpr uint32_t kBcBytesMask = 0xffff;

struct StridingBc {
  bool filler;
  uint32_t strides;
  uint32_t bytes;
};
inline StridingBc DecodeStridingBc(uint32_t bc) {
  return {(bc & kBcFiller) != 0, (bc & kBcStridesMask) >> kBcStridesShift, bc & kBcBytesMask};
}

// The IPv4 header checksum was checked and is good; the UDP/TCP checksum too (a UDP or TCP
// packet with L4_OK), from the flags word of a CQE or of a compressed session's title.
inline bool CsumIp4Ok(uint16_t f) { return (f & kFlagL3Ok) && ((f & kL3TypeMask) >> kL3TypeShift) == kL3Ip4; }
inline bool CsumL4Ok(uint16_t f) {
  const uint32_t t = (f & kL4TypeMask) >> kL4TypeShift;
  return (f & kFlagL4Ok) && t != 0 && t <= kL4TcpMax && !(f & kFlagIpFrag);
}

// The CQE at consumer index `ci` is ours (software owns it) when its owner bit equals the pass
// bit of ci over a ring of 2^log_size entries: hardware flips what it writes every wrap.
inline bool CqeIsSw(const uint8_t* cqe, uint32_t ci, uint32_t log_size) {
  return (cqe[kCqeOpOwn] & 1u) == ((ci >> log_size) & 1u);
}

// Slot of mini-CQE k (0-based) of the compressed session whose title CQE is at index ci: the
// first array of 8 sits in the slot after the title, the later ones every 8 slots from the
// title (DPDK mlx5_rx.c and VPP input.c agree: title+1, title+8, title+16, ...).
inline uint32_t MiniCqeSlot(uint32_t ci, uint32_t k) { return k < 8 ? ci + 1 : ci + (k & ~7u); }

// A compressed session of n mini-CQEs occupies indices ci .. ci+n-1. Hardware rewrites the
// title's owner; the other n-1 slots get an invalid opcode with the owner bit of the pass they
// are in, so none of them looks valid when the ring comes round again.
inline void ZippedResetOwner(uint8_t* cqes, uint32_t log_size, uint32_t ci, uint32_t n) {
  const uint32_t mask = (1u << log_size) - 1;
  for (uint32_t i = 1; i < n; i++) {
    const uint32_t idx = ci + i;
    cqes[(idx & mask) * kCqeSize + kCqeOpOwn] = static_cast<uint8_t>(0xf0 | ((idx >> log_size) & 1u));
  }
}

// Receive CQ polling state, kept across calls (a compressed session may end a burst midway).
struct RxCq {
  uint32_t ci = 0;
  uint32_t log_size = 0;
  uint32_t zip_total = 0;  // mini-CQEs in the session being drained (0: none)
  uint32_t zip_done = 0;   // of which already returned
  uint16_t zip_flags = 0;  // the title's flags word, shared by the session's packets
  // Counters.
  uint64_t cqes = 0, zipped_sessions = 0, zipped_cqes = 0, error_cqes = 0;
  // An opcode we do not know stops polling here (the ring is not ours to guess about).
  bool broken = false;
  uint8_t broken_op = 0;
  uint8_t last_syndrome = 0, last_vendor_syndrome = 0;
};

// One receive completion: bytes (host order; in a striding RQ the packed byte count), the
// flags word, and 0 or the error syndrome (the WQE was consumed without a packet).
struct RxCompletion {
  uint32_t bc;
  uint16_t flags;
  uint8_t syndrome;
};

// Take up to `max` completions from the receive CQ ring `cqes` (2^log_size CQEs of 64 B).
// Bounded by `max` and the ring; every index is masked. Returns how many were written to `out`.
// The caller writes the CQ doorbell (CqDoorbell(cq.ci)) when this returns > 0.
inline uint32_t PollRxCq(uint8_t* cqes, RxCq& cq, RxCompletion* out, uint32_t max) {
  const uint32_t mask = (1u << cq.log_size) - 1;
  uint32_t n = 0;
  while (n < max) {
    if (cq.zip_total != 0) {
      // Drain the session: mini-CQE k -> {hash/csum (be32), byte count (be32)}.
      while (cq.zip_done < cq.zip_total && n < max) {
        const uint32_t k = cq.zip_done;
        const uint8_t* m = cqes + (MiniCqeSlot(cq.ci, k) & mask) * kCqeSize + (k & 7u) * 8;
        out[n++] = {Be32(m + 4), cq.zip_flags, 0};
        cq.zip_done++;
      }
      if (cq.zip_done < cq.zip_total) break;  // out of room: go on next call
      ZippedResetOwner(cqes, cq.log_size, cq.ci, cq.zip_total);
      cq.ci += cq.zip_total;
      cq.zip_total = cq.zip_done = 0;
      continue;
    }
    uint8_t* cqe = cqes + (cq.ci & mask) * kCqeSize;
    if (!CqeIsSw(cqe, cq.ci, cq.log_size)) break;
    const uint8_t op = cqe[kCqeOpOwn];
    if ((op >> 4) == kOpcodeInvalid) break;  // never written since the ring was made
    const uint8_t kind = op & 0xfc;
    if (kind == kOpRespSend) {
      out[n++] = {Be32(cqe + kCqeByteCnt), Be16(cqe + kCqeFlags), 0};
      cq.ci++;
      cq.cqes++;
      continue;
    }
    if (kind == kOpRespSendZipped) {
      const uint32_t num = Be32(cqe + kCqeByteCnt);
      // A session cannot hold more CQEs than the ring, nor none.
      if (num == 0 || num > mask + 1) {
        cq.broken = true;
        cq.broken_op = op;
        break;
      }
      cq.zip_total = num;
      cq.zip_done = 0;
      cq.zip_flags = Be16(cqe + kCqeFlags);
      cq.zipped_sessions++;
      cq.zipped_cqes += num;
      cq.cqes += num;
      continue;
    }
    if ((op >> 4) == kOpcodeRespErr) {
      cq.last_syndrome = cqe[kErrSyndrome];
      cq.last_vendor_syndrome = cqe[kErrVendorSyndrome];
      out[n++] = {0, 0, cqe[kErrSyndrome] != 0 ? cqe[kErrSyndrome] : uint8_t{0xff}};
      cq.ci++;
      cq.cqes++;
      cq.error_cqes++;
      continue;
    }
    cq.broken = true;
    cq.broken_op = op;
    break;
  }
  return n;
}

// Send CQ (no compression: the driver never asks for it on a tx CQ, as VPP). A completion
// names the last WQE it covers (wqe_counter); REQ_ERR carries a syndrome.
struct TxCompletion {
  uint16_t wqe_counter;
  uint8_t syndrome;  // 0: success
};

inline uint32_t PollTxCq(uint8_t* cqes, RxCq& cq, TxCompletion* out, uint32_t max) {
  const uint32_t mask = (1u << cq.log_size) - 1;
  uint32_t n = 0;
  while (n < max) {
    uint8_t* cqe = cqes + (cq.ci & mask) * kCqeSize;
    if (!CqeIsSw(cqe, cq.ci, cq.log_size)) break;
    const uint8_t op = cqe[kCqeOpOwn] >> 4;
    if (op == kOpcodeInvalid) break;
    if (op == kOpcodeReq) {
      out[n++] = {Be16(cqe + kCqeWqeCounter), 0};
    } else if (op == kOpcodeReqErr) {
      cq.last_syndrome = cqe[kErrSyndrome];
      cq.last_vendor_syndrome = cqe[kErrVendorSyndrome];
      cq.error_cqes++;
      out[n++] = {Be16(cqe + kCqeWqeCounter), cqe[kErrSyndrome] != 0 ? cqe[kErrSyndrome] : uint8_t{0xff}};
    } else {
      cq.broken = true;
      cq.broken_op = cqe[kCqeOpOwn];
      break;
    }
    cq.ci++;
    cq.cqes++;
  }
  return n;
}

// Ring made by software: every CQE invalid and owned by hardware for the first pass.
inline void InitCqRing(uint8_t* cqes, uint32_t log_size) {
  for (uint32_t i = 0; i < (1u << log_size); i++) cqes[i * kCqeSize + kCqeOpOwn] = 0xf1;
}

// ---------------------------------------------------------------- doorbells

// CQ doorbell record word 0: the consumer index (24 bits), big-endian.
inline void CqDoorbell(uint8_t* dbrec, uint32_t ci) { PutBe32(dbrec, ci & 0xffffff); }
// RQ doorbell record (MLX5_RCV_DBR = word 0): the producer counter (16 bits), big-endian.
inline void RqDoorbell(uint8_t* dbrec, uint32_t tail) { PutBe32(dbrec, tail & 0xffff); }
// SQ doorbell record (MLX5_SND_DBR = word 1): the producer counter, big-endian.
inline void SqDoorbell(uint8_t* dbrec, uint32_t pi) { PutBe32(dbrec + 4, pi & 0xffff); }

// ---------------------------------------------------------------- WQEs

constexpr uint32_t kWqeBb = 64;                          // send WQE basic block
constexpr uint32_t kDataSeg = 16;                        // struct mlx5_wqe_data_seg {be32 bytes, be32 lkey, be64 addr}
constexpr uint32_t kInlineHdr = 18;                      // Ethernet header (with one VLAN tag) sent inline
constexpr uint8_t kOpcodeSend = 0x0a;                    // MLX5_OPCODE_SEND
constexpr uint8_t kCtrlCqUpdate = 0x08;                  // MLX5_WQE_CTRL_CQ_UPDATE: this WQE makes a CQE
constexpr uint8_t kEthL3Csum = 0x40, kEthL4Csum = 0x80;  // MLX5_ETH_WQE_L3_CSUM / L4_CSUM

inline void DataSeg(uint8_t* seg, uint32_t bytes, uint32_t lkey, uint64_t addr) {
  PutBe32(seg, bytes);
  PutBe32(seg + 4, lkey);
  PutBe64(seg + 8, addr);
}

// The SRQ "next" segment heading a striding-RQ WQE (struct mlx5_wqe_srq_next_seg: next index at 2).
inline void SrqNextSeg(uint8_t* seg, uint16_t next) {
  std::memset(seg, 0, 16);
  PutBe16(seg + 2, next);
}

// One Ethernet send WQE in one 64-byte basic block: ctrl (16) + eth with the first 18 bytes of
// the frame inline (32) + one data segment for the rest (16) = 4 units of 16 bytes. A frame of
// 18 bytes or fewer goes fully inline with no data segment (3 units). `frame` is the first
// min(len, 18) bytes; `addr` the frame's address in the registered memory.
inline uint32_t BuildSendWqe(uint8_t* wqe, uint16_t index, uint32_t qpn, const uint8_t* frame, uint32_t len,
                             uint32_t lkey, uint64_t addr, uint8_t cs_flags, bool signaled, uint32_t imm) {
  std::memset(wqe, 0, kWqeBb);
  const uint32_t inl = len < kInlineHdr ? len : kInlineHdr;
  const uint32_t ds = len > kInlineHdr ? 4 : 3;
  PutBe32(wqe + 0, uint32_t{index} << 8 | kOpcodeSend);  // opmod_idx_opcode
  PutBe32(wqe + 4, (qpn & 0xffffff) << 8 | ds);          // qpn_ds
  wqe[11] = signaled ? kCtrlCqUpdate : 0;                // fm_ce_se
  std::memcpy(wqe + 12, &imm, 4);                        // imm: ours, not the NIC's
  uint8_t* eth = wqe + 16;
  eth[4] = cs_flags;                              // cs_flags
  PutBe16(eth + 12, static_cast<uint16_t>(inl));  // inline_hdr_sz
  std::memcpy(eth + 14, frame, inl);              // inline_hdr_start .. (18 bytes end the segment)
  if (ds == 4) DataSeg(wqe + 48, len - inl, lkey, addr + inl);
  return ds;
}

// What a send WQE says (for tests and `test verbs dump`): index, qpn, ds, signaled, bytes inline,
// data bytes, lkey, addr.
struct SendWqeView {
  uint16_t index;
  uint8_t opcode;
  uint32_t qpn, ds;
  bool signaled;
  uint8_t cs_flags;
  uint32_t inline_bytes, data_bytes, lkey;
  uint64_t addr;
};
inline SendWqeView ParseSendWqe(const uint8_t* wqe) {
  SendWqeView v{};
  const uint32_t w0 = Be32(wqe), w1 = Be32(wqe + 4);
  v.index = static_cast<uint16_t>(w0 >> 8);
  v.opcode = static_cast<uint8_t>(w0);
  v.qpn = w1 >> 8;
  v.ds = w1 & 0x3f;
  v.signaled = (wqe[11] & kCtrlCqUpdate) != 0;
  v.cs_flags = wqe[16 + 4];
  v.inline_bytes = Be16(wqe + 16 + 12);
  if (v.ds >= 4) {
    v.data_bytes = Be32(wqe + 48);
    v.lkey = Be32(wqe + 52);
    v.addr = uint64_t{Be32(wqe + 56)} << 32 | Be32(wqe + 60);
  }
  return v;
}

}  // namespace mlx5
}  // namespace rg
