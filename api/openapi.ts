/**
 * The OpenAPI 3.0 document of the REST API, generated from the route table and the schemas the
 * routes validate with (api/schemas.ts): a schema object that is one of the named components
 * appears as a $ref to it.
 */
import { STATUS_CODES } from 'node:http';
import { VERSION } from '../dataplane/views.ts';
import { JSON_TYPE, OCTETS, type RouteDef } from './routes/route.ts';
import { components, type JsonSchema } from './schemas.ts';

export type OpenApiDocument = {
  openapi: string;
  info: { title: string; version: string; description: string };
  tags: { name: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, JsonSchema>; securitySchemes?: Record<string, unknown> };
  security?: Record<string, string[]>[];
};

export type Operation = {
  operationId: string;
  summary: string;
  tags: string[];
  parameters?: { name: string; in: 'path' | 'query'; required: boolean; description?: string; schema: JsonSchema }[];
  requestBody?: { required: boolean; content: Record<string, { schema: JsonSchema }> };
  responses: Record<string, { description: string; content?: Record<string, { schema: JsonSchema }> }>;
};

const byObject = new Map<unknown, string>(Object.entries(components).map(([name, s]) => [s, name]));

/** `s` with every nested named component replaced by a $ref (the top level kept when `keepTop`). */
function withRefs(s: JsonSchema, keepTop = false): JsonSchema {
  const name = byObject.get(s);
  if (name !== undefined && !keepTop) return { $ref: `#/components/schemas/${name}` };
  const out: JsonSchema = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === 'properties')
      out[k] = Object.fromEntries(Object.entries(v as Record<string, JsonSchema>).map(([p, ps]) => [p, withRefs(ps)]));
    else if (k === 'items') out[k] = withRefs(v as JsonSchema);
    else if (k === 'oneOf' || k === 'anyOf' || k === 'allOf') out[k] = (v as JsonSchema[]).map((x) => withRefs(x));
    else out[k] = v;
  }
  return out;
}

/** GET /v1/qps/{qpn}/connect -> postQpsByQpnConnect. */
export function operationId(def: RouteDef): string {
  const words = def.path
    .split('/')
    .filter((p) => p !== '' && p !== 'v1')
    .map((p) => {
      const param = /^\{(\w+)\}$/.exec(p);
      const w = param ? `by-${param[1]}` : p;
      return w
        .split(/[-_.]/)
        .map((x) => x.charAt(0).toUpperCase() + x.slice(1))
        .join('');
    });
  return def.method.toLowerCase() + words.join('');
}

function parameters(def: RouteDef): Operation['parameters'] {
  const out: NonNullable<Operation['parameters']> = [];
  for (const [where, s] of [
    ['path', def.params],
    ['query', def.querystring],
  ] as const) {
    if (!s) continue;
    const required = (s.required as string[] | undefined) ?? [];
    for (const [name, ps] of Object.entries(s.properties as Record<string, JsonSchema>)) {
      const { description, ...schema } = ps;
      out.push({
        name,
        in: where,
        required: where === 'path' || required.includes(name),
        ...(typeof description === 'string' ? { description } : {}),
        schema: withRefs(schema),
      });
    }
  }
  return out.length ? out : undefined;
}

/** The error statuses a route can answer: its own and those every route of its kind can. */
export function errorStatuses(def: RouteDef, token: boolean): number[] {
  const set = new Set(def.errors);
  if (def.params || def.querystring || def.body || def.consumes) set.add(400);
  if (def.params) set.add(404);
  if (def.method !== 'GET') set.add(413).add(415);
  if (token) set.add(401);
  // Host, Origin and Sec-Fetch-Site checks (api/guard.ts) apply to every route.
  set.add(403);
  set.add(500);
  return [...set].sort((a, b) => a - b);
}

export function openApiDocument(routes: RouteDef[], opts: { token: boolean }): OpenApiDocument {
  const paths: OpenApiDocument['paths'] = {};
  for (const def of routes) {
    const op: Operation = { operationId: operationId(def), summary: def.summary, tags: [def.tag], responses: {} };
    const params = parameters(def);
    if (params) op.parameters = params;
    if (def.consumes === OCTETS)
      op.requestBody = { required: true, content: { [OCTETS]: { schema: { type: 'string', format: 'binary' } } } };
    else if (def.body) op.requestBody = { required: true, content: { [JSON_TYPE]: { schema: withRefs(def.body) } } };
    const ok = STATUS_CODES[def.status] ?? 'OK';
    if (def.status === 204) op.responses['204'] = { description: ok };
    else {
      const type = def.produces ?? JSON_TYPE;
      const schema = def.response ? withRefs(def.response) : { type: 'string', format: 'binary' };
      op.responses[String(def.status)] = { description: ok, content: { [type.split(';')[0]]: { schema } } };
    }
    for (const code of errorStatuses(def, opts.token)) {
      op.responses[String(code)] = {
        description: STATUS_CODES[code] ?? 'Error',
        content: { [JSON_TYPE]: { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    (paths[def.path] ??= {})[def.method.toLowerCase()] = op;
  }
  const doc: OpenApiDocument = {
    openapi: '3.0.3',
    info: {
      title: 'rdma-graph',
      version: VERSION,
      description:
        'REST API of the rdma-graph data plane: interfaces, runtime, errors, trace, and the RDMA verbs (PDs, MRs, CQs, SRQs, QPs, listeners, post, poll). Errors are {statusCode, error, message}.',
    },
    tags: [...new Set(routes.map((r) => r.tag))].map((name) => ({ name })),
    paths,
    components: {
      schemas: Object.fromEntries(Object.entries(components).map(([name, s]) => [name, withRefs(s, true)])),
    },
  };
  if (opts.token) {
    doc.components.securitySchemes = {
      bearer: { type: 'http', scheme: 'bearer', description: 'the token of api.token in the start-up configuration' },
    };
    doc.security = [{ bearer: [] }];
  }
  return doc;
}

/** GET /v1/openapi.json, answering with the document of `routes` (itself included). */
export function openApiRoute(routes: () => RouteDef[], opts: { token: boolean }): RouteDef {
  let doc: OpenApiDocument | null = null;
  return {
    method: 'GET',
    path: '/v1/openapi.json',
    tag: 'status',
    summary: 'this OpenAPI 3.0 document',
    status: 200,
    response: { type: 'object', description: 'an OpenAPI 3.0 document' },
    errors: [],
    handler: async () => (doc ??= openApiDocument(routes(), opts)),
  };
}
