/**
 * The edge cases of drivers/steer-bpf.ts's socket filters as one table, run by two tests:
 * test/steer-bpf.test.ts with the module's interpreter (runBpf), test/steer-bpf-kernel.test.ts by
 * the kernel (each program attached to a real AF_PACKET socket, each frame sent over a veth).
 *
 * Every program meets every frame. What a program must do with a frame follows from the frame's
 * `dport` (written by hand, from the bytes) and the program's ranges, computed here without BPF:
 * - a port: an accepting program takes the frame when the port is in one of its ranges, a
 *   rejecting program when it is not;
 * - 'other': the frame is no UDP datagram with a header (ARP, TCP, a later fragment, IPv6...):
 *   the rejecting programs (an interface's owner) take it, the accepting ones (workers) do not;
 * - 'cut': an IPv4 frame that ends before the byte the filter needs next: a load past the end
 *   stops a classic BPF program with 0, so no socket gets it, the owner's neither (ip4-input
 *   would drop it anyway).
 */
import { acceptPorts, rejectPorts, type BpfInsn } from '../drivers/steer-bpf.ts';
import { arp, eth, icmpEcho, ip4, udp, udpFrame, PEER_MAC, US_MAC } from './l2l4-helpers.ts';

export interface SteerProgram {
  name: string;
  /** acceptPorts (a worker's socket) or rejectPorts (the interface owner's). */
  kind: 'accept' | 'reject';
  ranges: [number, number][];
  prog: BpfInsn[];
}

export interface SteerCase {
  name: string;
  /** The frame as it is on the wire. */
  frame: Uint8Array;
  /** The bytes the filter runs on when they differ: the kernel strips an 802.1Q tag first. */
  seen?: Uint8Array;
  /** The UDP destination port the filters steer by, 'other' or 'cut' (see the file's comment). */
  dport: number | 'other' | 'cut';
}

function program(name: string, kind: 'accept' | 'reject', ranges: [number, number][]): SteerProgram {
  return { name, kind, ranges, prog: kind === 'accept' ? acceptPorts(ranges) : rejectPorts(ranges) };
}

export const PROGRAMS: SteerProgram[] = [
  program('worker 1 of 2', 'accept', [[25000, 29999]]),
  program('owner of 2', 'reject', [[25000, 29999]]),
  program('two ranges', 'accept', [
    [100, 199],
    [300, 399],
  ]),
  program('owner of 3', 'reject', [
    [100, 199],
    [25000, 29999],
  ]),
  program('one port', 'accept', [[4791, 4791]]),
  program('every port', 'accept', [[0, 65535]]),
  program('owner of every port', 'reject', [[0, 65535]]),
  program(
    '64 ranges',
    'accept',
    Array.from({ length: 64 }, (_, i) => [i * 1000, i * 1000 + 9] as [number, number]),
  ),
];

/** Whether `p` must take `c` (from the table, not from BPF). */
export function expected(p: SteerProgram, c: SteerCase): boolean {
  if (c.dport === 'cut') return false;
  if (c.dport === 'other') return p.kind === 'reject';
  const port = c.dport;
  return p.ranges.some(([lo, hi]) => lo <= port && port <= hi) === (p.kind === 'accept');
}

const bytes = (b: number[]) => Uint8Array.from(b);
const u = (dport: number, ip: object = {}) => bytes(udpFrame({ dport, payload: [1, 2, 3, 4], ip }));
const withType = (type: number, payload: number[]) => bytes(eth(US_MAC, PEER_MAC, type, payload));
/** The first `n` bytes of a frame (a copy). */
const cut = (f: Uint8Array, n: number) => f.slice(0, n);
/** `f` with an 802.1Q tag (VLAN 5) after the MAC addresses. */
const tagged = (f: Uint8Array) => bytes([...f.subarray(0, 12), 0x81, 0x00, 0x00, 0x05, ...f.subarray(12)]);
const tcp26000 = withType(
  0x0800,
  ip4({ src: '10.0.0.2', dst: '10.0.0.1', proto: 6, payload: [0x61, 0xa8, 0x65, 0x90, 0, 0, 0, 1, 0, 0, 0, 0] }),
);
const laterFragment = u(26000, { frag: 0x0010 });

