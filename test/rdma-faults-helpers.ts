/**
 * Reliability under faults (`faultRun`, run by test/rdma-faults.test.ts over a pipe and by
 * test/memif-rdma.test.ts over memif): two stacks with the seeded fault injector on A's rx and
 * tx (so both directions of every exchange see loss, reordering, duplication and corruption at
 * once), 10 000 mixed operations per fault level; every byte checked, every completion exactly
 * once and successful, atomics adding up, no buffer leaked. Goodput per level is printed for
 * orientation (not asserted).
 */
import * as assert from 'uvu/assert';
import { makeEnds, connectManual, type Link, pattern, twoStacks, waitCompletions } from './rdma-helpers.ts';
import { withTeardown } from './helpers.ts';

export const OPS = 10_000;
const REGION = 4096; // bytes per op slot
const SLOTS = 256;

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

/** 10 000 mixed operations at fault level p on both directions of A's interface; asserts everything. */
export async function faultRun(
  p: number,
  seed: number,
  link: Link = 'pipe',
  mtu = 1500,
): Promise<{ ms: number; bytes: number; retransmits: number; dropped: number }> {
  const fault = { seed, loss: p, reorder: p, duplicate: p, corrupt: p, reorderDepth: 8, reorderDelayUs: 300 };
  const pair = twoStacks({
    rdma: { trp: { rtoMinMs: 2, rtoMaxMs: 50, maxRetries: 30 } },
    faultA: { rx: fault, tx: fault },
    link,
    mtu,
  });
  return withTeardown(
    async () => {
      await pair.ready;
      const A = makeEnds(pair.a, { maxSendWr: 512, maxRecvWr: 16 }, 16384);
      const B = makeEnds(pair.b, { maxSendWr: 16, maxRecvWr: 512 }, 16384);
      connectManual(pair.a, A.qp, pair.b, B.qp);
      const rw = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];
      const aSrc = pair.a.rdma.regMr(A.pd, SLOTS * REGION, ['local-write']);
      const aDst = pair.a.rdma.regMr(A.pd, SLOTS * REGION, ['local-write']);
      const bMem = pair.b.rdma.regMr(B.pd, SLOTS * REGION, rw);
      const bRecv = pair.b.rdma.regMr(B.pd, SLOTS * REGION, ['local-write']);
      const counter = pair.b.rdma.regMr(B.pd, 8, rw);
      const r = rng(seed * 7919);
      // What each in-flight op expects, by wrId.
      const expect = new Map<number, { kind: string; slot: number; len: number; data: Uint8Array }>();
      const recvPosted: number[] = [];
      let adds = 0n,
        addsDone = 0,
        bytes = 0,
        nextRecv = 0;
      const t0 = performance.now();
      let issued = 0,
        completed = 0,
        sendsCompleted = 0;
      const outstanding = new Set<number>();
      let recvChecked = 0;
      // A receive's buffer is reused SLOTS receives later: check each as soon as it completes.
      const checkRecvs = async (upTo: number) => {
        const got = upTo > recvChecked ? await waitCompletions(B.rcq, upTo - recvChecked, 20000) : [];
        for (const c of [...got, ...B.rcq.poll(1000)]) {
          const k = recvChecked++;
          assert.is(c.wrId, k, 'receive completions in MSN order');
          assert.is(c.status, 'success');
          const data = pattern(c.byteLen, recvPosted[k] + 1);
          const off = (k % SLOTS) * REGION;
          assert.ok(
            Buffer.from(bRecv.memory.subarray(off, off + c.byteLen)).equals(data),
            `send ${recvPosted[k]} data`,
          );
        }
      };
      while (completed < OPS) {
        // Every send A saw completed was received by B: its completion is in B's CQ already.
        await checkRecvs(sendsCompleted);
        while (issued < OPS && outstanding.size < 200) {
          const id = issued++;
          const slot = id % SLOTS;
          const len = Math.floor(r() * REGION);
          const pick = r();
          const data = pattern(len, id + 1);
          if (pick < 0.3) {
            // send: B posts a receive for it first (MSN order = post order)
            aSrc.memory.set(data, slot * REGION);
            pair.b.rdma.postRecv(B.qp, {
              wrId: nextRecv,
              sg: [{ mr: bRecv, offset: (nextRecv % SLOTS) * REGION, length: REGION }],
            });
            recvPosted.push(id);
            nextRecv++;
            pair.a.rdma.postSend(A.qp, {
              wrId: id,
              opcode: 'send',
              sg: [{ mr: aSrc, offset: slot * REGION, length: len }],
            });
            expect.set(id, { kind: 'send', slot, len, data });
          } else if (pick < 0.6) {
            aSrc.memory.set(data, slot * REGION);
            pair.a.rdma.postSend(A.qp, {
              wrId: id,
              opcode: 'write',
              sg: [{ mr: aSrc, offset: slot * REGION, length: len }],
              remote: { stag: bMem.stag, offset: slot * REGION },
            });
            expect.set(id, { kind: 'write', slot, len, data });
          } else if (pick < 0.9) {
            bMem.memory.set(data, slot * REGION);
            pair.a.rdma.postSend(A.qp, {
              wrId: id,
              opcode: 'read',
              sg: [{ mr: aDst, offset: slot * REGION, length: len }],
              remote: { stag: bMem.stag, offset: slot * REGION },
            });
            expect.set(id, { kind: 'read', slot, len, data });
          } else {
            const add = BigInt(id + 1);
            adds += add;
            pair.a.rdma.postSend(A.qp, {
              wrId: id,
              opcode: 'fetch-add',
              sg: [{ mr: aDst, offset: slot * REGION, length: 8 }],
              remote: { stag: counter.stag, offset: 0 },
              atomic: { add },
            });
            expect.set(id, { kind: 'atomic', slot, len: 8, data });
          }
          // Writes/reads on one slot must not overlap in time: wait for completion before reuse.
          outstanding.add(id);
          if (outstanding.size >= SLOTS - 1) break;
        }
        const cs = await waitCompletions(A.scq, 1, 20000);
        for (const c of [...cs, ...A.scq.poll(1000)]) {
          const id = c.wrId as number;
          const e = expect.get(id);
          assert.ok(e, `completion for unknown or already completed wrId ${id}`);
          assert.is(c.status, 'success', `wr ${id} (${e!.kind}) status`);
          expect.delete(id);
          outstanding.delete(id);
          completed++;
          if (e!.kind === 'write') {
            assert.ok(
              Buffer.from(bMem.memory.subarray(e!.slot * REGION, e!.slot * REGION + e!.len)).equals(e!.data),
              `write ${id} data`,
            );
            bytes += e!.len;
          } else if (e!.kind === 'read') {
            assert.ok(
              Buffer.from(aDst.memory.subarray(e!.slot * REGION, e!.slot * REGION + e!.len)).equals(e!.data),
              `read ${id} data`,
            );
            bytes += e!.len;
          } else if (e!.kind === 'atomic') addsDone++;
          else {
            bytes += e!.len;
            sendsCompleted++;
          }
        }
      }
      // Receives: exactly one success per send, in posting order, each byte right.
      await checkRecvs(recvPosted.length);
      assert.is(B.rcq.poll(10).length, 0, 'no extra receive completion');
      assert.is(A.scq.poll(10).length, 0, 'no extra send completion');
      assert.is(new DataView(counter.memory.buffer).getBigUint64(0, true), adds, 'fetch-adds sum');
      const ms = performance.now() - t0;
      const q = pair.a.rdma.queryQp(A.qp);
      const fc = pair.a.ifs.faultCounters(pair.a.ifName);
      const dropped = (fc.rx?.dropped ?? 0) + (fc.tx?.dropped ?? 0);
      if (p > 0) {
        assert.ok(
          dropped > 0 && (fc.rx?.corrupted ?? 0) > 0 && (fc.tx?.duplicated ?? 0) > 0 && (fc.tx?.reordered ?? 0) > 0,
          `faults really injected: ${JSON.stringify(fc)}`,
        );
        assert.ok(q.counters.retransmits > 0, 'losses were repaired by retransmission');
      }
      return { ms, bytes, retransmits: q.counters.retransmits, dropped };
    },
    () => {
      pair.close();
      assert.is(pair.lost(), 0, 'no buffer leaked');
    },
  );
}
