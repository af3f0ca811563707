/**
 * npm run bench -- mlx5: rx and tx Mpps of the ibverbs and mlx5dv drivers between two NIC
 * ports on one segment (RDMA_GRAPH_HW_A transmits 64-byte frames to RDMA_GRAPH_HW_B as fast as
 * its send queue takes them; B receives), both in this process, no graph: the drivers alone.
 * Without an mlx5 device or the two ports it prints why it did not run (never run on the
 * machines this was written on: they have no RDMA device).
 */
import { memPool } from '../test/helpers.ts';
import { VerbsDriver } from '../drivers/ibverbs.ts';
import { verbsAddon } from '../drivers/ibverbs-addon.ts';
import { nowNs } from '../graph/clock.ts';

export interface Mlx5BenchResult {
  text: string;
  json: Record<string, unknown>;
}

function notRun(): string | null {
  let list;
  try {
    list = verbsAddon().devices();
  } catch (e) {
    return `ibverbs.node is not built (${(e as Error).message})`;
  }
  if (list.error !== null) return `no mlx5 device (ibv_get_device_list: ${list.error})`;
  if (!list.devices.some((d) => d.mlx5)) return 'no mlx5 device';
  if (!process.env.RDMA_GRAPH_HW_A || !process.env.RDMA_GRAPH_HW_B)
    return 'set RDMA_GRAPH_HW_A and RDMA_GRAPH_HW_B to two kernel interfaces of mlx5 ports on one segment';
  return null;
}

async function one(mode: 'ibverbs' | 'mlx5dv', seconds: number): Promise<{ tx: number; rx: number }> {
  const mac = (b: number) => `02:fe:00:00:77:0${b}`;
  const mk = (name: string, hostInterface: string, m: string) =>
    new VerbsDriver(name, {
      mode,
      device: null,
      hostInterface,
      port: 1,
      promisc: false,
      mac: m,
      mtu: 1500,
      rxQueues: 1,
      txQueues: 1,
      rxQueueSize: 4096,
      txQueueSize: 4096,
    });
  const a = mk('hwa', process.env.RDMA_GRAPH_HW_A!, mac(1));
  const b = mk('hwb', process.env.RDMA_GRAPH_HW_B!, mac(2));
  const pa = memPool(65536, 2048),
    pb = memPool(65536, 2048);
  a.open(pa);
  b.open(pb);
  try {
    // A 64-byte frame (60 + FCS) to B: Ethernet, IPv4, UDP to port 9.
    const frame = new Uint8Array(60);
    frame.set(b.mac, 0);
    frame.set(a.mac, 6);
    frame.set(
      [0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2, 0x13, 0x88, 0, 9, 0, 26],
      12,
    );
    const burst = new Uint32Array(256),
      rx = new Uint32Array(256);
    let tx = 0,
      got = 0;
    const end = nowNs() + seconds * 1e9;
    while (nowNs() < end) {
      const n = pa.alloc(burst, 0, 256);
      for (let i = 0; i < n; i++) {
        const o = pa.dataStart(burst[i]);
        pa.u8.set(frame, o);
        pa.offset[burst[i]] = o;
        pa.length[burst[i]] = 60;
      }
      const sent = a.txBurst(0, burst, 0, n);
      if (sent < n) pa.free(burst, sent, n - sent);
      tx += sent;
      const r = b.rxBurst(0, rx, 256);
      got += r;
      pb.free(rx, 0, r);
      if ((tx & 0xffff) < 256) await new Promise((res) => setImmediate(res));
    }
    return { tx: tx / seconds / 1e6, rx: got / seconds / 1e6 };
  } finally {
    a.close();
    b.close();
  }
}

export async function runMlx5Bench(opts: { seconds: number }): Promise<Mlx5BenchResult> {
  const why = notRun();
  if (why !== null) return { text: `mlx5: not run: ${why}`, json: { bench: 'mlx5', notRun: why } };
  const lines = [
    `mlx5: 64-byte frames ${process.env.RDMA_GRAPH_HW_A} -> ${process.env.RDMA_GRAPH_HW_B}, drivers only (no graph)`,
  ];
  const json: Record<string, unknown> = { bench: 'mlx5' };
  for (const mode of ['ibverbs', 'mlx5dv'] as const) {
    const r = await one(mode, opts.seconds);
    lines.push(`  ${mode.padEnd(8)} tx ${r.tx.toFixed(2)} Mpps, rx ${r.rx.toFixed(2)} Mpps`);
    json[mode] = { txMpps: +r.tx.toFixed(3), rxMpps: +r.rx.toFixed(3) };
  }
  return { text: lines.join('\n'), json };
}
