// af_packet: one Linux AF_PACKET socket on one kernel interface (VPP's host-interface).
//
//   rx  TPACKET_V3 ring (mmapped blocks the kernel fills and retires when full or after
//       tp_retire_blk_tov ms). One call per burst walks the retired blocks and COPIES each frame
//       into packet-pool buffers whose indices JavaScript allocated for that burst (chaining
//       buffers for frames larger than the pool's data size), writes the pool's metadata arrays
//       (length, flags, next, timestamp) directly, and hands each block back to the kernel as
//       soon as its last frame is copied. Copying keeps one buffer model (every packet lives in
//       the pool, whatever the driver) and returns ring memory to the kernel at once.
//   tx  either sendmmsg(2) batches on this socket, whose iovecs point straight into the pool's
//       buffers (gathering chained segments) and into the external memories (ExtTable: an MR)
//       of payload segments sent in place, each window checked against its memory, or a
//       TPACKET_V3 TX ring on the same socket kicked by send(NULL, 0). Never both: a socket
//       with a TX ring sends only from the ring and silently ignores sendmsg payloads.
//
// Socket options: PACKET_QDISC_BYPASS, PACKET_IGNORE_OUTGOING (our own and the host's outgoing
// frames are not seen on rx), PACKET_LOSS (TX ring: skip malformed frames), promiscuous
// membership only when asked, non-blocking, close-on-exec. The fd is exposed so the engine can
// sleep on it (readable when a retired block is waiting).
//
// See native/addons.ts (AfPacketSocket) for the JavaScript view and drivers/af-packet.ts for the
// driver built on it.
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "afpacket_gso.h"
#include "common.h"
#include "ext_table.h"

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif
#ifndef PACKET_VNET_HDR
#define PACKET_VNET_HDR 15
#endif
#ifndef TP_STATUS_CSUM_VALID
#define TP_STATUS_CSUM_VALID (1 << 7)
#endif
#ifndef TP_STATUS_VLAN_TPID_VALID
#define TP_STATUS_VLAN_TPID_VALID (1 << 6)
#endif

namespace rg {

namespace {

constexpr uint32_t kMaxSegments = 64;     // per transmitted packet (iovecs)
constexpr uint32_t kMaxTxBatch = 1024;    // UIO_MAXIOV: the most messages one sendmmsg takes
constexpr uint32_t kNominalFrame = 2048;  // TPACKET_V3 rx "frame": only sizes the request
constexpr uint32_t kErrCheckEvery = 64;   // empty rx polls between SO_ERROR checks

inline uint32_t LoadAcquire(const volatile uint32_t* p) {
  return __atomic_load_n(const_cast<const uint32_t*>(p), __ATOMIC_ACQUIRE);
}
inline void StoreRelease(volatile uint32_t* p, uint32_t v) {
  __atomic_store_n(const_cast<uint32_t*>(p), v, __ATOMIC_RELEASE);
}

std::string ArgIfName(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  Napi::Env env = info.Env();
  if (!info[i].IsString()) throw TypeErr(env, std::string(fn) + ": interface name must be a string");
  std::string name = info[i].As<Napi::String>().Utf8Value();
  if (name.empty() || name.size() >= IFNAMSIZ || name.find('\0') != std::string::npos) {
    throw RangeErr(env, std::string(fn) + ": interface name must be 1 to " + std::to_string(IFNAMSIZ - 1) +
                            " bytes, got \"" + name + "\"");
  }
  return name;
}

struct IfInfo {
  int ifindex = 0;
  short flags = 0;
  int mtu = 0;
  unsigned short hwtype = 0;
  uint8_t mac[6] = {0, 0, 0, 0, 0, 0};
};

// Interface facts through ioctls on any socket (unprivileged). Throws ENODEV naming the interface.
IfInfo QueryIf(Napi::Env env, int sock, const std::string& name) {
  IfInfo r;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::memcpy(ifr.ifr_name, name.data(), name.size());
  if (ioctl(sock, SIOCGIFINDEX, &ifr) < 0) {
    int err = errno;
    if (err == ENODEV) {
      throw CodedError(env, "af_packet: no such kernel interface \"" + name + "\" (see ip link)", err, "ioctl");
    }
    throw ErrnoError(env, "af_packet: interface \"" + name + "\": SIOCGIFINDEX", err, "ioctl");
  }
  r.ifindex = ifr.ifr_ifindex;
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0) {
    throw ErrnoError(env, "af_packet: interface \"" + name + "\": SIOCGIFFLAGS", errno, "ioctl");
  }
  r.flags = ifr.ifr_flags;
  if (ioctl(sock, SIOCGIFMTU, &ifr) < 0) {
    throw ErrnoError(env, "af_packet: interface \"" + name + "\": SIOCGIFMTU", errno, "ioctl");
  }
  r.mtu = ifr.ifr_mtu;
  if (ioctl(sock, SIOCGIFHWADDR, &ifr) < 0) {
    throw ErrnoError(env, "af_packet: interface \"" + name + "\": SIOCGIFHWADDR", errno, "ioctl");
  }
  r.hwtype = ifr.ifr_hwaddr.sa_family;
  std::memcpy(r.mac, ifr.ifr_hwaddr.sa_data, 6);
  return r;
}

Napi::Object IfInfoObject(Napi::Env env, const IfInfo& i) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ifindex", Napi::Number::New(env, i.ifindex));
  o.Set("flags", Napi::Number::New(env, static_cast<uint16_t>(i.flags)));
  o.Set("up", Napi::Boolean::New(env, (i.flags & IFF_UP) != 0));
  o.Set("running", Napi::Boolean::New(env, (i.flags & IFF_RUNNING) != 0));
  o.Set("mtu", Napi::Number::New(env, i.mtu));
  o.Set("ethernet", Napi::Boolean::New(env, i.hwtype == ARPHRD_ETHER));
  o.Set("hwType", Napi::Number::New(env, i.hwtype));
  Napi::Uint8Array mac = Napi::Uint8Array::New(env, 6);
  std::memcpy(mac.Data(), i.mac, 6);
  o.Set("mac", mac);
  return o;
}

// afPacketIfInfo(name): {ifindex, flags, up, running, mtu, ethernet, hwType, mac}.
Napi::Value AfPacketIfInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = ArgIfName(info, 0, "afPacketIfInfo");
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw ErrnoError(env, "afPacketIfInfo: socket", errno, "socket");
  try {
    IfInfo i = QueryIf(env, s, name);
    close(s);
    return IfInfoObject(env, i);
  } catch (...) {
    close(s);
    throw;
  }
}

bool OptBool(Napi::Object o, const char* key, bool def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  return v.ToBoolean().Value();
}

class AfPacketSocket;

// Open sockets of this thread (one env per thread), by handle. The per-burst calls are plain
// functions taking the handle: an ObjectWrap method call costs about 78 ns here against 20 ns
// for a plain function (napi_unwrap and the receiver check), paid on every poll.
thread_local std::vector<AfPacketSocket*> t_sockets;

