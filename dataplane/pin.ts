/** Thread placement (cpu.main-core, cpu.corelist-workers). */
import { availableParallelism } from 'node:os';
import { loadCore } from '../native/addons.ts';
import { DataplaneError } from './views.ts';

/** Pin the calling thread to `cpu` (cpu.main-core, cpu.corelist-workers). */
export function pinThread(cpu: number, what: string): void {
  const n = availableParallelism();
  if (cpu >= n) throw new DataplaneError('invalid', `${what}: CPU ${cpu} is not on this machine (CPUs 0..${n - 1})`);
  loadCore().setThreadAffinity([cpu]);
}
