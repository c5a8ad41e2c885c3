import type { OutgoingHttpHeaders } from 'node:http';
import {
  decodeHttpResponse,
  decodeValue,
  HttpResponseRecord,
  isHttpResponse,
} from '../../../core/payload';
import type { StoredPayload } from '../../../core/store';
import { bodyValue } from '../../replayed-value';
import { plainResult } from '../graphql/graphql-result';
import type { HandlerPlan } from '../../config/handler-plan';
import { NEVER_STORED_HEADERS, StoredHttpResponse } from '../../config/idempotency.options';
import type { FinishedResponse, Outgoing } from './raw-response';
import type { IdempotencyHttpException, ProblemDetails } from './problem';

/**
 * Responses as the HTTP door stores and replays them: what is kept of a
 * finished response, what a replay writes, and a refusal written in place of
 * a finished response.
 */

const NEVER_STORED = new Set(NEVER_STORED_HEADERS);

/** Headers that describe the body: a replay's are the stored response's, never the live one's. */
const BODY_HEADERS = new Set([
  'content-type',
  'content-length',
  'etag',
  'transfer-encoding',
  'content-encoding',
]);

/** The response as it is stored: the plan's replayed headers, then `sanitize` on a copy (which may throw). */
export function recordOf(
  plan: HandlerPlan,
  finished: FinishedResponse,
  sanitize: ((result: StoredHttpResponse) => unknown) | undefined,
): HttpResponseRecord {
  const record: HttpResponseRecord = {
    status: finished.status,
    headers: storedHeaders(finished.headers, plan.replayHeaders!),
    body: finished.body,
  };
  if (!sanitize) return record;
  const clean = sanitized(record, sanitize);
  // Whatever the sanitizer returned, the headers that are never stored stay out.
  clean.headers = storedHeaders(clean.headers, plan.replayHeaders!);
  return clean;
}

/** `sanitize` sees a copy: the body parsed from the bytes being sent, never the live object. */
function sanitized(
  record: HttpResponseRecord,
  sanitize: (result: StoredHttpResponse) => unknown,
): HttpResponseRecord {
  const isJson = /[/+]json\b/i.test(String(record.headers['content-type'] ?? ''));
  const view: StoredHttpResponse = {
    kind: 'http',
    status: record.status,
    headers: { ...record.headers },
    body:
      isJson && record.body.length > 0
        ? JSON.parse(record.body.toString('utf8'))
        : Buffer.from(record.body),
  };
  const out = sanitize(view) as StoredHttpResponse;
  const body = out.body;
  let bytes: Buffer;
  if (Buffer.isBuffer(body)) bytes = body;
  else if (isJson) bytes = Buffer.from(JSON.stringify(body) ?? '', 'utf8');
  else bytes = Buffer.from(typeof body === 'string' ? body : (JSON.stringify(body) ?? ''), 'utf8');
  return { status: out.status, headers: out.headers, body: bytes };
}

function storedHeaders(
  headers: OutgoingHttpHeaders,
  allowed: Set<string>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const given of Object.keys(headers)) {
    const value = headers[given];
    const name = given.toLowerCase();
    if (value === undefined || !allowed.has(name) || NEVER_STORED.has(name)) continue;
    out[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return out;
}

/**
 * Stored responses already decoded, by their payload: a store that hands back
 * the same bytes for every duplicate (the in-memory store, the replay cache)
 * has its stored head parsed once. Read-only to every replay that shares it.
 */
const decoded = new WeakMap<StoredPayload, HttpResponseRecord>();

/**
 * The response a replay writes. A record the handler completed holds its
 * response; one that `nest-idempotency resolve --completed --payload` or a
 * `reconcile` hook completed holds a value, replayed as JSON with the route's
 * status (`@HttpCode`, else 201 for POST and 200 otherwise).
 */
export function replayedResponse(payload: StoredPayload, plan: HandlerPlan): HttpResponseRecord {
  if (isHttpResponse(payload)) {
    let stored = decoded.get(payload);
    if (stored === undefined) decoded.set(payload, (stored = decodeHttpResponse(payload)));
    return stored;
  }
  const value = plainResult(decodeValue(payload));
  const status = plan.replayStatus ?? 200;
  if (value === undefined) return { status, headers: {}, body: Buffer.alloc(0) };
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: Buffer.from(JSON.stringify(value), 'utf8'),
  };
}

