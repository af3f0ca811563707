/**
 * The verbs protocol's messages, encoded and decoded through its generated ABI (abi.generated.ts).
 * From native/verbs-lib/proto.h's layouts (the protocol: docs/VERBS-PROTOCOL.md): a struct
 * encoded from and decoded to its members by name, a message built (header, then body) and a
 * received one read, over DataView. The daemon's handlers decode every request here; tests that speak the
 * socket themselves build their requests and read the replies with the same functions.
 *
 *   const q = message(RGV_OP_CREATE_SRQ, seq, encode(rgv_create_srq, { pd, max_wr: 32, max_sge: 4 }));
 *   const r = readMessage(reply);            // { op, status, seq, count, body }
 *   const { handle, max_wr } = decode(rgv_srq, r.body);
 */
import { type AbiField, type AbiStruct, RGV_MAGIC, rgv_hdr } from './abi.generated.ts';

/** A member's value: text for char[], a number for one integer (a u64 exact up to 2^53), bytes for an array. */
type ValueOf<F extends AbiField> = F['type'] extends 'char' ? string : F['count'] extends 1 ? number : Uint8Array;
/** What encode() takes for a member: a u64 as a number or a bigint, an array as any list of bytes. */
type InputOf<F extends AbiField> = F['type'] extends 'char'
  ? string
  : F['count'] extends 1
    ? number | bigint
    : ArrayLike<number>;

/** A struct decoded: each member by its C name. */
export type Decoded<S extends AbiStruct> = { -readonly [K in keyof S['fields']]: ValueOf<S['fields'][K]> };
/** The members to encode (any left out is zero). */
export type Encodable<S extends AbiStruct> = { [K in keyof S['fields']]?: InputOf<S['fields'][K]> };

/**
 * The Linux errno values the daemon answers with: a reply's status is minus one of them (the
 * library hands it to the program as errno). Not part of proto.h: they are the kernel's.
 */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  ENOMEM: 12,
  EBUSY: 16,
  ENODEV: 19,
  EINVAL: 22,
  ENFILE: 23,
  EMFILE: 24,
  EUSERS: 87,
  EOPNOTSUPP: 95,
} as const;

const EMPTY = new Uint8Array(0);
const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

/** Struct `s` at byte `at` of `v` (which must hold all of it: RangeError otherwise). */
export function decode<S extends AbiStruct>(s: S, v: DataView, at = 0): Decoded<S> {
  if (at + s.size > v.byteLength) throw new RangeError(`${s.name}: ${v.byteLength - at} bytes, ${s.size} needed`);
  const out: Record<string, string | number | Uint8Array> = {};
  for (const [name, f] of Object.entries(s.fields)) {
    const o = at + f.offset;
    if (f.type === 'char') {
      const raw = new Uint8Array(v.buffer, v.byteOffset + o, f.count);
      const end = raw.indexOf(0);
      out[name] = textDecoder.decode(raw.subarray(0, end < 0 ? f.count : end));
    } else if (f.count !== 1) out[name] = new Uint8Array(v.buffer, v.byteOffset + o, f.count).slice();
    else if (f.type === 'u8') out[name] = v.getUint8(o);
    else if (f.type === 'i16') out[name] = v.getInt16(o, true);
    else if (f.type === 'u16') out[name] = v.getUint16(o, true);
    else if (f.type === 'u32') out[name] = v.getUint32(o, true);
    else out[name] = Number(v.getBigUint64(o, true));
  }
  return out as Decoded<S>;
}

/** Struct `s` into `v` at byte `at`: integers wrap to their width, a text is cut to leave its NUL. */
export function encodeInto<S extends AbiStruct>(s: S, values: Encodable<S>, v: DataView, at = 0): void {
  const given = values as Record<string, string | number | bigint | ArrayLike<number> | undefined>;
  for (const [name, f] of Object.entries(s.fields)) {
    const x = given[name];
    if (x === undefined) continue;
    const o = at + f.offset;
    if (f.type === 'char' || f.count !== 1) {
      const bytes = typeof x === 'string' ? textEncoder.encode(x).subarray(0, f.count - 1) : (x as ArrayLike<number>);
      if (bytes.length > f.count) throw new RangeError(`${s.name}.${name}: ${bytes.length} bytes, at most ${f.count}`);
      new Uint8Array(v.buffer, v.byteOffset + o, f.count).set(bytes);
    } else if (f.type === 'u64') v.setBigUint64(o, BigInt(x as number | bigint), true);
    else if (f.type === 'u8') v.setUint8(o, Number(x));
    else if (f.type === 'i16') v.setInt16(o, Number(x), true);
    else if (f.type === 'u16') v.setUint16(o, Number(x), true);
    else v.setUint32(o, Number(x) >>> 0, true);
  }
}

/** Struct `s` with these members, in its own bytes. */
export function encode<S extends AbiStruct>(s: S, values: Encodable<S>): Uint8Array {
  const out = new Uint8Array(s.size);
  encodeInto(s, values, new DataView(out.buffer));
  return out;
}

/** `n` records of struct `s` at the start of `v` (a DEVICES reply's body). */
export function decodeAll<S extends AbiStruct>(s: S, v: DataView, n: number): Decoded<S>[] {
  return Array.from({ length: n }, (_, k) => decode(s, v, k * s.size));
}

/**
 * A message: the header (RGV_MAGIC, op, status, seq, count), then `body`. A request has status
 * and count 0; a reply repeats its request's op and seq.
 */
export function message(op: number, seq: number, body: Uint8Array = EMPTY, status = 0, count = 0): Uint8Array {
  const out = new Uint8Array(rgv_hdr.size + body.length);
  encodeInto(rgv_hdr, { magic: RGV_MAGIC, op, status, seq, count }, new DataView(out.buffer));
  out.set(body, rgv_hdr.size);
  return out;
}

/** A received message: its header's members and its body (what follows the header). */
export interface Message {
  magic: number;
  op: number;
  /** 0, or minus an errno. */
  status: number;
  seq: number;
  count: number;
  body: DataView;
}

/** A received message read (null: shorter than a header; the magic is the caller's to check). */
export function readMessage(data: Uint8Array): Message | null {
  if (data.length < rgv_hdr.size) return null;
  const h = decode(rgv_hdr, new DataView(data.buffer, data.byteOffset, data.length));
  return {
    ...h,
    body: new DataView(data.buffer, data.byteOffset + rgv_hdr.size, data.length - rgv_hdr.size),
  };
}

/** A body's bytes as text (a refusal's reason). */
export function bodyText(body: DataView): string {
  return textDecoder.decode(new Uint8Array(body.buffer, body.byteOffset, body.byteLength));
}
