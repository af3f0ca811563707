/**
 * Stable hidden classes for objects whose number fields take values of any size.
 *
 * V8 stores a number field as a small integer (a Smi: 31 bits signed) while every value it held
 * was one. The first value outside that range (a 32-bit sequence number above 2^31, a time in
 * ns, a byte count past 2 GiB, a fraction) changes the field to a double and the object to a
 * new hidden class (map); the old map is deprecated, and every optimised function that saw it
 * deoptimises ("wrong map") and runs unoptimised until V8 compiles it again. For a QP that is
 * most of the data path: on the 2-core VM a new connection whose initial PSN lay above 2^31
 * made its first ~6000 round trips run at 3-5x their latency (ib_send_lat -R, p99 ~2 ms),
 * and which field crossed first depended on the peer's values, so it could happen again with
 * any later QP, or when a long-lived QP's counter crossed 2^31.
 *
 * `widenNumberFields(o)` makes every number field of `o` a double before the object is used:
 * the first object of a class moves its map tree to doubles once (at construction, on the
 * control path), and every later object is born with that map. A double field costs a load
 * through its box; its stores write into the box in place (no allocation).
 */
export function widenNumberFields(o: object): void {
  const r = o as Record<string, unknown>;
  for (const k of Object.keys(r)) {
    const v = r[k];
    if (typeof v !== 'number') continue;
    r[k] = 0.5; // not a Smi: the field's representation becomes double (monotonic)
    r[k] = v;
  }
}
