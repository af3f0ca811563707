/**
 * npm run test:hw — the README's real-NIC block, run as written where the NIC that
 * config/examples/dpdk.yaml names exists (root). No machine this was written on has one: here it
 * prints "not run: no device" and runs nothing.
 */
import { skip, test } from '../harness.ts';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../config/load.ts';
import { blocks, README, ROOT, runNicBlock } from '../readme-helpers.ts';

const FIRST = 'modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0';

test("the README's real-NIC block: bind, hugepages, start config/examples/dpdk.yaml; the port comes up", async () => {
  const block = blocks(README).find((b) => b.startsWith(FIRST));
  assert.ok(block, 'the README shows the block');
  const cfg = loadConfig(join(ROOT, 'config/examples/dpdk.yaml'));
  const pci = cfg.interfaces[0].dpdk!.device;
  assert.ok(block.includes(pci), `the block binds the device the example names (${pci})`);
  if (!existsSync(`/sys/bus/pci/devices/${pci}`))
    skip(`not run: no device (${pci}, the NIC config/examples/dpdk.yaml names, is not on this machine)`);
  await runNicBlock(block, [new RegExp(pci.replace(/[.]/g, '\\.'))]);
});

test.run();
