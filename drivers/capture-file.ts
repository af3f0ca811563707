/**
 * Capture files the API asks for (issue 12, item 4). The daemon runs as root; a client names a
 * file, never a path: it is created in the one configured directory (capture.dir, itself
 * never a symlink: opened O_NOFOLLOW and created in through that fd), never replaces anything
 * (an existing name, a symlink or a FIFO planted there is refused without being opened), and
 * must come out a regular file.
 *
 *   const { fd, path } = openCaptureFile('run/captures', 'a.pcap');   // then new PcapWriter(path, { fd })
 */
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';

/** Longest capture file name. */
export const CAPTURE_NAME_MAX = 128;
/** A name: letters, digits, '.', '_', '-'; not starting with '.' or '-'; no '..'. */
const NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;

export type CaptureFileErrorKind = 'invalid' | 'exists' | 'unavailable';

export class CaptureFileError extends Error {
  readonly kind: CaptureFileErrorKind;
  constructor(kind: CaptureFileErrorKind, message: string) {
    super(message);
    this.kind = kind;
    this.name = 'CaptureFileError';
  }
}

/** What is wrong with `name` as a capture file name, or undefined. */
export function captureNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || name === '') return 'is empty';
  if (name.length > CAPTURE_NAME_MAX) return `is ${name.length} characters, more than ${CAPTURE_NAME_MAX}`;
  if (name.includes('/') || name.includes('\0')) return 'is a path: give a file name (it goes into capture.dir)';
  if (name.startsWith('.')) return 'starts with "." (no hidden files, no "." or "..")';
  if (name.startsWith('-')) return 'starts with "-"';
  if (name.includes('..')) return 'contains ".."';
  if (!NAME.test(name)) return 'has characters other than letters, digits, ".", "_" and "-"';
  return undefined;
}

/**
 * `dir`, made (mode 0700) when missing, opened O_DIRECTORY|O_NOFOLLOW: a directory, never a
 * symlink to one (whoever can replace capture.dir by a link would choose where root writes).
 * Returns its fd (the caller closes it): files are created through it, so the directory they
 * land in is the one checked here even if the path is swapped meanwhile.
 */
function openDir(dir: string): number {
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw new CaptureFileError(
      'unavailable',
      `capture.dir ${dir} cannot be made: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  const c = fs.constants;
  try {
    return fs.openSync(dir, c.O_RDONLY | c.O_DIRECTORY | c.O_NOFOLLOW);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    let link = code === 'ELOOP';
    try {
      link ||= fs.lstatSync(dir).isSymbolicLink();
    } catch {
      // gone meanwhile: said below
    }
    if (link) throw new CaptureFileError('unavailable', `capture.dir ${dir} is a symbolic link: make it a directory`);
    if (code === 'ENOTDIR') throw new CaptureFileError('unavailable', `capture.dir ${dir} is not a directory`);
    throw new CaptureFileError('unavailable', `capture.dir ${dir} cannot be opened: ${code ?? (e as Error).message}`);
  }
}

/** `name` inside the directory open as `dirFd` (openat through /proc/self/fd; else by its path). */
function inDir(dirFd: number, dir: string, name: string): string {
  const via = `/proc/self/fd/${dirFd}`;
  return fs.existsSync(via) ? `${via}/${name}` : join(dir, name);
}

/**
 * Create capture file `name` in `dir` (made when missing; not a symlink):
 * O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK, mode 0600, a regular file. Returns the open fd (the
 * caller closes it) and the absolute path.
 */
export function openCaptureFile(dir: string, name: string): { fd: number; path: string } {
  const why = captureNameProblem(name);
  if (why !== undefined)
    throw new CaptureFileError('invalid', `capture file name ${JSON.stringify(String(name).slice(0, 200))} ${why}`);
  const dirFd = openDir(dir);
  const path = join(resolve(dir), name);
  const c = fs.constants;
  let fd: number;
  try {
    fd = fs.openSync(
      inDir(dirFd, resolve(dir), name),
      c.O_WRONLY | c.O_CREAT | c.O_EXCL | c.O_NOFOLLOW | c.O_NONBLOCK,
      0o600,
    );
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ELOOP')
      throw new CaptureFileError(
        'exists',
        `capture file ${name} already exists in capture.dir (${dir}): pick another name, or remove it`,
      );
    throw new CaptureFileError(
      'unavailable',
      `capture file ${name} cannot be created in capture.dir (${dir}): ${code ?? (e as Error).message}`,
    );
  } finally {
    fs.closeSync(dirFd);
  }
  const st = fs.fstatSync(fd);
  if (!st.isFile()) {
    fs.closeSync(fd);
    throw new CaptureFileError('unavailable', `capture file ${name} in capture.dir (${dir}) is not a regular file`);
  }
  return { fd, path };
}

/** Close and remove a capture file this module created (when starting the capture failed after all). */
export function discardCaptureFile(f: { fd: number; path: string }): void {
  try {
    fs.closeSync(f.fd);
  } catch {
    // already closed by a writer that took it over
  }
  fs.rmSync(f.path, { force: true });
}
