/**
 * tshark as an independent decoder of what we put on the wire: nodes/rdma/trp.lua dissects the
 * TRP header and hands DDP segments to Wireshark's own iwarp_ddp_rdmap dissector (nodes/rdma/PROTOCOL.md
 * section 8). `decodeTrp` returns, per frame, the TRP fields, the DDP/RDMAP fields Wireshark
 * decoded, and every malformed marker and expert info, so tests can compare them with what was
 * built or sent. `writeUdpPcap` makes a capture from raw UDP payloads.
 *
 * Needs tshark with Lua (Debian 12: `apt-get install tshark`, 4.0.x). tshark runs with HOME and
 * its configuration folder pointed at an empty temporary folder, so a user's own preferences or
 * an installed copy of trp.lua in the personal plugins folder cannot change the verdict.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PcapWriter } from '../drivers/pcap-file.ts';
import { PEER_IP, PEER_MAC, US_IP, US_MAC, udpFrame } from './l2l4-helpers.ts';

/** The Lua dissector (nodes/rdma/trp.lua). */
export const TRP_LUA = fileURLToPath(new URL('../nodes/rdma/trp.lua', import.meta.url));

/**
 * nodes/rdma/PROTOCOL.md section 8: per-packet Send decoding (no reassembly), and no heuristic guesses at
 * Send payloads (RPC-over-RDMA and SMB Direct call every other payload malformed).
 */
export const TSHARK_TRP_PREFS = [
  '-o',
  'iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE',
  '--disable-protocol',
  'rpcordma',
  '--disable-protocol',
  'smb_direct',
];

const TSHARK_TIMEOUT_MS = 60_000;

export interface TrpHeader {
  psn: number;
  ack: number;
  /** The TRP opcode (the high 4 bits): 0 DATA/ACK, 1 REQ, 2 ACCEPT, 3 REJECT, 4 FIN, 5 SACK. */
  opcode: number;
  /** The low 12 bits of REQ, ACCEPT, REJECT, FIN (0 in DATA and SACK, whose low bits are `ceEcho`). */
  reserved: number;
  /** DATA and SACK: the CE echo (PROTOCOL.md section 5), the low 12 bits. */
  ceEcho?: number;
  /** SACK only: "[psn, ack)". */
  sack?: string;
  /** Opcode 0 without a DDP segment. */
  pureAck: boolean;
  /** rdma-graph's Send with Immediate (RDMAP opcode 12/13): the immediate. */
  sendImm?: number;
  /** REQ/ACCEPT/REJECT. `privateData` is lower-case hex ('' when there is none); a REJECT has `rejectReason` where the others have `ird`. */
  cm?: { pdlen: number; ird?: number; rejectReason?: number; ord: number; privateData: string };
}

export interface DdpHeader {
  tagged: boolean;
  last: boolean;
  /** The 4 reserved bits of the control byte. */
  rsvd: number;
  dv: number;
  /** Untagged: RsvdULP as Wireshark shows it (5 bytes hex, the RDMAP control byte included). */
  rsvdulp?: string;
  /** Tagged. */
  stag?: number;
  to?: bigint;
  /** Untagged. */
  qn?: number;
  msn?: number;
  mo?: number;
}

export interface TerminateFields {
  /** 0 RDMAP, 1 DDP, 2 LLP. */
  layer: number;
  etype: number;
  errcode: number;
  m: boolean;
  d: boolean;
  r: boolean;
  /** The 13 bits after hdrct. */
  rsvd: number;
  /** Present when D is set (Wireshark reads it only then). */
  ddpSegLen?: number;
  /** Hex. 14 bytes when etype is 1 (tagged buffer error), else 18: Wireshark's rule. */
  ddpHeader?: string;
  /** Hex, 28 bytes, when R is set. */
  rdmaHeader?: string;
}

export interface AtomicRequestFields {
  reserved: number;
  /** 0 FetchAdd, 1 Swap, 2 CmpSwap. */
  opcode: number;
  requestId: number;
  stag: number;
  to: bigint;
  /** Wireshark 4.0 shows add data/mask for AOpCode 0, swap data/mask for 2, neither for 1. */
  addData?: bigint;
  addMask?: bigint;
  swapData?: bigint;
  swapMask?: bigint;
  /** Always shown; for AOpCode 1 these are the bytes at the swap data/mask position. */
  compareData?: bigint;
  compareMask?: bigint;
}

/**
 * The RDMAP fields Wireshark showed. A segment too short for its message lacks the fields past
 * its end (e.g. urdma's 24-byte Read Request has no `srcTo`), though the types say otherwise.
 */
