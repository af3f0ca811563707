/**
 * npm run test:hw — the README's real-NIC block, run as written where the NIC that
 * config/examples/dpdk.yaml names exists (root). No machine this was written on has one: here it
 * prints "not run: no device" and runs nothing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../config/load.ts';
import { bash, blocks, daemon, README, ROOT } from '../readme-helpers.ts';

const FIRST = 'modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0';

test("the README's real-NIC block: bind, hugepages, start config/examples/dpdk.yaml; the port comes up", async () => {
  const block = blocks(README).find((b) => b.startsWith(FIRST));
  assert.ok(block, 'the README shows the block');
  const cfg = loadConfig(join(ROOT, 'config/examples/dpdk.yaml'));
  const pci = cfg.interfaces[0].dpdk!.device;
  assert.ok(block.includes(pci), `the block binds the device the example names (${pci})`);
  if (!existsSync(`/sys/bus/pci/devices/${pci}`)) {
    console.log(`not run: no device (${pci}, the NIC config/examples/dpdk.yaml names, is not on this machine)`);
    return;
  }
  const lines = block.split('\n');
  const start = lines.pop() as string;
  const setup = bash(lines.join('\n'));
  assert.is(setup.code, 0, setup.out);
  const d = await daemon([], start);
  try {
    const up = bash(
      'for i in $(seq 100); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
    );
    assert.is(up.code, 0, `the port's link came up:\n${up.out}\n${d.out}`);
    const hw = bash('node bin/rdmactl.mjs show hardware');
    assert.match(hw.out, new RegExp(pci.replace(/[.]/g, '\\.')), hw.out);
  } finally {
    d.proc.kill('SIGTERM');
    assert.is(await d.exit, 0, d.out);
  }
});

test.run();
