import { createHash, hash } from 'node:crypto';
import stringify from 'safe-stable-stringify';

/** What the default fingerprint covers, as the IETF draft and Stripe compare requests. */
export interface FingerprintParts {
  method: string;
  /** The concrete path as requested (`/orders/1`, not the route `/orders/:id`), without the query. */
  path: string;
  /** The raw query string, without `?`; canonicalized here. */
  query: string;
  /** The parsed body (JSON, form fields, text or bytes). */
  body: unknown;
  /** Files a multipart parser (multer) attached before the check. */
  files?: unknown;
}

/**
 * SHA-256 of the method, the concrete path, the query with its parameters in
 * a canonical order, and the body as canonical JSON (object key order does not
 * matter; bytes are hashed as they are). Two requests share a fingerprint
 * only when a server could not tell them apart by these.
 */
export function requestFingerprint(parts: FingerprintParts): string {
  const text = `${parts.method.toUpperCase()}\n${parts.path}\n${canonicalQuery(parts.query)}\n${canonicalBody(parts.body)}${
    parts.files === undefined ? '' : `\n${canonicalBody(parts.files)}`
  }`;
  // One-shot hash: no Hash object per request.
  return hash('sha256', text);
}

/** Parameters sorted by name, then value; encoded the same way whatever the client sent. */
export function canonicalQuery(query: string): string {
  if (query === '') return '';
  const params = [...new URLSearchParams(query)];
  params.sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0));
  return new URLSearchParams(params).toString();
}

function canonicalBody(body: unknown): string {
  if (body === undefined || body === null) return 'null';
  if (Buffer.isBuffer(body)) return `bytes:${createHash('sha256').update(body).digest('hex')}`;
  return (
    stringify(body, (_key, value: unknown) =>
      // Buffers inside (multer's file.buffer) by digest, not as {"type":"Buffer","data":[…]}.
      isBufferJson(value)
        ? `bytes:${createHash('sha256').update(Buffer.from(value.data)).digest('hex')}`
        : value,
    ) ?? 'null'
  );
}

function isBufferJson(value: unknown): value is { type: 'Buffer'; data: number[] } {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
  );
}