export interface RdmapHeader {
  version: number;
  /** The 2 reserved bits of the control byte. */
  rsv: number;
  opcode: number;
  /** Untagged bytes 2..5 for Send, Send with SE, Read Request and Terminate (hex). */
  reserved?: string;
  invalidateStag?: number;
  readRequest?: { sinkStag: number; sinkTo: bigint; size: number; srcStag: number; srcTo: bigint };
  terminate?: TerminateFields;
  atomicRequest?: AtomicRequestFields;
  atomicResponse?: { requestId: number; originalValue: bigint };
}

export interface TrpExpert {
  severity: 'comment' | 'chat' | 'note' | 'warning' | 'error' | string;
  group: string;
  message: string;
}

export interface SidrDecoded {
  requestId: number;
  /** SIDR_REP's. */
  qkey?: number;
  status?: number;
  qpn?: number;
  pdlen: number;
  privateData: string;
}

export interface TrpDecoded {
  /** frame.number, from 1. */
  frame: number;
  /** frame.protocols split at ':' (e.g. [..., 'udp', 'urdma_trp', 'iwarp_ddp_rdmap', 'data']). */
  protocols: string[];
  /** The Info column. */
  info: string;
  trp?: TrpHeader;
  /** A UD datagram's header (TRP opcode 6), with its message as lower-case hex. */
  datagram?: { qkey: number; imm: number; flags: number; data: string };
  /** A datagram service request or answer (TRP opcodes 9 and 10): what trp.lua shows of it. */
  sidr?: SidrDecoded;
  ddp?: DdpHeader;
  rdmap?: RdmapHeader;
  /** The bytes Wireshark handed to its "data" dissector (payload of Send/Write/Read Response), hex. */
  payload?: string;
  /** Every `_ws.malformed` item ([] when none). */
  malformed: string[];
  /** Every expert info of the frame. */
  experts: TrpExpert[];
  /** All requested fields as tshark printed them, for anything not mapped above. */
  raw: Record<string, string[]>;
}

const TRP_FIELDS = [
  'trp.psn',
  'trp.ack',
  'trp.opcode',
  'trp.reserved',
  'trp.ce_echo',
  'trp.sack',
  'trp.pure_ack',
  'trp.cm.pdlen',
  'trp.cm.ird',
  'trp.cm.reject_reason',
  'trp.cm.ord',
  'trp.cm.private_data',
  'trp.send_imm',
  'trp.dg.qkey',
  'trp.dg.imm',
  'trp.dg.flags',
  'trp.dg.data',
  'trp.sidr.request_id',
  'trp.sidr.qkey',
  'trp.sidr.status',
  'trp.sidr.qpn',
];
const DDP_FIELDS = [
  'iwarp_ddp.tagged_flag',
  'iwarp_ddp.last_flag',
  'iwarp_ddp.rsvd',
  'iwarp_ddp.dv',
  'iwarp_ddp.rsvdulp',
  'iwarp_ddp.stag',
  'iwarp_ddp.tagged_offset',
  'iwarp_ddp.qn',
  'iwarp_ddp.msn',
  'iwarp_ddp.mo',
];
const R = 'iwarp_rdma.';
const RDMAP_FIELDS = [
  'version',
  'rsv',
  'opcode',
  'reserved',
  'inval_stag',
  'sinkstag',
  'sinkto',
  'rdmardsz',
  'srcstag',
  'srcto',
  'term_layer',
  'term_etype_rdma',
  'term_etype_ddp',
  'term_etype_llp',
  'term_etype',
  'term_errcode_rdma',
  'term_errcode_ddp_tagged',
  'term_errcode_ddp_untagged',
  'term_errcode_llp',
  'term_errcode',
  'term_hdrct_m',
  'hdrct_d',
  'hdrct_r',
  'term_rsvd',
  'term_ddp_seg_len',
  'term_ddp_h',
  'term_rdma_h',
  'atomic.reserved',
  'atomic.opcode',
  'atomic.request_identifier',
  'atomic.remote_stag',
  'atomic.remote_tagged_offset',
  'atomic.add_data',
  'atomic.add_mask',
  'atomic.swap_data',
  'atomic.swap_mask',
  'atomic.compare_data',
  'atomic.compare_mask',
  'atomic.original_request_identifier',
  'atomic.original_remote_data_value',
].map((f) => R + f);
const FIELDS = [
  'frame.number',
  'frame.protocols',
  '_ws.col.Info',
  ...TRP_FIELDS,
  ...DDP_FIELDS,
  ...RDMAP_FIELDS,
  'data.data',
  '_ws.malformed',
  '_ws.expert.severity',
  '_ws.expert.group',
  '_ws.expert.message',
];

