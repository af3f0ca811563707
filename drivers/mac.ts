/** MAC address options shared by the drivers. */

/**
 * A driver's `mac` option: "aa:bb:cc:dd:ee:ff" (or '-' separated) or 6 bytes; when absent, a
 * stable locally administered unicast address derived from the interface name (02:fe + FNV-1a).
 */
export function macOption(where: string, mac: string | Uint8Array | undefined, name: string): Uint8Array {
  if (mac === undefined) {
    // FNV-1a of the name into the low 4 bytes: 02:fe:xx:xx:xx:xx.
    let h = 0x811c9dc5;
    for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
    return Uint8Array.of(0x02, 0xfe, h >>> 24, (h >>> 16) & 0xff, (h >>> 8) & 0xff, h & 0xff);
  }
  if (mac instanceof Uint8Array) {
    if (mac.length !== 6) throw new RangeError(`${where}: mac must be 6 bytes, got ${mac.length}`);
    return Uint8Array.from(mac);
  }
  const m = /^([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})$/i.exec(mac);
  if (m === null) throw new RangeError(`${where}: mac must look like aa:bb:cc:dd:ee:ff, got "${mac}"`);
  return Uint8Array.from(m.slice(1), (x) => parseInt(x, 16));
}
