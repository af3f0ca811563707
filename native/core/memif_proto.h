// The memif wire format (version 2.0), as spoken by VPP's memif plugin, libmemif and DPDK's
// net_memif PMD: 128-byte control messages on a UNIX SOCK_SEQPACKET socket, and rings of
// 16-byte descriptors in shared memory regions.
//
//   Control: server -> HELLO; client -> INIT, ADD_REGION (memfd in SCM_RIGHTS) x regions,
//   ADD_RING (eventfd in SCM_RIGHTS) x rings, CONNECT; server ACKs each of INIT / ADD_REGION /
//   ADD_RING and answers CONNECT with CONNECTED. Either side may send DISCONNECT (code + reason)
//   and close the socket.
//
//   Rings (all created by the client in region 0): S2M ("client to server", C2S) rings first,
//   then M2S (S2C). Each ring is a 128-byte header (cookie, flags, head on the first cache line,
//   tail on the second) followed by 2^log2 descriptors. Head and tail are free-running u16.
//     C2S: the client writes descriptors at head and publishes head (release); the server reads
//          up to head (acquire) and publishes how far it got as tail (release).
//     S2C: the client hands empty buffers to the server by writing descriptors at head
//          (length = room) and publishing head; the server fills them from tail up to head,
//          sets length/flags and publishes tail; the client reads up to tail.
//   The receiver of a ring sets MEMIF_RING_FLAG_MASK_INT in the ring's flags when it polls; the
//   sender writes 1 to the ring's eventfd after publishing unless that flag is set.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rg {
namespace memif {

constexpr uint32_t kCookie = 0x3E31F20;
constexpr uint16_t kVersion = (2 << 8) | 0;
constexpr size_t kNameSize = 32;
constexpr size_t kSecretSize = 24;
constexpr size_t kReasonSize = 96;
constexpr size_t kMsgSize = 128;

enum MsgType : uint16_t {
  kMsgNone = 0,
  kMsgAck = 1,
  kMsgHello = 2,
  kMsgInit = 3,
  kMsgAddRegion = 4,
  kMsgAddRing = 5,
  kMsgConnect = 6,
  kMsgConnected = 7,
  kMsgDisconnect = 8,
};

constexpr uint16_t kAddRingFlagC2S = 1;   // MEMIF_MSG_ADD_RING_FLAG_S2M
constexpr uint16_t kDescFlagNext = 1;     // MEMIF_DESC_FLAG_NEXT: chained buffer
constexpr uint16_t kRingFlagMaskInt = 1;  // MEMIF_RING_FLAG_MASK_INT: receiver polls, no kicks
constexpr uint8_t kModeEthernet = 0;

#pragma pack(push, 1)
struct Hello {
  uint8_t name[kNameSize];
  uint16_t min_version;
  uint16_t max_version;
  uint16_t max_region;    // highest region index accepted
  uint16_t max_m2s_ring;  // highest S2C ring index accepted
  uint16_t max_s2m_ring;  // highest C2S ring index accepted
  uint8_t max_log2_ring_size;
};
struct Init {
  uint16_t version;
  uint32_t id;
  uint8_t mode;
  uint8_t secret[kSecretSize];
  uint8_t name[kNameSize];
};
struct AddRegion {
  uint16_t index;
  uint64_t size;
};
struct AddRing {
  uint16_t flags;
  uint16_t index;
  uint16_t region;
  uint32_t offset;
  uint8_t log2_ring_size;
  uint16_t private_hdr_size;
};
struct Connect {
  uint8_t if_name[kNameSize];
};
struct Disconnect {
  uint32_t code;
  uint8_t string[kReasonSize];
};
// One control message: the type, then the body (packed right after it), padded to 128 bytes.
struct Msg {
  uint16_t type;
  union {
    Hello hello;
    Init init;
    AddRegion add_region;
    AddRing add_ring;
    Connect connect;
    Connect connected;
    Disconnect disconnect;
    uint8_t raw[kMsgSize - 2];
  };
};
struct Desc {
  uint16_t flags;
  uint16_t region;
  uint32_t length;
  uint32_t offset;
  uint32_t metadata;
};
#pragma pack(pop)

static_assert(sizeof(Hello) == 43, "memif hello layout");
static_assert(sizeof(Init) == 63, "memif init layout");
static_assert(sizeof(AddRegion) == 10, "memif add_region layout");
static_assert(sizeof(AddRing) == 13, "memif add_ring layout");
static_assert(sizeof(Disconnect) == 100, "memif disconnect layout");
static_assert(sizeof(Msg) == kMsgSize, "memif message is 128 bytes");
static_assert(sizeof(Desc) == 16, "memif descriptor is 16 bytes");

// Ring header offsets (64-byte cache lines, as VPP and DPDK on x86-64).
constexpr size_t kRingCookie = 0;
constexpr size_t kRingFlags = 4;
constexpr size_t kRingHead = 6;
constexpr size_t kRingTail = 64;
constexpr size_t kRingDesc = 128;

constexpr size_t RingBytes(uint32_t log2) { return kRingDesc + sizeof(Desc) * (size_t{1} << log2); }

// Largest ring both VPP and DPDK accept (2^14 slots; head/tail are u16).
constexpr uint8_t kMaxLog2RingSize = 14;
constexpr uint16_t kMaxRegions = 256;

}  // namespace memif
}  // namespace rg