export const CASES: SteerCase[] = [
  // Ports: both ends of every range, one past each, the extremes.
  ...[0, 7, 9, 10, 99, 100, 199, 200, 299, 300, 399, 400, 4790, 4791, 4792, 24999, 25000, 25009, 25010, 26999]
    .concat([27000, 29999, 30000, 63009, 63010, 65535])
    .map((port): SteerCase => ({ name: `UDP to port ${port}`, frame: u(port), dport: port })),
  // IPv4 header length: the UDP header is found through IHL.
  {
    name: 'IHL 7 (8 bytes of options), port 26000',
    frame: u(26000, { options: [1, 1, 1, 0, 0x94, 4, 0, 0] }),
    dport: 26000,
  },
  {
    name: 'IHL 15 (40 bytes of options), port 26000',
    frame: u(26000, { options: [...new Array(39).fill(1), 0] }),
    dport: 26000,
  },
  {
    name: 'IHL 6, port 7, a router alert option holding 26000 where a fixed-offset filter would look',
    frame: u(7, { options: [0x94, 4, 0x65, 0x90] }),
    dport: 7,
  },
  {
    name: "IHL 0 (bogus): the filter's port is read 4 bytes into the IP header (its total length, 32)",
    frame: u(9999, { ihl: 0 }),
    dport: 32,
  },
  // Fragments: only the first has the UDP header.
  { name: 'a first fragment (MF, offset 0), port 26000', frame: u(26000, { frag: 0x2000 }), dport: 26000 },
  {
    name: 'the reserved flag bit set, offset 0: not a later fragment',
    frame: u(26000, { frag: 0x8000 }),
    dport: 26000,
  },
  { name: 'a later fragment (offset 16)', frame: laterFragment, dport: 'other' },
  { name: 'a last fragment at the largest offset', frame: u(26000, { frag: 0x1fff }), dport: 'other' },
  // Not UDP over IPv4.
  {
    name: 'ARP request',
    frame: bytes(
      eth(
        'ff:ff:ff:ff:ff:ff',
        PEER_MAC,
        0x0806,
        arp({ op: 1, sha: PEER_MAC, spa: '10.0.0.2', tha: '00:00:00:00:00:00', tpa: '10.0.0.1' }),
      ),
    ),
    dport: 'other',
  },
  { name: 'TCP to port 26000', frame: tcp26000, dport: 'other' },
  {
    name: 'ICMP echo request',
    frame: withType(0x0800, ip4({ src: '10.0.0.2', dst: '10.0.0.1', proto: 1, payload: icmpEcho(8, 1, 1, [9]) })),
    dport: 'other',
  },
  {
    name: 'IPv6 UDP to port 26000',
    frame: withType(0x86dd, [
      ...[0x60, 0, 0, 0, 0, 12, 17, 64],
      ...new Array(15).fill(0),
      ...[2, ...new Array(15).fill(0), 1],
      ...udp({ src: '10.0.0.2', dst: '10.0.0.1', sport: 5000, dport: 26000, payload: [1, 2, 3, 4], checksum: 0 }),
    ]),
    dport: 'other',
  },
  { name: 'EtherType 0x88b5', frame: withType(0x88b5, [1, 2, 3, 4, 5, 6]), dport: 'other' },
  { name: 'EtherType 0x88b5, header only (14 bytes)', frame: withType(0x88b5, []), dport: 'other' },
  // The kernel strips an 802.1Q tag before the filter runs: a tagged frame is steered as untagged.
  { name: 'VLAN 5, UDP to port 26000', frame: tagged(u(26000)), seen: u(26000), dport: 26000 },
  { name: 'VLAN 5, UDP to port 7', frame: tagged(u(7)), seen: u(7), dport: 7 },
  // Cut frames: a load past the end ends the program with 0, unless it decided before.
  { name: 'UDP to 26000 cut to 38 bytes, ending with the port', frame: cut(u(26000), 38), dport: 26000 },
  { name: 'UDP to 26000 cut to 37 bytes, in the port', frame: cut(u(26000), 37), dport: 'cut' },
  { name: 'UDP to 26000 cut to 30 bytes', frame: cut(u(26000), 30), dport: 'cut' },
  { name: 'IPv4 UDP cut to 24 bytes, with the protocol', frame: cut(u(26000), 24), dport: 'cut' },
  { name: 'IPv4 cut to 23 bytes, before the protocol', frame: cut(u(26000), 23), dport: 'cut' },
  { name: 'IPv4, header only (14 bytes)', frame: cut(u(26000), 14), dport: 'cut' },
  { name: 'TCP cut to 24 bytes: decided at the protocol', frame: cut(tcp26000, 24), dport: 'other' },
  { name: 'a later fragment cut to 24 bytes: decided at the offset', frame: cut(laterFragment, 24), dport: 'other' },
  {
    name: 'IHL 15 cut before its UDP header',
    frame: cut(u(26000, { options: new Array(40).fill(1) }), 70),
    dport: 'cut',
  },
];