// epan/proto.h
const SEVERITY: Record<number, string> = {
  0x00100000: 'comment',
  0x00200000: 'chat',
  0x00400000: 'note',
  0x00600000: 'warning',
  0x00800000: 'error',
};
const GROUP: Record<number, string> = {
  0x01000000: 'checksum',
  0x02000000: 'sequence',
  0x03000000: 'response-code',
  0x04000000: 'request-code',
  0x05000000: 'undecoded',
  0x06000000: 'reassemble',
  0x07000000: 'malformed',
  0x08000000: 'debug',
  0x09000000: 'protocol',
  0x0a000000: 'security',
  0x0b000000: 'comment',
  0x0c000000: 'decryption',
  0x0d000000: 'assumption',
  0x0e000000: 'deprecated',
};

let availability: string | null | undefined;

/** null when tshark can run the TRP dissector here, else why not (a reason to skip). */
export function tsharkAvailable(): string | null {
  if (availability !== undefined) return availability;
  availability = probe();
  return availability;
}

function probe(): string | null {
  if (!existsSync(TRP_LUA)) return `${TRP_LUA} is missing`;
  const v = spawnSync('tshark', ['--version'], { encoding: 'utf8', timeout: TSHARK_TIMEOUT_MS, env: tsharkEnv() });
  if (v.error)
    return (v.error as NodeJS.ErrnoException).code === 'ENOENT'
      ? 'tshark not installed (Debian package tshark)'
      : `tshark --version: ${v.error.message}`;
  if (v.status !== 0) return `tshark --version exited ${v.status}: ${v.stderr.trim()}`;
  if (!/with Lua/.test(v.stdout)) return 'this tshark is built without Lua';
  const p = spawnSync('tshark', ['-G', 'protocols'], {
    encoding: 'utf8',
    timeout: TSHARK_TIMEOUT_MS,
    maxBuffer: 64 << 20,
    env: tsharkEnv(),
  });
  if (p.status !== 0) return `tshark -G protocols exited ${p.status}: ${p.stderr.trim()}`;
  if (!/\tiwarp_ddp_rdmap$/m.test(p.stdout)) return 'this tshark has no iwarp_ddp_rdmap dissector';
  return null;
}

let home: string | null = null;

/** tshark's environment: an empty HOME and configuration folder (no personal prefs or plugins). */
export function tsharkEnv(): NodeJS.ProcessEnv {
  home ??= mkdtempSync(join(tmpdir(), 'tshark-home-'));
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, WIRESHARK_CONFIG_DIR: join(home, 'wireshark') };
  delete env.XDG_CONFIG_HOME;
  return env;
}

/** The tshark command line decodeTrp runs (also what a user types, minus -T/-e). */
export function tsharkTrpArgs(pcapFile: string, ports: number[]): string[] {
  if (ports.length === 0) throw new Error('decodeTrp: no UDP ports to decode as TRP');
  return [
    '-r',
    pcapFile,
    '-n',
    '-X',
    `lua_script:${TRP_LUA}`,
    ...ports.flatMap((p) => ['-d', `udp.port==${p},urdma_trp`]),
    ...TSHARK_TRP_PREFS,
  ];
}

/**
 * Decode every frame of `pcapFile`, UDP `ports` as TRP. Rejects with tshark's stderr when it
 * fails or takes longer than a minute.
 */
export function decodeTrp(pcapFile: string, ports: number[]): Promise<TrpDecoded[]> {
  const base = tsharkTrpArgs(pcapFile, ports);
  const args = [...base, '-T', 'json', ...FIELDS.flatMap((f) => ['-e', f])];
  return new Promise((resolve, reject) => {
    execFile(
      'tshark',
      args,
      { encoding: 'utf8', timeout: TSHARK_TIMEOUT_MS, maxBuffer: 256 << 20, env: tsharkEnv() },
      (err, stdout, stderr) => {
        // tshark says "Running as user root ..." on stderr; only a failure makes it worth showing.
        if (err) {
          const why = err.killed ? `timed out after ${TSHARK_TIMEOUT_MS / 1000} s` : `exited ${err.code ?? err.signal}`;
          const said = stderr
            .split('\n')
            .filter((l) => l.trim() && !/^Running as user/.test(l))
            .join('\n');
          reject(
            new Error(
              `tshark ${why}: ${said || '(no message)'}\n  command: tshark ${base.join(' ')} -T json -e <${FIELDS.length} fields>`,
            ),
          );
          return;
        }
        let rows: { _source: { layers: Record<string, string[]> } }[];
        try {
          rows = JSON.parse(stdout);
        } catch (e) {
          reject(
            new Error(`tshark printed no JSON (${(e as Error).message}): ${stdout.slice(0, 200)}\n${stderr.trim()}`),
          );
          return;
        }
        resolve(rows.map((r) => decodeRow(r._source.layers)));
      },
    );
  });
}

