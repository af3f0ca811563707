/**
 * Memory windows' local work (verbs.ts's Mw): a bind (type 1: ibv_bind_mw; type 2: a BIND_MW
 * work request) and a local invalidate, done by ddp-output when the send queue reaches them, in
 * order with the work requests around them; neither makes a packet. What a bind checks
 * (IBTA 10.6.7, as rdma-core's providers do): the window is live and in the QP's PD, its MR
 * was registered with mw-bind, is valid, in the same PD and holds the range; remote write or
 * atomic rights need the MR's local write; the new STag keeps the window's table index (only
 * the key's low 8 bits change: ibv_inc_rkey); a type 2 window is bound only while free; a zero
 * length unbinds a type 1 window. A local invalidate frees a type 2 window (nothing else can be
 * invalidated here: there are no fast-registration MRs). A failure completes the work request
 * with memory-window-bind-error or local-qp-operation-error and puts the QP in error, as a NIC
 * does. The reason is returned for the QP's error event.
 */
import { RdmaCore } from './core.ts';
import type { Qp, SendWr } from './qp.ts';
import { Access, Mr, WcStatus, WrOpcode } from './verbs.ts';

/** The key bits a bind may change (ibv_inc_rkey changes the low 8). */
const REKEY_MASK = 0xff;

/** The outcome of the last `runLocal` that failed (its status and why). */
export const localFailure = { status: 0, why: '' };

/** Do local work request `wr` of `qp`: true when done, false (localFailure says why) when it failed. */
export function runLocal(core: RdmaCore, qp: Qp, wr: SendWr): boolean {
  return wr.opcode === WrOpcode.BIND_MW ? bind(core, qp, wr) : localInvalidate(core, qp, wr.invStag);
}

function fail(status: number, why: string): false {
  localFailure.status = status;
  localFailure.why = why;
  return false;
}

function bind(core: RdmaCore, qp: Qp, wr: SendWr): boolean {
  const mw = wr.mw;
  const E = WcStatus.MW_BIND_ERR;
  if (mw === null || mw.destroyed) return fail(E, 'bind of a deallocated memory window');
  if (mw.pd !== qp.pd) return fail(E, `memory window ${mw.handle} is not in the QP's PD`);
  const stag = wr.rstag >>> 0;
  if ((stag & ~REKEY_MASK) >>> 0 !== (mw.rkey & ~REKEY_MASK) >>> 0)
    return fail(
      E,
      `rkey 0x${stag.toString(16)} is not one of memory window ${mw.handle}'s (0x${mw.rkey.toString(16)})`,
    );
  const slot = core.mrs[mw.index];
  if (slot === null || slot.mw !== mw) return fail(E, `memory window ${mw.handle} lost its table slot`);
  if (mw.type === 2 && mw.parent !== null)
    return fail(E, `memory window ${mw.handle} (type 2) is bound: invalidate it first`);
  const unbind = wr.sg.n === 0 || wr.sg.total === 0;
  if (unbind && mw.type === 2) return fail(E, 'a type 2 memory window cannot be bound with zero length');
  let window: Mr;
  if (unbind) {
    window = new Mr(slot.handle, mw.pd, stag, EMPTY, 0, 0);
    window.valid = false;
  } else {
    const parent = wr.sg.mr[0] as Mr,
      off = wr.sg.off[0],
      len = wr.sg.len[0];
    if (!parent.valid || parent.mw !== null || parent.pd !== mw.pd)
      return fail(E, `the MR to bind to is not valid in memory window ${mw.handle}'s PD`);
    if (!(parent.access & Access.MW_BIND)) return fail(E, `MR ${parent.handle} was not registered with mw-bind`);
    if (off + len > parent.length) return fail(E, `[${off}, ${off + len}) is outside MR ${parent.handle}`);
    if (wr.mwAccess & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) && !(parent.access & Access.LOCAL_WRITE))
      return fail(E, `remote write or atomic rights need MR ${parent.handle}'s local write`);
    const access = wr.mwAccess & (Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC);
    window = new Mr(slot.handle, mw.pd, stag, parent.memory.subarray(off, off + len), access, wr.roff);
    window.boundQp = mw.type === 2 ? qp : null;
  }
  window.mw = mw;
  // The old binding (type 1) goes: its STag is dead from here.
  if (slot.valid) RdmaCore.invalidate(slot);
  if (!unbind) {
    mw.parent = wr.sg.mr[0];
    (mw.parent as Mr).windows++;
  }
  mw.rkey = stag;
  core.mrs[mw.index] = window;
  return true;
}

function localInvalidate(core: RdmaCore, qp: Qp, stag: number): boolean {
  const E = WcStatus.LOC_QP_OP_ERR;
  const mr = core.mrs[stag >>> core.stagKeyBits];
  if (mr === undefined || mr === null || mr.stag !== stag || !mr.valid || mr.pd !== qp.pd)
    return fail(E, `local invalidate of STag 0x${stag.toString(16)}: nothing valid in the QP's PD has it`);
  if (mr.mw === null)
    return fail(E, `local invalidate of MR STag 0x${stag.toString(16)}: MRs cannot be invalidated here`);
  if (mr.mw.type !== 2) return fail(E, `local invalidate of a type 1 memory window (0x${stag.toString(16)})`);
  RdmaCore.invalidate(mr);
  return true;
}

const EMPTY = new Uint8Array(0);
