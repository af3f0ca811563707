/**
 * Classic libpcap capture files (not pcapng): a reader that indexes a whole file held in memory
 * and a writer that appends records through one staging buffer, one write per burst.
 *
 * File layout (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcap-03.html):
 *   global header (24 bytes): magic u32, version_major u16, version_minor u16, thiszone i32,
 *                             sigfigs u32, snaplen u32, linktype u32
 *   per record (16 bytes + data): ts_sec u32, ts_frac u32 (µs or ns, by magic), incl_len u32,
 *                             orig_len u32, then incl_len bytes of packet data
 * The magic, read in the file's own byte order, is 0xa1b2c3d4 (microsecond timestamps) or
 * 0xa1b23c4d (nanosecond timestamps); read the other way round it tells a big-endian file.
 *
 * The reader creates no object per record: its index is a handful of typed arrays.
 */
import * as fs from 'node:fs';

export const PCAP_MAGIC_USEC = 0xa1b2c3d4;
export const PCAP_MAGIC_NSEC = 0xa1b23c4d;
/** Section header block type of pcapng (byte-order independent). */
export const PCAPNG_MAGIC = 0x0a0d0d0a;
export const PCAP_GLOBAL_HEADER_BYTES = 24;
export const PCAP_RECORD_HEADER_BYTES = 16;
/** Largest record we accept (libpcap's MAXIMUM_SNAPLEN). */
export const PCAP_MAX_RECORD_BYTES = 256 * 1024;
export const PCAP_DEFAULT_SNAPLEN = 262144;
export const LINKTYPE_ETHERNET = 1;

/** The global header of a capture, as read (or as to be written). */
export interface PcapHeader {
  /** Fields are little-endian in the file. The writer always writes little-endian. */
  littleEndian: boolean;
  /** Record timestamps are nanoseconds (magic 0xa1b23c4d) rather than microseconds. */
  nanosecond: boolean;
  versionMajor: number;
  versionMinor: number;
  /** GMT to local correction, seconds (signed; always 0 in practice). */
  thiszone: number;
  sigfigs: number;
  snaplen: number;
  /** LINKTYPE_* value (1 = Ethernet). */
  linktype: number;
}

/**
 * An indexed capture. Record i's data is `data[dataOffset[i] .. dataOffset[i] + inclLen[i])`;
 * its timestamp is `tsSec[i]` seconds + `tsNsec[i]` nanoseconds (microsecond files are scaled).
 */
export class PcapReader {
  readonly source: string;
  readonly data: Uint8Array;
  readonly header: PcapHeader;
  readonly count: number;
  /** Byte offset in `data` of each record's packet bytes (after its 16-byte header). */
  readonly dataOffset: Float64Array;
  readonly inclLen: Uint32Array;
  readonly origLen: Uint32Array;
  readonly tsSec: Uint32Array;
  /** Nanoseconds within the second (a fraction of 1e6 µs / 1e9 ns or more carries into tsSec). */
  readonly tsNsec: Uint32Array;
  /** Sum of inclLen over all records. */
  readonly totalBytes: number;
  /** Largest inclLen (0 for an empty capture). */
  readonly maxInclLen: number;

