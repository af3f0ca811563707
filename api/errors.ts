/**
 * Errors of the REST API: the one response shape `{statusCode, error, message}`, the HTTP status
 * of each DataplaneError kind, and validation messages that name the field ("body/maxSendWr
 * must be integer") instead of Ajv's raw error list.
 */
import { STATUS_CODES } from 'node:http';
import type { ErrorObject } from 'ajv';
import type { DataplaneErrorKind } from '../dataplane/views.ts';

/** What every error response carries (and what the client throws). */
export interface ErrorBody {
  statusCode: number;
  /** The HTTP reason phrase of statusCode ("Bad Request", "Conflict", ...). */
  error: string;
  /** What is wrong and where. */
  message: string;
}

/** The HTTP status each kind of data plane failure answers with. */
export const KIND_STATUS: Record<DataplaneErrorKind, number> = {
  invalid: 400,
  'not-found': 404,
  state: 409,
  busy: 409,
  'too-large': 413,
  resource: 503,
  timeout: 504,
  rejected: 409,
  unavailable: 503,
};

/** An error the API itself raises with a status (a failed check in a handler or hook). */
export class HttpError extends Error {
  readonly statusCode: number;
  constructor(statusCode: number, message: string) {
    super(message);
    this.statusCode = statusCode;
    this.name = 'HttpError';
  }
}

export function errorBody(statusCode: number, message: string): ErrorBody {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message };
}

/** The extension keyword a schema uses to say, in words, what a value must be. */
export const EXPECTED = 'x-expected';

function expected(e: ErrorObject): string | undefined {
  const p = e.parentSchema as Record<string, unknown> | undefined;
  return p && typeof p[EXPECTED] === 'string' ? (p[EXPECTED] as string) : undefined;
}

function describeOne(e: ErrorObject, where: string): string {
  const at = `${where}${e.instancePath}`;
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'required':
      return `${at}/${String(params.missingProperty)} is required`;
    case 'additionalProperties': {
      const known = Object.keys((e.parentSchema as { properties?: object } | undefined)?.properties ?? {});
      return `${at}/${String(params.additionalProperty)} is not allowed (${known.length ? `allowed: ${known.join(', ')}` : `${at} takes no fields`})`;
    }
    case 'enum':
      return `${at} must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    default: {
      const x = expected(e);
      if (x !== undefined) return `${at} must be ${x}`;
      return `${at} ${e.message ?? 'is invalid'}`;
    }
  }
}

/**
 * One message for a failed validation. Ajv stops at the first failure, but a oneOf/anyOf
 * reports its branches' failures before its own: the combinator's error (with its x-expected
 * words) says more than "must be string", so it wins.
 */
export function describeValidation(errors: ErrorObject[], where: string): string {
  if (errors.length === 0) return `${where} is invalid`;
  const combined = errors.find((e) => e.keyword === 'oneOf' || e.keyword === 'anyOf');
  return describeOne(combined ?? errors[0], where);
}
