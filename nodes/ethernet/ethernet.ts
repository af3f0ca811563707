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

/** "aa:bb:cc:dd:ee:ff" (or '-' separated) or 6 bytes -> 6 bytes. */
export function parseMac(mac: string | Uint8Array, where = 'mac'): Uint8Array {
  if (mac instanceof Uint8Array) {
    if (mac.length !== 6) throw new RangeError(`${where}: a MAC address is 6 bytes, got ${mac.length}`);
    return Uint8Array.from(mac);
  }
  const m = /^([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})$/i.exec(mac);
  if (m === null) throw new RangeError(`${where}: "${mac}" is not a MAC address like aa:bb:cc:dd:ee:ff`);
  return Uint8Array.from(m.slice(1), (x) => parseInt(x, 16));
}

export function macHi(mac: Uint8Array): number {
  return ((mac[0] << 24) | (mac[1] << 16) | (mac[2] << 8) | mac[3]) >>> 0;
}

export function macLo(mac: Uint8Array): number {
  return (mac[4] << 8) | mac[5];
}

/** Format a MAC given as (hi, lo). Allocates: trace formatters and control plane only. */
export function formatMacHiLo(hi: number, lo: number): string {
  const h = (x: number): string => (x & 0xff).toString(16).padStart(2, '0');
  return `${h(hi >>> 24)}:${h(hi >>> 16)}:${h(hi >>> 8)}:${h(hi)}:${h(lo >>> 8)}:${h(lo)}`;
}

export function formatMac(mac: Uint8Array): string {
  return formatMacHiLo(macHi(mac), macLo(mac));
}

/** Group bit of the first byte (multicast and broadcast). */
export function isGroupMac(hi: number): boolean {
  return (hi & 0x01000000) !== 0;
}

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