class AfPacketSocket : public Napi::ObjectWrap<AfPacketSocket> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "AfPacketSocket",
                       {
                           InstanceMethod<&AfPacketSocket::BindPool>("bindPool"),
                           InstanceMethod<&AfPacketSocket::Stats>("stats"),
                           InstanceMethod<&AfPacketSocket::LinkFlags>("linkFlags"),
                           InstanceMethod<&AfPacketSocket::LinkMtu>("linkMtu"),
                           InstanceMethod<&AfPacketSocket::Multicast>("multicast"),
                           InstanceMethod<&AfPacketSocket::Close>("close"),
                       });
  }

  // new AfPacketSocket(ifname, {promisc, bringUp, qdiscBypass, blockSize, blocks, blockTimeoutMs,
  //                             txRing, txFrames, txFrameSize})
  explicit AfPacketSocket(const Napi::CallbackInfo& info) : Napi::ObjectWrap<AfPacketSocket>(info) {
    Napi::Env env = info.Env();
    const char* fn = "AfPacketSocket";
    ifname_ = ArgIfName(info, 0, fn);
    Napi::Object o = info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(env);
    const bool promisc = OptBool(o, "promisc", false);
    const bool bring_up = OptBool(o, "bringUp", true);
    const bool bypass = OptBool(o, "qdiscBypass", true);
    // filter: a classic BPF program as flat [code, jt, jf, k, ...] (drivers/steer-bpf.ts), attached
    // before bind so no frame arrives unfiltered.
    {
      Napi::Value fv = o.Get("filter");
      if (!fv.IsUndefined()) {
        if (!fv.IsTypedArray() || fv.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
          throw TypeErr(env, std::string(fn) + ": filter must be a Uint32Array of [code, jt, jf, k] instructions");
        }
        Napi::Uint32Array f = fv.As<Napi::Uint32Array>();
        const size_t n = f.ElementLength() / 4;
        if (n == 0 || n * 4 != f.ElementLength() || n > BPF_MAXINSNS) {
          throw RangeErr(
              env, std::string(fn) + ": filter must hold 1 to " + std::to_string(BPF_MAXINSNS) + " whole instructions");
        }
        for (size_t i = 0; i < n; i++) {
          const uint32_t* w = f.Data() + 4 * i;
          if (w[0] > 0xffff || w[1] > 0xff || w[2] > 0xff)
            throw RangeErr(env, std::string(fn) + ": filter instruction " + std::to_string(i) + " is malformed");
          filter_.push_back(
              sock_filter{static_cast<uint16_t>(w[0]), static_cast<uint8_t>(w[1]), static_cast<uint8_t>(w[2]), w[3]});
        }
      }
    }
    const long page = sysconf(_SC_PAGESIZE);
    block_size_ = OptU32(o, "blockSize", fn, 64 * 1024, page, 1u << 26);
    if (block_size_ % page != 0 || (block_size_ & (block_size_ - 1)) != 0) {
      throw RangeErr(env, std::string(fn) + ": blockSize must be a power of 2 and a multiple of the page size (" +
                              std::to_string(page) + "), got " + std::to_string(block_size_));
    }
    block_nr_ = OptU32(o, "blocks", fn, 128, 2, 1u << 16);
    const uint32_t tov = OptU32(o, "blockTimeoutMs", fn, 1, 1, 1000);
    tx_ring_ = OptBool(o, "txRing", false);
    {
      const Napi::Value rv = o.Get("rxRing");
      const std::string rr = rv.IsUndefined() ? "v3" : rv.IsString() ? rv.As<Napi::String>().Utf8Value() : "?";
      if (rr != "v3" && rr != "v2")
        throw RangeErr(env, std::string(fn) + ": rxRing must be 'v3' or 'v2', got '" + rr + "'");
      v2_ = rr == "v2";
    }
    if (v2_ && tx_ring_) throw RangeErr(env, std::string(fn) + ": rxRing 'v2' works with txRing false (sendmmsg) only");
    gso_ = OptBool(o, "gso", false);
    if (gso_ && !v2_) throw RangeErr(env, std::string(fn) + ": gso needs rxRing 'v2' (and txRing false)");
    uint32_t tx_frames = OptU32(o, "txFrames", fn, 1024, 8, 1u << 20);
    tx_frame_size_ = OptU32(o, "txFrameSize", fn, 2048, TPACKET_ALIGN(TPACKET3_HDRLEN) + 64, 1u << 20);
    if (tx_frame_size_ % TPACKET_ALIGNMENT != 0) {
      throw RangeErr(env, std::string(fn) + ": txFrameSize must be a multiple of " + std::to_string(TPACKET_ALIGNMENT));
    }

    // The interface first: "no such interface" is the most useful error whoever runs this.
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0) throw ErrnoError(env, "af_packet: socket(AF_UNIX)", errno, "socket");
    IfInfo ii;
    try {
      ii = QueryIf(env, probe, ifname_);
    } catch (...) {
      close(probe);
      throw;
    }
    close(probe);
    ifindex_ = ii.ifindex;
    link_mtu_ = static_cast<uint32_t>(ii.mtu > 0 ? ii.mtu : 0);
    if (v2_) {
      // One frame per slot: the header, the kernel's alignment pad, and a frame of the link's
      // MTU with an Ethernet header and a VLAN tag, rounded up to a power of 2 (2048 at 1500).
      uint32_t need = TPACKET_ALIGN(TPACKET2_HDRLEN) + 32 + link_mtu_ + ETH_HLEN + 8;
      // gso: a slot holds a whole message (64 KiB of IPv4) behind its virtio_net_hdr.
      if (gso_) need = TPACKET_ALIGN(TPACKET2_HDRLEN) + 32 + sizeof(gso::VnetHdr) + 65535 + ETH_HLEN + 8;
      frame_size_ = 256;
      while (frame_size_ < need) frame_size_ <<= 1;
      if (frame_size_ > block_size_) {
        throw RangeErr(env, std::string(fn) + ": rxRing 'v2' needs blockSize of at least " +
                                std::to_string(frame_size_) + " bytes for the MTU of \"" + ifname_ + "\" (" +
                                std::to_string(link_mtu_) + ")");
      }
      frames_per_block_ = block_size_ / frame_size_;
      frame_nr_ = frames_per_block_ * block_nr_;
    }
    if (ii.hwtype != ARPHRD_ETHER) {
      throw CodedError(env,
                       "af_packet: interface \"" + ifname_ + "\" is not an Ethernet interface (ARPHRD " +
                           std::to_string(ii.hwtype) + ")",
                       EPROTONOSUPPORT, "ioctl");
    }

    // Protocol 0: nothing is received until bind() names the interface and ETH_P_ALL.
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      int err = errno;
      if (err == EPERM || err == EACCES) {
        throw CodedError(
            env, "af_packet needs CAP_NET_RAW (run as root): cannot open a packet socket on \"" + ifname_ + "\"", err,
            "socket");
      }
      throw ErrnoError(env, "af_packet: socket(AF_PACKET) for \"" + ifname_ + "\"", err, "socket");
    }
    std::vector<std::string> warnings;
    try {
      Setup(env, ii, promisc, bring_up, bypass, tov, tx_frames, warnings);
    } catch (...) {
      Release();
      throw;
    }

    handle_ = 0;
    while (handle_ < t_sockets.size() && t_sockets[handle_] != nullptr) handle_++;
    if (handle_ == t_sockets.size()) t_sockets.push_back(nullptr);
    t_sockets[handle_] = this;
    registered_ = true;

    Napi::Object self = info.This().As<Napi::Object>();
    self.Set("handle", Napi::Number::New(env, handle_));
    self.Set("fd", Napi::Number::New(env, fd_));
    self.Set("ifindex", Napi::Number::New(env, ifindex_));
    self.Set("info", IfInfoObject(env, ii));
    self.Set("broughtUp", Napi::Boolean::New(env, brought_up_));
    self.Set("blockSize", Napi::Number::New(env, block_size_));
    self.Set("blocks", Napi::Number::New(env, block_nr_));
    self.Set("rxRing", Napi::String::New(env, v2_ ? "v2" : "v3"));
    self.Set("gso", Napi::Boolean::New(env, gso_));
    self.Set("rxSlots", Napi::Number::New(env, v2_ ? frame_nr_ : 0));
    // The kernel puts a frame's MAC header at TPACKET_ALIGN(TPACKET3_HDRLEN + 16) - 14 in its slot.
    self.Set("maxFrameLen",
             Napi::Number::New(env, block_size_ - BlockHeaderLen() - (TPACKET_ALIGN(TPACKET3_HDRLEN + 16) - ETH_HLEN)));
    self.Set("txMode", Napi::String::New(env, tx_ring_ ? "ring" : "sendmmsg"));
    self.Set("txFrames", Napi::Number::New(env, tx_ring_ ? tx_frame_nr_ : 0));
    self.Set("txMaxFrameLen", Napi::Number::New(env, tx_ring_ ? tx_frame_size_ - TxDataOffset() : 0));
    Napi::Array w = Napi::Array::New(env, warnings.size());
    for (size_t i = 0; i < warnings.size(); i++) w.Set(static_cast<uint32_t>(i), Napi::String::New(env, warnings[i]));
    self.Set("warnings", w);
  }

  ~AfPacketSocket() override { Release(); }

 private:
  static uint32_t BlockHeaderLen() { return TPACKET_ALIGN(sizeof(struct tpacket_block_desc)); }
  static uint32_t TxDataOffset() { return TPACKET3_HDRLEN - sizeof(struct sockaddr_ll); }

  void SetOpt(Napi::Env env, int level, int opt, int val, const char* name) {
    if (setsockopt(fd_, level, opt, &val, sizeof val) < 0) {
      throw ErrnoError(env, std::string("af_packet: setsockopt(") + name + ") on \"" + ifname_ + "\"", errno,
                       "setsockopt");
    }
  }

  void Setup(Napi::Env env, const IfInfo& ii, bool promisc, bool bring_up, bool bypass, uint32_t tov,
             uint32_t tx_frames, std::vector<std::string>& warnings) {
    // What VPP's af_packet does with an administratively down host interface: set it up, before
    // bind() (binding to a down interface leaves ENETDOWN pending on the socket).
    if (!(ii.flags & IFF_UP) && bring_up) {
      struct ifreq ifr;
      std::memset(&ifr, 0, sizeof ifr);
      std::memcpy(ifr.ifr_name, ifname_.data(), ifname_.size());
      if (ioctl(fd_, SIOCGIFFLAGS, &ifr) < 0)
        throw ErrnoError(env, "af_packet: SIOCGIFFLAGS on \"" + ifname_ + "\"", errno, "ioctl");
      ifr.ifr_flags |= IFF_UP;
      if (ioctl(fd_, SIOCSIFFLAGS, &ifr) < 0) {
        int err = errno;
        if (err == EPERM || err == EACCES) {
          throw CodedError(env,
                           "af_packet: kernel interface \"" + ifname_ +
                               "\" is down and setting it up needs CAP_NET_ADMIN (run as root, or ip link set " +
                               ifname_ + " up)",
                           err, "ioctl");
        }
        throw ErrnoError(env, "af_packet: setting kernel interface \"" + ifname_ + "\" up", err, "ioctl");
      }
      brought_up_ = true;
    }

    // Before the version and the rings (the kernel refuses it once a ring exists).
    if (gso_) SetOpt(env, SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR");
    if (v2_)
      SetOpt(env, SOL_PACKET, PACKET_VERSION, TPACKET_V2, "PACKET_VERSION TPACKET_V2");
    else
      SetOpt(env, SOL_PACKET, PACKET_VERSION, TPACKET_V3, "PACKET_VERSION TPACKET_V3");
    // Bypass: our frames go straight to the driver, skipping the qdisc and the taps (tcpdump on
    // this interface does not see them; capture on the peer instead).
    if (bypass) SetOpt(env, SOL_PACKET, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS");
    {
      int one = 1;
      if (setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0) {
        // Kernels before 4.20: our own frames are still not looped back (the sending socket is
        // skipped), only the host stack's outgoing frames would show up on rx.
        warnings.push_back(std::string("PACKET_IGNORE_OUTGOING unsupported: ") + std::strerror(errno));
      }
    }
    // A larger send buffer so a 256-frame sendmmsg batch is not cut short by socket memory.
    {
      int sz = 4 << 20;
      if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) < 0) {
        setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
      }
    }

    // Before any ring exists (the kernel refuses it afterwards with EBUSY).
    if (tx_ring_) SetOpt(env, SOL_PACKET, PACKET_LOSS, 1, "PACKET_LOSS");

    struct tpacket_req3 rx;
    std::memset(&rx, 0, sizeof rx);
    rx.tp_block_size = block_size_;
    rx.tp_block_nr = block_nr_;
    rx.tp_frame_size = kNominalFrame;
    rx.tp_frame_nr = (block_size_ / kNominalFrame) * block_nr_;
    rx.tp_retire_blk_tov = tov;
    if (v2_) {
      // TPACKET_V2: one slot per frame, handed to us the moment it is written (no block to
      // retire: no latency floor), at the cost of a fixed slot size.
      rx.tp_frame_size = frame_size_;
      rx.tp_frame_nr = frame_nr_;
    }
    if (setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &rx, v2_ ? sizeof(struct tpacket_req) : sizeof rx) < 0) {
      throw ErrnoError(env,
                       "af_packet: setsockopt(PACKET_RX_RING) on \"" + ifname_ + "\" (" + std::to_string(block_nr_) +
                           " blocks of " + std::to_string(block_size_) + " bytes)",
                       errno, "setsockopt");
    }
    rx_bytes_ = static_cast<size_t>(block_size_) * block_nr_;
    size_t tx_bytes = 0;
    if (tx_ring_) {
      // Frames never cross a block: blocks of at least 64 KiB holding whole frames.
      uint32_t bs = 64 * 1024;
      while (bs < tx_frame_size_) bs <<= 1;
      tx_block_size_ = bs;
      tx_frames_per_block_ = bs / tx_frame_size_;
      uint32_t tx_blocks = (tx_frames + tx_frames_per_block_ - 1) / tx_frames_per_block_;
      tx_frame_nr_ = tx_blocks * tx_frames_per_block_;
      struct tpacket_req3 tx;
      std::memset(&tx, 0, sizeof tx);
      tx.tp_block_size = tx_block_size_;
      tx.tp_block_nr = tx_blocks;
      tx.tp_frame_size = tx_frame_size_;
      tx.tp_frame_nr = tx_frame_nr_;
      if (setsockopt(fd_, SOL_PACKET, PACKET_TX_RING, &tx, sizeof tx) < 0) {
        throw ErrnoError(env, "af_packet: setsockopt(PACKET_TX_RING) on \"" + ifname_ + "\"", errno, "setsockopt");
      }
      tx_bytes = static_cast<size_t>(tx_block_size_) * tx_blocks;
    }
    map_len_ = rx_bytes_ + tx_bytes;
    void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
    if (m == MAP_FAILED) {
      map_len_ = 0;
      throw ErrnoError(
          env, "af_packet: mmap of the " + std::to_string(rx_bytes_ + tx_bytes) + "-byte ring of \"" + ifname_ + "\"",
          errno, "mmap");
    }
    ring_ = static_cast<uint8_t*>(m);
    if (tx_ring_) tx_base_ = ring_ + rx_bytes_;

    if (!filter_.empty()) {
      // The kernel checks the program (EINVAL when it would not run).
      struct sock_fprog prog = {static_cast<unsigned short>(filter_.size()), filter_.data()};
      if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0) {
        throw ErrnoError(env, "af_packet: setsockopt(SO_ATTACH_FILTER) on \"" + ifname_ + "\"", errno, "setsockopt");
      }
    }
    struct sockaddr_ll sll;
    std::memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifindex_;
    if (bind(fd_, reinterpret_cast<struct sockaddr*>(&sll), sizeof sll) < 0) {
      int err = errno;
      if (err == ENODEV)
        throw CodedError(env, "af_packet: kernel interface \"" + ifname_ + "\" disappeared while opening it", err,
                         "bind");
      throw ErrnoError(env, "af_packet: bind to \"" + ifname_ + "\"", err, "bind");
    }

    if (promisc) {
      struct packet_mreq mr;
      std::memset(&mr, 0, sizeof mr);
      mr.mr_ifindex = ifindex_;
      mr.mr_type = PACKET_MR_PROMISC;
      if (setsockopt(fd_, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0) {
        throw ErrnoError(env, "af_packet: promiscuous mode on \"" + ifname_ + "\"", errno, "setsockopt");
      }
    }
  }

  void Release() {
    if (registered_) {
      t_sockets[handle_] = nullptr;
      registered_ = false;
    }
    if (ring_) {
      munmap(ring_, map_len_);
      ring_ = nullptr;
      tx_base_ = nullptr;
    }
    if (fd_ >= 0) {
      close(fd_);  // the kernel drops the socket's memberships with it
      fd_ = -1;
    }
    mc_.clear();
    refs_.clear();
    pool_bound_ = false;
  }

  void CheckOpen(Napi::Env env, const char* fn) {
    if (fd_ < 0)
      throw Napi::Error::New(env, std::string("AfPacketSocket.") + fn + ": socket of \"" + ifname_ + "\" is closed");
  }

  // bindPool({memory, firstOffset, stride, headroom, dataSize, count, offset, length, flags,
  //           next, tsSec, tsNsec, idx, result, flagNext, flagTimestamp, flagL4Ok, flagTxUdp,
  //           flagExt, ext, extId})
  Napi::Value BindPool(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckOpen(env, "bindPool");
    if (!info[0].IsObject()) throw TypeErr(env, "AfPacketSocket.bindPool: expects an object");
    Napi::Object o = info[0].As<Napi::Object>();
    const char* fn = "AfPacketSocket.bindPool";
    Napi::Value memv = o.Get("memory");
    if (!memv.IsArrayBuffer()) throw TypeErr(env, "AfPacketSocket.bindPool: memory must be an ArrayBuffer");
    Napi::ArrayBuffer mem = memv.As<Napi::ArrayBuffer>();
    PoolView p;
    p.mem = static_cast<uint8_t*>(mem.Data());
    p.mem_len = mem.ByteLength();
    if (p.mem == nullptr || p.mem_len == 0) throw RangeErr(env, "AfPacketSocket.bindPool: memory is empty or detached");
    p.first_offset = OptU32(o, "firstOffset", fn, 0, 0, 4294967295.0);
    p.stride = OptU32(o, "stride", fn, 0, 64, 1u << 20);
    p.headroom = OptU32(o, "headroom", fn, 0, 0, 65535);
    p.data_size = OptU32(o, "dataSize", fn, 0, 64, 1u << 20);
    p.count = OptU32(o, "count", fn, 0, 1, 4294967294.0);
    if (p.stride < p.headroom + p.data_size)
      throw RangeErr(env, "AfPacketSocket.bindPool: stride < headroom + dataSize");
    if (static_cast<uint64_t>(p.first_offset) + static_cast<uint64_t>(p.count) * p.stride > p.mem_len) {
      throw RangeErr(env, "AfPacketSocket.bindPool: " + std::to_string(p.count) + " buffers of " +
                              std::to_string(p.stride) + " bytes do not fit in " + std::to_string(p.mem_len) +
                              " bytes of memory");
    }
    p.offset = U32ArrayArg(env, o.Get("offset"), "AfPacketSocket.bindPool", "offset", p.count);
    p.length = U32ArrayArg(env, o.Get("length"), "AfPacketSocket.bindPool", "length", p.count);
    p.flags = U32ArrayArg(env, o.Get("flags"), "AfPacketSocket.bindPool", "flags", p.count);
    p.next = U32ArrayArg(env, o.Get("next"), "AfPacketSocket.bindPool", "next", p.count);
    p.ts_sec = U32ArrayArg(env, o.Get("tsSec"), "AfPacketSocket.bindPool", "tsSec", p.count);
    p.ts_nsec = U32ArrayArg(env, o.Get("tsNsec"), "AfPacketSocket.bindPool", "tsNsec", p.count);
    size_t idx_len = 0;
    p.idx = U32ArrayArg(env, o.Get("idx"), "AfPacketSocket.bindPool", "idx", 1, &idx_len);
    p.idx_cap = static_cast<uint32_t>(idx_len);
    p.result = U32ArrayArg(env, o.Get("result"), "AfPacketSocket.bindPool", "result", 4);
    p.f_next = OptU32(o, "flagNext", fn, 0, 1, 4294967295.0);
    p.f_ts = OptU32(o, "flagTimestamp", fn, 0, 0, 4294967295.0);
    p.f_l4ok = OptU32(o, "flagL4Ok", fn, 0, 0, 4294967295.0);
    p.f_txudp = OptU32(o, "flagTxUdp", fn, 0, 0, 4294967295.0);
    // A single frame must always fit in one burst's indices.
    const uint32_t max_segs = (block_size_ + 4 + p.data_size - 1) / p.data_size;
    if (p.idx_cap < max_segs) {
      throw RangeErr(env, "AfPacketSocket.bindPool: idx holds " + std::to_string(p.idx_cap) + " indices, a " +
                              std::to_string(block_size_) + "-byte frame needs " + std::to_string(max_segs));
    }
    refs_.clear();
    for (const char* k : {"memory", "offset", "length", "flags", "next", "tsSec", "tsNsec", "idx", "result"}) {
      refs_.push_back(Napi::Persistent(o.Get(k)));
    }
    // External payload segments (sendmmsg gathers them from where they are; the TX ring copies).
    p.ext = ParseExtBinding(env, o, fn, p.f_next, p.count, &refs_);
    pool_ = p;
    pool_bound_ = true;
    return env.Undefined();
  }

  // The rx walk position: block cur_block_; while in_block_, left_ frames remain at off_.
  tpacket_block_desc* Block(uint32_t b) const {
    return reinterpret_cast<tpacket_block_desc*>(ring_ + static_cast<size_t>(b) * block_size_);
  }

  // Segments a frame needs in the pool; 0 when it is dropped (truncated by the ring).
  uint32_t SegsFor(const tpacket3_hdr* h) const {
    if (h->tp_snaplen < h->tp_len) return 0;
    uint32_t len = h->tp_snaplen + ((h->tp_status & TP_STATUS_VLAN_VALID) ? 4 : 0);
    return len == 0 ? 1 : (len + pool_.data_size - 1) / pool_.data_size;
  }

  // A frame header at `off` in block `bd` is sane (the ring is shared memory; never trust it).
  bool FrameOk(uint32_t off) const {
    if (off < BlockHeaderLen() || static_cast<uint64_t>(off) + sizeof(tpacket3_hdr) > block_size_) return false;
    return true;
  }
  bool FrameDataOk(const tpacket3_hdr* h, uint32_t off) const {
    return static_cast<uint64_t>(off) + h->tp_mac + h->tp_snaplen <= block_size_;
  }

  void ReleaseBlock() {
    StoreRelease(&Block(cur_block_)->hdr.bh1.block_status, TP_STATUS_KERNEL);
    in_block_ = false;
    cur_block_ = cur_block_ + 1 == block_nr_ ? 0 : cur_block_ + 1;
  }

  // Moves to the next frame, opening retired blocks (and releasing empty ones). False: none.
  bool Current(tpacket3_hdr** out) {
    for (;;) {
      if (in_block_) {
        if (left_ > 0 && FrameOk(off_)) {
          *out = reinterpret_cast<tpacket3_hdr*>(reinterpret_cast<uint8_t*>(Block(cur_block_)) + off_);
          return true;
        }
        if (left_ > 0) rx_bad_ += left_;  // a corrupt offset: give up on the rest of the block
        ReleaseBlock();
        continue;
      }
      tpacket_block_desc* bd = Block(cur_block_);
      if (!(LoadAcquire(&bd->hdr.bh1.block_status) & TP_STATUS_USER)) return false;
      in_block_ = true;
      left_ = bd->hdr.bh1.num_pkts;
      off_ = bd->hdr.bh1.offset_to_first_pkt;
    }
  }

  void Advance(const tpacket3_hdr* h) {
    left_--;
    off_ += h->tp_next_offset;
    if (left_ == 0) ReleaseBlock();  // hand the block back as soon as it is consumed
  }

  // TPACKET_V2 slots: frame k of the ring; its data is sane when [tp_mac, tp_mac + snaplen)
  // lies inside the slot (shared memory: never trusted).
  tpacket2_hdr* Slot(uint32_t k) const {
    return reinterpret_cast<tpacket2_hdr*>(ring_ + static_cast<size_t>(k / frames_per_block_) * block_size_ +
                                           static_cast<size_t>(k % frames_per_block_) * frame_size_);
  }
  bool SlotDataOk(const tpacket2_hdr* h) const {
    const uint32_t lo = sizeof(tpacket2_hdr) + (gso_ ? sizeof(gso::VnetHdr) : 0);
    return h->tp_mac >= lo && static_cast<uint64_t>(h->tp_mac) + h->tp_snaplen <= frame_size_;
  }
  // gso: the virtio_net_hdr the kernel wrote just before the frame (SlotDataOk checked room).
  gso::VnetHdr SlotVnet(const tpacket2_hdr* h) const {
    gso::VnetHdr v;
    std::memcpy(&v, reinterpret_cast<const uint8_t*>(h) + h->tp_mac - sizeof v, sizeof v);
    return v;
  }
  // A GSO frame's plan: datagrams (0: drop it), payload bytes per datagram, pool buffers in all.
  uint32_t GsoPlan(const tpacket2_hdr* h, uint32_t* seg, uint32_t* bufs) const {
    if (h->tp_snaplen < h->tp_len || (h->tp_status & TP_STATUS_VLAN_VALID)) return 0;
    const uint8_t* f = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
    uint32_t n = gso::RxPlan(SlotVnet(h), f, h->tp_snaplen, seg);
    if (n == 0) return 0;
    const uint32_t ds = pool_.data_size, payload = h->tp_snaplen - gso::kHdrLen;
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t chunk = payload - i * *seg < *seg ? payload - i * *seg : *seg;
      total += (gso::kHdrLen + chunk + ds - 1) / ds;
    }
    if (total > pool_.idx_cap) return 0;  // could never be placed: drop rather than wait forever
    *bufs = total;
    return n;
  }
  // A UDP GSO message to cut. Other GSO frames (the kernel's TCP through the same veth, to its own
  // address) go up whole, as any frame not for us, and are dropped there for what they are.
  bool IsGso(const tpacket2_hdr* h) const { return gso_ && SlotVnet(h).gso_type == gso::kTypeUdpL4; }
  // Pool buffers slot h's frame needs (0: it is dropped when reached).
  uint32_t NeedFor2(const tpacket2_hdr* h) const {
    if (!IsGso(h)) return SegsFor2(h);
    uint32_t seg = 0, bufs = 0;
    return GsoPlan(h, &seg, &bufs) ? bufs : 0;
  }
  uint32_t SegsFor2(const tpacket2_hdr* h) const {
    if (h->tp_snaplen < h->tp_len) return 0;
    uint32_t len = h->tp_snaplen + ((h->tp_status & TP_STATUS_VLAN_VALID) ? 4 : 0);
    return len == 0 ? 1 : (len + pool_.data_size - 1) / pool_.data_size;
  }
  tpacket2_hdr* Current2() const {
    tpacket2_hdr* h = Slot(cur_frame_);
    return (LoadAcquire(&h->tp_status) & TP_STATUS_USER) ? h : nullptr;
  }
  void Advance2(tpacket2_hdr* h) {
    StoreRelease(&h->tp_status, static_cast<uint32_t>(TP_STATUS_KERNEL));
    cur_frame_ = cur_frame_ + 1 == frame_nr_ ? 0 : cur_frame_ + 1;
  }

  // Occasional SO_ERROR read: a bound socket whose interface went down has sk_err set, which
  // makes it permanently "readable" (EPOLLERR) to the engine's waiter until someone reads it.
  void MaybeClearError() {
    if (++empty_polls_ < kErrCheckEvery) return;
    empty_polls_ = 0;
    ClearError();
  }
  void ClearError() {
    int e = 0;
    socklen_t l = sizeof e;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e != 0) {
      sock_errors_++;
      last_sock_errno_ = e;
    }
  }

  // Copies one frame (snap bytes at src, its ring status st, the VLAN tag the kernel stripped)
  // into the pool buffers idx[used..used+segs), chained, with its flags and timestamp; the head.
  uint32_t Place(Napi::Env env, const uint8_t* src, uint32_t snap, uint32_t st, uint16_t tpid_raw, uint16_t tci,
                 uint32_t sec, uint32_t nsec, uint32_t segs, uint32_t used) {
    const PoolView& p = pool_;
    const bool vlan = (st & TP_STATUS_VLAN_VALID) != 0;
    const uint32_t head = p.idx[used];
    if (segs == 1 && !vlan) {
      if (head >= p.count)
        throw RangeErr(env, "AfPacketSocket.rx: buffer index " + std::to_string(head) + " out of range");
      uint8_t* dst = p.mem + p.first_offset + static_cast<size_t>(head) * p.stride + p.headroom;
      std::memcpy(dst, src, snap);
      p.offset[head] = static_cast<uint32_t>(dst - p.mem);
      p.length[head] = snap;
    } else {
      // Gather pieces [dst/src MACs][802.1Q tag the kernel stripped][rest] across segments.
      uint8_t tag[4];
      const uint8_t* pieces[3];
      uint32_t plen[3];
      int np = 0;
      if (vlan) {
        uint16_t tpid = (st & TP_STATUS_VLAN_TPID_VALID) && tpid_raw ? tpid_raw : ETH_P_8021Q;
        tag[0] = tpid >> 8;
        tag[1] = tpid & 0xff;
        tag[2] = tci >> 8;
        tag[3] = tci & 0xff;
        uint32_t mac_len = snap < 12 ? snap : 12;
        pieces[np] = src;
        plen[np++] = mac_len;
        pieces[np] = tag;
        plen[np++] = 4;
        pieces[np] = src + mac_len;
        plen[np++] = snap - mac_len;
      } else {
        pieces[np] = src;
        plen[np++] = snap;
      }
      PlacePieces(env, pieces, plen, np, segs, used);
      if (vlan) rx_vlan_++;
    }
    Mark(head, st, sec, nsec);
    return head;
  }

  // Flags and timestamp of a received packet's head buffer.
  void Mark(uint32_t head, uint32_t st, uint32_t sec, uint32_t nsec) {
    const PoolView& p = pool_;
    uint32_t f = p.f_ts;
    if (st & (TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID)) f |= p.f_l4ok;
    if (st & TP_STATUS_CSUMNOTREADY) rx_csum_partial_++;
    p.flags[head] |= f;
    p.ts_sec[head] = sec;
    p.ts_nsec[head] = nsec;
  }

  // Copies pieces (np of them, in order) into the pool buffers idx[used..used+segs), chained.
  void PlacePieces(Napi::Env env, const uint8_t* const* pieces, const uint32_t* plen, int np, uint32_t segs,
                   uint32_t used) {
    const PoolView& p = pool_;
    const uint32_t ds = p.data_size;
    {
      int pi = 0;
      uint32_t poff = 0;
      for (uint32_t s = 0; s < segs; s++) {
        const uint32_t bi = p.idx[used + s];
        if (bi >= p.count)
          throw RangeErr(env, "AfPacketSocket.rx: buffer index " + std::to_string(bi) + " out of range");
        uint8_t* dst = p.mem + p.first_offset + static_cast<size_t>(bi) * p.stride + p.headroom;
        uint32_t room = ds, w = 0;
        while (room > 0 && pi < np) {
          uint32_t take = plen[pi] - poff;
          if (take > room) take = room;
          std::memcpy(dst + w, pieces[pi] + poff, take);
          w += take;
          room -= take;
          poff += take;
          if (poff == plen[pi]) {
            pi++;
            poff = 0;
          }
        }
        p.offset[bi] = static_cast<uint32_t>(dst - p.mem);
        p.length[bi] = w;
        if (s + 1 < segs) {
          p.flags[bi] |= p.f_next;
          p.next[bi] = p.idx[used + s + 1];
        }
      }
    }
  }

  // Cuts the GSO frame in slot h into its n datagrams of seg payload bytes (GsoPlan said so and
  // that idx[used..) holds enough buffers): their heads go to out[]. Returns the buffers used.
  uint32_t PlaceGso(Napi::Env env, const tpacket2_hdr* h, uint32_t n, uint32_t seg, uint32_t* out, uint32_t used) {
    const uint8_t* f = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
    const uint32_t payload = h->tp_snaplen - gso::kHdrLen, ds = pool_.data_size;
    uint8_t hdr[gso::kHdrLen];
    uint32_t u = used;
    for (uint32_t i = 0; i < n; i++) {
      const uint32_t chunk = payload - i * seg < seg ? payload - i * seg : seg;
      gso::RxSegmentHeader(f, i, chunk, hdr);
      const uint8_t* pieces[2] = {hdr, f + gso::kHdrLen + i * seg};
      const uint32_t plen[2] = {gso::kHdrLen, chunk};
      const uint32_t bufs = (gso::kHdrLen + chunk + ds - 1) / ds;
      const uint32_t head = pool_.idx[u];
      PlacePieces(env, pieces, plen, 2, bufs, u);
      // Never crossed a wire, checksum left to offload by its sender: L4 OK (as CSUMNOTREADY).
      pool_.flags[head] |= pool_.f_ts | pool_.f_l4ok;
      pool_.ts_sec[head] = h->tp_sec;
      pool_.ts_nsec[head] = h->tp_nsec;
      out[i] = head;
      u += bufs;
    }
    rx_gso_frames_++;
    rx_gso_segs_ += n;
    return u - used;
  }

  // ---- per-burst calls, reached through ByHandle(): arguments start at info[1] (info[0] is the
  // handle).
 public:
  // rxNeed(max): pool buffers the next (up to max) frames need; 0 when the ring has none.
  // Never more than the bound idx array holds (a frame that would overflow it waits).
  Napi::Value RxNeed(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (fd_ < 0 || !pool_bound_) return Napi::Number::New(env, 0);
    uint32_t max = info[1].IsNumber() ? info[1].As<Napi::Number>().Uint32Value() : 256;
    uint32_t need = 0, pkts = 0;
    uint64_t bytes = 0;  // as rx() stops: after the frame that reaches kRxBurstBytes
    if (v2_) {
      // Slots from cur_frame_ the kernel handed over, without releasing any.
      for (uint32_t k = cur_frame_; pkts < max && bytes < kRxBurstBytes && pkts < frame_nr_;) {
        const tpacket2_hdr* h = Slot(k);
        if (!(LoadAcquire(&h->tp_status) & TP_STATUS_USER)) break;
        uint32_t sg = SlotDataOk(h) ? NeedFor2(h) : 0;
        if (need + sg > pool_.idx_cap) break;
        need += sg;
        pkts++;
        bytes += h->tp_snaplen;
        k = k + 1 == frame_nr_ ? 0 : k + 1;
      }
      if (pkts == 0) MaybeClearError();
      if (need == 0 && pkts > 0) need = 1;
      return Napi::Number::New(env, need);
    }
    // Walk a copy of the position without releasing anything.
    uint32_t b = cur_block_, left = left_, off = off_;
    bool in = in_block_;
    for (uint32_t blocks_seen = 0; pkts < max && bytes < kRxBurstBytes && blocks_seen <= block_nr_;) {
      if (!in) {
        tpacket_block_desc* bd = Block(b);
        if (!(LoadAcquire(&bd->hdr.bh1.block_status) & TP_STATUS_USER)) break;
        in = true;
        left = bd->hdr.bh1.num_pkts;
        off = bd->hdr.bh1.offset_to_first_pkt;
      }
      if (left == 0 || !FrameOk(off)) {
        in = false;
        b = b + 1 == block_nr_ ? 0 : b + 1;
        blocks_seen++;
        continue;
      }
      const tpacket3_hdr* h = reinterpret_cast<const tpacket3_hdr*>(reinterpret_cast<uint8_t*>(Block(b)) + off);
      uint32_t s = FrameDataOk(h, off) ? SegsFor(h) : 0;
      if (need + s > pool_.idx_cap) break;
      need += s;
      pkts++;
      bytes += h->tp_snaplen;
      left--;
      off += h->tp_next_offset;
    }
    if (pkts == 0) MaybeClearError();
    // A ring holding only frames to drop still needs a call to rx() to consume them.
    if (need == 0 && pkts > 0) need = 1;
    return Napi::Number::New(env, need);
  }

  // rx(out, max, nIdx): copies up to max frames into the buffers idx[0..nIdx) (in order),
  // writes the head buffer of each packet to out[], returns the packet count; result[0] =
  // indices used. Frames the ring truncated are dropped and counted.
  Napi::Value Rx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (fd_ < 0 || !pool_bound_) return Napi::Number::New(env, 0);
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "afPacketRx: out must be a Uint32Array");
    }
    Napi::Uint32Array outa = info[1].As<Napi::Uint32Array>();
    uint32_t* out = outa.Data();
    uint32_t max = info[2].As<Napi::Number>().Uint32Value();
    uint32_t nidx = info[3].As<Napi::Number>().Uint32Value();
    if (max > outa.ElementLength()) max = static_cast<uint32_t>(outa.ElementLength());
    if (nidx > pool_.idx_cap) nidx = pool_.idx_cap;
    const PoolView& p = pool_;
    uint32_t n = 0, used = 0;
    uint64_t bytes = 0;
    if (v2_) {
      tpacket2_hdr* h2;
      // A burst ends after the frame that reaches kRxBurstBytes (common.h).
      while (n < max && bytes < kRxBurstBytes && (h2 = Current2()) != nullptr) {
        if (!SlotDataOk(h2)) {
          rx_bad_++;
          Advance2(h2);
          continue;
        }
        if (IsGso(h2)) {
          uint32_t seg = 0, bufs = 0;
          const uint32_t k = GsoPlan(h2, &seg, &bufs);
          if (k == 0 || (n == 0 && k > max)) {
            rx_gso_bad_++;  // not ours to cut (or can never fit this call's out[]): dropped
            Advance2(h2);
            continue;
          }
          if (used + bufs > nidx || n + k > max) break;  // waits in its slot for the next burst
          used += PlaceGso(env, h2, k, seg, out + n, used);
          n += k;
          bytes += static_cast<uint64_t>(h2->tp_snaplen) + (k - 1) * gso::kHdrLen;
          Advance2(h2);
          continue;
        }
        uint32_t segs = SegsFor2(h2);
        if (segs == 0) {
          rx_truncated_++;
          Advance2(h2);
          continue;
        }
        if (used + segs > nidx) break;  // out of buffers: the frame waits in its slot
        const uint32_t st = h2->tp_status;
        const uint32_t total = h2->tp_snaplen + ((st & TP_STATUS_VLAN_VALID) ? 4 : 0);
        const uint32_t head = Place(env, reinterpret_cast<const uint8_t*>(h2) + h2->tp_mac, h2->tp_snaplen, st,
                                    h2->tp_vlan_tpid, h2->tp_vlan_tci, h2->tp_sec, h2->tp_nsec, segs, used);
        out[n++] = head;
        used += segs;
        bytes += total;
        Advance2(h2);
      }
    } else {
      tpacket3_hdr* h;
      while (n < max && bytes < kRxBurstBytes && Current(&h)) {
        if (!FrameDataOk(h, off_)) {
          rx_bad_++;
          Advance(h);
          continue;
        }
        uint32_t segs = SegsFor(h);
        if (segs == 0) {
          rx_truncated_++;
          Advance(h);
          continue;
        }
        if (used + segs > nidx) break;  // out of buffers: the frame waits in the ring
        const uint32_t st = h->tp_status;
        const uint32_t total = h->tp_snaplen + ((st & TP_STATUS_VLAN_VALID) ? 4 : 0);
        const uint32_t head =
            Place(env, reinterpret_cast<const uint8_t*>(h) + h->tp_mac, h->tp_snaplen, st, h->hv1.tp_vlan_tpid,
                  static_cast<uint16_t>(h->hv1.tp_vlan_tci), h->tp_sec, h->tp_nsec, segs, used);
        out[n++] = head;
        used += segs;
        bytes += total;
        Advance(h);
      }
    }
    if (n == 0) MaybeClearError();
    rx_packets_ += n;
    rx_bytes_total_ += bytes;
    p.result[0] = used;
    return Napi::Number::New(env, n);
  }

  // rxSkip(max, touch): consume up to max frames without copying them (benchmarks: the ring
  // walk alone, and with touch = true also a read of each frame's EtherType in the ring, i.e.
  // what a zero-copy receive path pays to look at a packet).
  Napi::Value RxSkip(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (fd_ < 0) return Napi::Number::New(env, 0);
    uint32_t max = info[1].As<Napi::Number>().Uint32Value();
    const bool touch = info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
    uint32_t n = 0, acc = 0;
    if (v2_) {
      tpacket2_hdr* h2;
      while (n < max && (h2 = Current2()) != nullptr) {
        if (touch && h2->tp_snaplen >= 14 && SlotDataOk(h2)) {
          const volatile uint8_t* d = reinterpret_cast<const uint8_t*>(h2) + h2->tp_mac;
          acc |= (d[12] << 8) | d[13];
        }
        n++;
        Advance2(h2);
      }
      rx_skipped_ += n;
      touch_acc_ |= acc;
      return Napi::Number::New(env, n);
    }
    tpacket3_hdr* h;
    while (n < max && Current(&h)) {
      if (touch && h->tp_snaplen >= 14) {
        const volatile uint8_t* d = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
        acc |= (d[12] << 8) | d[13];
      }
      n++;
      Advance(h);
    }
    rx_skipped_ += n;
    touch_acc_ |= acc;
    return Napi::Number::New(env, n);
  }

  // Gathers packet `head`'s segments into iov (at most kMaxSegments), external ones (ext) where
  // they are. Returns the segment count and the total length, or 0 when the chain is invalid
  // (bad index, out of bounds, an external window its memory does not hold, too long).
  uint32_t Gather(uint32_t head, struct iovec* iov, uint64_t* len_out) const {
    const PoolView& p = pool_;
    uint32_t bi = head, nseg = 0;
    uint64_t len = 0;
    for (;;) {
      if (bi >= p.count || nseg == kMaxSegments) return 0;
      uint64_t o = p.offset[bi], l = p.length[bi];
      if (p.ext.f_ext != 0 && (p.flags[bi] & p.ext.f_ext)) {
        // A window of an external memory (an MR), checked against it; never a packet's head.
        if (nseg == 0 || p.ext.ext == nullptr) return 0;
        const uint8_t* at = p.ext.ext->Window(p.ext.ext_id[bi], o, l);
        if (at == nullptr) return 0;
        iov[nseg].iov_base = const_cast<uint8_t*>(at);
      } else {
        if (o + l > p.mem_len) return 0;
        iov[nseg].iov_base = p.mem + o;
      }
      iov[nseg].iov_len = l;
      nseg++;
      len += l;
      if (!(p.flags[bi] & p.f_next)) break;
      bi = p.next[bi];
    }
    *len_out = len;
    return nseg;
  }

  // tx(bufs, off, n): transmits packets bufs[off..off+n); returns how many were taken (sent, or
  // dropped as malformed and counted in txErrors). The rest were refused (socket buffer or TX
  // ring full, interface down) and stay with the caller.
  Napi::Value Tx(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
      throw TypeErr(env, "afPacketTx: bufs must be a Uint32Array");
    }
    Napi::Uint32Array a = info[1].As<Napi::Uint32Array>();
    uint32_t off = info[2].As<Napi::Number>().Uint32Value();
    uint32_t n = info[3].As<Napi::Number>().Uint32Value();
    if (static_cast<uint64_t>(off) + n > a.ElementLength()) throw RangeErr(env, "afPacketTx: off + n beyond bufs");
    if (fd_ < 0 || !pool_bound_ || n == 0) {
      tx_refused_ += n;
      return Napi::Number::New(env, 0);
    }
    const uint32_t* bufs = a.Data() + off;
    uint32_t taken = tx_ring_ ? TxRing(bufs, n) : TxSendmmsg(bufs, n);
    tx_refused_ += n - taken;
    return Napi::Number::New(env, taken);
  }

 private:
  static bool LinkGone(int err) { return err == ENETDOWN || err == ENXIO || err == ENODEV; }

  // The virtio_net_hdr asking for the UDP checksum of frame f (first buffer of len bytes):
  // untagged or 802.1Q-tagged IPv4/UDP. Anything else was never flagged by the stack.
  static void UdpCsumOffload(const uint8_t* f, uint64_t len, gso::VnetHdr* vh) {
    uint32_t l3 = ETH_HLEN;
    if (len >= 18 && f[12] == 0x81 && f[13] == 0x00) l3 += 4;
    if (len < l3 + 20 || f[l3 - 2] != 0x08 || f[l3 - 1] != 0x00 || (f[l3] >> 4) != 4 || f[l3 + 9] != 17) return;
    const uint32_t l4 = l3 + (f[l3] & 0x0f) * 4;
    if (len < l4 + 8) return;
    vh->flags = gso::kNeedsCsum;
    vh->csum_start = static_cast<uint16_t>(l4);
    vh->csum_offset = 6;
  }

  // Ends GSO group message k: with two frames or more, its header for the whole and its
  // virtio_net_hdr; the first frame's own header (its first iovec's first bytes) left out.
  void CloseGso(uint32_t k, const uint8_t* tmpl, uint32_t gsz, uint32_t gpay, uint32_t gcnt) {
    if (gcnt < 2) return;
    struct iovec* v = &iov_[msg_at_[k]];
    gso::BuildTx(tmpl, gpay, static_cast<uint16_t>(gsz), static_cast<uint8_t*>(v[1].iov_base), &vnet_[k]);
    v[1].iov_len = gso::kHdrLen;
    v[2].iov_base = static_cast<uint8_t*>(v[2].iov_base) + gso::kHdrLen;
    v[2].iov_len -= gso::kHdrLen;
  }

  uint32_t TxSendmmsg(const uint32_t* bufs, uint32_t n) {
    uint32_t done = 0;  // packets taken so far
    bool retried = false;
    // gso: every message starts with its virtio_net_hdr, then a header for a whole GSO message
    // (empty for a message of one frame), then the frames' bytes.
    const uint32_t lead = gso_ ? 2 : 0;
    while (done < n) {
      uint32_t batch = n - done < kMaxTxBatch ? n - done : kMaxTxBatch;
      if (msgs_.size() < batch) {
        msgs_.resize(batch);
        msg_pkt_.resize(batch);
        msg_len_.resize(batch);
        msg_cnt_.resize(batch);
        msg_at_.resize(batch);
        if (gso_) {
          vnet_.resize(batch);
          gso_hdr_.resize(static_cast<size_t>(batch) * gso::kHdrLen);
        }
      }
      const size_t iov_need = static_cast<size_t>(batch) * (kMaxSegments + lead);
      if (iov_.size() < iov_need) iov_.resize(iov_need);
      // Build the batch; invalid packets are taken (dropped, counted) and left out of it.
      uint32_t m = 0;
      size_t iv = 0;
      invalid_.clear();
      // The open GSO group (message m - 1): its template header, datagram payload size, payload
      // bytes and datagrams so far.
      bool open = false;
      const uint8_t* tmpl = nullptr;
      uint32_t gsz = 0, gpay = 0, gcnt = 0;
      for (uint32_t i = 0; i < batch; i++) {
        uint64_t len = 0;
        uint32_t segs = Gather(bufs[done + i], &iov_[iv + lead], &len);
        if (segs == 0) {
          tx_errors_++;
          tx_invalid_++;
          invalid_.push_back(done + i);
          if (open) CloseGso(m - 1, tmpl, gsz, gpay, gcnt);
          open = false;  // a group's frames are consecutive in bufs
          continue;
        }
        int64_t pl = -1;
        if (gso_) {
          const uint8_t* f = static_cast<const uint8_t*>(iov_[iv + lead].iov_base);
          pl = gso::UdpPayload(f, iov_[iv + lead].iov_len, len);
          if (open && pl > 0 && static_cast<uint32_t>(pl) <= gsz && gpay + pl <= gso::kMaxPayload &&
              gcnt < gso::kMaxSegs && msgs_[m - 1].msg_hdr.msg_iovlen + segs <= IOV_MAX && gso::SameFlow(tmpl, f)) {
            // Joins message m - 1: its bytes without its header.
            std::memmove(&iov_[iv], &iov_[iv + lead], segs * sizeof(struct iovec));
            iov_[iv].iov_base = static_cast<uint8_t*>(iov_[iv].iov_base) + gso::kHdrLen;
            iov_[iv].iov_len -= gso::kHdrLen;
            iv += segs;
            msgs_[m - 1].msg_hdr.msg_iovlen += segs;
            msg_len_[m - 1] += len;
            msg_cnt_[m - 1]++;
            gpay += static_cast<uint32_t>(pl);
            gcnt++;
            if (static_cast<uint32_t>(pl) < gsz) {  // a shorter datagram ends the group
              CloseGso(m - 1, tmpl, gsz, gpay, gcnt);
              open = false;
            }
            continue;
          }
          if (open) CloseGso(m - 1, tmpl, gsz, gpay, gcnt);
          // A group's datagram size: what a receiver cuts at (it refuses smaller pieces).
          open = pl >= gso::kMinSegment;
          if (open) {
            tmpl = f;
            gsz = gpay = static_cast<uint32_t>(pl);
            gcnt = 1;
          }
          std::memset(&vnet_[m], 0, sizeof vnet_[m]);
          // Checksum offload: the kernel (or the NIC) completes the UDP checksum from the
          // pseudo-header sum the stack left (a GSO group's header gets its own at CloseGso).
          if (pool_.f_txudp && (pool_.flags[bufs[done + i]] & pool_.f_txudp))
            UdpCsumOffload(f, iov_[iv + lead].iov_len, &vnet_[m]);
          iov_[iv].iov_base = &vnet_[m];
          iov_[iv].iov_len = sizeof vnet_[m];
          iov_[iv + 1].iov_base = &gso_hdr_[static_cast<size_t>(m) * gso::kHdrLen];
          iov_[iv + 1].iov_len = 0;
        }
        struct mmsghdr& mh = msgs_[m];
        std::memset(&mh, 0, sizeof mh);
        mh.msg_hdr.msg_iovlen = segs + lead;
        msg_at_[m] = iv;
        msg_pkt_[m] = done + i;
        msg_len_[m] = len;
        msg_cnt_[m] = 1;
        iv += segs + lead;
        m++;
      }
      if (open) CloseGso(m - 1, tmpl, gsz, gpay, gcnt);
      for (uint32_t k = 0; k < m; k++) msgs_[k].msg_hdr.msg_iov = &iov_[msg_at_[k]];
      uint32_t i = 0;  // messages of the batch handled
      bool stop = false;
      while (i < m) {
        int r = sendmmsg(fd_, &msgs_[i], m - i, MSG_DONTWAIT);
        if (r > 0) {
          for (int k = 0; k < r; k++) {
            tx_bytes_ += msg_len_[i + k];
            tx_packets_ += msg_cnt_[i + k];
            if (msg_cnt_[i + k] > 1) {
              tx_gso_msgs_++;
              tx_gso_segs_ += msg_cnt_[i + k];
            }
          }
          i += r;
          continue;
        }
        int err = r < 0 ? errno : EIO;
        if (err == EINTR) continue;
        last_tx_errno_ = err;
        if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
          stop = true;
          break;
        }
        if (LinkGone(err)) {
          // The first such error may be the sk_err the interface going down left behind (it is
          // cleared by being returned): try once more before refusing the rest.
          if (!retried) {
            retried = true;
            continue;
          }
          stop = true;
          break;
        }
        // Refused by the kernel for this message alone (EMSGSIZE: longer than the MTU; EINVAL:
        // shorter than an Ethernet header...): drop its frames, count them, go on.
        tx_errors_ += msg_cnt_[i];
        i++;
      }
      if (stop) {
        if (i == m) return done + batch;
        // Invalid packets after the first refused one stay with the caller: not errors after all.
        const uint32_t first_refused = msg_pkt_[i];
        for (uint32_t q : invalid_) {
          if (q > first_refused) {
            tx_errors_--;
            tx_invalid_--;
          }
        }
        return first_refused;
      }
      done += batch;
    }
    return n;
  }

  uint32_t TxRing(const uint32_t* bufs, uint32_t n) {
    const uint32_t data_off = TxDataOffset();
    const uint32_t room = tx_frame_size_ - data_off;
    struct iovec iov[kMaxSegments];
    uint32_t taken = 0, queued = 0;
    for (; taken < n; taken++) {
      uint32_t f = tx_head_;
      uint8_t* frame = tx_base_ + static_cast<size_t>(f / tx_frames_per_block_) * tx_block_size_ +
                       static_cast<size_t>(f % tx_frames_per_block_) * tx_frame_size_;
      tpacket3_hdr* h = reinterpret_cast<tpacket3_hdr*>(frame);
      uint32_t st = LoadAcquire(&h->tp_status);
      if (st == TP_STATUS_WRONG_FORMAT) {
        tx_errors_++;  // the kernel refused an earlier frame here (should not happen with PACKET_LOSS)
      } else if (st != TP_STATUS_AVAILABLE) {
        break;  // ring full: the kernel still owns this slot
      }
      uint64_t len = 0;
      uint32_t segs = Gather(bufs[taken], iov, &len);
      // The kernel's own limit (tpacket_snd): MTU + Ethernet header, + 4 for a VLAN-tagged
      // frame. With PACKET_LOSS it would drop a longer frame silently; count it here instead.
      uint64_t limit = static_cast<uint64_t>(link_mtu_) + ETH_HLEN;
      if (segs > 0 && len >= ETH_HLEN) {
        const uint8_t* p0 = static_cast<const uint8_t*>(iov[0].iov_base);
        uint16_t type = iov[0].iov_len >= 14 ? static_cast<uint16_t>((p0[12] << 8) | p0[13]) : 0;
        if (type == ETH_P_8021Q || type == ETH_P_8021AD) limit += 4;
      }
      if (segs == 0 || len > room || len < ETH_HLEN || len > limit) {
        tx_errors_++;
        if (segs == 0) tx_invalid_++;
        StoreRelease(&h->tp_status, TP_STATUS_AVAILABLE);
        continue;
      }
      uint8_t* dst = frame + data_off;
      for (uint32_t s = 0; s < segs; s++) {
        std::memcpy(dst, iov[s].iov_base, iov[s].iov_len);
        dst += iov[s].iov_len;
      }
      h->tp_len = static_cast<uint32_t>(len);
      h->tp_snaplen = static_cast<uint32_t>(len);
      h->tp_next_offset = 0;
      StoreRelease(&h->tp_status, TP_STATUS_SEND_REQUEST);
      tx_head_ = f + 1 == tx_frame_nr_ ? 0 : f + 1;
      tx_bytes_ += len;
      queued++;
    }
    if (queued > 0) {
      tx_packets_ += queued;
      for (int attempt = 0; attempt < 2; attempt++) {
        if (send(fd_, nullptr, 0, MSG_DONTWAIT) >= 0) break;
        int err = errno;
        if (err == EINTR) continue;
        last_tx_errno_ = err;
        // EAGAIN/ENOBUFS: the frames stay queued and go with the next kick. A stale sk_err
        // (ENETDOWN) is cleared by being returned: kick once more.
        if (!LinkGone(err)) break;
      }
    }
    return taken;
  }

  // stats(): counters (kernel ones from PACKET_STATISTICS, accumulated: reading resets them).
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (fd_ >= 0) {
      struct tpacket_stats_v3 st;
      std::memset(&st, 0, sizeof st);
      socklen_t l = sizeof st;
      if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &l) == 0) {
        k_packets_ += st.tp_packets;
        k_drops_ += st.tp_drops;
        k_freeze_ += st.tp_freeze_q_cnt;
      }
    }
    Napi::Object o = Napi::Object::New(env);
    auto set = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
    set("rxPackets", static_cast<double>(rx_packets_));
    set("rxBytes", static_cast<double>(rx_bytes_total_));
    set("rxTruncated", static_cast<double>(rx_truncated_));
    set("rxBad", static_cast<double>(rx_bad_));
    set("rxVlan", static_cast<double>(rx_vlan_));
    set("rxCsumPartial", static_cast<double>(rx_csum_partial_));
    set("rxSkipped", static_cast<double>(rx_skipped_));
    set("txPackets", static_cast<double>(tx_packets_));
    set("txBytes", static_cast<double>(tx_bytes_));
    set("txErrors", static_cast<double>(tx_errors_));
    set("txInvalid", static_cast<double>(tx_invalid_));
    set("txRefused", static_cast<double>(tx_refused_));
    set("txGsoMessages", static_cast<double>(tx_gso_msgs_));
    set("txGsoDatagrams", static_cast<double>(tx_gso_segs_));
    set("rxGsoFrames", static_cast<double>(rx_gso_frames_));
    set("rxGsoDatagrams", static_cast<double>(rx_gso_segs_));
    set("rxGsoDropped", static_cast<double>(rx_gso_bad_));
    set("kernelPackets", static_cast<double>(k_packets_));
    set("kernelDrops", static_cast<double>(k_drops_));
    set("kernelFreezeQueue", static_cast<double>(k_freeze_));
    set("socketErrors", static_cast<double>(sock_errors_));
    set("lastSocketErrno", last_sock_errno_);
    set("lastTxErrno", last_tx_errno_);
    return o;
  }

  // linkFlags(): the interface's current IFF_* flags, or -1 when it no longer exists.
  Napi::Value LinkFlags(const Napi::CallbackInfo& info) {
    struct ifreq ifr;
    if (!LinkQuery(SIOCGIFFLAGS, &ifr)) return Napi::Number::New(info.Env(), -1);
    return Napi::Number::New(info.Env(), static_cast<uint16_t>(ifr.ifr_flags));
  }

  // One SIOCGIF* ioctl on our interface, found by index (it may have been renamed since it was
  // opened); false when the socket is closed or the interface is gone.
  bool LinkQuery(unsigned long request, struct ifreq* ifr) const {
    if (fd_ < 0) return false;
    std::memset(ifr, 0, sizeof *ifr);
    ifr->ifr_ifindex = ifindex_;
    return ioctl(fd_, SIOCGIFNAME, ifr) == 0 && ioctl(fd_, request, ifr) == 0;
  }

  // linkMtu(): the interface's current MTU, or -1 when it no longer exists (or is closed).
  Napi::Value LinkMtu(const Napi::CallbackInfo& info) {
    struct ifreq ifr;
    if (!LinkQuery(SIOCGIFMTU, &ifr)) return Napi::Number::New(info.Env(), -1);
    return Napi::Number::New(info.Env(), ifr.ifr_mtu);
  }

  // multicast(macs): the multicast MACs the interface is to receive (a Uint8Array of 6-byte
  // MACs, at most kMaxMulticast), as this socket's PACKET_MR_MULTICAST memberships: the kernel
  // adds each to the device's filter (a NIC drops a group's frames it was not told of unless
  // promiscuous) and takes them out when the socket closes. Changes only what differs from the
  // last call; a failure leaves the memberships made so far and throws with the MAC.
  Napi::Value Multicast(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsTypedArray() ||
        info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      throw Napi::TypeError::New(env, "af_packet multicast(macs): macs must be a Uint8Array of 6-byte MACs");
    }
    const Napi::Uint8Array a = info[0].As<Napi::Uint8Array>();
    const size_t n = a.ElementLength() / ETH_ALEN;
    if (a.ElementLength() % ETH_ALEN != 0 || n > kMaxMulticast) {
      throw Napi::RangeError::New(env, "af_packet multicast(macs): " + std::to_string(a.ElementLength()) +
                                           " bytes is not a list of at most " + std::to_string(kMaxMulticast) +
                                           " MACs");
    }
    if (fd_ < 0) throw Napi::Error::New(env, "af_packet: \"" + ifname_ + "\" is closed");
    std::vector<Mac> want(n);
    for (size_t k = 0; k < n; k++) {
      std::memcpy(want[k].data(), a.Data() + k * ETH_ALEN, ETH_ALEN);
      if (!(want[k][0] & 1))
        throw Napi::RangeError::New(env, "af_packet multicast(macs): " + MacText(want[k]) + " is not a multicast MAC");
    }
    auto has = [](const std::vector<Mac>& v, const Mac& m) {
      for (const Mac& x : v)
        if (x == m) return true;
      return false;
    };
    for (size_t k = mc_.size(); k-- > 0;) {
      if (has(want, mc_[k])) continue;
      Membership(PACKET_DROP_MEMBERSHIP, mc_[k]);  // ENOENT etc.: it is gone either way
      mc_.erase(mc_.begin() + static_cast<std::ptrdiff_t>(k));
    }
    for (const Mac& m : want) {
      if (has(mc_, m)) continue;
      if (!Membership(PACKET_ADD_MEMBERSHIP, m))
        throw ErrnoError(env, "af_packet: multicast " + MacText(m) + " on \"" + ifname_ + "\"", errno, "setsockopt");
      mc_.push_back(m);
    }
    return env.Undefined();
  }

  using Mac = std::array<uint8_t, ETH_ALEN>;
  static constexpr size_t kMaxMulticast = 64;

  bool Membership(int op, const Mac& m) const {
    struct packet_mreq mr;
    std::memset(&mr, 0, sizeof mr);
    mr.mr_ifindex = ifindex_;
    mr.mr_type = PACKET_MR_MULTICAST;
    mr.mr_alen = ETH_ALEN;
    std::memcpy(mr.mr_address, m.data(), ETH_ALEN);
    return setsockopt(fd_, SOL_PACKET, op, &mr, sizeof mr) == 0;
  }

  static std::string MacText(const Mac& m) {
    char t[18];
    std::snprintf(t, sizeof t, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return t;
  }

  // close(): unmap the rings and close the socket (leaves promiscuous mode). Idempotent.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Release();
    return info.Env().Undefined();
  }

  struct PoolView {
    uint8_t* mem = nullptr;
    size_t mem_len = 0;
    uint32_t first_offset = 0, stride = 0, headroom = 0, data_size = 0, count = 0;
    uint32_t *offset = nullptr, *length = nullptr, *flags = nullptr, *next = nullptr;
    uint32_t *ts_sec = nullptr, *ts_nsec = nullptr;
    uint32_t* idx = nullptr;
    uint32_t idx_cap = 0;
    uint32_t* result = nullptr;
    uint32_t f_next = 0, f_ts = 0, f_l4ok = 0;
    uint32_t f_txudp = 0;  // gso: the stack left the UDP checksum to us (the pseudo-header sum in the field)
    ExtBinding ext;        // payload segments in external memory (graph/ext-memory.ts)
  };

  std::string ifname_;
  uint32_t handle_ = 0;
  bool registered_ = false;
  int ifindex_ = 0;
  uint32_t link_mtu_ = 0;  // the kernel interface's MTU at open (TX ring length check)
  int fd_ = -1;
  bool brought_up_ = false;
  std::vector<Mac> mc_;  // PACKET_MR_MULTICAST memberships of the socket (multicast())

  uint8_t* ring_ = nullptr;
  size_t map_len_ = 0;
  size_t rx_bytes_ = 0;
  std::vector<sock_filter> filter_;  // SO_ATTACH_FILTER program, or none
  uint32_t block_size_ = 0, block_nr_ = 0;
  uint32_t cur_block_ = 0, left_ = 0, off_ = 0;
  bool in_block_ = false;
  // TPACKET_V2 (rxRing 'v2'): fixed slots of frame_size_, the next one cur_frame_.
  bool v2_ = false;
  // gso: PACKET_VNET_HDR; UDP datagrams of one flow sent as one message, such messages cut on rx.
  bool gso_ = false;
  uint32_t frame_size_ = 0, frames_per_block_ = 0, frame_nr_ = 0, cur_frame_ = 0;
  uint32_t empty_polls_ = 0;

  bool tx_ring_ = false;
  uint8_t* tx_base_ = nullptr;
  uint32_t tx_frame_size_ = 0, tx_block_size_ = 0, tx_frames_per_block_ = 0, tx_frame_nr_ = 0, tx_head_ = 0;

  PoolView pool_;
  bool pool_bound_ = false;
  std::vector<Napi::Reference<Napi::Value>> refs_;

  std::vector<struct mmsghdr> msgs_;
  std::vector<uint32_t> msg_pkt_;
  std::vector<uint64_t> msg_len_;
  std::vector<uint32_t> msg_cnt_;  // frames in each message (more than one: a GSO message)
  std::vector<size_t> msg_at_;     // each message's first iovec in iov_
  std::vector<gso::VnetHdr> vnet_;
  std::vector<uint8_t> gso_hdr_;
  std::vector<struct iovec> iov_;
  std::vector<uint32_t> invalid_;

  uint64_t rx_packets_ = 0, rx_bytes_total_ = 0, rx_truncated_ = 0, rx_bad_ = 0, rx_vlan_ = 0, rx_csum_partial_ = 0,
           rx_skipped_ = 0;
  uint64_t tx_packets_ = 0, tx_bytes_ = 0, tx_errors_ = 0, tx_invalid_ = 0, tx_refused_ = 0;
  uint64_t tx_gso_msgs_ = 0, tx_gso_segs_ = 0, rx_gso_frames_ = 0, rx_gso_segs_ = 0, rx_gso_bad_ = 0;
  uint64_t k_packets_ = 0, k_drops_ = 0, k_freeze_ = 0;
  uint64_t sock_errors_ = 0;
  uint32_t touch_acc_ = 0;  // keeps rxSkip's reads from being optimised away
  int last_sock_errno_ = 0, last_tx_errno_ = 0;
};

