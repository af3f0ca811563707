/**
 * ethernet-input: Ethernet II in, by EtherType to ip4-input or arp-input, everything else to
 * error-drop with its reason counted.
 *
 * Accepted destinations: our MAC on the receiving interface, broadcast, the multicast MACs
 * the interface subscribed to and those of the IPv4 groups it joined (net/ip4-groups.ts). On the way out the buffer's data starts at the L3 header and the
 * Ethernet header sits in the 14 bytes just before it (replies are built in place from it).
 *
 * 802.1Q: we have no VLAN sub-interfaces, so a frame tagged with a VLAN ID is dropped and
 * counted ("VLAN-tagged frame"). A priority tag (VLAN ID 0, 802.1p only) means "untagged" in
 * 802.1Q, so it is popped (the MAC addresses move up 4 bytes, counted as info) and the frame is
 * handled as untagged; its replies go out untagged. Stacked tags (802.1ad, a tag inside a tag)
 * are dropped with the VLAN counter.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, errorTable, nextTable } from '../../graph/index.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import {
  BROADCAST_HI,
  BROADCAST_LO,
  ETH_HEADER_BYTES,
  ETHERTYPE_ARP,
  ETHERTYPE_IP4,
  ETHERTYPE_IP6,
  ETHERTYPE_MIN,
  ETHERTYPE_QINQ,
  ETHERTYPE_VLAN,
  etherTypeName,
} from './ethernet.ts';
import { formatMacHiLo } from '../net/address.ts';

/** 01:00:5e:00:00:01 (224.0.0.1, all systems: IGMP queries), taken while the interface has joined a group. */
const ALL_SYSTEMS_MAC_HI = 0x01005e00,
  ALL_SYSTEMS_MAC_LO = 0x0001;

export const ETHERNET_INPUT = 'ethernet-input';

const NEXT = nextTable({ DROP: 'error-drop', IP4: 'ip4-input', ARP: 'arp-input' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_IP4 = NEXT.index.IP4,
  NEXT_ARP = NEXT.index.ARP;

const ERROR_TABLE = errorTable({
  TRUNCATED: { name: 'truncated', description: 'frame shorter than Ethernet header', severity: 'error' },
  NOT_CONFIGURED: { name: 'not_configured', description: 'interface has no IPv4 config', severity: 'warn' },
  NOT_OUR_MAC: { name: 'not_our_mac', description: 'unicast to another MAC', severity: 'warn' },
  MCAST_NOT_SUBSCRIBED: { name: 'mcast_not_subscribed', description: 'multicast MAC not subscribed', severity: 'info' },
  VLAN: { name: 'vlan', description: 'VLAN-tagged frame (no sub-ifs)', severity: 'warn' },
  PRIORITY_TAG: { name: 'priority_tag', description: 'priority tag (VLAN 0) removed', severity: 'info' },
  LLC: { name: 'llc', description: '802.3/LLC frame (not Ethernet II)', severity: 'info' },
  IP6: { name: 'ip6', description: 'IPv6 (not supported)', severity: 'info' },
  UNKNOWN_TYPE: { name: 'unknown_ethertype', description: 'unknown EtherType', severity: 'warn' },
});
export const EthernetError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

interface EthTrace {
  dstHi: number;
  dstLo: number;
  srcHi: number;
  srcLo: number;
  type: number;
  priorityTag: boolean;
  next: string;
}

function formatEthTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as EthTrace;
  const tag = t.priorityTag ? ' (802.1q priority tag removed)' : '';
  return `${etherTypeName(t.type)}: ${formatMacHiLo(t.srcHi, t.srcLo)} -> ${formatMacHiLo(t.dstHi, t.dstLo)}${tag} next ${t.next}`;
}

export function registerEthernetInput(graph: Graph, ifs: InterfaceTable): NodeRuntime {
  return graph.register({
    name: ETHERNET_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: ifs,
    fn: ethernetInput,
    formatTrace: formatEthTrace,
  });
}

function ethernetInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const ifs = rt.runtimeData as InterfaceTable;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    rxIf = pool.rxIf,
    error = pool.error,
    flags = pool.flags;
  const configured = ifs.configured,
    ourHi = ifs.macHi,
    ourLo = ifs.macLo;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    let o = offset[bi];
    const ix = rxIf[bi];
    let err = -1;
    let next = NEXT_DROP;
    let type = 0;
    let tagged = false;
    if (length[bi] < ETH_HEADER_BYTES) err = EthernetError.TRUNCATED;
    else if (configured[ix] !== 1) err = EthernetError.NOT_CONFIGURED;
    else {
      const dhi = v.getUint32(o),
        dlo = v.getUint16(o + 4);
      if (dhi & 0x01000000) {
        if (
          (dhi !== BROADCAST_HI || dlo !== BROADCAST_LO) &&
          !ifs.mcastMember(ix, dhi, dlo) &&
          !ifs.groups.macMember(ix, dhi, dlo) &&
          !(dhi === ALL_SYSTEMS_MAC_HI && dlo === ALL_SYSTEMS_MAC_LO && ifs.groups.count(ix) > 0)
        )
          err = EthernetError.MCAST_NOT_SUBSCRIBED;
      } else if (dhi !== ourHi[ix] || dlo !== ourLo[ix]) err = EthernetError.NOT_OUR_MAC;
      if (err < 0) {
        type = v.getUint16(o + 12);
        if (type === ETHERTYPE_VLAN) {
          if (length[bi] < ETH_HEADER_BYTES + 4) err = EthernetError.TRUNCATED;
          else if ((v.getUint16(o + 14) & 0x0fff) !== 0) err = EthernetError.VLAN;
          else {
            type = v.getUint16(o + 16);
            if (type === ETHERTYPE_VLAN || type === ETHERTYPE_QINQ) err = EthernetError.VLAN;
            else {
              // Pop the priority tag: the MACs move up over it.
              u8.copyWithin(o + 4, o, o + 12);
              pool.advance(bi, 4);
              o += 4;
              tagged = true;
              rt.countError(EthernetError.PRIORITY_TAG);
            }
          }
        } else if (type === ETHERTYPE_QINQ) err = EthernetError.VLAN;
        if (err < 0) {
          if (type === ETHERTYPE_IP4) next = NEXT_IP4;
          else if (type === ETHERTYPE_ARP) next = NEXT_ARP;
          else if (type === ETHERTYPE_IP6) err = EthernetError.IP6;
          else if (type < ETHERTYPE_MIN) err = EthernetError.LLC;
          else err = EthernetError.UNKNOWN_TYPE;
        }
      }
    }
    if (err >= 0) error[bi] = eBase + err;
    else pool.advance(bi, ETH_HEADER_BYTES);
    nexts[i] = next;
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED) {
      rt.addTrace(
        bi,
        err === EthernetError.TRUNCATED && length[bi] < ETH_HEADER_BYTES
          ? `truncated frame: ${length[bi]} bytes`
          : ({
              dstHi: v.getUint32(o),
              dstLo: v.getUint16(o + 4),
              srcHi: v.getUint32(o + 6),
              srcLo: v.getUint16(o + 10),
              type: tagged ? type : v.getUint16(o + 12),
              priorityTag: tagged,
              next: NEXT.names[next],
            } satisfies EthTrace),
      );
    }
  }
  rt.enqueue(vec, n);
  return n;
}
