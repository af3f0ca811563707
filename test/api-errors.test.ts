/**
 * Bad input for every route, over real HTTP: each row asserts the status and the message. Then
 * a fuzz-ish sweep of malformed bodies, media types and hostile values over every route (never a
 * 5xx, always {statusCode, error, message}), the token, and afterwards the data plane still
 * carries a SEND.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { apiRoutes, buildServer, startApi } from '../api/server.ts';
import { MR_DATA_MAX } from '../api/routes/verbs-objects.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { apiPair, assertError, raw, type ApiPair } from './api-helpers.ts';

interface Row {
  method: string;
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
  bytes?: Uint8Array;
  status: number;
  message: string | RegExp;
}

/** Objects on A the rows refer to: a connected pair for state errors, spare ones for the rest. */
async function fixture(p: ApiPair) {
  const { ca, cb } = p;
  const { pd } = await ca.createPd();
  const { cq } = await ca.createCq({ depth: 64 });
  const mr = await ca.createMr({
    pd,
    length: 65536,
    access: ['local-write', 'remote-write', 'remote-read', 'remote-atomic'],
  });
  const srq = await ca.createSrq({ pd, maxWr: 1 });
  const qp = await ca.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
  const rts = await ca.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
  const spare = await ca.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
  const bPd = (await cb.createPd()).pd;
  const bCq = (await cb.createCq({ depth: 64 })).cq;
  const bMr = await cb.createMr({ pd: bPd, length: 65536, access: ['local-write', 'remote-write', 'remote-read'] });
  const peer = await cb.createQp({ pd: bPd, sendCq: bCq, recvCq: bCq, maxSendWr: 16, maxRecvWr: 16 });
  await ca.connect(rts.qpn, { remote: { ip: IP_B, port: peer.qpn }, mode: 'manual', remotePsn: peer.psn });
  await cb.connect(peer.qpn, { remote: { ip: IP_A, port: rts.qpn }, mode: 'manual', remotePsn: rts.psn });
  await ca.listen({ port: 18700, pd, sendCq: cq, recvCq: cq, maxSendWr: 4, maxRecvWr: 4 });
  // A listener on B whose QPs cannot be made (maxSendWr over the limit; REST's schema refuses it,
  // the embedding API takes it and fails each QP): every request is rejected.
  await p.b.listen({ port: 18701, pd: bPd, sendCq: bCq, recvCq: bCq, maxSendWr: 99999, maxRecvWr: 4 });
  const [itf] = await ca.interfaces();
  return {
    pd,
    cq,
    mr,
    srq: srq.srq,
    qpn: qp.qpn,
    rts: rts.qpn,
    spare: spare.qpn,
    peer: peer.qpn,
    bCq,
    bMr,
    itf: itf.name,
  };
}

