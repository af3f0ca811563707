/**
 * Unpredictable 32-bit numbers for what a blind spoofer must not guess: initial PSNs, QP ports
 * and STag keys (as TCP's initial sequence numbers and RoCE's random PSNs and keys). Drawn from
 * the operating system's CSPRNG a block at a time; used on the control path only (QP creation,
 * connection set-up, MR registration), never per packet.
 */
import { getRandomValues } from 'node:crypto';

const block = new Uint32Array(64);
let left = 0;

/** A uniformly random unsigned 32-bit integer. */
export function randomU32(): number {
  if (left === 0) {
    getRandomValues(block);
    left = block.length;
  }
  return block[--left];
}

/** A uniformly random integer in [0, n) for 1 <= n <= 2^32 (rejection sampling: no modulo bias). */
export function randomBelow(n: number): number {
  const limit = 4294967296 - (4294967296 % n);
  for (;;) {
    const x = randomU32();
    if (x < limit) return x % n;
  }
}
