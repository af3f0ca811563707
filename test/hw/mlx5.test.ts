/**
 * npm run test:hw — the ConnectX suite, where ibv_devices lists an mlx5 device (root):
 *
 * 1. The README's ConnectX block as written (modprobe, ibv_devices, the netdev up, then the
 *    daemon on config/examples/mlx5dv.yaml): the port comes up and `show hardware` names it.
 *    Needs the example's host-interface on this machine.
 * 2. The rdma-ops suite (every opcode, sizes to 16 MiB, SRQ, bursts, the connection manager)
 *    between two ports, in both modes, when RDMA_GRAPH_HW_A and RDMA_GRAPH_HW_B name two kernel
 *    interfaces of this machine on one segment (two ports cabled together: both stacks run in
 *    this process).
 *
 * No machine this was written on has an RDMA device: there it prints "not run: no mlx5 device"
 * and runs nothing. That is the one place a test may not run; the README says so.
 */
import { skip, suite, test } from '../harness.ts';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../config/load.ts';
import { verbsAddon } from '../../drivers/ibverbs-addon.ts';
import { blocks, README, ROOT, runNicBlock } from '../readme-helpers.ts';
import { rdmaOpsSuite } from '../rdma-ops-helpers.ts';
import { hwPorts } from '../rdma-helpers.ts';

const FIRST = 'modprobe mlx5_ib && modprobe ib_uverbs';

/** Why nothing can run here, or null when an mlx5 device is present. */
function noDevice(): string | null {
  let list;
  try {
    list = verbsAddon().devices();
  } catch (e) {
    return `no mlx5 device (ibverbs.node is not built: ${(e as Error).message})`;
  }
  if (list.error !== null) return `no mlx5 device (ibv_get_device_list: ${list.error})`;
  const mlx5 = list.devices.filter((d) => d.mlx5);
  return mlx5.length === 0
    ? `no mlx5 device (ibv_get_device_list found ${list.devices.length} devices, none mlx5)`
    : null;
}

const why = noDevice();

test("the README's ConnectX block: start config/examples/mlx5dv.yaml; the port comes up and show hardware names it", async () => {
  const block = blocks(README).find((b) => b.startsWith(FIRST));
  assert.ok(block, 'the README shows the block');
  const cfg = loadConfig(join(ROOT, 'config/examples/mlx5dv.yaml'));
  const hostIf = cfg.interfaces[0].mlx5dv!.hostInterface!;
  assert.ok(block.includes(hostIf), `the block brings up the interface the example names (${hostIf})`);
  if (why !== null) skip(`not run: ${why}`);
  if (!existsSync(`/sys/class/net/${hostIf}/device`))
    skip(`not run: no device (${hostIf}, the interface config/examples/mlx5dv.yaml names, is not here)`);
  await runNicBlock(block, [/mode: dv/, /link-up/]);
});

test.run();

if (why === null && hwPorts() !== null) {
  rdmaOpsSuite('ibverbs').run();
  rdmaOpsSuite('mlx5dv').run();
} else {
  const none = suite('the rdma-ops suite over two NIC ports');
  none('ibverbs and mlx5dv', () =>
    skip(`not run: ${why ?? 'set RDMA_GRAPH_HW_A and RDMA_GRAPH_HW_B to two kernel interfaces on one segment'}`),
  );
  none.run();
}