function rows(f: Awaited<ReturnType<typeof fixture>>): Row[] {
  const { pd, cq, mr, srq, qpn, rts, spare, itf } = f;
  const NOFIELDS = (part: string, k: string) => `${part}/${k} is not allowed (${part} takes no fields)`;
  const sge = [{ mr: mr.mr, offset: 0, length: 8 }];
  const long = 'x'.repeat(300);
  return [
    // status
    { method: 'GET', path: '/v1/health?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    {
      method: 'POST',
      path: '/v1/health',
      status: 405,
      message: 'POST is not a method of /v1/health: it takes GET, HEAD',
    },
    { method: 'GET', path: '/v1/buffers?count=1', status: 400, message: NOFIELDS('querystring', 'count') },
    { method: 'GET', path: '/v1/version?v=1', status: 400, message: NOFIELDS('querystring', 'v') },
    { method: 'GET', path: '/v1/devices?port=1', status: 400, message: NOFIELDS('querystring', 'port') },
    { method: 'GET', path: '/v1/hardware?name=x', status: 400, message: NOFIELDS('querystring', 'name') },
    { method: 'GET', path: '/v1/rx-placement?thread=1', status: 400, message: NOFIELDS('querystring', 'thread') },
    { method: 'GET', path: '/v1/threads?worker=1', status: 400, message: NOFIELDS('querystring', 'worker') },
    { method: 'GET', path: '/v1/interfaces?verbose=1', status: 400, message: NOFIELDS('querystring', 'verbose') },
    { method: 'GET', path: '/v1/interfaces/eth9', status: 404, message: `no interface "eth9" (have: ${itf})` },
    { method: 'GET', path: '/v1/interfaces/%F0%9F%9A%80', status: 404, message: `no interface "🚀" (have: ${itf})` },
    {
      method: 'GET',
      path: `/v1/interfaces/${long}`,
      status: 400,
      message: 'params/name must NOT have more than 256 characters',
    },
    {
      method: 'GET',
      path: '/v1/interfaces/%E0%A4%A',
      status: 400,
      message: "'/v1/interfaces/%E0%A4%A' is not a valid url component",
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: {},
      status: 400,
      message: 'body/direction is required',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'up', file: 'x.pcap' },
      status: 400,
      message: 'body/direction must be one of "rx", "tx", "both"',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'rx', file: '' },
      status: 400,
      message:
        'body/file must be a file name of 1..128 letters, digits, ".", "_" and "-", not starting with "." or "-" (no path: it goes into capture.dir)',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'rx', file: 'x.pcap', count: 0 },
      status: 400,
      message: 'body/count must be >= 1',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'rx', file: 'x.pcap', count: 2 ** 32 },
      status: 400,
      message: 'body/count must be <= 4294967295',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'rx', file: '/nonexistent-dir/x.pcap' },
      status: 400,
      message:
        'body/file must be a file name of 1..128 letters, digits, ".", "_" and "-", not starting with "." or "-" (no path: it goes into capture.dir)',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/capture`,
      body: { direction: 'rx', file: 'a..b' },
      status: 400,
      message: 'capture file name "a..b" contains ".."',
    },
    {
      method: 'POST',
      path: '/v1/interfaces/eth9/capture',
      body: { direction: 'rx', file: 'x.pcap' },
      status: 404,
      message: `no interface "eth9" (have: ${itf})`,
    },
    {
      method: 'DELETE',
      path: '/v1/interfaces/eth9/capture',
      status: 404,
      message: `no interface "eth9" (have: ${itf})`,
    },
    {
      method: 'DELETE',
      path: `/v1/interfaces/${itf}/capture`,
      body: { file: 'x' },
      status: 400,
      message: NOFIELDS('body', 'file'),
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', loss: 2 },
      status: 400,
      message: 'body/loss must be <= 1',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', loss: '0.5' },
      status: 400,
      message: 'body/loss must be number',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', off: true, loss: 0.1 },
      status: 400,
      message: 'body/off: true removes the injector; it takes no loss',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', off: false },
      status: 400,
      message: 'body/off must be one of true',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', reorderDepth: 0 },
      status: 400,
      message: 'body/reorderDepth must be >= 1',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', 'reorder-depth': 4 },
      status: 400,
      message:
        /^body\/reorder-depth is not allowed \(allowed: direction, off, seed, loss, reorder, reorderDepth, reorderDelayUs, duplicate, corrupt, ce\)$/,
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { direction: 'rx', seed: -1 },
      status: 400,
      message: 'body/seed must be >= 0',
    },
    {
      method: 'POST',
      path: `/v1/interfaces/${itf}/fault`,
      body: { loss: 0.1 },
      status: 400,
      message: 'body/direction is required',
    },
    {
      method: 'POST',
      path: '/v1/interfaces/eth9/fault',
      body: { direction: 'rx', loss: 0.1 },
      status: 404,
      message: `no interface "eth9" (have: ${itf})`,
    },
    { method: 'GET', path: '/v1/neighbors?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    {
      method: 'POST',
      path: '/v1/ping',
      body: { address: '10.10.0.2', size: 5000 },
      status: 400,
      message: 'body/size must be <= 1472',
    },
    {
      method: 'POST',
      path: '/v1/ping',
      body: { address: '172.16.0.1' },
      status: 404,
      message: 'ping: no route to 172.16.0.1 (no interface address or gateway covers it)',
    },
    {
      method: 'POST',
      path: '/v1/ping',
      body: { address: '10.10.0.2', count: 60, intervalMs: 1001 },
      status: 400,
      message: 'ping: 60 requests 1001 ms apart waited 1000 ms take longer than 60000 ms',
    },
    {
      method: 'GET',
      path: '/v1/runtime?verbose=yes',
      status: 400,
      message: 'querystring/verbose must be one of "0", "1", "true", "false"',
    },
    {
      method: 'GET',
      path: '/v1/runtime?verbose=1&x=2',
      status: 400,
      message: 'querystring/x is not allowed (allowed: verbose)',
    },
    { method: 'POST', path: '/v1/runtime/clear', body: { a: 1 }, status: 400, message: NOFIELDS('body', 'a') },
    { method: 'POST', path: '/v1/interfaces/clear', body: { a: 1 }, status: 400, message: NOFIELDS('body', 'a') },
    {
      method: 'POST',
      path: '/v1/runtime/clear',
      body: 'clear',
      headers: { 'content-type': 'text/plain' },
      status: 415,
      message:
        'POST /v1/runtime/clear needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got Content-Type "text/plain"',
    },
    {
      method: 'POST',
      path: '/v1/runtime/clear',
      status: 415,
      message:
        'POST /v1/runtime/clear needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got no Content-Type',
    },
    { method: 'GET', path: '/v1/errors?verbose=1', status: 400, message: NOFIELDS('querystring', 'verbose') },
    { method: 'POST', path: '/v1/errors/clear', body: [], status: 400, message: 'body must be object' },
    {
      method: 'POST',
      path: '/v1/trace',
      body: { node: 'ethernet-input', count: 1 },
      status: 400,
      message:
        /^trace add: node "ethernet-input" is not an input node that supports trace \(these do: [^)]*pipe-input[^)]*\)$/,
    },
    {
      method: 'POST',
      path: '/v1/trace',
      body: { node: 'no-such-node', count: 1 },
      status: 400,
      message: /no-such-node/,
    },
    {
      method: 'POST',
      path: '/v1/trace',
      body: { node: 'pipe-input', count: -1 },
      status: 400,
      message: 'body/count must be >= 0',
    },
    {
      method: 'POST',
      path: '/v1/trace',
      body: { node: 'pipe-input', count: '5' },
      status: 400,
      message: 'body/count must be integer',
    },
    {
      method: 'POST',
      path: '/v1/trace',
      body: { node: 'pipe-input', count: 1e7 },
      status: 400,
      message: 'body/count must be <= 1000000',
    },
    { method: 'POST', path: '/v1/trace', body: { count: 1 }, status: 400, message: 'body/node is required' },
    { method: 'GET', path: '/v1/trace?max=3', status: 400, message: NOFIELDS('querystring', 'max') },
    { method: 'DELETE', path: '/v1/trace', body: { all: true }, status: 400, message: NOFIELDS('body', 'all') },
    { method: 'GET', path: '/v1/trace/nodes?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    { method: 'GET', path: '/v1/events?since=-1', status: 400, message: 'querystring/since must be >= 0' },
    { method: 'GET', path: '/v1/events?since=abc', status: 400, message: 'querystring/since must be integer' },
    { method: 'GET', path: '/v1/events?since=1.5', status: 400, message: 'querystring/since must be integer' },
    { method: 'GET', path: '/v1/events?since=0x10', status: 400, message: 'querystring/since must be integer' },
    { method: 'GET', path: '/v1/events?since=1&since=2', status: 400, message: 'querystring/since must be integer' },
    { method: 'GET', path: '/metrics?format=json', status: 400, message: NOFIELDS('querystring', 'format') },
    { method: 'GET', path: '/v1/openapi.json?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    // the live view (test/api-live.test.ts has the rest)
    { method: 'GET', path: '/?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    {
      method: 'GET',
      path: '/live/nope.js',
      status: 404,
      message:
        'no file "nope.js" in the live view (it has live-page.mjs, live-graph.mjs, live-tables.mjs, live.css; the page is GET /)',
    },
    { method: 'GET', path: '/live/events?since=1', status: 400, message: NOFIELDS('querystring', 'since') },
    // PD
    {
      method: 'POST',
      path: '/v1/pds',
      body: { x: 1 },
      status: 400,
      message: 'body/x is not allowed (allowed: interface, worker)',
    },
    { method: 'POST', path: '/v1/pds', body: { interface: 'nope0' }, status: 404, message: 'no interface "nope0"' },
    { method: 'POST', path: '/v1/pds', body: '"pd"', status: 400, message: 'body must be object' },
    { method: 'GET', path: '/v1/pds?x=1', status: 400, message: NOFIELDS('querystring', 'x') },
    { method: 'DELETE', path: '/v1/pds/999999', status: 404, message: 'no protection domain 999999' },
    { method: 'DELETE', path: `/v1/pds/${pd}`, status: 409, message: `pd ${pd} is in use by 5 MR/QP/SRQ` },
    { method: 'DELETE', path: '/v1/pds/abc', status: 400, message: 'params/pd must be integer' },
    { method: 'DELETE', path: '/v1/pds/-1', status: 400, message: 'params/pd must be >= 0' },
    { method: 'DELETE', path: '/v1/pds/4294967296', status: 400, message: 'params/pd must be <= 4294967295' },
    // MR
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 16, access: 'local-write' },
      status: 400,
      message: 'body/access must be array',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 16, access: ['fly'] },
      status: 400,
      message:
        'body/access/0 must be one of "local-write", "remote-write", "remote-read", "remote-atomic", "remote-invalidate", "mw-bind"',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 16, access: 'local-write' },
      status: 400,
      message: 'body/access must be array',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: -1, access: [] },
      status: 400,
      message: 'body/length must be >= 0',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: '16', access: [] },
      status: 400,
      message: 'body/length must be integer',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 2 ** 40, access: [] },
      status: 400,
      message: 'body/length must be <= 2147483648',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 1e300, access: [] },
      status: 400,
      message: 'body/length must be <= 2147483648',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd: 999999, length: 16, access: [] },
      status: 404,
      message: 'no protection domain 999999',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd: 2 ** 33, length: 16, access: [] },
      status: 400,
      message: 'body/pd must be <= 4294967295',
    },
    {
      method: 'POST',
      path: '/v1/mrs',
      body: { pd, length: 16, access: [], mr: 5 },
      status: 400,
      message: 'body/mr is not allowed (allowed: pd, length, access)',
    },
    { method: 'GET', path: '/v1/mrs?pd=1', status: 400, message: NOFIELDS('querystring', 'pd') },
    { method: 'GET', path: '/v1/mrs/999999', status: 404, message: 'no memory region 999999' },
    { method: 'GET', path: '/v1/mrs/1.5', status: 400, message: 'params/mr must be integer' },
    { method: 'DELETE', path: '/v1/mrs/999999', status: 404, message: 'no memory region 999999' },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data`,
      body: { data: 'aGk=' },
      status: 415,
      message: 'PUT /v1/mrs/{mr}/data takes application/octet-stream, got Content-Type "application/json"',
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data`,
      body: 'hi',
      headers: { 'content-type': 'text/plain' },
      status: 415,
      message: 'PUT /v1/mrs/{mr}/data takes application/octet-stream, got Content-Type "text/plain"',
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data?offset=65537`,
      bytes: new Uint8Array(1),
      status: 400,
      message: `write mr ${mr.mr}: offset 65537 is past the end of mr ${mr.mr} (length 65536)`,
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data?offset=65530`,
      bytes: new Uint8Array(7),
      status: 413,
      message: `write mr ${mr.mr}: 7 bytes at offset 65530 do not fit in mr ${mr.mr} (length 65536)`,
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data?offset=-1`,
      bytes: new Uint8Array(1),
      status: 400,
      message: 'querystring/offset must be >= 0',
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data?offset=abc`,
      bytes: new Uint8Array(1),
      status: 400,
      message: 'querystring/offset must be integer',
    },
    {
      method: 'PUT',
      path: `/v1/mrs/${mr.mr}/data?length=1`,
      bytes: new Uint8Array(1),
      status: 400,
      message: 'querystring/length is not allowed (allowed: offset)',
    },
    {
      method: 'PUT',
      path: '/v1/mrs/999999/data',
      bytes: new Uint8Array(1),
      status: 404,
      message: 'no memory region 999999',
    },
    {
      method: 'GET',
      path: `/v1/mrs/${mr.mr}/data?offset=65000&length=1000`,
      status: 413,
      message: `read mr ${mr.mr}: 1000 bytes at offset 65000 do not fit in mr ${mr.mr} (length 65536)`,
    },
    {
      method: 'GET',
      path: `/v1/mrs/${mr.mr}/data?offset=70000`,
      status: 400,
      message: `read mr ${mr.mr}: offset 70000 is past the end of mr ${mr.mr} (length 65536)`,
    },
    {
      method: 'GET',
      path: `/v1/mrs/${mr.mr}/data?length=${MR_DATA_MAX + 1}`,
      status: 413,
      message: `querystring/length: ${MR_DATA_MAX + 1} bytes is more than one request reads (${MR_DATA_MAX}); read in pieces with offset and length`,
    },
    {
      method: 'GET',
      path: `/v1/mrs/${mr.mr}/data?length=ten`,
      status: 400,
      message: 'querystring/length must be integer',
    },
    { method: 'GET', path: '/v1/mrs/999999/data', status: 404, message: 'no memory region 999999' },
    // CQ
    { method: 'POST', path: '/v1/cqs', body: { depth: 0 }, status: 400, message: 'body/depth must be >= 1' },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: { depth: 2 ** 21 },
      status: 400,
      message: 'body/depth must be <= 1048576',
    },
    { method: 'POST', path: '/v1/cqs', body: { depth: '5' }, status: 400, message: 'body/depth must be integer' },
    { method: 'POST', path: '/v1/cqs', body: { depth: 5.5 }, status: 400, message: 'body/depth must be integer' },
    { method: 'POST', path: '/v1/cqs', body: '{"depth": 1e400}', status: 400, message: 'body/depth must be integer' },
    { method: 'POST', path: '/v1/cqs', body: {}, status: 400, message: 'body/depth is required' },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: '{"depth": 1,}',
      status: 400,
      message: /^body is not valid JSON: .*position 12/,
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: '',
      status: 400,
      message: 'body is required: send a JSON object with Content-Type: application/json',
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: '{"depth": 1, "__proto__": {"polluted": 1}}',
      status: 400,
      message: 'body/__proto__ is not allowed (allowed: depth, interface, worker)',
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: '{"depth": 1}',
      headers: { 'content-type': '' },
      status: 415,
      message:
        'POST /v1/cqs needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got Content-Type ""',
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      body: '{"depth": 1}',
      headers: { 'content-type': 'text/plain' },
      status: 415,
      message:
        'POST /v1/cqs needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got Content-Type "text/plain"',
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      bytes: new Uint8Array([123, 125]),
      status: 415,
      message:
        'POST /v1/cqs needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got Content-Type "application/octet-stream"',
    },
    {
      method: 'POST',
      path: '/v1/cqs',
      status: 415,
      message:
        'POST /v1/cqs needs Content-Type: application/json (send {} when the route takes no body): web pages cannot send that without asking, got no Content-Type',
    },
    { method: 'GET', path: '/v1/cqs?depth=1', status: 400, message: NOFIELDS('querystring', 'depth') },
    { method: 'GET', path: '/v1/cqs/999999', status: 404, message: 'no completion queue 999999' },
    { method: 'GET', path: `/v1/cqs/${cq}/completions?max=0`, status: 400, message: 'querystring/max must be >= 1' },
    {
      method: 'GET',
      path: `/v1/cqs/${cq}/completions?max=65537`,
      status: 400,
      message: 'querystring/max must be <= 65536',
    },
    {
      method: 'GET',
      path: `/v1/cqs/${cq}/completions?waitMs=60001`,
      status: 400,
      message: 'querystring/waitMs must be <= 60000',
    },
    {
      method: 'GET',
      path: `/v1/cqs/${cq}/completions?waitMs=-5`,
      status: 400,
      message: 'querystring/waitMs must be >= 0',
    },
    { method: 'GET', path: `/v1/cqs/${cq}/completions?max=`, status: 400, message: 'querystring/max must be integer' },
    {
      method: 'GET',
      path: `/v1/cqs/${cq}/completions?wait=5`,
      status: 400,
      message: 'querystring/wait is not allowed (allowed: max, waitMs)',
    },
    { method: 'GET', path: '/v1/cqs/999999/completions', status: 404, message: 'no completion queue 999999' },
    { method: 'DELETE', path: `/v1/cqs/${cq}`, status: 409, message: `cq ${cq} is in use by 3 QP(s)` }, // qp, rts, spare: each once, though each uses it for send and receive
    { method: 'DELETE', path: '/v1/cqs/999999', status: 404, message: 'no completion queue 999999' },
    // SRQ
    { method: 'POST', path: '/v1/srqs', body: { pd, maxWr: 0 }, status: 400, message: 'body/maxWr must be >= 1' },
    {
      method: 'POST',
      path: '/v1/srqs',
      body: { pd, maxWr: 99999 },
      status: 400,
      message: 'body/maxWr must be <= 16384',
    },
    {
      method: 'POST',
      path: '/v1/srqs',
      body: { pd: 999999, maxWr: 4 },
      status: 404,
      message: 'no protection domain 999999',
    },
    {
      method: 'POST',
      path: '/v1/srqs',
      body: { pd, maxWr: 4, limit: 5 },
      status: 400,
      message: 'srq limit must be an integer in 0..4, got 5',
    },
    { method: 'POST', path: '/v1/srqs', body: { maxWr: 4 }, status: 400, message: 'body/pd is required' },
    { method: 'GET', path: '/v1/srqs?pd=1', status: 400, message: NOFIELDS('querystring', 'pd') },
    {
      method: 'POST',
      path: `/v1/srqs/${srq}/modify`,
      body: { limit: -1 },
      status: 400,
      message: 'body/limit must be >= 0',
    },
    {
      method: 'POST',
      path: `/v1/srqs/${srq}/modify`,
      body: { limit: 2 },
      status: 400,
      message: 'srq limit must be an integer in 0..1, got 2',
    },
    { method: 'POST', path: `/v1/srqs/${srq}/modify`, body: {}, status: 400, message: 'body/limit is required' },
    {
      method: 'POST',
      path: '/v1/srqs/999999/modify',
      body: { limit: 0 },
      status: 404,
      message: 'no shared receive queue 999999',
    },
    { method: 'POST', path: `/v1/srqs/${srq}/recv`, body: { sge }, status: 400, message: 'body/wrId is required' },
    {
      method: 'POST',
      path: `/v1/srqs/${srq}/recv`,
      body: { wrId: 1, sge: [{ mr: 999999, offset: 0, length: 8 }] },
      status: 404,
      message: 'srq recv: sge[0]: no memory region 999999',
    },
    { method: 'POST', path: `/v1/srqs/${srq}/recv`, body: { wrId: 'fills-it', sge }, status: 202, message: '' },
    {
      method: 'POST',
      path: `/v1/srqs/${srq}/recv`,
      body: { wrId: 'one-too-many', sge },
      status: 503,
      message: `srq ${srq} is full (maxWr 1)`,
    },
    {
      method: 'POST',
      path: '/v1/srqs/999999/recv',
      body: { wrId: 1 },
      status: 404,
      message: 'no shared receive queue 999999',
    },
    { method: 'DELETE', path: '/v1/srqs/999999', status: 404, message: 'no shared receive queue 999999' },
    // QP
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: '5', maxRecvWr: 4 },
      status: 400,
      message: 'body/maxSendWr must be integer',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 99999, maxRecvWr: 4 },
      status: 400,
      message: 'body/maxSendWr must be <= 16384',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { sendCq: cq, recvCq: cq, maxSendWr: 4 },
      status: 400,
      message: 'body/pd is required',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: 999999, recvCq: cq, maxSendWr: 4 },
      status: 404,
      message: 'no completion queue 999999',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, interface: 'eth9' },
      status: 404,
      message: 'no interface "eth9"',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, port: qpn },
      status: 409,
      message: `port ${qpn} already has a QP`,
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, port: 80 },
      status: 400,
      message: 'qp port (port-range 20000..29999) must be an integer in 20000..29999, got 80',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, port: 70000 },
      status: 400,
      message: 'body/port must be <= 65535',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, srq: 'none' },
      status: 400,
      message: 'body/srq must be integer',
    },
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd, sendCq: cq, recvCq: cq, maxSendWr: 4, qpn: 1 },
      status: 400,
      message:
        /^body\/qpn is not allowed \(allowed: pd, sendCq, recvCq, srq, maxSendWr, maxRecvWr, maxSge, maxInline, ird, ord, interface, port, type, multicastLoopback\)$/,
    },
    { method: 'GET', path: '/v1/qps?state=rts', status: 400, message: NOFIELDS('querystring', 'state') },
    { method: 'GET', path: '/v1/qps/1', status: 404, message: 'no QP 1' },
    { method: 'GET', path: '/v1/qps/70000', status: 400, message: 'params/qpn must be <= 65535' },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'tcp' },
      status: 400,
      message: 'body/mode must be one of "manual", "cm"',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { mode: 'manual' },
      status: 400,
      message: 'body/remote is required',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 0 }, mode: 'manual' },
      status: 400,
      message: 'body/remote/port must be >= 1',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: '10.10.0.256', port: 1 }, mode: 'manual' },
      status: 400,
      message: 'body/remote/ip must be an IPv4 address in dotted decimal, like 10.10.0.2',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 1, host: 'b' }, mode: 'manual' },
      status: 400,
      message: 'body/remote/host is not allowed (allowed: ip, port)',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'cm', privateData: 'not base64!' },
      status: 400,
      message: 'body/privateData must be base64 (standard alphabet, with = padding)',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'cm', privateData: Buffer.alloc(513).toString('base64') },
      status: 413,
      message: 'body/privateData is 513 bytes decoded; private data is at most 512 bytes',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'cm', timeoutMs: 0 },
      status: 400,
      message: 'body/timeoutMs must be >= 1',
    },
    {
      method: 'POST',
      path: `/v1/qps/${spare}/connect`,
      body: { remote: { ip: '198.51.100.1', port: 1 }, mode: 'manual', remotePsn: 0 },
      status: 400,
      message: /no route to 198\.51\.100\.1/,
    },
    {
      method: 'POST',
      path: `/v1/qps/${spare}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'manual' },
      status: 400,
      message: `qp ${spare}: a manual connect needs remotePsn, the peer QP's psn (GET /v1/qps/{qpn} on the peer shows it)`,
    },
    {
      method: 'POST',
      path: `/v1/qps/${spare}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'manual', remotePsn: 2 ** 32 },
      status: 400,
      message: 'body/remotePsn must be <= 4294967295',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/connect`,
      body: { remote: { ip: IP_B, port: 1 }, mode: 'manual' },
      status: 409,
      message: `qp ${rts} is in rts: a manual connect needs RESET or INIT`,
    },
    {
      method: 'POST',
      path: '/v1/qps/1/connect',
      body: { remote: { ip: IP_B, port: 1 }, mode: 'manual' },
      status: 404,
      message: 'no QP 1',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/modify`,
      body: { state: 'flying' },
      status: 400,
      message: 'body/state must be one of "reset", "init", "rtr", "rts", "sqd", "sqe", "error"',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/modify`,
      body: { state: 'rts' },
      status: 409,
      message: `qp ${qpn}: cannot go from reset to rts`,
    },
    { method: 'POST', path: `/v1/qps/${qpn}/modify`, body: {}, status: 400, message: 'body/state is required' },
    { method: 'POST', path: '/v1/qps/1/modify', body: { state: 'init' }, status: 404, message: 'no QP 1' },
    { method: 'DELETE', path: '/v1/qps/1', status: 404, message: 'no QP 1' },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/multicast`,
      body: { group: '239.1.1.1' },
      status: 400,
      message: `qp ${qpn}: attach to 239.1.1.1: only a UD QP joins a multicast group`,
    },
    { method: 'POST', path: `/v1/qps/${qpn}/multicast`, body: {}, status: 400, message: 'body/group is required' },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/multicast`,
      body: { group: 'x' },
      status: 400,
      message: 'body/group must be an IPv4 address in dotted decimal, like 10.10.0.2',
    },
    { method: 'POST', path: '/v1/qps/1/multicast', body: { group: '239.1.1.1' }, status: 404, message: 'no QP 1' },
    {
      method: 'DELETE',
      path: `/v1/qps/${qpn}/multicast/239.1.1.1`,
      status: 404,
      message: `qp ${qpn} is not attached to 239.1.1.1`,
    },
    { method: 'DELETE', path: '/v1/qps/1/multicast/239.1.1.1', status: 404, message: 'no QP 1' },
    { method: 'DELETE', path: '/v1/qps/x', status: 400, message: 'params/qpn must be integer' },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/recv`,
      body: { wrId: 1, sge },
      status: 409,
      message: `qp ${qpn} is in RESET`,
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 1, sge: [{ mr: mr.mr, offset: 0, length: -1 }] },
      status: 400,
      message: 'body/sge/0/length must be >= 0',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 1, sge: [{ mr: mr.mr, offset: 0, length: 1, key: 2 }] },
      status: 400,
      message: 'body/sge/0/key is not allowed (allowed: mr, offset, length)',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: { id: 1 } },
      status: 400,
      message: 'body/wrId must be a string of at most 256 characters or a safe integer',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 2 ** 53 },
      status: 400,
      message: 'body/wrId must be a string of at most 256 characters or a safe integer',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 'x'.repeat(257) },
      status: 400,
      message: 'body/wrId must be a string of at most 256 characters or a safe integer',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 1, sge: Array.from({ length: 65 }, () => sge[0]) },
      status: 400,
      message: 'body/sge must NOT have more than 64 items',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/recv`,
      body: { wrId: 1, sge: [{ mr: 999999, offset: 0, length: 1 }] },
      status: 404,
      message: 'recv: sge[0]: no memory region 999999',
    },
    { method: 'POST', path: '/v1/qps/1/recv', body: { wrId: 1 }, status: 404, message: 'no QP 1' },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'jump' },
      status: 400,
      message:
        'body/opcode must be one of "send", "send-with-solicited", "send-with-invalidate", "send-with-imm", "write", "write-with-imm", "read", "fetch-add", "swap", "cmp-swap"',
    },
    {
      method: 'POST',
      path: `/v1/qps/${qpn}/send`,
      body: { wrId: 1, opcode: 'send', sge },
      status: 409,
      message: `qp ${qpn} is in reset: post send needs RTS`,
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'write', sge },
      status: 400,
      message: 'write needs remote {stag, offset}',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'fetch-add', sge, remote: { stag: 1, offset: 0 }, atomic: { add: '-1' } },
      status: 400,
      message: 'body/atomic/add must be a decimal string of an unsigned 64-bit integer or a non-negative safe integer',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: {
        wrId: 1,
        opcode: 'fetch-add',
        sge,
        remote: { stag: 1, offset: 0 },
        atomic: { add: '18446744073709551616' },
      },
      status: 400,
      message: 'atomic.add must be a decimal string of an unsigned 64-bit integer, got "18446744073709551616"',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'fetch-add', sge, remote: { stag: 1, offset: 0 }, atomic: { sub: 1 } },
      status: 400,
      message: 'body/atomic/sub is not allowed (allowed: add, swap, compare)',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'write-with-imm', sge, remote: { stag: 1, offset: 0 }, imm: 2 ** 32 },
      status: 400,
      message: 'body/imm must be <= 4294967295',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'send', sge, signaled: 'yes' },
      status: 400,
      message: 'body/signaled must be boolean',
    },
    {
      method: 'POST',
      path: `/v1/qps/${rts}/send`,
      body: { wrId: 1, opcode: 'send', sge: [{ mr: 999999, offset: 0, length: 1 }] },
      status: 404,
      message: 'send: sge[0]: no memory region 999999',
    },
    { method: 'POST', path: '/v1/qps/1/send', body: { wrId: 1, opcode: 'send' }, status: 404, message: 'no QP 1' },
    // listeners
    {
      method: 'POST',
      path: '/v1/listeners',
      body: { port: 0, pd, sendCq: cq, recvCq: cq, maxSendWr: 4 },
      status: 400,
      message: 'body/port must be >= 1',
    },
    {
      method: 'POST',
      path: '/v1/listeners',
      body: { port: 18700, pd, sendCq: cq, recvCq: cq, maxSendWr: 4 },
      status: 409,
      message: /18700/,
    },
    {
      method: 'POST',
      path: '/v1/listeners',
      body: { port: 18702, pd: 999999, sendCq: cq, recvCq: cq, maxSendWr: 4 },
      status: 404,
      message: 'no protection domain 999999',
    },
    {
      method: 'POST',
      path: '/v1/listeners',
      body: {
        port: 18702,
        pd,
        sendCq: cq,
        recvCq: cq,
        maxSendWr: 4,
        privateData: Buffer.alloc(600).toString('base64'),
      },
      status: 413,
      message: 'body/privateData is 600 bytes decoded; private data is at most 512 bytes',
    },
    {
      method: 'POST',
      path: '/v1/listeners',
      body: { port: 18702, pd, sendCq: cq },
      status: 400,
      message: 'body/recvCq is required',
    },
    { method: 'GET', path: '/v1/listeners?port=1', status: 400, message: NOFIELDS('querystring', 'port') },
    { method: 'DELETE', path: '/v1/listeners/1', status: 404, message: 'no listener on port 1' },
    { method: 'DELETE', path: '/v1/listeners/65536', status: 400, message: 'params/port must be <= 65535' },
    // unknown routes
    {
      method: 'GET',
      path: '/v1/nope',
      status: 404,
      message: 'no route GET /v1/nope (GET /v1/openapi.json lists the routes)',
    },
    {
      method: 'PATCH',
      path: `/v1/qps/${qpn}`,
      body: {},
      status: 405,
      message: `PATCH is not a method of /v1/qps/${qpn}: it takes GET, HEAD, DELETE`,
    },
    {
      method: 'GET',
      path: '/v1/nothing-here',
      status: 404,
      message: 'no route GET /v1/nothing-here (GET /v1/openapi.json lists the routes)',
    },
  ];
}