// fn(handle, ...): the socket's method, or `closed` when the handle names no open socket.
template <Napi::Value (AfPacketSocket::*M)(const Napi::CallbackInfo&)>
Napi::Value ByHandle(const Napi::CallbackInfo& info) {
  uint32_t h = info[0].As<Napi::Number>().Uint32Value();
  if (h >= t_sockets.size() || t_sockets[h] == nullptr) return Napi::Number::New(info.Env(), 0);
  return (t_sockets[h]->*M)(info);
}

}  // namespace

void InitAfPacket(Napi::Env env, Napi::Object exports) {
  exports.Set("AfPacketSocket", AfPacketSocket::Define(env));
  exports.Set("afPacketRxNeed", Napi::Function::New(env, ByHandle<&AfPacketSocket::RxNeed>, "afPacketRxNeed"));
  exports.Set("afPacketRx", Napi::Function::New(env, ByHandle<&AfPacketSocket::Rx>, "afPacketRx"));
  exports.Set("afPacketRxSkip", Napi::Function::New(env, ByHandle<&AfPacketSocket::RxSkip>, "afPacketRxSkip"));
  exports.Set("afPacketTx", Napi::Function::New(env, ByHandle<&AfPacketSocket::Tx>, "afPacketTx"));
  exports.Set("afPacketIfInfo", Napi::Function::New(env, AfPacketIfInfo, "afPacketIfInfo"));
}

}  // namespace rg
