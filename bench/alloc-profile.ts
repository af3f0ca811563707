/**
 * Where a run allocates: V8's sampling heap profiler (the inspector's HeapProfiler, in this
 * process) from start() to stop(), the sampled bytes summed by the last three frames of the
 * allocating stack and divided by a count the caller gives (messages, round trips). Objects a
 * scavenge already collected are included: the garbage is what costs a latency run its pauses.
 * Sampling every `intervalBytes` slows the run it watches; use it to find allocations, never
 * beside a timed figure.
 */
import { Session } from 'node:inspector/promises';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

export interface AllocProfile {
  stop(per: number, rows?: number): Promise<string>;
}

export async function startAllocProfile(intervalBytes = 512): Promise<AllocProfile> {
  const s = new Session();
  s.connect();
  await s.post('HeapProfiler.startSampling', {
    samplingInterval: intervalBytes,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  } as { samplingInterval: number });
  return {
    async stop(per: number, rows = 20): Promise<string> {
      const { profile } = (await s.post('HeapProfiler.stopSampling')) as { profile: { head: ProfileNode } };
      s.disconnect();
      const sites = new Map<string, number>();
      let total = 0;
      const walk = (node: ProfileNode, stack: string[]) => {
        const cf = node.callFrame;
        const here = [
          ...stack,
          `${cf.functionName || '(anonymous)'} ${cf.url.split('/').slice(-2).join('/')}:${cf.lineNumber + 1}`,
        ];
        if (node.selfSize > 0) {
          const key = here.slice(-3).reverse().join(' < ');
          sites.set(key, (sites.get(key) ?? 0) + node.selfSize);
          total += node.selfSize;
        }
        for (const c of node.children) walk(c, here);
      };
      walk(profile.head, []);
      const d = Math.max(1, per);
      const lines = [`allocated (sampled): ${(total / d).toFixed(0)} bytes each (${total} bytes / ${per})`];
      for (const [k, v] of [...sites].sort((a, b) => b[1] - a[1]).slice(0, rows))
        lines.push(`${(v / d).toFixed(1).padStart(9)}  ${k}`);
      return lines.join('\n');
    },
  };
}