/** What every 401 adds: how rdmactl and curl send the token. */
const HOW = ' (rdmactl: --token TOKEN or RDMACTL_TOKEN; curl: -H "Authorization: Bearer TOKEN")';

test('bad input for every route: status and message of each', async () => {
  const p = await apiPair();
  try {
    const f = await fixture(p);
    const table = rows(f);
    for (const r of table) {
      const what = `${r.method} ${r.path} ${r.body === undefined ? '' : typeof r.body === 'string' ? r.body : JSON.stringify(r.body).slice(0, 200)}`;
      const res = await raw(p.apiA.url, r.method, r.path, { body: r.body, headers: r.headers, bytes: r.bytes });
      if (r.status < 300) assert.is(res.status, r.status, `${what}: ${res.text}`);
      else assertError(res, r.status, r.message, what);
    }
    // Every route of the table has at least one row (a route added without rows fails here).
    const routes = apiRoutes({ token: false });
    for (const def of routes) {
      const re = new RegExp(`^${def.path.replace(/\{\w+\}/g, '[^/?]+')}(\\?|$)`);
      assert.ok(
        table.some((r) => r.method === def.method && r.status >= 400 && re.test(r.path)),
        `no bad-input row for ${def.method} ${def.path}`,
      );
    }
    // The CM errors need the peer: a listener that rejects (409), a port with none (409, at
    // once) and no answer at all (504: A's receive side loses everything meanwhile).
    const reject = await raw(p.apiA.url, 'POST', `/v1/qps/${f.qpn}/connect`, {
      body: { remote: { ip: IP_B, port: 18701 }, mode: 'cm', timeoutMs: 2000 },
    });
    assertError(reject, 409, new RegExp(`^qp ${f.qpn}: .*reject`, 'i'), 'CM connect to a listener that rejects');
    const q2 = await p.ca.createQp({ pd: f.pd, sendCq: f.cq, recvCq: f.cq, maxSendWr: 4, maxRecvWr: 4 });
    const closed = await raw(p.apiA.url, 'POST', `/v1/qps/${q2.qpn}/connect`, {
      body: { remote: { ip: IP_B, port: 18799 }, mode: 'cm', timeoutMs: 2000 },
    });
    assertError(
      closed,
      409,
      new RegExp(`^qp ${q2.qpn}: .*no listener on the port`),
      'CM connect to a port with no listener',
    );
    const q3 = await p.ca.createQp({ pd: f.pd, sendCq: f.cq, recvCq: f.cq, maxSendWr: 4, maxRecvWr: 4 });
    const lose = (body: object) => raw(p.apiA.url, 'POST', `/v1/interfaces/${f.itf}/fault`, { body });
    assert.is((await lose({ direction: 'rx', loss: 1 })).status, 200);
    const timeout = await raw(p.apiA.url, 'POST', `/v1/qps/${q3.qpn}/connect`, {
      body: { remote: { ip: IP_B, port: 18799 }, mode: 'cm', timeoutMs: 150 },
    });
    assert.is((await lose({ direction: 'rx', off: true })).status, 200);
    assertError(timeout, 504, new RegExp(`^qp ${q3.qpn}: .*time`, 'i'), 'CM connect nobody answers');
    // A body over the limit: 413 for JSON (1 MiB) and for MR data (64 MiB).
    const huge = await raw(p.apiA.url, 'POST', '/v1/cqs', {
      body: JSON.stringify({ depth: 1, pad: 'x'.repeat(1100000) }),
    });
    assertError(huge, 413, 'body too large: POST /v1/cqs takes at most 1048576 bytes', 'JSON over 1 MiB');
    const tooMuch = await raw(p.apiA.url, 'PUT', `/v1/mrs/${f.mr.mr}/data`, { bytes: new Uint8Array(MR_DATA_MAX + 1) });
    assertError(
      tooMuch,
      413,
      `body too large: PUT /v1/mrs/{mr}/data takes at most ${MR_DATA_MAX} bytes a request (write in pieces with ?offset=)`,
      'MR data over 64 MiB',
    );

    // After all that, the data plane still carries a SEND from A to B.
    await p.cb.postRecv(f.peer, { wrId: 'after', sge: [{ mr: f.bMr.mr, offset: 0, length: 64 }] });
    await p.ca.writeMr(f.mr.mr, 0, new TextEncoder().encode('still alive'));
    await p.ca.postSend(f.rts, { wrId: 'alive', opcode: 'send', sge: [{ mr: f.mr.mr, offset: 0, length: 11 }] });
    const c = await p.cb.pollCq(f.bCq, { waitMs: 2000 });
    assert.equal(
      c.completions.map((x) => [x.wrId, x.status, x.byteLen]),
      [['after', 'success', 11]],
    );
    assert.equal(await p.cb.readMr(f.bMr.mr, 0, 11), new TextEncoder().encode('still alive'));
  } finally {
    await p.close();
  }
});