  private constructor(source: string, data: Uint8Array) {
    this.source = source;
    // A plain Uint8Array view, also of a Buffer: one array shape in the data path.
    if (data.constructor !== Uint8Array) data = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.data = data;
    const where = `pcap file ${source}`;
    if (data.byteLength < PCAP_GLOBAL_HEADER_BYTES) {
      throw new Error(
        `${where}: too short for a pcap global header (${data.byteLength} bytes, need ${PCAP_GLOBAL_HEADER_BYTES})`,
      );
    }
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const magicLE = view.getUint32(0, true);
    let le: boolean;
    let ns: boolean;
    if (magicLE === PCAP_MAGIC_USEC || magicLE === PCAP_MAGIC_NSEC) {
      le = true;
      ns = magicLE === PCAP_MAGIC_NSEC;
    } else {
      const magicBE = view.getUint32(0, false);
      if (magicBE === PCAP_MAGIC_USEC || magicBE === PCAP_MAGIC_NSEC) {
        le = false;
        ns = magicBE === PCAP_MAGIC_NSEC;
      } else if (magicLE === PCAPNG_MAGIC) {
        throw new Error(
          `${where}: this is a pcapng file (magic 0x0a0d0d0a); pcapng is not supported, convert it with "editcap -F pcap IN OUT"`,
        );
      } else {
        throw new Error(
          `${where}: bad magic 0x${hex32(view.getUint32(0, false))} (first 4 bytes); expected a classic pcap file ` +
            `(a1b2c3d4 or a1b23c4d in either byte order)`,
        );
      }
    }
    const header: PcapHeader = {
      littleEndian: le,
      nanosecond: ns,
      versionMajor: view.getUint16(4, le),
      versionMinor: view.getUint16(6, le),
      thiszone: view.getInt32(8, le),
      sigfigs: view.getUint32(12, le),
      snaplen: view.getUint32(16, le),
      linktype: view.getUint32(20, le),
    };
    if (header.versionMajor !== 2) {
      throw new Error(
        `${where}: unsupported pcap version ${header.versionMajor}.${header.versionMinor} (expected 2.x)`,
      );
    }
    this.header = header;

    // Pass 1: validate every record and count them; pass 2 fills the index.
    const len = data.byteLength;
    const snaplen = header.snaplen;
    let n = 0;
    let pos = PCAP_GLOBAL_HEADER_BYTES;
    while (pos < len) {
      const rec = n + 1;
      if (len - pos < PCAP_RECORD_HEADER_BYTES) {
        throw new Error(
          `${where}: record ${rec} at byte offset ${pos} is truncated: ${len - pos} bytes left, a record header needs ${PCAP_RECORD_HEADER_BYTES}`,
        );
      }
      const incl = view.getUint32(pos + 8, le);
      if (incl > PCAP_MAX_RECORD_BYTES) {
        throw new Error(
          `${where}: record ${rec} at byte offset ${pos} has incl_len ${incl}, more than the ${PCAP_MAX_RECORD_BYTES}-byte maximum`,
        );
      }
      if (incl > snaplen) {
        throw new Error(
          `${where}: record ${rec} at byte offset ${pos} has incl_len ${incl}, more than the file's snaplen ${snaplen}`,
        );
      }
      const end = pos + PCAP_RECORD_HEADER_BYTES + incl;
      if (end > len) {
        throw new Error(
          `${where}: record ${rec} at byte offset ${pos} is truncated: incl_len ${incl} but only ${len - pos - PCAP_RECORD_HEADER_BYTES} data bytes left`,
        );
      }
      n++;
      pos = end;
    }

    this.count = n;
    this.dataOffset = new Float64Array(n);
    this.inclLen = new Uint32Array(n);
    this.origLen = new Uint32Array(n);
    this.tsSec = new Uint32Array(n);
    this.tsNsec = new Uint32Array(n);
    const fracPerSec = ns ? 1e9 : 1e6;
    const nsPerFrac = ns ? 1 : 1000;
    let total = 0,
      maxIncl = 0;
    pos = PCAP_GLOBAL_HEADER_BYTES;
    for (let i = 0; i < n; i++) {
      let sec = view.getUint32(pos, le);
      let frac = view.getUint32(pos + 4, le);
      if (frac >= fracPerSec) {
        // Out-of-range fraction (seen from some writers): carry whole seconds.
        sec = (sec + Math.floor(frac / fracPerSec)) >>> 0;
        frac = frac % fracPerSec;
      }
      const incl = view.getUint32(pos + 8, le);
      this.tsSec[i] = sec;
      this.tsNsec[i] = frac * nsPerFrac;
      this.inclLen[i] = incl;
      this.origLen[i] = view.getUint32(pos + 12, le);
      this.dataOffset[i] = pos + PCAP_RECORD_HEADER_BYTES;
      total += incl;
      if (incl > maxIncl) maxIncl = incl;
      pos += PCAP_RECORD_HEADER_BYTES + incl;
    }
    this.totalBytes = total;
    this.maxInclLen = maxIncl;
  }

