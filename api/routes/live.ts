/**
 * The live view's routes: the page at `/` and its files (api/live/, read once, served from
 * memory: nothing is fetched from anywhere else, so it works offline), and GET /live/events,
 * the Server-Sent Events stream of frames (api/live-stream.ts). Read-only: nothing here changes
 * the data plane. They pass the same Host/Origin guard and token or user checks as every route.
 */
import { readFileSync } from 'node:fs';
import { HttpError } from '../errors.ts';
import type { Ctx, RouteDef } from './route.ts';

const DIR = new URL('../live/', import.meta.url);

/** The page's files by name, with their media types. */
const FILES: Record<string, { type: string; text: string }> = Object.fromEntries(
  (
    [
      ['live-page.mjs', 'text/javascript; charset=utf-8'],
      ['live-graph.mjs', 'text/javascript; charset=utf-8'],
      ['live-tables.mjs', 'text/javascript; charset=utf-8'],
      ['live.css', 'text/css; charset=utf-8'],
    ] as const
  ).map(([name, type]) => [name, { type, text: readFileSync(new URL(name, DIR), 'utf8') }]),
);
const PAGE = readFileSync(new URL('index.html', DIR), 'utf8');

/** The page runs only what this daemon serves and talks only to it. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML = 'text/html; charset=utf-8';
export const EVENT_STREAM = 'text/event-stream; charset=utf-8';

const FileParams = {
  type: 'object',
  additionalProperties: false,
  required: ['file'],
  properties: { file: { type: 'string', maxLength: 64, description: 'a file of the page (live-page.mjs ...)' } },
};

export const liveRoutes: RouteDef[] = [
  {
    method: 'GET',
    path: '/',
    tag: 'live',
    summary:
      'the live view: a page drawing the node graph, interfaces, QPs and moved error counters as GET /live/events pushes them (read-only)',
    status: 200,
    produces: HTML,
    response: { type: 'string', description: 'HTML' },
    errors: [],
    handler: async ({ reply }: Ctx) => {
      reply.type(HTML).header('content-security-policy', CSP).header('cache-control', 'no-cache');
      reply.header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer');
      return PAGE;
    },
  },
  {
    method: 'GET',
    path: '/live/{file}',
    tag: 'live',
    summary: "a file of the live view's page (its scripts and style sheet; 404 for any other name)",
    params: FileParams,
    status: 200,
    produces: 'text/javascript',
    response: { type: 'string', description: 'JavaScript or CSS' },
    errors: [404],
    handler: async ({ reply, params }: Ctx<{ file: string }>) => {
      const f = Object.hasOwn(FILES, params.file) ? FILES[params.file] : undefined;
      if (f === undefined)
        throw new HttpError(
          404,
          `no file "${params.file}" in the live view (it has ${Object.keys(FILES).join(', ')}; the page is GET /)`,
        );
      reply.type(f.type).header('cache-control', 'no-cache').header('x-content-type-options', 'nosniff');
      return f.text;
    },
  },
  {
    method: 'GET',
    path: '/live/events',
    tag: 'live',
    summary:
      'Server-Sent Events: a frame (JSON: per-thread node rates and arcs, interfaces, QPs, moved errors) every 500 ms while connected; sampling runs only while a stream is open; a stream that stops reading is cut; 503 past 16 streams',
    status: 200,
    produces: EVENT_STREAM,
    response: { type: 'string', description: 'text/event-stream: `event: frame` messages, data the frame as JSON' },
    errors: [503],
    handler: async ({ reply, live }: Ctx) => {
      live.reserve();
      if (reply.request.method === 'HEAD') {
        reply.type(EVENT_STREAM);
        return '';
      }
      reply.hijack();
      live.serve(reply.raw);
      return undefined;
    },
  },
];