test('fuzz: malformed JSON, wrong media types, hostile values and keys on every route: never a 5xx, always {statusCode, error, message}, no prototype pollution, the data plane still works', async () => {
  const p = await apiPair();
  try {
    const f = await fixture(p);
    const ids: Record<string, number | string> = {
      name: f.itf,
      pd: 999999,
      mr: 999999,
      cq: 999999,
      srq: 999999,
      qpn: 1,
      port: 1,
    };
    const bodies: { body?: string; bytes?: Uint8Array; type?: string }[] = [
      { body: '{' },
      { body: '[1,2' },
      { body: '"str"' },
      { body: 'null' },
      { body: '[]' },
      { body: '123' },
      { body: 'true' },
      { body: 'NaN' },
      { body: '{"a":1,}' },
      { body: "{'a':1}" },
      { body: '\u0000' },
      { body: '\ufeff{}' },
      { body: '['.repeat(100000) + ']'.repeat(100000) },
      {
        body: JSON.stringify({
          wrId: '🚀'.repeat(1000),
          opcode: 'sénd',
          node: '\u0000',
          name: 'a\nb',
          direction: 'ｒｘ',
        }),
      },
      { body: '{"__proto__": {"polluted": true}, "depth": 1}' },
      { body: '{"constructor": {"prototype": {"polluted": true}}}' },
      {
        body: '{"depth": 1e309, "pd": -0, "length": 1e-400, "maxSendWr": 18446744073709551616, "wrId": 9007199254740993}',
      },
      {
        body: JSON.stringify({
          pd: [],
          sendCq: {},
          recvCq: null,
          maxSendWr: true,
          remote: 'x',
          sge: 'x',
          atomic: [],
          limit: {},
          port: '80',
        }),
      },
      { body: JSON.stringify({ remote: { ip: IP_B, port: 1, __proto__: { x: 1 } }, mode: 'manual' }) },
      { body: '{"a": 1}', type: 'application/json; charset=latin1' },
      { body: 'a=1&b=2', type: 'application/x-www-form-urlencoded' },
      { body: '--x\r\n\r\n--x--', type: 'multipart/form-data; boundary=x' },
      { body: '<x/>', type: 'application/xml' },
      { body: '{"depth": 1}', type: '' },
      { body: '{}', type: 'application/json-patch+json' },
      { bytes: new Uint8Array([0xff, 0xfe, 0, 1]) },
      { bytes: new Uint8Array(0) },
    ];
    const routes = apiRoutes({ token: false });
    let n = 0;
    for (const def of routes) {
      const path = def.path.replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(ids[k])));
      for (const b of bodies) {
        if (def.method === 'GET') continue;
        const headers: Record<string, string> = {};
        if (b.type !== undefined) headers['content-type'] = b.type;
        if (b.bytes !== undefined) headers['content-type'] = 'application/octet-stream';
        const res = await raw(p.apiA.url, def.method, path, { body: b.body, bytes: b.bytes, headers });
        const what = `${def.method} ${path} with ${JSON.stringify(b).slice(0, 120)}`;
        assert.ok(res.status < 500, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
        if (res.status >= 400) assertError(res, res.status, /\S/, what);
        n++;
      }
      // Hostile path and query values.
      for (const v of [
        '-1',
        '1.5',
        '1e3',
        '0x1',
        '99999999999999999999999',
        '%00',
        '%F0%9F%9A%80',
        '__proto__',
        'constructor',
        '',
        'NaN',
        'Infinity',
      ]) {
        const pth = def.path.replace(/\{(\w+)\}/g, () => v);
        const qs = def.querystring
          ? Object.keys(def.querystring.properties as object)
              .map((k) => `${k}=${v}`)
              .join('&')
          : `__proto__=${v}`;
        const res = await raw(
          p.apiA.url,
          def.method,
          `${pth}?${qs}`,
          def.method === 'GET' || def.consumes ? {} : { body: {} },
        );
        assert.ok(
          res.status < 500 && res.status >= 200,
          `${def.method} ${pth}?${qs}: ${res.status} ${res.text.slice(0, 300)}`,
        );
        if (res.status >= 400) assertError(res, res.status, /\S/, `${def.method} ${pth}?${qs}`);
        n++;
      }
    }
    assert.ok(n > 1000, `${n} requests`);
    assert.is(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype is not polluted');
    // Nothing was created by accident with those bodies, and the data plane still works.
    await p.cb.postRecv(f.peer, { wrId: 'after-fuzz', sge: [{ mr: f.bMr.mr, offset: 0, length: 64 }] });
    await p.ca.postSend(f.rts, { wrId: 'alive', opcode: 'send', sge: [{ mr: f.mr.mr, offset: 0, length: 4 }] });
    const c = await p.cb.pollCq(f.bCq, { waitMs: 2000 });
    assert.equal(
      c.completions.map((x) => [x.wrId, x.status]),
      [['after-fuzz', 'success']],
    );
  } finally {
    await p.close();
  }
});

