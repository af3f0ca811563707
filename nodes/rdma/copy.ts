/**
 * Byte copies between typed arrays over different buffers (pool <-> MR) without garbage for
 * small ones: `dst.set(src.subarray(...))` makes a view object per call (a heap allocation),
 * which per 64-byte message is the most of what a latency run allocates. Up to SMALL_COPY bytes
 * a loop copies in place; longer copies take the view (its cost spread over the bytes).
 */
export const SMALL_COPY = 64;

export function copyBytes(dst: Uint8Array, dstOff: number, src: Uint8Array, srcOff: number, len: number): void {
  if (len <= SMALL_COPY) {
    for (let k = 0; k < len; k++) dst[dstOff + k] = src[srcOff + k];
  } else dst.set(src.subarray(srcOff, srcOff + len), dstOff);
}
