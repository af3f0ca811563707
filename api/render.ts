/**
 * rdmactl's tables for what graph/format.ts does not cover, in VPP's CLI layout:
 *
 *   show interfaces   VPP `show interface` (format_vnet_sw_interface: `%=32s%=5s%=10s%=21s%=16s%=16s`
 *                     header, counters one per line as `%-16s%16d` indented to the Counter column,
 *                     only the non-zero ones)
 *   show neighbors    VPP `show ip neighbors` (`%=12s%=40s%=6s%=20s%=24s`: Time IP Flags Ethernet Interface;
 *                     flags S static, D dynamic, P pending)
 *   show qps          one row per QP in the same fixed-width style (our own table: VPP has no QPs)
 *   show listeners, show completions
 *
 * Pure functions over the API's JSON views; every line ends with '\n'.
 */
import { vppFormat } from '../graph/format.ts';
import type {
  Completion,
  InterfaceView,
  ListenerView,
  NeighborView,
  QpView,
  RxPlacementView,
} from '../dataplane/views.ts';

const IF_HEADER = '%=32s%=5s%=10s%=21s%=16s%=16s';
const IF_ROW = '%-32s%=5d%=10s%=21s';
const COUNTER = '%-16s%16d';
const COUNTER_INDENT = 32 + 5 + 10 + 21;

export function formatInterfaces(views: InterfaceView[]): string {
  let out = vppFormat(IF_HEADER, 'Name', 'Idx', 'State', 'MTU (L3/IP4/IP6/MPLS)', 'Counter', 'Count') + '\n';
  for (const v of [...views].sort((a, b) => a.index - b.index)) {
    const c = v.counters;
    const counters: [string, number][] = [
      ['rx packets', c.rxPackets],
      ['rx bytes', c.rxBytes],
      ['tx packets', c.txPackets],
      ['tx bytes', c.txBytes],
      ['drops', c.rxDrops + c.txDrops],
      ['tx held', c.txHeld],
      ['rx-error', c.rxErrors],
      ['tx-error', c.txErrors],
    ];
    const shown = counters.filter(([, n]) => n !== 0);
    const row = vppFormat(IF_ROW, v.name, v.index, v.state, `${v.mtu}/0/0/0`);
    if (shown.length === 0) {
      out += row + '\n';
      continue;
    }
    shown.forEach(([name, n], i) => {
      out += (i === 0 ? row : ' '.repeat(COUNTER_INDENT)) + vppFormat(COUNTER, name, n) + '\n';
    });
  }
  return out;
}

/** `show interface addr`: name (state) and its addresses, as VPP prints it. */
export function formatInterfaceAddresses(views: InterfaceView[]): string {
  let out = '';
  for (const v of views) {
    out += `${v.name} (${v.state}):\n`;
    out += `  L2 address ${v.mac} driver ${v.driver}\n`;
    for (const a of v.addresses) out += `  L3 ${a}\n`;
    if (v.gateway) out += `  gateway ${v.gateway}\n`;
    for (const g of v.groups) out += `  multicast ${g.group} (${g.users} QP${g.users === 1 ? '' : 's'})\n`;
  }
  return out;
}

const NEIGH_HEADER = '%=12s%=40s%=6s%=20s%=24s';
const NEIGH_ROW = '%=12.4f%=40s%=6s%=20s%s';

function neighborFlags(state: string): string {
  if (state === 'static') return 'S';
  if (state === 'incomplete' || state === 'pending' || state === 'probe') return 'P';
  return 'D';
}

/** VPP's `show interface rx-placement`: per thread, per input node, each interface queue and its mode. */
export function formatRxPlacement(threads: RxPlacementView[]): string {
  let out = '';
  for (const t of threads) {
    out += `Thread ${t.index} (${t.name}):\n`;
    for (const n of t.nodes) {
      out += `  node ${n.node}:\n`;
      for (const q of n.queues) out += `    ${q.interface} queue ${q.queue} (${q.mode})\n`;
    }
  }
  return out;
}

export function formatNeighbors(views: NeighborView[]): string {
  let out = vppFormat(NEIGH_HEADER, 'Time', 'IP', 'Flags', 'Ethernet', 'Interface') + '\n';
  for (const n of views)
    out += vppFormat(NEIGH_ROW, n.age, n.address, neighborFlags(n.state), n.mac ?? '', n.interface) + '\n';
  return out;
}

const QP_HEADER = '%=8s%=8s%=22s%=22s%=11s%=14s%=14s%=10s%=12s  %s';
const QP_ROW = '%=8d%=8s%=22s%=22s%=11s%14d%14d%10d%12.1f  %s';

function endpoint(e: { ip: string; port: number } | null): string {
  return e === null ? '-' : `${e.ip}:${e.port}`;
}