/** What goes out on a replay: the stored status, body and headers over the live response's own. */
export function replayOf(stored: HttpResponseRecord, finished: FinishedResponse): Outgoing {
  const headers: OutgoingHttpHeaders = {};
  const live = finished.headers;
  for (const name of Object.keys(live)) {
    // What describes the body is the stored response's, not the re-serialized value's.
    if (!BODY_HEADERS.has(name)) headers[name] = live[name];
  }
  const kept = stored.headers;
  for (const name of Object.keys(kept)) {
    const value = kept[name];
    // A list is copied: the stored head is shared by every replay of its payload.
    headers[name] = Array.isArray(value) ? [...value] : value;
  }
  headers['idempotent-replayed'] = 'true';
  // Under CORS a browser only lets a page read the headers listed here.
  if (headers['access-control-allow-origin'] !== undefined) {
    const exposed = String(headers['access-control-expose-headers'] ?? '');
    if (!/(^|,)\s*(idempotent-replayed|\*)\s*(,|$)/i.test(exposed)) {
      headers['access-control-expose-headers'] = exposed
        ? `${exposed}, Idempotent-Replayed`
        : 'Idempotent-Replayed';
    }
  }
  return { kind: 'replace', status: stored.status, headers, body: stored.body };
}

/** The stored body as the value outer interceptors see on a replay: parsed JSON, text, or bytes. */
export function valueOf(stored: HttpResponseRecord): unknown {
  return bodyValue(stored.body, stored.headers['content-type']);
}

/** A problem document in place of the finished response, keeping its headers that do not describe the body (CORS, request ids). */
export function asOutgoing(
  exception: IdempotencyHttpException,
  finished: FinishedResponse,
): Outgoing {
  const kept: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(finished.headers)) {
    if (!BODY_HEADERS.has(name) && !NEVER_STORED.has(name)) kept[name] = value;
  }
  return {
    kind: 'replace',
    status: exception.problem.status,
    headers: {
      ...kept,
      'content-type': 'application/problem+json',
      ...Object.fromEntries(
        Object.entries(exception.headers).map(([k, v]) => [k.toLowerCase(), v]),
      ),
    },
    body: Buffer.from(JSON.stringify(exception.problem)),
  };
}

/** True when what is being sent is this refusal's problem document (whatever its Content-Type). */
export function isProblem(
  finished: FinishedResponse,
  exception: IdempotencyHttpException,
): boolean {
  if (finished.status !== exception.problem.status || finished.body.length > 64 * 1024)
    return false;
  try {
    const sent = JSON.parse(finished.body.toString('utf8')) as Partial<ProblemDetails>;
    return sent.code === exception.problem.code && sent.detail === exception.problem.detail;
  } catch {
    return false;
  }
}

/** The header a suspension's answer carries its continuation token in, and a resumption sends it back in. */
export const CONTINUATION_HEADER = 'idempotency-continuation';

/** The token a resumption presented (the first, if sent twice), or undefined. */
export function continuationHeader(request: {
  headers?: Record<string, string | string[] | undefined>;
}): string | undefined {
  const value = request.headers?.[CONTINUATION_HEADER];
  return Array.isArray(value) ? value[0] : value;
}

/** A suspension's answer: the written body, with the suspension's status and the token. */
export function suspendedAnswer(
  finished: FinishedResponse,
  status: number,
  token: string,
): Outgoing {
  const headers: OutgoingHttpHeaders = { ...finished.headers, [CONTINUATION_HEADER]: token };
  if (headers['access-control-allow-origin'] !== undefined) {
    const exposed = String(headers['access-control-expose-headers'] ?? '');
    headers['access-control-expose-headers'] = exposed
      ? `${exposed}, Idempotency-Continuation`
      : 'Idempotency-Continuation';
  }
  return { kind: 'replace', status, headers, body: finished.body };
}
