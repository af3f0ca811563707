/**
 * The ibverbs and mlx5dv drivers without a NIC: ibverbs.node is built and linked against
 * rdma-core; start-up naming a device this machine does not have fails with one line that
 * lists what ibv_get_device_list found (asserted against what it finds here); a device is
 * chosen by kernel interface through sysfs as VPP does (a fake sysfs tree and device list
 * exercise the real resolution code); the daemon's `check` and `start` say the same. The data
 * path runs in `npm run test:hw` only, where an mlx5 device exists.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseConfig } from '../config/load.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { type VerbsAddon, type VerbsDevice, verbsAddon } from '../drivers/ibverbs-addon.ts';
import { describeDevices, resolveVerbsDevice } from '../drivers/ibverbs-devices.ts';

let v: VerbsAddon | null = null;
let why = '';
try {
  v = verbsAddon();
} catch (e) {
  why = `ibverbs.node was not built (${(e as Error).message})`;
}

const cfg = (driver: string, opts: string) =>
  parseConfig(
    `api: { listen: 127.0.0.1:0 }\ninterfaces:\n  - name: nic0\n    driver: ${driver}\n    ${driver}: ${opts}\n    address: 10.9.0.1/24\n`,
    'verbs.yaml',
  );

/** What the error must say about this machine's devices, from the addon itself. */
function foundText(): string {
  const { devices, error } = v!.devices();
  return error !== null
    ? `ibv_get_device_list failed: ${error}`
    : `ibv_get_device_list found ${describeDevices(devices)}`;
}

test('start-up naming a device that is not here: one line with the devices ibv_get_device_list found', async () => {
  if (v === null) skip(why);
  const { devices } = v.devices();
  const name = 'mlx5_' + (devices.length + 7);
  for (const driver of ['ibverbs', 'mlx5dv']) {
    const err = await Dataplane.create(cfg(driver, `{ device: ${name} }`)).then(
      () => null,
      (e: Error) => e,
    );
    assert.ok(err, `${driver}: start-up failed`);
    assert.is(err!.message, `interface nic0 (line 3): no RDMA device "${name}"; ${foundText()}`);
  }
});

test('start-up by host-interface: a missing interface, a virtual one (lo), and one that is no RDMA device', async () => {
  if (v === null) skip(why);
  const msg = async (hostIf: string) =>
    (await Dataplane.create(cfg('mlx5dv', `{ host-interface: ${hostIf} }`)).then(
      () => null,
      (e: Error) => e.message,
    )) ?? 'started';
  assert.is(
    await msg('nosuch0'),
    `interface nic0 (line 3): host-interface nosuch0: no such kernel interface; ${foundText()}`,
  );
  assert.is(
    await msg('lo'),
    `interface nic0 (line 3): host-interface lo has no device (/sys/class/net/lo/device: a virtual interface, not a NIC); ${foundText()}`,
  );
});

/** A sysfs look-alike: net/<if>/device and <ibdev>/device both link to one PCI function. */
function fakeSysfs(): { root: string; net: string; ibdev: (name: string) => string } {
  const root = mkdtempSync(join(tmpdir(), 'verbs-sysfs-'));
  const pci = join(root, 'devices/pci0000:3a/0000:3b:00.0');
  const pci2 = join(root, 'devices/pci0000:3a/0000:3b:00.1');
  for (const p of [pci, pci2, join(root, 'net/enp59s0f0'), join(root, 'net/enp59s0f1'), join(root, 'net/veth0')])
    mkdirSync(p, { recursive: true });
  mkdirSync(join(pci, 'net/enp59s0f0'), { recursive: true });
  symlinkSync(pci, join(root, 'net/enp59s0f0/device'));
  symlinkSync(pci2, join(root, 'net/enp59s0f1/device'));
  for (const [dev, fn] of [
    ['mlx5_0', pci],
    ['mlx5_1', pci2],
  ]) {
    mkdirSync(join(root, 'ib', dev), { recursive: true });
    symlinkSync(fn, join(root, 'ib', dev, 'device'));
  }
  return { root, net: join(root, 'net'), ibdev: (n) => join(root, 'ib', n) };
}

