/** MAC address options shared by the drivers. */
import { getRandomValues } from 'node:crypto';

/**
 * A driver's `mac` option: "aa:bb:cc:dd:ee:ff" (or '-' separated) or 6 bytes; when absent, a
 * random locally administered unicast address, 02:fe:xx:xx:xx:xx, drawn when the interface is
 * made (as VPP's memif does). Not derived from the interface name: every daemon's `memif0`
 * would get the same address, and two of them on one segment would take each other's frames.
 * The data plane logs the address each interface got.
 */
export function macOption(where: string, mac: string | Uint8Array | undefined, _name: string): Uint8Array {
  if (mac === undefined) {
    const m = Uint8Array.of(0x02, 0xfe, 0, 0, 0, 0);
    getRandomValues(m.subarray(2));
    return m;
  }
  if (mac instanceof Uint8Array) {
    if (mac.length !== 6) throw new RangeError(`${where}: mac must be 6 bytes, got ${mac.length}`);
    return Uint8Array.from(mac);
  }
  const m =
    /^([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})$/i.exec(mac);
  if (m === null) throw new RangeError(`${where}: mac must look like aa:bb:cc:dd:ee:ff, got "${mac}"`);
  return Uint8Array.from(m.slice(1), (x) => parseInt(x, 16));
}
