// UDP segmentation offload on an af_packet socket (option gso): with PACKET_VNET_HDR every frame
// is preceded by a virtio_net_hdr, which lets one sendmsg carry many UDP datagrams of one flow
// and lets the kernel hand over a frame that holds many.
//
//   tx  consecutive frames of one flow (the same Ethernet, IPv4 and UDP header but for the
//       fields that differ per datagram: IPv4 total length, ID and checksum, UDP length and
//       checksum), all of one UDP payload size but the last, go out as ONE message: the first
//       frame's header patched to the sum of the payloads, then every payload (gathered straight
//       from the pool buffers). The kernel cuts it back into the same datagrams (gso_size = the
//       payload size; each gets its own IPv4 ID, lengths and checksums), on the NIC or in
//       software before the wire, and across a veth pair it crosses as one packet: per-packet
//       costs of the kernel's path are paid once per message. Each of our datagrams is one TRP
//       segment with its own headers inside the payload, so the cuts fall where ours did (as
//       QUIC stacks use UDP_SEGMENT).
//   rx  a frame the kernel hands over with gso_type UDP_L4 (a peer's message that crossed a veth
//       whole) is cut here into its datagrams, each a packet of its own with a patched header.
//
// Only untagged IPv4 without options and UDP take part; everything else goes as before (a
// message of its own with an empty virtio_net_hdr). Every field of a received header is checked
// before use: a GSO frame that is not IPv4/UDP, whose lengths disagree, or that would cut into
// more than kMaxSegs datagrams or into pieces smaller than kMinSegment bytes is dropped.
#pragma once

#include <cstdint>
#include <cstring>

namespace rg::gso {

constexpr uint32_t kHdrLen = 14 + 20 + 8;         // Ethernet, IPv4 without options, UDP
constexpr uint32_t kMaxSegs = 64;                 // datagrams per message, either way
constexpr uint32_t kMaxPayload = 65535 - 20 - 8;  // IPv4 total length bound
constexpr uint32_t kMinSegment = 64;              // smallest gso_size sent or accepted
constexpr uint8_t kNeedsCsum = 1;                 // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr uint8_t kTypeNone = 0;                  // VIRTIO_NET_HDR_GSO_NONE
constexpr uint8_t kTypeUdpL4 = 5;                 // VIRTIO_NET_HDR_GSO_UDP_L4

// struct virtio_net_hdr, host byte order (little-endian hosts: what the kernel expects).
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
} __attribute__((packed));
static_assert(sizeof(VnetHdr) == 10, "virtio_net_hdr is 10 bytes");

inline uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline void PutBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// The UDP payload length of frame f (first buffer of first_len bytes, total bytes in all) when
// it can take part: untagged IPv4 without options, not a fragment, UDP, lengths consistent with
// the frame (no Ethernet padding) and the whole header in the first buffer. -1 otherwise.
inline int64_t UdpPayload(const uint8_t* f, uint64_t first_len, uint64_t total) {
  if (first_len < kHdrLen || total <= kHdrLen || total > 14 + 65535) return -1;
  if (f[12] != 0x08 || f[13] != 0x00 || f[14] != 0x45 || f[23] != 17) return -1;
  if ((Be16(f + 20) & 0x3fff) != 0) return -1;  // MF or a fragment offset
  if (Be16(f + 16) != total - 14 || Be16(f + 38) != total - 34) return -1;
  return static_cast<int64_t>(total - kHdrLen);
}

// Same flow: the 42 header bytes equal but for IPv4 total length (16-17), ID (18-19), header
// checksum (24-25), UDP length (38-39) and checksum (40-41).
inline bool SameFlow(const uint8_t* a, const uint8_t* b) {
  return std::memcmp(a, b, 16) == 0 && std::memcmp(a + 20, b + 20, 4) == 0 && std::memcmp(a + 26, b + 26, 12) == 0;
}

