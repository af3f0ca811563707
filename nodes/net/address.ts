/**
 * Link and network addresses as the nodes and the control plane handle them: MACs as 6 bytes or
 * as a (hi 32, lo 16) pair of numbers the nodes compare without allocating, IPv4 addresses as
 * u32 in host order. Parsers throw a RangeError naming where the value came from; formatters
 * allocate (control plane and trace formatters only).
 */

/** "aa:bb:cc:dd:ee:ff" (or '-' separated) or 6 bytes -> 6 bytes. */
export function parseMac(mac: string | Uint8Array, where = 'mac'): Uint8Array {
  if (mac instanceof Uint8Array) {
    if (mac.length !== 6) throw new RangeError(`${where}: a MAC address is 6 bytes, got ${mac.length}`);
    return Uint8Array.from(mac);
  }
  const m =
    /^([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})[:-]([0-9a-f]{2})$/i.exec(mac);
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

/**
 * The project's one IPv4 parser (config/formats.ts uses it too): four decimal numbers 0..255,
 * no leading zeros ("010.0.0.1" is 8.0.0.1 to inet_aton, 10.0.0.1 to others: refused as
 * ambiguous). "10.0.0.1" -> u32 (host order), or why not.
 */
export function ip4OrWhy(s: string): number | string {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s);
  if (m === null) return `"${s}" is not a dotted-quad IPv4 address`;
  let a = 0;
  for (let i = 1; i <= 4; i++) {
    const part = m[i];
    if (part.length > 1 && part[0] === '0')
      return `"${s}" is not a dotted-quad IPv4 address (${part} has a leading zero: octal to some parsers)`;
    const b = Number(part);
    if (b > 255) return `"${s}" is not a dotted-quad IPv4 address (${b} > 255)`;
    a = a * 256 + b;
  }
  return a;
}

/** "10.0.0.1" -> u32 (host order), or null (ip4OrWhy). */
export function ip4OrNull(s: string): number | null {
  const r = ip4OrWhy(s);
  return typeof r === 'number' ? r : null;
}

/** "10.0.0.1" -> u32 (host order). Throws a RangeError naming `where` on anything else (ip4OrWhy). */
export function parseIp4(s: string, where = 'address'): number {
  const r = ip4OrWhy(s);
  if (typeof r === 'string') throw new RangeError(`${where}: ${r}`);
  return r;
}

/** "10.0.0.1/24" -> { address, prefix }; a bare address means /32. */
export function parseIp4Prefix(s: string, where = 'address'): { address: number; prefix: number } {
  const slash = s.indexOf('/');
  if (slash < 0) return { address: parseIp4(s, where), prefix: 32 };
  const p = s.slice(slash + 1);
  const prefix = /^\d{1,2}$/.test(p) ? Number(p) : -1;
  if (prefix < 0 || prefix > 32) throw new RangeError(`${where}: prefix length in "${s}" must be 0..32`);
  return { address: parseIp4(s.slice(0, slash), where), prefix };
}

/** u32 -> "10.0.0.1". Allocates: control plane and trace formatters only. */
export function formatIp4(a: number): string {
  return `${a >>> 24}.${(a >>> 16) & 0xff}.${(a >>> 8) & 0xff}.${a & 0xff}`;
}

/** Netmask of a prefix length, as u32. */
export function prefixMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** 224.0.0.0/4 */
export function isIp4Multicast(a: number): boolean {
  return a >>> 28 === 0xe;
}
