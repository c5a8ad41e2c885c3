import { decodePayload, encodePayload } from '../../core/payload';
import type { StoredHttpResponse } from '../idempotency.options';

/**
 * What the store holds for an HTTP response. The body is kept as JSON text, so
 * a replay serializes byte for byte like the original (PostgreSQL's jsonb
 * would reorder object keys, changing the body and its ETag).
 */
export interface PersistedHttpResponse {
  kind: 'http';
  status: number;
  headers: Record<string, string | string[]>;
  bodyJson: string;
}

/** Throws `IdempotencyPayloadError` for a body that JSON cannot carry (BigInt, circular…). */
export function persistHttpResponse(response: StoredHttpResponse): PersistedHttpResponse {
  return {
    kind: 'http',
    status: response.status,
    headers: response.headers,
    bodyJson: encodePayload(response.body, Number.POSITIVE_INFINITY),
  };
}

export function restoreHttpResponse(persisted: PersistedHttpResponse): StoredHttpResponse {
  return {
    kind: 'http',
    status: persisted.status,
    headers: persisted.headers,
    body: decodePayload(persisted.bodyJson),
  };
}