inline uint32_t Sum16(const uint8_t* p, uint32_t n, uint32_t acc) {
  for (uint32_t i = 0; i + 1 < n; i += 2) acc += Be16(p + i);
  if (n & 1) acc += static_cast<uint32_t>(p[n - 1]) << 8;
  return acc;
}
inline uint16_t Fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

// The message header for `count` datagrams of template t's flow carrying `payload` bytes in
// all, cut every gso_size bytes: t's 42 bytes with IPv4 total length and UDP length for the
// whole (and its IPv4 checksum), UDP checksum the pseudo-header sum (the kernel completes it
// per datagram).
inline void BuildTx(const uint8_t* t, uint32_t payload, uint16_t gso_size, uint8_t* hdr, VnetHdr* vh) {
  std::memcpy(hdr, t, kHdrLen);
  PutBe16(hdr + 16, static_cast<uint16_t>(20 + 8 + payload));
  // A receiver on a veth checks this header before anything cuts the message: valid for it.
  hdr[24] = hdr[25] = 0;
  PutBe16(hdr + 24, static_cast<uint16_t>(~Fold(Sum16(hdr + 14, 20, 0))));
  PutBe16(hdr + 38, static_cast<uint16_t>(8 + payload));
  uint32_t acc = Sum16(hdr + 26, 8, 17 + 8 + payload);  // addresses, protocol, UDP length
  PutBe16(hdr + 40, Fold(acc));
  vh->flags = kNeedsCsum;
  vh->gso_type = kTypeUdpL4;
  vh->hdr_len = static_cast<uint16_t>(kHdrLen);
  vh->gso_size = gso_size;
  vh->csum_start = 34;
  vh->csum_offset = 6;
}

// A received GSO frame (len bytes at f, its virtio_net_hdr vh): the datagram count it cuts into,
// with *seg its payload bytes per datagram; 0 when it cannot be cut (not UDP_L4, not untagged
// IPv4/UDP, lengths that disagree, too many or too small pieces): drop it.
inline uint32_t RxPlan(const VnetHdr& vh, const uint8_t* f, uint32_t len, uint32_t* seg) {
  if (vh.gso_type != kTypeUdpL4 || len <= kHdrLen) return 0;
  if (f[12] != 0x08 || f[13] != 0x00 || f[14] != 0x45 || f[23] != 17) return 0;
  if ((Be16(f + 20) & 0x3fff) != 0) return 0;
  const uint32_t payload = len - kHdrLen;
  // The kernel writes the whole message's lengths (capped: a 16-bit field) into the header.
  if (Be16(f + 16) != (len - 14 > 0xffff ? 0xffff : len - 14)) return 0;
  if (Be16(f + 38) != (len - 34 > 0xffff ? 0xffff : len - 34)) return 0;
  const uint32_t g = vh.gso_size;
  if (g < kMinSegment) return 0;
  const uint32_t n = (payload + g - 1) / g;
  if (n == 0 || n > kMaxSegs) return 0;
  *seg = g;
  return n;
}

// Datagram i's header (chunk payload bytes) of the received GSO frame f: lengths, ID + i and
// the IPv4 checksum; UDP checksum 0 (none: the frame never crossed a wire, the sender left it to
// offload, and the packet is flagged L4-checksum-ok as a CHECKSUM_PARTIAL frame is).
inline void RxSegmentHeader(const uint8_t* f, uint32_t i, uint32_t chunk, uint8_t* out) {
  std::memcpy(out, f, kHdrLen);
  PutBe16(out + 16, static_cast<uint16_t>(20 + 8 + chunk));
  PutBe16(out + 18, static_cast<uint16_t>(Be16(f + 18) + i));
  out[24] = out[25] = 0;
  PutBe16(out + 24, static_cast<uint16_t>(~Fold(Sum16(out + 14, 20, 0))));
  PutBe16(out + 38, static_cast<uint16_t>(8 + chunk));
  out[40] = out[41] = 0;
}

}  // namespace rg::gso
