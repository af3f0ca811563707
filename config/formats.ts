/**
 * The string formats of the start-up configuration: IPv4 addresses and prefixes, MAC addresses,
 * `host:port`, interface names. Each `check*` returns what is wrong with a value (the WHAT of a
 * config issue, config/load.ts adds the path and what was expected) or undefined when it is fine.
 */
import { readFileSync } from 'node:fs';
import { formatIp4, ip4OrNull } from '../nodes/net/address.ts';
import { isIPv6 } from 'node:net';

/** "a.b.c.d" -> u32, or null (decimal, no leading zeros): the project's one IPv4 parser, nodes/net/address.ts. */
export const parseIp4 = ip4OrNull;
export { formatIp4 };

/** An interface address "a.b.c.d/N" taken apart. */
export interface Ip4Prefix {
  addr: number;
  prefix: number;
  network: number;
  broadcast: number;
}

/** "a.b.c.d/N" with N in 0..32, or null. */
export function parseIp4Prefix(s: string): Ip4Prefix | null {
  const m = /^([^/]*)\/(0|[1-9]\d?)$/.exec(s);
  if (m === null) return null;
  const addr = parseIp4(m[1]);
  const prefix = Number(m[2]);
  if (addr === null || prefix > 32) return null;
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  const network = (addr & mask) >>> 0;
  return { addr, prefix, network, broadcast: (network | (~mask >>> 0)) >>> 0 };
}

/** "10.10.0.0/24": the subnet of an interface address. */
export function subnetText(p: Ip4Prefix): string {
  return `${formatIp4(p.network)}/${p.prefix}`;
}

export function inSubnet(p: Ip4Prefix, addr: number): boolean {
  return addr >= p.network && addr <= p.broadcast;
}

/**
 * Why `addr` cannot be a host of subnet `p` (its network or broadcast address; /31 and /32
 * have neither), or undefined.
 */
export function notAHost(p: Ip4Prefix, addr: number): string | undefined {
  if (p.prefix >= 31) return undefined;
  if (addr === p.network) return `the network address of ${subnetText(p)}`;
  if (addr === p.broadcast) return `the broadcast address of ${subnetText(p)}`;
  return undefined;
}

const q = (s: string) => JSON.stringify(s);

export function checkIp4(s: string): string | undefined {
  return parseIp4(s) === null ? `${q(s)} is not an IPv4 address` : undefined;
}

export function checkIp4Prefix(s: string): string | undefined {
  const m = /^(.*)\/(\d+)$/.exec(s);
  if (m === null || parseIp4(m[1]) === null) return `${q(s)} is not an IPv4 address with a prefix length`;
  const p = parseIp4Prefix(s);
  if (p === null) return `${q(s)} has a prefix length out of range`;
  const why = notAHost(p, p.addr);
  return why === undefined ? undefined : `${q(s)} is ${why}`;
}

/** Colon-separated, unicast, not all zeros. */
export function checkMac(s: string): string | undefined {
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(s)) return `${q(s)} is not a MAC address`;
  if (parseInt(s.slice(0, 2), 16) & 1) return `${q(s)} is a multicast address`;
  if (/^(00:){5}00$/.test(s)) return `${q(s)} is all zeros`;
  return undefined;
}

/** `host:port` taken apart ([v6] loses its brackets), or a string saying what is wrong. */
export function parseListen(s: string): { host: string; port: number } | string {
  const m = /^(\[[^\]]*\]|[^:[\]]*):(\d+)$/.exec(s);
  if (m === null) return `${q(s)} is not host:port`;
  let host = m[1];
  if (host.startsWith('[')) {
    host = host.slice(1, -1);
    if (!isIPv6(host)) return `${q(s)} has a host that is not an IPv4 address, localhost or [IPv6]`;
  } else if (host !== 'localhost' && parseIp4(host) === null) {
    return `${q(s)} has a host that is not an IPv4 address, localhost or [IPv6]`;
  }
  const port = Number(m[2]);
  if (m[2].length > 5 || port > 65535) return `${q(s)} has a port out of range`;
  return { host, port };
}

export function checkListen(s: string): string | undefined {
  const r = parseListen(s);
  return typeof r === 'string' ? r : undefined;
}

export const IFNAME = /^[a-z][a-z0-9_-]{0,31}$/;

export function checkIfName(s: string): string | undefined {
  return IFNAME.test(s) ? undefined : `${q(s)} is not a valid interface name`;
}

/** The RDMA device name's prefix, and its longest length (UCX's and the kernel's limit, IB_DEVICE_NAME_MAX - 1). */
export const RDMA_DEVICE_PREFIX = 'rg_';
export const RDMA_DEVICE_NAME_MAX = 15;

/**
 * The RDMA device name of interface `ifname` (dataplane/rdma-devices.ts): `rg_<ifname>` when it
 * fits 15 characters, else `rg_`, the first 6 characters, `-` and 5 upper-case hex digits of
 * the FNV-1a hash of the whole name. Interface names are lower case, so a hashed name is never
 * a short one.
 */
export function rdmaDeviceName(ifname: string): string {
  const room = RDMA_DEVICE_NAME_MAX - RDMA_DEVICE_PREFIX.length;
  if (ifname.length <= room) return RDMA_DEVICE_PREFIX + ifname;
  let h = 0x811c9dc5;
  for (const b of Buffer.from(ifname, 'utf8')) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  const tag = (h >>> 12).toString(16).toUpperCase().padStart(5, '0');
  return `${RDMA_DEVICE_PREFIX}${ifname.slice(0, room - 1 - tag.length)}-${tag}`;
}

/** A Linux network device name (dev_valid_name): no '/', ':' or white space, not "." or "..". */
export function checkHostIfName(s: string): string | undefined {
  return /[/:\s]/.test(s) || s === '.' || s === '..' ? `${q(s)} is not a Linux interface name` : undefined;
}

export function checkNoWhitespace(s: string): string | undefined {
  return /\s/.test(s) ? `${q(s)} contains white space` : undefined;
}

/** Whether `file` (/etc/passwd, /etc/group) has an entry named `name` (or with that id). */
function hasEntry(file: string, name: string): boolean {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return false;
  }
  return text.split('\n').some((l) => {
    const f = l.split(':');
    return f.length >= 3 && (f[0] === name || f[2] === name);
  });
}

/** A local user: a uid, or a name /etc/passwd has. */
export function checkLocalUser(s: string): string | undefined {
  if (/^[0-9]+$/.test(s)) return Number(s) <= 0xfffffffe ? undefined : `${q(s)} is not a uid`;
  return hasEntry('/etc/passwd', s) ? undefined : `${q(s)} is not a user of this host (/etc/passwd)`;
}

/** A local group: a name or gid /etc/group has. */
export function checkLocalGroup(s: string): string | undefined {
  return hasEntry('/etc/group', s) ? undefined : `${q(s)} is not a group of this host (/etc/group)`;
}
