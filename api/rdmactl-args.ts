/**
 * rdmactl's command-line words: the usage error, `key value` options, integers (decimal or
 * 0x hex), SGE lists, endpoints, hex bytes, and VPP's unique-prefix matching of command words
 * (`sh int` is `show interfaces`, `show runtim` is `show runtime`).
 */

export class UsageError extends Error {}

/**
 * The choice `word` names: an exact alias, or the one choice every alias it begins is for.
 * `choices` maps each accepted word (aliases too) to its canonical name.
 */
export function resolveWord(word: string | undefined, choices: Record<string, string>, what: string): string {
  const list = [...new Set(Object.values(choices))].join(', ');
  // what '' is the command word itself: "unknown command", not "rdmactl: rdmactl: ...".
  const pre = what === '' ? '' : `${what}: `,
    noun = what === '' ? 'command ' : '';
  if (word === undefined || word === '') throw new UsageError(`${pre}missing ${noun}(expected ${list})`);
  if (Object.hasOwn(choices, word)) return choices[word];
  const hits = new Set(
    Object.keys(choices)
      .filter((k) => k.startsWith(word))
      .map((k) => choices[k]),
  );
  if (hits.size === 1) return [...hits][0];
  if (hits.size > 1) throw new UsageError(`${pre}${noun}"${word}" is ambiguous: ${[...hits].join(', ')}`);
  throw new UsageError(`${pre}unknown ${noun}"${word}" (expected ${list})`);
}

/** Words after a command, as `key value` pairs and bare flags. */
export class Args {
  private i = 0;
  constructor(
    private readonly words: string[],
    private readonly what: string,
  ) {}

  get done(): boolean {
    return this.i >= this.words.length;
  }

  word(name: string): string {
    if (this.i >= this.words.length) throw new UsageError(`${this.what}: missing ${name}`);
    return this.words[this.i++];
  }

  int(name: string): number {
    const w = this.word(name);
    return toInt(w, `${this.what}: ${name}`);
  }

  /** The remaining words as options: `key value` for keys in `valued`, bare flags for `flags`. */
  options(valued: string[], flags: string[] = []): Map<string, string> {
    const m = new Map<string, string>();
    while (this.i < this.words.length) {
      const k = this.words[this.i++];
      if (flags.includes(k)) m.set(k, 'true');
      else if (valued.includes(k)) {
        if (this.i >= this.words.length) throw new UsageError(`${this.what}: ${k} needs a value`);
        m.set(k, this.words[this.i++]);
      } else
        throw new UsageError(
          `${this.what}: unknown word "${k}" (expected ${[...valued, ...flags].join(', ') || 'nothing more'})`,
        );
    }
    return m;
  }

  end(): void {
    if (this.i < this.words.length) throw new UsageError(`${this.what}: unexpected "${this.words[this.i]}"`);
  }
}

export function toInt(w: string, what: string): number {
  if (!/^(0|[1-9][0-9]*|0x[0-9a-fA-F]+)$/.test(w))
    throw new UsageError(`${what} must be a non-negative integer, got "${w}"`);
  const n = Number(w);
  if (!Number.isSafeInteger(n)) throw new UsageError(`${what} is too large: ${w}`);
  return n;
}

export function intOpt(m: Map<string, string>, key: string, what: string): number | undefined {
  const v = m.get(key);
  return v === undefined ? undefined : toInt(v, `${what}: ${key}`);
}

export function numOpt(m: Map<string, string>, key: string, what: string): number | undefined {
  const v = m.get(key);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${what}: ${key} must be a number, got "${v}"`);
  return n;
}

/** wr-id: an integer when it looks like one, else the string. */
export function wrId(w: string): string | number {
  return /^(0|[1-9][0-9]{0,14})$/.test(w) ? Number(w) : w;
}

export function sges(
  s: string | undefined,
  what: string,
): { mr: number; offset: number; length: number }[] | undefined {
  if (s === undefined) return undefined;
  return s.split(',').map((e, i) => {
    const p = e.split(':');
    if (p.length !== 3) throw new UsageError(`${what}: sge ${i} must be MR:OFFSET:LENGTH, got "${e}"`);
    return {
      mr: toInt(p[0], `${what}: sge ${i} mr`),
      offset: toInt(p[1], `${what}: sge ${i} offset`),
      length: toInt(p[2], `${what}: sge ${i} length`),
    };
  });
}

export function endpoint(s: string, what: string): { ip: string; port: number } {
  const m = /^(\d+\.\d+\.\d+\.\d+):(\d+)$/.exec(s);
  if (!m) throw new UsageError(`${what}: expected IP:PORT, got "${s}"`);
  return { ip: m[1], port: toInt(m[2], `${what}: port`) };
}

export function hexBytes(s: string, what: string): Uint8Array {
  const h = s.startsWith('0x') ? s.slice(2) : s;
  if (!/^([0-9a-fA-F]{2})*$/.test(h))
    throw new UsageError(`${what}: expected hex bytes (an even number of hex digits), got "${s}"`);
  return Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
}

export function base64(b: Uint8Array): string {
  return Buffer.from(b).toString('base64');
}

export function hexdump(b: Uint8Array, base: number): string {
  let out = '';
  for (let o = 0; o < b.length; o += 16) {
    const row = b.subarray(o, o + 16);
    const hex = Array.from(row, (x) => x.toString(16).padStart(2, '0')).join(' ');
    const txt = Array.from(row, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    out += `${(base + o).toString(16).padStart(8, '0')}  ${hex.padEnd(48)}  ${txt}\n`;
  }
  return out;
}
