/**
 * Byte copies between typed arrays over different buffers (pool <-> MR) without garbage:
 * `dst.set(src.subarray(...))` makes a view object per call (a heap allocation), which per
 * 64-byte message was the most of what a latency run allocated, and per 2 KiB buffer of a 32 KiB
 * segment ~1.6 KB of garbage per segment received. Up to SMALL_COPY bytes the copy goes through
 * the two arrays' DataViews, eight bytes a step as two 32-bit words (a byte loop over the
 * Uint8Arrays measured ~4.5x slower at 64 bytes: ~310 vs ~65 ns here, each byte's access
 * bounds-checked); a received chain's payload goes to memory in one native call, and a
 * segment's payload from one piece of memory into its chain in one (graph/chain-copy.ts); other
 * longer copies take the view (its cost spread over the bytes).
 */
export const SMALL_COPY = 64;

/**
 * Copy `len` bytes from `src` at `srcOff` to `dst` at `dstOff`; `dstView` and `srcView` are
 * DataViews over the same bytes as `dst` and `src` (index 0 at the same byte). Overlapping
 * ranges of one buffer are not supported (callers copy between a pool and an MR).
 */
export function copyBytes(
  dst: Uint8Array,
  dstView: DataView,
  dstOff: number,
  src: Uint8Array,
  srcView: DataView,
  srcOff: number,
  len: number,
): void {
  if (len > SMALL_COPY) {
    dst.set(src.subarray(srcOff, srcOff + len), dstOff);
    return;
  }
  let k = 0;
  for (; k + 8 <= len; k += 8) {
    const a = srcView.getInt32(srcOff + k, true),
      b = srcView.getInt32(srcOff + k + 4, true);
    dstView.setInt32(dstOff + k, a, true);
    dstView.setInt32(dstOff + k + 4, b, true);
  }
  for (; k < len; k++) dstView.setUint8(dstOff + k, srcView.getUint8(srcOff + k));
}
