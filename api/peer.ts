/**
 * Who is on the other end of a loopback TCP connection: the uid that owns the client's socket,
 * from the kernel's socket table (/proc/net/tcp and tcp6, the `uid` column of the entry whose
 * local address and port are the connection's remote ones), as identd answers it. The kernel
 * writes that column from the socket's creator: a process cannot claim another user's uid.
 * Works for connections from this network namespace (a loopback peer always is); anything else
 * is null (the caller then needs the API token).
 */
import { readFileSync } from 'node:fs';
import { endianness } from 'node:os';

const LE = endianness() === 'LE';

export interface Endpoints {
  localAddress?: string;
  localPort?: number;
  remoteAddress?: string;
  remotePort?: number;
}

/** "127.0.0.1", "::1", "::ffff:127.0.0.1" -> the 16 bytes of its IPv6 form (IPv4 mapped), or null. */
function ipBytes(addr: string): Uint8Array | null {
  const out = new Uint8Array(16);
  const v4 = /^(?:::ffff:)?(\d+)\.(\d+)\.(\d+)\.(\d+)$/i.exec(addr);
  if (v4) {
    out[10] = out[11] = 0xff;
    for (let k = 0; k < 4; k++) out[12 + k] = Number(v4[k + 1]);
    return out;
  }
  const [head, tail] = addr.split('::') as [string, string | undefined];
  if (addr.split('::').length > 2) return null;
  const hs = head === '' ? [] : head.split(':');
  const ts = tail === undefined || tail === '' ? [] : tail.split(':');
  if (tail === undefined && hs.length !== 8) return null;
  const groups = [...hs, ...new Array<string>(8 - hs.length - ts.length).fill('0'), ...ts];
  if (groups.length !== 8) return null;
  for (let k = 0; k < 8; k++) {
    const g = parseInt(groups[k], 16);
    if (!/^[0-9a-f]{1,4}$/i.test(groups[k]) || !(g >= 0)) return null;
    out[2 * k] = g >> 8;
    out[2 * k + 1] = g & 0xff;
  }
  return out;
}

/**
 * A /proc/net/tcp{,6} address column ("0100007F:1F90": the address as the kernel's u32 words in
 * host order, then the port in hex) -> the 16 bytes of its IPv6 form and the port.
 */
function procAddress(col: string, v6: boolean): { ip: Uint8Array; port: number } | null {
  const [hex, port] = col.split(':');
  if (hex === undefined || port === undefined) return null;
  const words = v6 ? 4 : 1;
  if (hex.length !== 8 * words) return null;
  const raw = new Uint8Array(4 * words);
  for (let w = 0; w < words; w++) {
    // Each u32 printed as %08X of its host-order value: on little-endian hosts the bytes reverse.
    new DataView(raw.buffer).setUint32(4 * w, parseInt(hex.slice(8 * w, 8 * w + 8), 16), LE);
  }
  let ip = raw;
  if (!v6) {
    ip = new Uint8Array(16);
    ip[10] = ip[11] = 0xff;
    ip.set(raw, 12);
  }
  return { ip, port: parseInt(port, 16) };
}

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, k) => x === b[k]);

/**
 * The uid owning the client end of the TCP connection `c` (seen from the server), or null when
 * it is not in this namespace's table (not local, or gone). One read of the tables per call.
 */
export function tcpPeerUid(c: Endpoints, tables = ['/proc/net/tcp', '/proc/net/tcp6']): number | null {
  if (c.remoteAddress === undefined || c.remotePort === undefined) return null;
  if (c.localAddress === undefined || c.localPort === undefined) return null;
  const peer = ipBytes(c.remoteAddress),
    me = ipBytes(c.localAddress);
  if (peer === null || me === null) return null;
  for (const table of tables) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    const v6 = table.endsWith('6');
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
      const col = line.trim().split(/\s+/);
      if (col.length < 8) continue;
      const local = procAddress(col[1], v6),
        rem = procAddress(col[2], v6);
      if (local === null || rem === null) continue;
      if (local.port !== c.remotePort || rem.port !== c.localPort) continue;
      if (!same(local.ip, peer) || !same(rem.ip, me)) continue;
      const uid = Number(col[7]);
      return Number.isInteger(uid) && uid >= 0 ? uid : null;
    }
  }
  return null;
}
