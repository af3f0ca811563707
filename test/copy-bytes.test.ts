/**
 * nodes/rdma/copy.ts: the pool <-> MR copy every SEND, WRITE and READ payload up to 64 bytes
 * takes (8 bytes a step through DataViews, then the odd bytes), and the longer one through a view.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { copyBytes, SMALL_COPY } from '../nodes/rdma/copy.ts';

test('copyBytes: every length to past SMALL_COPY at unaligned offsets, exactly the bytes asked for', () => {
  // Two arrays over different buffers, each starting inside its buffer (as an MR over part of a
  // program's memory does), their DataViews over the same bytes.
  const srcBuf = new ArrayBuffer(512),
    dstBuf = new ArrayBuffer(512);
  const src = new Uint8Array(srcBuf, 3, 400),
    dst = new Uint8Array(dstBuf, 5, 400);
  const sv = new DataView(srcBuf, 3, 400),
    dv = new DataView(dstBuf, 5, 400);
  for (let i = 0; i < src.length; i++) src[i] = (i * 37 + 11) & 0xff;
  let cases = 0;
  for (let len = 0; len <= SMALL_COPY + 9; len++)
    for (const [so, doff] of [
      [0, 0],
      [1, 7],
      [6, 3],
      [13, 2],
      [400 - len, 400 - len],
    ]) {
      dst.fill(0xee);
      copyBytes(dst, dv, doff, src, sv, so, len);
      for (let i = 0; i < dst.length; i++) {
        const want = i >= doff && i < doff + len ? src[so + i - doff] : 0xee;
        if (dst[i] !== want)
          assert.unreachable(`len ${len} from ${so} to ${doff}: byte ${i} is ${dst[i]}, want ${want}`);
      }
      cases++;
    }
  assert.is(cases, (SMALL_COPY + 10) * 5);
});

test('copyBytes: a range past either array throws (the views check every access)', () => {
  const a = new Uint8Array(32),
    b = new Uint8Array(32);
  const av = new DataView(a.buffer),
    bv = new DataView(b.buffer);
  assert.throws(() => copyBytes(a, av, 28, b, bv, 0, 8), RangeError);
  assert.throws(() => copyBytes(a, av, 0, b, bv, 27, 8), RangeError);
});
test.run();
