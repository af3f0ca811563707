/**
 * The RDMA devices, once: one per interface with an IPv4 address, with its name and attributes.
 * The verbs socket's DEVICES reply (ibv_get_device_list, ibv_query_device, ibv_query_port, the
 * probe paths of native/verbs-lib/probes.c), GET /v1/devices and `rdmactl show device` all take
 * them from deviceView here.
 *
 * A name is `rg_` and the interface's name when that fits 15 characters (UCX and the kernel's
 * IB_DEVICE_NAME_MAX take no more); a longer interface name keeps its first 6 characters, then
 * `-` and 5 upper-case hex digits of the FNV-1a hash of the whole name (`rg_enp59s-3FA21`):
 * config/formats.ts rdmaDeviceName. Interface names are lower case, so a hashed name never
 * equals a short one; two long names with the same first 6 characters collide with odds of
 * 2^-20, and the configuration refuses that (config/load.ts).
 */
import { rdmaDeviceName } from '../config/formats.ts';
import type { DeviceAttr } from '../nodes/rdma/stack.ts';
import { DDP_UNTAGGED_BYTES, segmentPayload } from '../nodes/rdma/wire.ts';
import type { DeviceView } from './views.ts';

/** libibverbs' enum ibv_mtu (1: 256 ... 5: 4096) of the largest IB MTU not over `bytes` (256 at least). */
export function ibMtu(bytes: number): 1 | 2 | 3 | 4 | 5 {
  let e: 1 | 2 | 3 | 4 | 5 = 1;
  for (const k of [2, 3, 4, 5] as const) if (128 << k <= bytes) e = k;
  return e;
}

/** The bytes of IB MTU `e` (enum ibv_mtu). */
export const ibMtuBytes = (e: number): number => 128 << e;

/** The EUI-64 of a MAC (the universal/local bit flipped), 8 bytes in network order. */
export function eui64(mac: string): number[] {
  const m = mac.split(':').map((h) => parseInt(h, 16));
  return [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]];
}

/** A GUID as libibverbs prints one: four groups of 4 hex digits ("00fe:00ff:fe00:0001"). */
export function formatGuid(bytes: readonly number[]): string {
  const hex = bytes.map((b) => b.toString(16).padStart(2, '0')).join('');
  return [0, 4, 8, 12].map((k) => hex.slice(k, k + 4)).join(':');
}

/** What deviceView needs of an interface. */
export interface DeviceInterface {
  name: string;
  mac: string;
  /** The IP MTU. */
  mtu: number;
  up: boolean;
  /** Its IPv4 address (no prefix). */
  address: string;
}

/**
 * Vendor and hardware figures ibv_query_device answers. No PCI vendor (a software device): the
 * vendor ID is 0xffffff as rxe's is, not 0, which programs read as "no device answered".
 */
export const DEVICE_IDS = Object.freeze({ vendorId: 0xffffff, vendorPartId: 0, hwVer: 0 });
/** The largest path MTU MODIFY_QP takes (a larger one than the link's is clamped to the link's). */
export const MAX_PATH_MTU = 5;

/**
 * The device of interface `itf`: the data plane's limits (`attr`), its port (segments carry the
 * IP MTU less IPv4, UDP and TRP headers, whatever the buffer size: a longer segment is a chain
 * of buffers), and the version as its firmware.
 */
export function deviceView(itf: DeviceInterface, attr: DeviceAttr, version: string): DeviceView {
  const segmentBytes = segmentPayload(itf.mtu, false) + DDP_UNTAGGED_BYTES;
  const guid = formatGuid(eui64(itf.mac));
  return {
    name: rdmaDeviceName(itf.name),
    interface: itf.name,
    transport: 'InfiniBand',
    wire: 'iWARP over UDP (urdma TRP)',
    fwVer: version,
    nodeGuid: guid,
    sysImageGuid: guid,
    ...DEVICE_IDS,
    ...attr,
    ports: [
      {
        port: 1,
        state: itf.up ? 'active' : 'down',
        maxMtu: ibMtuBytes(MAX_PATH_MTU),
        activeMtu: ibMtuBytes(ibMtu(segmentBytes)),
        mtu: itf.mtu,
        segmentBytes,
        linkLayer: 'Ethernet',
        gid: `::ffff:${itf.address}`,
        gidType: 'RoCE v2',
        address: itf.address,
      },
    ],
  };
}
