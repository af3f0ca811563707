/**
 * ibverbs.node (native/ibverbs/), as TypeScript sees it: the ibverbs/mlx5dv Port, the device list,
 * and the mlx5 format functions (the same C code the mlx5dv data path runs, exported so tests
 * can run it on byte fixtures).
 */
import { loadAddon } from '../native/addons.ts';

export const VERBS_HINT = 'install libibverbs-dev (it brings libmlx5)';

export interface VerbsPortInfo {
  device: string;
  port: number;
  mode: 'ibv' | 'dv';
  fwVer: string;
  vendorPartId: number;
  rxQueues: number;
  txQueues: number;
  rxQueueSize: number;
  txQueueSize: number;
  txChecksum: boolean;
  striding: boolean;
  strideBytes: number;
  cqeCompression: 'off' | 'hash' | 'csum-stridx';
  mlx5Version: number;
  deviceFlags: string;
  promisc: boolean;
}

export interface VerbsPortStats {
  rxPackets: number;
  rxBytes: number;
  rxErrors: number;
  txPackets: number;
  txBytes: number;
  txErrors: number;
  txRefused: number;
  txRecoveries: number;
  cqeZippedSessions: number;
  cqeZipped: number;
  stridingFillers: number;
  asyncEvents: number;
  error: string | null;
}

export interface VerbsPort {
  rx(queue: number, out: Uint32Array, max: number): number;
  tx(queue: number, bufs: Uint32Array, off: number, n: number): number;
  linkUp(): boolean;
  stats(): VerbsPortStats;
  info(): VerbsPortInfo;
  close(): void;
  reclaim(): number;
}

export interface VerbsDevicePort {
  port: number;
  state: string;
  linkLayer: string;
  activeMtu: number;
  activeSpeed: number;
  activeWidth: number;
}

export interface VerbsDevice {
  name: string;
  ibdevPath: string;
  guid: bigint;
  mlx5: boolean;
  fwVer?: string;
  vendorId?: number;
  vendorPartId?: number;
  hwVer?: number;
  error?: string;
  ports: VerbsDevicePort[];
}

export interface VerbsAddon {
  devices(): { devices: VerbsDevice[]; error: string | null };
  Port: new (opts: Record<string, unknown>) => VerbsPort;
  mlx5PollRx(
    cqes: Uint8Array,
    logSize: number,
    state: Uint32Array,
    max: number,
  ): { bc: number; flags: number; syndrome: number }[];
  mlx5PollTx(
    cqes: Uint8Array,
    logSize: number,
    state: Uint32Array,
    max: number,
  ): { wqeCounter: number; syndrome: number }[];
  mlx5InitCq(cqes: Uint8Array, logSize: number): void;
  mlx5BuildSendWqe(
    wqe: Uint8Array,
    index: number,
    qpn: number,
    frame: Uint8Array,
    lkey: number,
    addrHi: number,
    addrLo: number,
    csFlags: number,
    signaled: boolean,
    imm: number,
    len: number,
  ): number;
  mlx5ParseSendWqe(wqe: Uint8Array): {
    index: number;
    opcode: number;
    qpn: number;
    ds: number;
    signaled: boolean;
    csFlags: number;
    inlineBytes: number;
    dataBytes: number;
    lkey: number;
    addr: bigint;
  };
  mlx5StridingBc(bc: number): { filler: boolean; strides: number; bytes: number };
  mlx5Csum(flags: number): { ip4: boolean; l4: boolean };
  mlx5Doorbell(kind: 'cq' | 'rq' | 'sq', value: number): Uint8Array;
  mlx5DataSeg(seg: Uint8Array, bytes: number, lkey: number, addrHi: number, addrLo: number): void;
  mlx5SrqNextSeg(seg: Uint8Array, next: number): void;
}

/** ibverbs.node, or throws DriverUnavailableError saying what to install. */
export function verbsAddon(): VerbsAddon {
  return loadAddon<VerbsAddon>('ibverbs', VERBS_HINT);
}

/** Why the verbs drivers cannot be used in this build, or null when they can. */
export function verbsUnavailable(): string | null {
  try {
    verbsAddon();
    return null;
  } catch {
    return `the ibverbs and mlx5dv drivers are not built: ${VERBS_HINT} and run npm run build`;
  }
}