test('token: every route, /metrics, the OpenAPI document and unknown routes need "Authorization: Bearer <token>"; compared whole', async () => {
  const p = await apiPair({ tokenA: 's3cret-token' });
  const u = p.apiA.url;
  try {
    const routes = apiRoutes({ token: true });
    for (const def of routes) {
      const path = def.path.replace(/\{\w+\}/g, '1');
      const none = await raw(u, def.method, path);
      assertError(
        none,
        401,
        `missing Authorization header: this API needs "Authorization: Bearer <token>"${HOW}`,
        `${def.method} ${path} without a token`,
      );
      assert.is(none.headers.get('www-authenticate'), 'Bearer');
      for (const [h, msg] of [
        ['Bearer wrong', `wrong token${HOW}`],
        ['Bearer s3cret-toke', `wrong token${HOW}`],
        ['Bearer s3cret-token-and-more', `wrong token${HOW}`],
        ['Basic czNjcmV0LXRva2Vu', `the Authorization header must be "Bearer <token>"${HOW}`],
        ['Bearer', `the Authorization header must be "Bearer <token>"${HOW}`],
      ]) {
        assertError(
          await raw(u, def.method, path, { headers: { authorization: h } }),
          401,
          msg,
          `${def.method} ${path} with "${h}"`,
        );
      }
    }
    assertError(await raw(u, 'GET', '/v1/nope'), 401, /missing Authorization/, 'unknown route without a token');
    const ok = { authorization: 'Bearer s3cret-token' };
    assert.is((await raw(u, 'GET', '/metrics', { headers: ok })).status, 200);
    assert.is((await raw(u, 'GET', '/v1/openapi.json', { headers: ok })).status, 200);
    assert.is(
      (await raw(u, 'GET', '/v1/health', { headers: { authorization: 'bearer s3cret-token' } })).status,
      200,
      'the scheme is case-insensitive',
    );
    assertError(
      await raw(u, 'GET', '/v1/nope', { headers: ok }),
      404,
      /no route GET \/v1\/nope/,
      'unknown route with the token',
    );
    // The client sends it.
    assert.is((await p.ca.health()).status, 'ok');
    // B has no token: no header needed.
    assert.is((await raw(p.apiB.url, 'GET', '/v1/health')).status, 200);
  } finally {
    await p.close();
  }
});

