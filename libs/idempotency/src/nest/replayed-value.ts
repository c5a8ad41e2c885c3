import { decodeHttpResponse, decodeValue, isHttpResponse } from '../core/payload';
import type { StoredPayload } from '../core/store';
import { plainResult } from './doors/graphql/graphql-result';
import type { HandlerPlan } from './config/handler-plan';

/** What a message handler or a mutation replays: a value, or the error an HTTP route answered. */
export type ReplayedValue = { kind: 'value'; value: unknown } | { kind: 'error'; message: string };

/**
 * The value a message handler or a GraphQL mutation replays. Its own records
 * hold a value. A record an HTTP route of the same scope completed holds a
 * response: a success (below 400) replays its body as the value the route's
 * handler would have given (JSON parsed, `text/*` as a string, other bytes
 * as a `Buffer`, nothing as `undefined`); an error status, which has no
 * value, is an error naming the status.
 */
export function replayedValue(
  payload: StoredPayload,
  plan: HandlerPlan,
  /** Keep a mutation's stored result as stored (the GraphQL door revives it itself). */
  options: { typed?: boolean } = {},
): ReplayedValue {
  if (!isHttpResponse(payload)) {
    const value = decodeValue(payload);
    return { kind: 'value', value: options.typed ? value : plainResult(value) };
  }
  const response = decodeHttpResponse(payload);
  if (response.status >= 400) {
    return {
      kind: 'error',
      message: `${plan.where}: this key was first processed through an HTTP route of the scope "${plan.policy.scope}", which answered ${response.status}; it is not processed again`,
    };
  }
  return { kind: 'value', value: bodyValue(response.body, response.headers['content-type']) };
}

/**
 * A response body as a value: parsed JSON for a JSON content type, text for
 * `text/*`, otherwise a copy of the bytes (the application may change what
 * it gets; the stored bytes, which a store may hand to every replay, stay).
 */
export function bodyValue(body: Buffer, contentType: string | string[] | undefined): unknown {
  if (body.length === 0) return undefined;
  const type = String(contentType ?? '');
  if (/[/+]json\b/i.test(type)) {
    try {
      return JSON.parse(body.toString('utf8')) as unknown;
    } catch {
      return body.toString('utf8');
    }
  }
  return /^text\//i.test(type) ? body.toString('utf8') : Buffer.from(body);
}