function fakeAddon(list: VerbsDevice[]): VerbsAddon {
  return { ...v!, devices: () => ({ devices: list, error: null }) };
}

const port = (n: number, linkLayer = 'ethernet') => ({
  port: n,
  state: 'active',
  linkLayer,
  activeMtu: 4096,
  activeSpeed: 64,
  activeWidth: 2,
});

test('device by kernel interface: the verbs device on the same PCI function; mlx5, port and link-layer checks', () => {
  if (v === null) skip(why);
  const fs = fakeSysfs();
  try {
    const devs: VerbsDevice[] = [
      { name: 'mlx5_0', ibdevPath: fs.ibdev('mlx5_0'), guid: 1n, mlx5: true, fwVer: '16.35.2000', ports: [port(1)] },
      { name: 'mlx5_1', ibdevPath: fs.ibdev('mlx5_1'), guid: 2n, mlx5: false, ports: [port(1, 'infiniband')] },
    ];
    const a = fakeAddon(devs);
    const r = resolveVerbsDevice(
      a,
      'interface x',
      'mlx5dv',
      { device: null, hostInterface: 'enp59s0f0', port: 1 },
      fs.net,
    );
    assert.is(r.device.name, 'mlx5_0');
    assert.is(r.pci, '0000:3b:00.0');
    assert.equal(r.netdevs, ['enp59s0f0']);
    const err = (
      mode: 'ibverbs' | 'mlx5dv',
      sel: { device: string | null; hostInterface: string | null; port: number },
    ) => {
      try {
        resolveVerbsDevice(a, 'interface x', mode, sel, fs.net);
        return 'resolved';
      } catch (e) {
        return (e as Error).message;
      }
    };
    const found =
      'ibv_get_device_list found mlx5_0 (mlx5, port 1 ethernet active), mlx5_1 (not mlx5, port 1 infiniband active)';
    assert.is(
      err('mlx5dv', { device: null, hostInterface: 'enp59s0f1', port: 1 }),
      'interface x: device mlx5_1 is not an mlx5 device (driver: mlx5dv needs one; driver: ibverbs works on any RAW_PACKET device)',
    );
    assert.is(
      err('ibverbs', { device: null, hostInterface: 'enp59s0f1', port: 1 }),
      'interface x: device mlx5_1 port 1 is infiniband, not Ethernet (RAW_PACKET queues need an Ethernet port)',
    );
    assert.is(
      err('ibverbs', { device: 'mlx5_0', hostInterface: null, port: 2 }),
      'interface x: device mlx5_0 has no port 2 (ports: 1)',
    );
    assert.is(
      err('ibverbs', { device: null, hostInterface: 'veth0', port: 1 }),
      `interface x: host-interface veth0 has no device (${fs.net}/veth0/device: a virtual interface, not a NIC); ${found}`,
    );
    assert.is(
      err('ibverbs', { device: 'mlx5_9', hostInterface: null, port: 1 }),
      `interface x: no RDMA device "mlx5_9"; ${found}`,
    );
    const none = fakeAddon([]);
    assert.is(
      (() => {
        try {
          resolveVerbsDevice(
            none,
            'interface x',
            'ibverbs',
            { device: 'mlx5_0', hostInterface: null, port: 1 },
            fs.net,
          );
          return 'resolved';
        } catch (e) {
          return (e as Error).message;
        }
      })(),
      'interface x: no RDMA device "mlx5_0"; ibv_get_device_list found none',
    );
  } finally {
    rmSync(fs.root, { recursive: true, force: true });
  }
});

test('the Port refuses a device name this machine does not have, and bad queue sizes, before touching anything', () => {
  if (v === null) skip(why);
  assert.throws(
    () =>
      new v!.Port({
        device: 'nosuch_0',
        mode: 'ibv',
        rxQueueSize: 100,
        txQueueSize: 1024,
        mac: new Uint8Array(6),
        pool: {},
      }),
    /queue sizes must be powers of two/,
  );
  assert.throws(
    () => new v!.Port({ device: 'nosuch_0', mode: 'ibv', mac: new Uint8Array(5), pool: {} }),
    /mac must be a Uint8Array of 6/,
  );
});

test.run();
