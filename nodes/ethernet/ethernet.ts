/**
 * Ethernet II constants and MAC address helpers. In the data path a MAC address is two numbers:
 * `hi` (the first 4 bytes, big-endian u32) and `lo` (the last 2, u16), read and written with
 * two DataView calls and compared without building anything.
 */

export const ETH_HEADER_BYTES = 14;
export const ETHERTYPE_IP4 = 0x0800;
export const ETHERTYPE_ARP = 0x0806;
export const ETHERTYPE_VLAN = 0x8100;
export const ETHERTYPE_QINQ = 0x88a8;
export const ETHERTYPE_IP6 = 0x86dd;
/** Below this the field is an 802.3 length, not an EtherType. */
export const ETHERTYPE_MIN = 0x0600;

export const BROADCAST_HI = 0xffffffff;
export const BROADCAST_LO = 0xffff;

/** EtherType name as VPP prints it in traces (IP4, ARP, ...), else 0x%04x. */
export function etherTypeName(t: number): string {
  switch (t) {
    case ETHERTYPE_IP4:
      return 'IP4';
    case ETHERTYPE_ARP:
      return 'ARP';
    case ETHERTYPE_IP6:
      return 'IP6';
    case ETHERTYPE_VLAN:
      return '802.1q';
    case ETHERTYPE_QINQ:
      return '802.1ad';
    default:
      return t < ETHERTYPE_MIN ? `802.3 length ${t}` : `0x${t.toString(16).padStart(4, '0')}`;
  }
}
