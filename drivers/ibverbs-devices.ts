/**
 * Which RDMA device an ibverbs/mlx5dv interface means: by verbs name (`device: mlx5_0`) or by
 * its kernel interface (`host-interface: enp59s0f0`, resolved as VPP's rdma plugin does:
 * /sys/class/net/<if>/device is the PCI function, and the verbs device whose
 * <ibdev_path>/device is the same function is the one). Every failure is one line that says
 * what was looked for and what ibv_get_device_list did find.
 */
import { existsSync, readdirSync, readlinkSync, realpathSync } from 'node:fs';
import { basename } from 'node:path';
import type { VerbsAddon, VerbsDevice } from './ibverbs-addon.ts';

export interface VerbsSelector {
  device: string | null;
  hostInterface: string | null;
  port: number;
}

export interface ResolvedDevice {
  device: VerbsDevice;
  /** PCI address (0000:3b:00.0) or null when sysfs does not say. */
  pci: string | null;
  /** The kernel interfaces on the device (its netdevs), e.g. ["enp59s0f0"]. */
  netdevs: string[];
  /** The kernel driver of the PCI function (mlx5_core), or null. */
  kernelDriver: string | null;
}

/** "mlx5_0 (mlx5, port 1 ethernet active), mlx5_1 (...)" or "none". */
export function describeDevices(list: VerbsDevice[]): string {
  if (list.length === 0) return 'none';
  return list
    .map((d) => {
      const ports = d.ports.map((p) => `port ${p.port} ${p.linkLayer} ${p.state}`).join(', ');
      return `${d.name} (${d.mlx5 ? 'mlx5' : 'not mlx5'}${ports ? `, ${ports}` : ''})`;
    })
    .join(', ');
}

function real(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

function sysfsFacts(d: VerbsDevice): Omit<ResolvedDevice, 'device'> {
  const dev = real(`${d.ibdevPath}/device`) ?? real(`/sys/class/infiniband/${d.name}/device`);
  let netdevs: string[] = [];
  let kernelDriver: string | null = null;
  if (dev !== null) {
    try {
      netdevs = existsSync(`${dev}/net`) ? readdirSync(`${dev}/net`).sort() : [];
    } catch {
      netdevs = [];
    }
    try {
      kernelDriver = basename(readlinkSync(`${dev}/driver`));
    } catch {
      kernelDriver = null;
    }
  }
  const pci =
    dev !== null && /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/i.test(basename(dev)) ? basename(dev) : null;
  return { pci, netdevs, kernelDriver };
}

/**
 * The device `sel` names, checked for what `mode` needs (mlx5dv: an mlx5 device; both: an
 * Ethernet port of that number). Throws an Error starting with `where`.
 */
export function resolveVerbsDevice(
  addon: VerbsAddon,
  where: string,
  mode: 'ibverbs' | 'mlx5dv',
  sel: VerbsSelector,
  sysClassNet = '/sys/class/net',
): ResolvedDevice {
  const { devices, error } = addon.devices();
  const found =
    error !== null ? `ibv_get_device_list failed: ${error}` : `ibv_get_device_list found ${describeDevices(devices)}`;
  let d: VerbsDevice | undefined;
  if (sel.device !== null) {
    d = devices.find((x) => x.name === sel.device);
    if (d === undefined) throw new Error(`${where}: no RDMA device "${sel.device}"; ${found}`);
  } else {
    const ifname = sel.hostInterface!;
    if (!existsSync(`${sysClassNet}/${ifname}`))
      throw new Error(`${where}: host-interface ${ifname}: no such kernel interface; ${found}`);
    const fn = real(`${sysClassNet}/${ifname}/device`);
    if (fn === null)
      throw new Error(
        `${where}: host-interface ${ifname} has no device (${sysClassNet}/${ifname}/device: a virtual interface, not a NIC); ${found}`,
      );
    d = devices.find((x) => real(`${x.ibdevPath}/device`) === fn);
    if (d === undefined)
      throw new Error(`${where}: host-interface ${ifname} (${basename(fn)}) is no RDMA device's interface; ${found}`);
  }
  const facts = sysfsFacts(d);
  if (mode === 'mlx5dv' && !d.mlx5)
    throw new Error(
      `${where}: device ${d.name} is not an mlx5 device (driver: mlx5dv needs one; driver: ibverbs works on any RAW_PACKET device)`,
    );
  if (d.error !== undefined) throw new Error(`${where}: device ${d.name}: ${d.error}`);
  const p = d.ports.find((x) => x.port === sel.port);
  if (p === undefined)
    throw new Error(
      `${where}: device ${d.name} has no port ${sel.port} (ports: ${d.ports.map((x) => x.port).join(', ') || 'none'})`,
    );
  if (p.linkLayer !== 'ethernet')
    throw new Error(
      `${where}: device ${d.name} port ${sel.port} is ${p.linkLayer}, not Ethernet (RAW_PACKET queues need an Ethernet port)`,
    );
  return { device: d, ...facts };
}
