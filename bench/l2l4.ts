/**
 * L2–L4 node cost: a UDP echo service driven at full speed with no driver in the way.
 *
 *   node --import tsx bench/l2l4.ts [--seconds N] [--size PAYLOAD] [--json]
 *
 * An input node fills 256 fresh buffers per pass with one 60-byte-class Ethernet/IPv4/UDP
 * frame (the copy a driver would do), the graph runs ethernet-input -> ip4-input (header
 * checksum verified) -> udp4-input (UDP checksum verified) -> udp-echo -> udp4-encap (UDP
 * checksum computed) -> ip4-rewrite (IPv4 header + checksum, neighbor lookup) -> a sink output
 * node that frees them. Prints packets per second and each node's ns per packet.
 */
import { Graph, FRAME_SIZE, type Frame, type NodeRuntime, NodeFlag, createPool } from '../graph/index.ts';
import { registerL2L4 } from '../nodes/netstack.ts';

export interface L2l4BenchResult {
  mpps: number;
  perNode: { name: string; nsPerPacket: number; vectorsPerCall: number }[];
  text: string;
}

function frameBytes(size: number): Uint8Array {
  const f = new Uint8Array(42 + size);
  const v = new DataView(f.buffer);
  f.set([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0]);
  v.setUint32(14, 0x45000000 | (28 + size));
  v.setUint32(18, 0x00014000);
  v.setUint32(22, 0x40110000);
  v.setUint32(26, 0x0a000002);
  v.setUint32(30, 0x0a000001);
  let s = 0;
  for (let i = 14; i < 34; i += 2) s += v.getUint16(i);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  v.setUint16(24, ~s & 0xffff);
  v.setUint16(34, 5000);
  v.setUint16(36, 7);
  v.setUint16(38, 8 + size);
  for (let i = 0; i < size; i++) f[42 + i] = i & 0xff;
  // UDP checksum over the pseudo-header and the datagram.
  s = 0x0a00 + 0x0002 + 0x0a00 + 0x0001 + 17 + 8 + size;
  for (let i = 34; i < 42 + size; i += 2) s += (f[i] << 8) | (i + 1 < f.length ? f[i + 1] : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  v.setUint16(40, ~s & 0xffff || 0xffff);
  return f;
}

export async function runL2l4Bench(opts: { seconds?: number; size?: number } = {}): Promise<L2l4BenchResult> {
  const seconds = opts.seconds ?? 2;
  const size = opts.size ?? 18;
  const pool = createPool({ count: 4096 });
  const g = new Graph({ pool });
  const net = registerL2L4(g);
  const tmpl = frameBytes(size);
  let sunk = 0;
  g.register({
    name: 'bench0-output',
    flags: NodeFlag.IS_OUTPUT,
    fn: (rt: NodeRuntime, fr: Frame | null) => {
      const f = fr as Frame;
      sunk += f.n;
      rt.graph.pool.free(f.vec, 0, f.n);
      return f.n;
    },
  });
  g.register({
    name: 'bench-input',
    type: 'input',
    next: ['ethernet-input'],
    fn: (rt: NodeRuntime) => {
      const out = rt.scratch;
      const n = pool.alloc(out, 0, FRAME_SIZE);
      const u8 = pool.u8,
        offset = pool.offset,
        length = pool.length,
        rxIf = pool.rxIf,
        len = tmpl.length;
      for (let i = 0; i < n; i++) {
        const bi = out[i];
        u8.set(tmpl, offset[bi]);
        length[bi] = len;
        rxIf[bi] = 1;
      }
      rt.graph.enqueueToSingleNext(rt, 0, out, 0, n);
      return n;
    },
  });
  net.addInterface({
    index: 1,
    name: 'bench0',
    mac: '02:00:00:00:00:01',
    address: '10.0.0.1/24',
    output: 'bench0-output',
    neighbors: [{ address: '10.0.0.2', mac: '02:00:00:00:00:02' }],
  });
  net.udp.bind(7, 'udp-echo');
  g.build();
  // Warm up, then measure.
  const warm = performance.now();
  while (performance.now() - warm < 300) g.runPass();
  g.clearRuntime();
  sunk = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) for (let k = 0; k < 64; k++) g.runPass();
  const dt = (performance.now() - t0) / 1000;
  const cpn = g.clock.clocksPerNs();
  const names = [
    'bench-input',
    'ethernet-input',
    'ip4-input',
    'udp4-input',
    'udp-echo',
    'udp4-encap',
    'ip4-rewrite',
    'bench0-output',
  ];
  const perNode = names.map((name) => {
    const c = g.nodeCounters(name);
    return {
      name,
      nsPerPacket: c.clocks / cpn / Math.max(c.vectors, 1),
      vectorsPerCall: c.vectors / Math.max(c.calls, 1),
    };
  });
  const mpps = sunk / dt / 1e6;
  const lines = [
    `l2l4: UDP echo, ${size}-byte payload (${tmpl.length}-byte frames), ${seconds} s: ${mpps.toFixed(2)} Mpps through the whole graph`,
    ...perNode.map(
      (p) =>
        `  ${p.name.padEnd(16)} ${p.nsPerPacket.toFixed(2).padStart(7)} ns/packet  ${p.vectorsPerCall.toFixed(1)} vectors/call`,
    ),
    `  (clock source ${g.clock.source}; bench-input includes the frame copy a driver does)`,
  ];
  g.close();
  return { mpps, perNode, text: lines.join('\n') };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const arg = (k: string) => {
    const i = args.indexOf(k);
    return i >= 0 ? Number(args[i + 1]) : undefined;
  };
  const r = await runL2l4Bench({ seconds: arg('--seconds'), size: arg('--size') });
  console.log(args.includes('--json') ? JSON.stringify({ bench: 'l2l4', mpps: r.mpps, perNode: r.perNode }) : r.text);
}
