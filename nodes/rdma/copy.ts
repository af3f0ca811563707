/**
 * Byte copies between typed arrays over different buffers (pool <-> MR) without garbage:
 * `dst.set(src.subarray(...))` makes a view object per call (a heap allocation), which per
 * 64-byte message was the most of what a latency run allocated, and per 2 KiB buffer of a 32 KiB
 * segment ~1.6 KB of garbage per segment received. Up to SMALL_COPY bytes a loop copies in
 * place; a received chain's payload goes to memory in one native call, and a segment's payload from
 * one piece of memory into its chain in one (graph/chain-copy.ts); other longer copies take
 * the view (its cost spread over the bytes).
 */
export const SMALL_COPY = 64;

export function copyBytes(dst: Uint8Array, dstOff: number, src: Uint8Array, srcOff: number, len: number): void {
  if (len <= SMALL_COPY) {
    for (let k = 0; k < len; k++) dst[dstOff + k] = src[srcOff + k];
  } else dst.set(src.subarray(srcOff, srcOff + len), dstOff);
}