export function formatQps(views: QpView[]): string {
  let out =
    vppFormat(
      QP_HEADER,
      'QPN',
      'State',
      'Local',
      'Remote',
      'SQ/RQ',
      'Tx-packets',
      'Rx-packets',
      'Retrans',
      'SRTT-us',
      'Owner',
    ) + '\n';
  for (const q of [...views].sort((a, b) => a.qpn - b.qpn)) {
    out +=
      vppFormat(
        QP_ROW,
        q.qpn,
        q.state,
        endpoint(q.local),
        endpoint(q.remote),
        `${q.sqOutstanding}/${q.srq === null ? q.rqPosted : `srq${q.srq}`}`,
        q.counters.txPackets,
        q.counters.rxPackets,
        q.counters.retransmits,
        q.rtt.srttUs,
        q.owner ?? '-',
      ) + '\n';
  }
  return out;
}

/** `show qp N`: every field of one QP, one per line. */
export function formatQp(q: QpView): string {
  const lines = [
    `qp ${q.qpn}: ${q.type === 'ud' ? `UD (qkey 0x${(q.qkey ?? 0).toString(16)}), ` : ''}state ${q.state}, local ${endpoint(q.local)}, remote ${endpoint(q.remote)}${q.listener === null ? '' : `, accepted by listener ${q.listener}`}`,
    `  psn ${q.psn} (initial send PSN: a manual connect of the peer needs it)`,
    `  pd ${q.pd} send-cq ${q.sendCq} recv-cq ${q.recvCq} srq ${q.srq ?? '-'}${q.owner === null ? '' : ` owner ${q.owner}`}`,
    `  ird ${q.ird} ord ${q.ord} max-send-wr ${q.maxSendWr} max-recv-wr ${q.maxRecvWr} max-sge ${q.maxSge} max-inline ${q.maxInline} segment-size ${q.segmentSize}`,
    `  sq outstanding ${q.sqOutstanding} rq posted ${q.rqPosted}${q.multicast.length > 0 ? ` multicast ${q.multicast.join(' ')}` : ''}`,
    `  tx ${q.counters.txPackets} packets ${q.counters.txBytes} bytes, rx ${q.counters.rxPackets} packets ${q.counters.rxBytes} bytes`,
    `  retransmits ${q.counters.retransmits} (fast ${q.counters.fastRetransmits}) timeouts ${q.counters.timeouts} (spurious ${q.counters.spuriousTimeouts}, probes ${q.counters.probes}) duplicates ${q.counters.duplicates}`,
    `  srtt ${q.rtt.srttUs.toFixed(1)} us rttvar ${q.rtt.rttvarUs.toFixed(1)} us rto ${q.rtt.rtoUs.toFixed(1)} us`,
    `  congestion ${q.congestion.algorithm} cwnd ${q.congestion.cwnd} ssthresh ${q.congestion.ssthresh.toFixed(1)} alpha ${q.congestion.alpha.toFixed(3)}`,
    `  ce marks ${q.congestion.ceMarks} (echoed by the peer) received ${q.congestion.ceReceived}, losses ${q.congestion.losses}, reductions ${q.congestion.lossReductions} (loss) ${q.congestion.ecnReductions} (ecn) ${q.congestion.delayReductions} (delay), HyStart++ exits ${q.congestion.hystartExits}${q.congestion.fullQueueRttUs > 0 ? `, full-queue RTT ${q.congestion.fullQueueRttUs.toFixed(1)} us` : ''}`,
  ];
  return lines.join('\n') + '\n';
}

const L_HEADER = '%=8s%=6s%=10s%=10s%=6s%=12s%=12s%=10s  %s';
const L_ROW = '%=8d%=6d%=10d%=10d%=6s%=12d%=12d%=10d  %s';

export function formatListeners(views: ListenerView[]): string {
  let out =
    vppFormat(L_HEADER, 'Port', 'PD', 'Send-CQ', 'Recv-CQ', 'SRQ', 'Max-send', 'Max-recv', 'Requests', 'Accepted QPs') +
    '\n';
  for (const l of views) {
    out +=
      vppFormat(
        L_ROW,
        l.port,
        l.pd,
        l.sendCq,
        l.recvCq,
        l.srq === null ? '-' : String(l.srq),
        l.maxSendWr,
        l.maxRecvWr,
        l.requests,
        l.accepted.join(' ') || '-',
      ) + '\n';
  }
  return out;
}

/** Completions one per line, the fields that are set. */
export function formatCompletions(cs: Completion[]): string {
  let out = '';
  for (const c of cs) {
    let line = `wr-id ${JSON.stringify(c.wrId)} qpn ${c.qpn} ${c.opcode} ${c.status} byte-len ${c.byteLen}`;
    if (c.imm !== undefined) line += ` imm ${c.imm}`;
    if (c.invalidatedStag !== undefined) line += ` invalidated-stag 0x${c.invalidatedStag.toString(16)}`;
    if (c.solicited) line += ' solicited';
    if (c.srcQp !== undefined) line += ` src-qp ${c.srcQp}`;
    out += line + '\n';
  }
  return out;
}
