/**
 * What keeps web pages out of the API (issue 12, item 6). The API has no cookies, but a browser
 * on the same machine can still reach 127.0.0.1, and so can every page it loads:
 *
 * - DNS rebinding: a page of evil.example whose name then resolves to 127.0.0.1 talks to us as
 *   "same origin". Its requests carry `Host: evil.example:7070`: the Host header must name this
 *   API (its listen address, localhost, 127.0.0.1 or [::1], with its port).
 * - Cross-site requests: a page may send GETs (an <img>) and "simple" POSTs (a form, fetch with
 *   no-cors) to us without asking. Every browser request that is not a top-level navigation
 *   carries `Origin` or `Sec-Fetch-Site` (or both): an Origin other than this API's, or a
 *   Sec-Fetch-Site other than same-origin or none (typed by the user), is refused.
 * - Every POST must carry `Content-Type: application/json` (`{}` when there is nothing to say).
 *   A browser sends that type cross-origin only after a CORS preflight, which this API never
 *   approves (it sends no Access-Control-* headers), so no page can make it POST, whatever the
 *   browser's age. PUT and DELETE need the preflight anyway.
 *
 * Refusals are 403 (Host, Origin, Sec-Fetch-Site) and 415 (POST without JSON).
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { HttpError } from './errors.ts';

/** The loopback names every API answers to (besides its listen address). */
export const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** True for addresses that only this machine can reach: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h === '::1') return true;
  return isIP(h) === 4 && h.startsWith('127.');
}

/** A host as written in a Host header or URL: IPv6 in brackets, lower case. */
function hostName(host: string): string {
  const h = host.toLowerCase();
  return isIP(h) === 6 ? `[${h}]` : h;
}

/**
 * The host names a listener on `host` answers to: loopback names, the address itself, and for
 * a wildcard address (0.0.0.0, ::) every address of this machine's interfaces.
 */
export function allowedHostNames(host: string): Set<string> {
  const names = new Set([...LOOPBACK_NAMES, hostName(host)]);
  if (host === '0.0.0.0' || host === '::') {
    for (const list of Object.values(networkInterfaces())) {
      for (const a of list ?? []) if (!a.address.includes('%')) names.add(hostName(a.address));
    }
  }
  return names;
}

/** "name:port" split; port null when none is written. Undefined when it is not a host[:port]. */
function splitHostPort(text: string): { name: string; port: number | null } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::([0-9]{1,5}))?$/.exec(text);
  if (!m) return undefined;
  return { name: m[1].toLowerCase(), port: m[2] === undefined ? null : Number(m[2]) };
}

export interface GuardOptions {
  /** The listen address. */
  host: string;
  /** The bound port, or null before listening (fastify's inject: any port). */
  port(): number | null;
}

export interface RequestHeaders {
  host?: string;
  origin?: string;
  'sec-fetch-site'?: string;
}

/** Throws a 403 HttpError when the request may come from a web page or names another host. */
export function makeOriginCheck(opts: GuardOptions): (h: RequestHeaders) => void {
  const names = allowedHostNames(opts.host);
  const listed = [...names].join(', ');
  const ours = (text: string): boolean => {
    const hp = splitHostPort(text);
    if (hp === undefined || !names.has(hp.name)) return false;
    const port = opts.port();
    return port === null || (hp.port ?? 80) === port;
  };
  const portText = () => (opts.port() === null ? 'its port' : `port ${opts.port()}`);
  return (h) => {
    const host = h.host;
    if (host === undefined || host === '')
      throw new HttpError(403, `missing Host header: this API answers only to ${listed} with ${portText()}`);
    if (!ours(host)) {
      throw new HttpError(
        403,
        `Host ${JSON.stringify(host.slice(0, 300))} is not this API: it answers only to ${listed} with ${portText()} (a page whose name resolves here, DNS rebinding, is refused)`,
      );
    }
    const origin = h.origin;
    if (origin !== undefined) {
      const m = /^http:\/\/(.+)$/i.exec(origin);
      if (!m || !ours(m[1])) {
        throw new HttpError(
          403,
          `Origin ${JSON.stringify(origin.slice(0, 300))} is not this API: requests from web pages are refused (send no Origin header, as curl and rdmactl do)`,
        );
      }
    }
    const site = h['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin' && site !== 'none') {
      throw new HttpError(
        403,
        `Sec-Fetch-Site ${JSON.stringify(site.slice(0, 100))}: requests from web pages are refused`,
      );
    }
  };
}

/** The media type of a Content-Type header, lower case, without parameters. */
export function mediaType(ct: string | undefined): string | undefined {
  return ct === undefined ? undefined : ct.split(';')[0].trim().toLowerCase();
}

/** POSTs need application/json (see the head of this file); `where` is "POST /v1/pds". */
export function checkPostType(contentType: string | undefined, where: string): void {
  if (mediaType(contentType) === 'application/json') return;
  const got =
    contentType === undefined ? 'no Content-Type' : `Content-Type ${JSON.stringify(contentType.slice(0, 100))}`;
  throw new HttpError(
    415,
    `${where} needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got ${got}`,
  );
}
