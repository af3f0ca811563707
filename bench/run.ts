/**
 * npm run bench [-- <name...>] [--json] [--seconds N]
 * npm run bench -- compare REF [<name...>] [--rounds N] [--seconds N] [--keep] (bench/compare.ts)
 * Benchmarks print figures and compare with baselines measured in the same run; they assert
 * nothing. Names: graph, l2l4, af_packet (root: veth pair in a network namespace), rdma, memif
 * (root: dpdk-testpmd), dpdk (root: dpdk.node and dpdk-testpmd), perftest (perftest through
 * librdmagraph-verbs.so; iperf3 and sockperf baselines, iperf3's needs root), soak (RSS of a
 * daemon at start-up, with 1024 QPs and over SOAK_SECONDS (default 600) of traffic; not in the
 * default set: name it), mlx5 (two ConnectX ports named by RDMA_GRAPH_HW_A/B; says why not), workers
 * (cpu.workers 0/1/2: WRITE bandwidth over two interfaces, the API's latency under load, the memif
 * spine with a queue pair per worker), hostile (the per-frame cost of seeded hostile frames on one
 * stack, p50/p99/p99.9/max and the 5 slowest, against good frames on the same stack: a ping, an
 * in-window Write and Send; hostile p99 / good p50), incast (root; only when named: 2 senders x 4
 * QPs into one receiver through a tbf bottleneck between network namespaces, beside iperf3), mpi
 * (root; only when named: Open MPI ping-pong 8 B latency and 1 MiB bandwidth, and UCX UCP tag_lat, over rdma-graph
 * between two daemons in two network namespaces vs the kernel's TCP between the same namespaces).
 */
import os from 'node:os';
import { clockReadNs, graphBreakdown, type GraphBenchResult, runGraphBench } from './graph-bench.ts';
import { runAfPacketBench } from './af-packet-bench.ts';
import { runL2l4Bench } from './l2l4.ts';
import { runRdmaBench } from './rdma.ts';
import { runMemifBench } from './memif-bench.ts';
import { runDpdkBench } from './dpdk-bench.ts';
import { runPerftestBench } from './perftest.ts';
import { runSoakBench } from './soak.ts';
import { runMlx5Bench } from './mlx5.ts';
import { runWorkersBench } from './workers.ts';
import { runHostileBench } from './hostile.ts';
import { runIncastBench } from './incast.ts';
import { runMpiBench } from './mpi.ts';
import { parseCompareArgs, runCompare } from './compare.ts';

const args = process.argv.slice(2);
const known = [
  'graph',
  'l2l4',
  'af_packet',
  'rdma',
  'memif',
  'dpdk',
  'perftest',
  'soak',
  'mlx5',
  'workers',
  'hostile',
  'incast',
  'mpi',
];
if (args[0] === 'compare') {
  // npm run bench -- compare REF [bench ...]: bench/compare.ts.
  try {
    await runCompare(parseCompareArgs(args.slice(1), known));
    process.exit(0);
  } catch (e) {
    console.error((e as Error).message);
    process.exit(2);
  }
}
const json = args.includes('--json');
const si = args.indexOf('--seconds');
const seconds = si >= 0 ? Number(args[si + 1]) : 2;
if (!(seconds > 0)) {
  console.error(`bench: --seconds needs a positive number, got "${args[si + 1]}"`);
  process.exit(2);
}
const names = args.filter((a, i) => !a.startsWith('--') && !(si >= 0 && i === si + 1));
for (const n of names) {
  if (!known.includes(n)) {
    console.error(`bench: unknown benchmark "${n}" (known: ${known.join(', ')})`);
    process.exit(2);
  }
}
const run = names.length ? names : known.filter((n) => n !== 'soak' && n !== 'incast' && n !== 'mpi');
// The machine first: figures mean little without it (a busy-polling benchmark on 2 cores competes with itself).
const cpus = os.cpus();
if (!json) console.log(`machine: ${cpus.length} cores, ${cpus[0]?.model ?? 'unknown CPU'}, Node ${process.version}`);

for (const name of run) {
  if (name === 'graph') {
    const direct = await runGraphBench({ seconds });
    const sched = await runGraphBench({ seconds, loop: 'scheduler' });
    const closures = await runGraphBench({ seconds, style: 'closure' });
    // The breakdown compares three graphs: run alternately, 3 rounds, medians (this machine's
    // speed changes between seconds).
    const trios: (GraphBenchResult & { text: string })[][] = [[], [], []];
    for (let r = 0; r < 3; r++) {
      trios[0].push(await runGraphBench({ seconds: seconds / 3 }));
      trios[1].push(await runGraphBench({ seconds: seconds / 3, style: 'bare' }));
      trios[2].push(await runGraphBench({ seconds: seconds / 3, chain: 0 }));
    }
    const [full, bare, ends] = trios.map((t) => t.sort((a, b) => a.nsPerPacket - b.nsPerPacket)[1]);
    const where = graphBreakdown(full, bare, ends, clockReadNs());
    if (!json) {
      console.log(direct.text);
      console.log(sched.text.split('\n').slice(0, 3).join('\n'));
      console.log(closures.text.split('\n').slice(0, 3).join('\n'));
      for (const t of [full, bare, ends]) console.log(t.text.split('\n').slice(0, 2).join('\n'));
      console.log(where.text);
      console.log(
        `  target: <= 3 ns/packet/node; event-loop scheduling costs ${(100 * (1 - sched.mpps / direct.mpps)).toFixed(1)} % of direct dispatch; ` +
          `nodes as closures of one literal cost x${(closures.nsPerPacketPerNode / direct.nsPerPacketPerNode).toFixed(2)} per packet per node`,
      );
    } else {
      console.log(direct.text.split('\n').slice(0, 3).join('\n'));
      console.log(sched.text.split('\n').slice(0, 3).join('\n'));
    }
    if (json)
      console.log(
        JSON.stringify({
          bench: 'graph',
          mpps: round(direct.mpps),
          nsPerPacketPerNode: round(direct.nsPerPacketPerNode),
          nodeLoopNs: round(where.nodeLoopNs),
          engineNsPerNode: round(where.engineNs),
          allocFreeNsPerPacket: round(where.allocFreeNs),
          vector: direct.vector,
        }),
      );
  }
  if (name === 'l2l4') {
    for (const size of [18, 1000]) {
      const r = await runL2l4Bench({ seconds, size });
      console.log(
        json ? JSON.stringify({ bench: 'l2l4', payload: size, mpps: round(r.mpps), perNode: r.perNode }) : r.text,
      );
    }
  }
  if (name === 'rdma') {
    const r = await runRdmaBench({ seconds });
    console.log(json ? JSON.stringify(r.json) : r.text);
  }
  if (name === 'memif') {
    const r = await runMemifBench({ seconds });
    // Always ends with its JSON line (the text above it when not --json).
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'dpdk') {
    const r = await runDpdkBench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'soak') {
    const r = await runSoakBench();
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'perftest') {
    const r = await runPerftestBench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'workers') {
    const r = await runWorkersBench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'mlx5') {
    const r = await runMlx5Bench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'af_packet') {
    const r = await runAfPacketBench({ seconds });
    console.log(json ? JSON.stringify(r.json) : r.text);
  }
  if (name === 'hostile') {
    const r = runHostileBench({ seconds });
    console.log(json ? JSON.stringify(r.json) : r.text);
  }
  if (name === 'incast') {
    const r = await runIncastBench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
  if (name === 'mpi') {
    const r = await runMpiBench({ seconds });
    if (!json) console.log(r.text);
    console.log(JSON.stringify(r.json));
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