  /** Index a capture held in memory. `source` names it in error messages. */
  static parse(data: Uint8Array, source = '<memory>'): PcapReader {
    return new PcapReader(source, data);
  }

  /** Read and index a capture file. Errors name the path and what is wrong. */
  static open(path: string): PcapReader {
    let data: Uint8Array;
    try {
      data = fs.readFileSync(path);
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      if (err.code === 'ENOENT') throw new Error(`pcap file ${path} does not exist`);
      if (err.code === 'EACCES') throw new Error(`pcap file ${path} is not readable: permission denied`);
      if (err.code === 'EISDIR') throw new Error(`pcap file ${path} is a directory`);
      throw new Error(`pcap file ${path} cannot be read: ${err.message}`);
    }
    return new PcapReader(path, data);
  }

  /** Record i's packet bytes (a view, no copy; allocates the view: not for the data path). */
  packet(i: number): Uint8Array {
    const o = this.dataOffset[i];
    return this.data.subarray(o, o + this.inclLen[i]);
  }
}

export interface PcapWriterOptions {
  /** Default 262144. */
  snaplen?: number;
  /** Nanosecond timestamps (magic a1b23c4d). Default false (microseconds). */
  nanosecond?: boolean;
  /** Default 1 (Ethernet). */
  linktype?: number;
  /** Default 2. */
  versionMajor?: number;
  /** Default 4. */
  versionMinor?: number;
  /** Default 0. */
  thiszone?: number;
  /** Default 0. */
  sigfigs?: number;
  /**
   * An open, writable file descriptor to write to instead of opening `path` (the writer takes it
   * over and closes it); `path` then only names the file. For files opened with care
   * (drivers/capture-file.ts).
   */
  fd?: number;
}

/**
 * Appends records to a new little-endian pcap file. Records are staged in memory and written by
 * `flush()` with one `fs.writeSync`; `close()` flushes and closes.
 *
 * Writing many records without copying them twice:
 *   const at = w.beginRecord(sec, nsec, incl, orig); w.buf.set(bytes, at); ... w.flush();
 * (read `w.buf` after `beginRecord`: it may have grown.)
 */
export class PcapWriter {
  readonly path: string;
  readonly header: PcapHeader;
  /** Staging buffer; valid bytes are `[0, pending)`. Replaced when it grows. */
  buf: Uint8Array;
  private view: DataView;
  private pending = 0;
  private fd: number;
  private readonly nanosecond: boolean;
  /** Records appended (flushed or not). */
  records = 0;
  /** Bytes written to the file so far, header included. */
  bytesWritten = 0;

  constructor(path: string, opts: PcapWriterOptions = {}) {
    const snaplen = opts.snaplen ?? PCAP_DEFAULT_SNAPLEN;
    checkU32('snaplen', snaplen, 1);
    const linktype = opts.linktype ?? LINKTYPE_ETHERNET;
    checkU32('linktype', linktype, 0);
    const versionMajor = opts.versionMajor ?? 2;
    const versionMinor = opts.versionMinor ?? 4;
    if (!Number.isInteger(versionMajor) || versionMajor < 0 || versionMajor > 0xffff)
      throw new RangeError(`pcap writer: versionMajor must be a u16, got ${versionMajor}`);
    if (!Number.isInteger(versionMinor) || versionMinor < 0 || versionMinor > 0xffff)
      throw new RangeError(`pcap writer: versionMinor must be a u16, got ${versionMinor}`);
    const thiszone = opts.thiszone ?? 0;
    if (!Number.isInteger(thiszone) || thiszone < -0x80000000 || thiszone > 0x7fffffff)
      throw new RangeError(`pcap writer: thiszone must be an i32, got ${thiszone}`);
    const sigfigs = opts.sigfigs ?? 0;
    checkU32('sigfigs', sigfigs, 0);
    this.path = path;
    this.nanosecond = opts.nanosecond ?? false;
    this.header = {
      littleEndian: true,
      nanosecond: this.nanosecond,
      versionMajor,
      versionMinor,
      thiszone,
      sigfigs,
      snaplen,
      linktype,
    };
    this.buf = new Uint8Array(64 * 1024);
    this.view = new DataView(this.buf.buffer);
    if (opts.fd !== undefined) this.fd = opts.fd;
    else {
      try {
        this.fd = fs.openSync(path, 'w');
      } catch (e) {
        throw new Error(`pcap file ${path} cannot be created: ${(e as Error).message}`);
      }
    }
    const v = this.view;
    v.setUint32(0, this.nanosecond ? PCAP_MAGIC_NSEC : PCAP_MAGIC_USEC, true);
    v.setUint16(4, versionMajor, true);
    v.setUint16(6, versionMinor, true);
    v.setInt32(8, thiszone, true);
    v.setUint32(12, sigfigs, true);
    v.setUint32(16, snaplen, true);
    v.setUint32(20, linktype, true);
    this.pending = PCAP_GLOBAL_HEADER_BYTES;
    this.flush();
  }