function decodeRow(l: Record<string, string[]>): TrpDecoded {
  const one = (f: string): string | undefined => l[f]?.[0];
  const u = (f: string): number | undefined => {
    const s = one(f);
    return s === undefined ? undefined : Number(s); // Number() reads "12" and "0x0c" alike
  };
  const u64 = (f: string): bigint | undefined => {
    const s = one(f);
    return s === undefined ? undefined : BigInt(s);
  };
  const bool = (f: string): boolean | undefined => {
    const s = one(f);
    return s === undefined
      ? undefined
      : s === '1' || /^true$/i.test(s) || (/^(0x)?[0-9a-f]+$/i.test(s) && Number(s) !== 0);
  };
  const hex = (f: string): string | undefined => one(f)?.replace(/:/g, '').toLowerCase();
  const need = (f: string): number => u(f) as number;

  const d: TrpDecoded = {
    frame: need('frame.number'),
    protocols: (one('frame.protocols') ?? '').split(':'),
    info: one('_ws.col.Info') ?? '',
    malformed: l['_ws.malformed'] ?? [],
    experts: (l['_ws.expert.severity'] ?? []).map((s, i) => ({
      severity: SEVERITY[Number(s)] ?? s,
      group: GROUP[Number(l['_ws.expert.group']?.[i])] ?? String(l['_ws.expert.group']?.[i]),
      message: l['_ws.expert.message']?.[i] ?? '',
    })),
    raw: l,
  };
  if (l['trp.psn']) {
    d.trp = {
      psn: need('trp.psn'),
      ack: need('trp.ack'),
      opcode: need('trp.opcode'),
      reserved: l['trp.reserved'] ? need('trp.reserved') : 0,
      pureAck: bool('trp.pure_ack') ?? false,
    };
    if (l['trp.ce_echo']) d.trp.ceEcho = need('trp.ce_echo');
    if (l['trp.sack']) d.trp.sack = one('trp.sack');
    if (l['trp.send_imm']) d.trp.sendImm = need('trp.send_imm');
    if (l['trp.cm.pdlen'])
      d.trp.cm = {
        pdlen: need('trp.cm.pdlen'),
        ...(l['trp.cm.reject_reason'] ? { rejectReason: need('trp.cm.reject_reason') } : { ird: need('trp.cm.ird') }),
        ord: need('trp.cm.ord'),
        privateData: hex('trp.cm.private_data') ?? '',
      };
  }
  if (l['trp.dg.qkey'])
    d.datagram = {
      qkey: need('trp.dg.qkey'),
      imm: need('trp.dg.imm'),
      flags: need('trp.dg.flags'),
      data: hex('trp.dg.data') ?? '',
    };
  if (l['trp.sidr.request_id'])
    d.sidr = {
      requestId: need('trp.sidr.request_id'),
      ...(l['trp.sidr.qkey']
        ? { qkey: need('trp.sidr.qkey'), status: need('trp.sidr.status'), qpn: need('trp.sidr.qpn') }
        : {}),
      pdlen: need('trp.cm.pdlen'),
      privateData: hex('trp.cm.private_data') ?? '',
    };
  if (l['iwarp_ddp.tagged_flag']) {
    d.ddp = {
      tagged: bool('iwarp_ddp.tagged_flag')!,
      last: bool('iwarp_ddp.last_flag')!,
      rsvd: need('iwarp_ddp.rsvd'),
      dv: need('iwarp_ddp.dv'),
    };
    if (d.ddp.tagged) put(d.ddp, { stag: u('iwarp_ddp.stag'), to: u64('iwarp_ddp.tagged_offset') });
    else
      put(d.ddp, {
        rsvdulp: hex('iwarp_ddp.rsvdulp'),
        qn: u('iwarp_ddp.qn'),
        msn: u('iwarp_ddp.msn'),
        mo: u('iwarp_ddp.mo'),
      });
  }
  if (l[`${R}opcode`]) {
    const rd: RdmapHeader = { version: need(`${R}version`), rsv: need(`${R}rsv`), opcode: need(`${R}opcode`) };
    if (l[`${R}reserved`]) rd.reserved = hex(`${R}reserved`);
    if (l[`${R}inval_stag`]) rd.invalidateStag = u(`${R}inval_stag`);
    if (l[`${R}sinkstag`]) {
      rd.readRequest = {} as NonNullable<RdmapHeader['readRequest']>;
      put(rd.readRequest, {
        sinkStag: u(`${R}sinkstag`),
        sinkTo: u64(`${R}sinkto`),
        size: u(`${R}rdmardsz`),
        srcStag: u(`${R}srcstag`),
        srcTo: u64(`${R}srcto`),
      });
    }
    if (l[`${R}term_layer`]) {
      // Wireshark names the error type and code fields by layer (and, for DDP, by error type).
      const first = (names: string[]) => names.map((n) => u(R + n)).find((x) => x !== undefined) as number;
      const t: TerminateFields = {
        layer: need(`${R}term_layer`),
        etype: first(['term_etype_rdma', 'term_etype_ddp', 'term_etype_llp', 'term_etype']),
        errcode: first([
          'term_errcode_rdma',
          'term_errcode_ddp_tagged',
          'term_errcode_ddp_untagged',
          'term_errcode_llp',
          'term_errcode',
        ]),
        m: bool(`${R}term_hdrct_m`)!,
        d: bool(`${R}hdrct_d`)!,
        r: bool(`${R}hdrct_r`)!,
        rsvd: need(`${R}term_rsvd`),
      };
      if (l[`${R}term_ddp_seg_len`]) t.ddpSegLen = parseInt(hex(`${R}term_ddp_seg_len`)!, 16);
      if (l[`${R}term_ddp_h`]) t.ddpHeader = hex(`${R}term_ddp_h`);
      if (l[`${R}term_rdma_h`]) t.rdmaHeader = hex(`${R}term_rdma_h`);
      rd.terminate = t;
    }
    const A = `${R}atomic.`;
    if (l[`${A}opcode`]) {
      rd.atomicRequest = {} as AtomicRequestFields;
      put(rd.atomicRequest, {
        reserved: u(`${A}reserved`),
        opcode: u(`${A}opcode`),
        requestId: u(`${A}request_identifier`),
        stag: u(`${A}remote_stag`),
        to: u64(`${A}remote_tagged_offset`),
        addData: u64(`${A}add_data`),
        addMask: u64(`${A}add_mask`),
        swapData: u64(`${A}swap_data`),
        swapMask: u64(`${A}swap_mask`),
        compareData: u64(`${A}compare_data`),
        compareMask: u64(`${A}compare_mask`),
      });
    }
    if (l[`${A}original_request_identifier`]) {
      rd.atomicResponse = {} as NonNullable<RdmapHeader['atomicResponse']>;
      put(rd.atomicResponse, {
        requestId: u(`${A}original_request_identifier`),
        originalValue: u64(`${A}original_remote_data_value`),
      });
    }
    d.rdmap = rd;
  }
  if (l['data.data']) d.payload = hex('data.data');
  return d;
}

/** Copy the defined values only (a field tshark did not show stays absent, not `undefined`). */
function put<T extends object>(to: T, from: Partial<T>): void {
  for (const [k, v] of Object.entries(from)) if (v !== undefined) (to as Record<string, unknown>)[k] = v;
}

/** One UDP datagram of a test capture (addresses default to l2l4-helpers' PEER -> US). */
export interface PcapDatagram {
  payload: number[] | Uint8Array;
  sport: number;
  dport: number;
  src?: string;
  dst?: string;
}

/** Write Ethernet/IPv4/UDP frames (correct checksums) around `datagrams` into a new pcap. */
export function writeUdpPcap(file: string, datagrams: PcapDatagram[]): void {
  const w = new PcapWriter(file);
  try {
    datagrams.forEach((g, i) => {
      const src = g.src ?? PEER_IP,
        dst = g.dst ?? US_IP;
      const frame = udpFrame({
        src,
        dst,
        sport: g.sport,
        dport: g.dport,
        payload: Array.from(g.payload),
        srcMac: PEER_MAC,
        dstMac: US_MAC,
      });
      w.writeRecord(1_700_000_000, i * 1000, Uint8Array.from(frame));
    });
  } finally {
    w.close();
  }
}