test('a bug (a facade method that throws something unexpected) is a 500 with the message, and it is logged', async () => {
  const logged: string[] = [];
  const broken = {
    health: async () => {
      throw new TypeError('cannot read properties of undefined (reading "x")');
    },
  };
  const app = await buildServer(broken as never, { log: (_level, m) => logged.push(m) });
  const api = await startApi(broken as never, { port: 0, log: (_level, m) => logged.push(m) });
  try {
    const r = await raw(api.url, 'GET', '/v1/health');
    assertError(r, 500, 'internal error in GET /v1/health: cannot read properties of undefined (reading "x")', 'a bug');
    assert.is(logged.length, 1);
    assert.match(logged[0], /internal error in GET \/v1\/health: cannot read properties of undefined/);
    assert.match(logged[0], /TypeError/, 'with its stack');
    // inject (no socket) gives the same.
    const i = await app.inject({ method: 'GET', url: '/v1/health' });
    assert.is(i.statusCode, 500);
    assert.is(logged.length, 2);
  } finally {
    await api.close();
    await app.close();
  }
});

test('405 names the methods in Allow; every JSON answer ends with a newline', async () => {
  const p = await apiPair();
  try {
    const r = await fetch(`${p.apiA.url}/v1/qps`, { method: 'PUT' });
    assert.is(r.status, 405);
    assert.is(r.headers.get('allow'), 'GET, HEAD, POST');
    const text = await r.text();
    assert.ok(text.endsWith('}\n'), JSON.stringify(text));
    const post = await fetch(`${p.apiA.url}/v1/cqs`, { method: 'DELETE' });
    assert.is(post.headers.get('allow'), 'GET, HEAD, POST', 'a path with GET and POST');
    for (const path of ['/v1/health', '/v1/qps', '/v1/openapi.json', '/v1/nope']) {
      const t = await (await fetch(`${p.apiA.url}${path}`)).text();
      assert.ok(t.endsWith('\n') && !t.endsWith('\n\n'), `${path}: ${JSON.stringify(t.slice(-20))}`);
    }
  } finally {
    await p.close();
  }
});

test('HEAD on a GET route answers as GET without a body (health, metrics, a missing object)', async () => {
  const p = await apiPair();
  try {
    for (const path of ['/v1/health', '/metrics', '/v1/qps']) {
      const get = await fetch(`${p.apiA.url}${path}`);
      const getBody = await get.text();
      const head = await fetch(`${p.apiA.url}${path}`, { method: 'HEAD' });
      assert.is(head.status, get.status, path);
      assert.is(head.headers.get('content-type'), get.headers.get('content-type'), path);
      assert.is(await head.text(), '', `${path}: no body`);
      assert.ok(getBody.length > 0, `${path}: GET has one`);
    }
    const missing = await fetch(`${p.apiA.url}/v1/qps/4242`, { method: 'HEAD' });
    assert.is(missing.status, (await fetch(`${p.apiA.url}/v1/qps/4242`)).status);
    assert.is(missing.status, 404);
    const notGet = await fetch(`${p.apiA.url}/v1/qps/4242/send`, { method: 'HEAD' });
    assert.is(notGet.status, 405, 'HEAD only where GET is');
  } finally {
    await p.close();
  }
});

test.run();
