/**
 * Who may use the API (README "Security"). With api.token set, the token is the credential:
 * every request needs it, from anywhere. Without it the API takes requests only from local
 * users it knows by the uid owning the connecting socket (api/peer.ts): the daemon's own user,
 * root, and those api.users and api.group name. Those extra users do not reach a verbs
 * program's memory: an MR a program registered through the verbs socket is read, written or
 * deregistered only by the daemon's user, root, or a caller with the token.
 */
import { readFileSync } from 'node:fs';

/** Who made a request: what it may do follows from this. */
export type Caller =
  { kind: 'token' } | { kind: 'owner'; uid: number } | { kind: 'user'; uid: number } | { kind: 'refused'; why: string };

export interface AccessOptions {
  /** The daemon's uid (default process.getuid()). */
  ownerUid?: number;
  /** Other local users (names or uids) allowed without the token. */
  users?: readonly (string | number)[];
  /** A local group whose members are allowed without the token. */
  group?: string | null;
  /** /etc/passwd and /etc/group (tests give their own). */
  passwd?: string;
  groupFile?: string;
}

interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
}

function readLines(path: string): string[] {
  try {
    return readFileSync(path, 'utf8').split('\n');
  } catch {
    return [];
  }
}

function passwdEntries(path: string): PasswdEntry[] {
  return readLines(path).flatMap((l) => {
    const f = l.split(':');
    if (f.length < 4 || l.startsWith('#')) return [];
    const uid = Number(f[2]),
      gid = Number(f[3]);
    return Number.isInteger(uid) && Number.isInteger(gid) ? [{ name: f[0], uid, gid }] : [];
  });
}

/** The uid a user name or number names, or an Error saying it is unknown. */
export function resolveUser(u: string | number, passwd = '/etc/passwd'): number {
  if (typeof u === 'number' || /^[0-9]+$/.test(u)) return Number(u);
  const e = passwdEntries(passwd).find((p) => p.name === u);
  if (e === undefined) throw new Error(`api.users: no local user "${u}" (not in ${passwd}; a uid number works too)`);
  return e.uid;
}

/** A group's gid and member names, or an Error saying it is unknown. */
export function resolveGroup(name: string, groupFile = '/etc/group'): { gid: number; members: string[] } {
  for (const l of readLines(groupFile)) {
    const f = l.split(':');
    if (f.length >= 4 && (f[0] === name || f[2] === name))
      return { gid: Number(f[2]), members: f[3].split(',').filter((m) => m !== '') };
  }
  throw new Error(`api.group: no local group "${name}" (not in ${groupFile})`);
}

export class LocalAccess {
  readonly ownerUid: number;
  private readonly users: Set<number>;
  private readonly group: string | null;
  private readonly passwd: string;
  private readonly groupFile: string;

  /** Throws, naming it, when api.users or api.group names a user or group this host lacks. */
  constructor(o: AccessOptions = {}) {
    this.ownerUid = o.ownerUid ?? process.getuid?.() ?? 0;
    this.passwd = o.passwd ?? '/etc/passwd';
    this.groupFile = o.groupFile ?? '/etc/group';
    this.users = new Set((o.users ?? []).map((u) => resolveUser(u, this.passwd)));
    this.group = o.group ?? null;
    if (this.group !== null) resolveGroup(this.group, this.groupFile);
  }

  private nameOf(uid: number): string {
    const e = passwdEntries(this.passwd).find((p) => p.uid === uid);
    return e ? `uid ${uid} (${e.name})` : `uid ${uid}`;
  }

  /** Whether `uid` is in api.group: a listed member, or the group is its primary group. */
  private inGroup(uid: number): boolean {
    if (this.group === null) return false;
    // Read at each new connection: a user added to the group counts without a restart.
    let g: { gid: number; members: string[] };
    try {
      g = resolveGroup(this.group, this.groupFile);
    } catch {
      return false;
    }
    const e = passwdEntries(this.passwd).find((p) => p.uid === uid);
    return e !== undefined && (e.gid === g.gid || g.members.includes(e.name));
  }

  /** Who a connection from `uid` (null: not a local socket we can identify) is, without a token. */
  caller(uid: number | null): Caller {
    if (uid === 0 || uid === this.ownerUid) return { kind: 'owner', uid };
    if (uid !== null && (this.users.has(uid) || this.inGroup(uid))) return { kind: 'user', uid };
    const allowed = [
      `the daemon's user (${this.nameOf(this.ownerUid)})`,
      'root',
      ...[...this.users].map((u) => this.nameOf(u)),
      ...(this.group !== null ? [`members of group ${this.group}`] : []),
    ].join(', ');
    const who = uid === null ? 'a connection whose local user cannot be known (not from this host)' : this.nameOf(uid);
    return {
      kind: 'refused',
      why: `this API serves ${allowed} without a token; the request came from ${who}: set api.token and send it, or add the user to api.users or api.group`,
    };
  }
}