  get snaplen(): number {
    return this.header.snaplen;
  }

  get isOpen(): boolean {
    return this.fd >= 0;
  }

  /**
   * Stage a record header and reserve `inclLen` data bytes after it. Returns the offset in
   * `this.buf` where the caller writes the packet bytes. `tsNsec` >= 1e9 carries into seconds.
   */
  beginRecord(tsSec: number, tsNsec: number, inclLen: number, origLen: number): number {
    if (this.fd < 0) throw new Error(`pcap file ${this.path}: write after close`);
    const need = this.pending + PCAP_RECORD_HEADER_BYTES + inclLen;
    if (need > this.buf.byteLength) this.grow(need);
    if (tsNsec >= 1e9) {
      tsSec += Math.floor(tsNsec / 1e9);
      tsNsec %= 1e9;
    }
    const v = this.view,
      p = this.pending;
    v.setUint32(p, tsSec >>> 0, true);
    v.setUint32(p + 4, this.nanosecond ? tsNsec : Math.floor(tsNsec / 1000), true);
    v.setUint32(p + 8, inclLen, true);
    v.setUint32(p + 12, origLen, true);
    this.pending = p + PCAP_RECORD_HEADER_BYTES + inclLen;
    this.records++;
    return p + PCAP_RECORD_HEADER_BYTES;
  }

  /** Stage one record whose bytes are contiguous (truncated to snaplen; orig_len = data length unless given). */
  writeRecord(tsSec: number, tsNsec: number, data: Uint8Array, origLen = data.byteLength): void {
    const incl = data.byteLength < this.header.snaplen ? data.byteLength : this.header.snaplen;
    const at = this.beginRecord(tsSec, tsNsec, incl, origLen);
    this.buf.set(incl === data.byteLength ? data : data.subarray(0, incl), at);
  }

  /** Write everything staged with one write (looping only if the kernel writes short). */
  flush(): void {
    let off = 0;
    const n = this.pending;
    while (off < n) off += fs.writeSync(this.fd, this.buf, off, n - off);
    this.bytesWritten += n;
    this.pending = 0;
  }

  /** Flush and close. Idempotent. */
  close(): void {
    if (this.fd < 0) return;
    try {
      this.flush();
    } finally {
      fs.closeSync(this.fd);
      this.fd = -1;
    }
  }

  private grow(need: number): void {
    let size = this.buf.byteLength * 2;
    while (size < need) size *= 2;
    const b = new Uint8Array(size);
    b.set(this.buf.subarray(0, this.pending));
    this.buf = b;
    this.view = new DataView(b.buffer);
  }
}

function checkU32(name: string, v: number, min: number): void {
  if (!Number.isInteger(v) || v < min || v > 0xffffffff)
    throw new RangeError(`pcap writer: ${name} must be an integer in ${min}..4294967295, got ${v}`);
}

function hex32(v: number): string {
  return v.toString(16).padStart(8, '0');
}
