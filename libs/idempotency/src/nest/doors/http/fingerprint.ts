import { createHash, hash } from 'node:crypto';
import { configure } from 'safe-stable-stringify';

/** What the default fingerprint covers, as the IETF draft and Stripe compare requests. */
export interface FingerprintParts {
  method: string;
  /** The concrete path as requested (`/orders/1`, not the route `/orders/:id`), without the query. */
  path: string;
  /** The raw query string, without `?`; canonicalized here. */
  query: string;
  /** The parsed body (JSON, form fields, text or bytes), exactly as the handler gets it. */
  body: unknown;
  /** Files a multipart parser (multer) attached before the check, as the adapter describes them. */
  files?: unknown;
  /** The route's parameters; compared instead of the method and path in the `shared-scope` form. */
  params?: Record<string, unknown>;
}

/**
 * `route`: the method and concrete path name the door, as for a handler alone
 * in its scope. `shared-scope`: several routes share one scope on purpose,
 * each with its own method and path, so those are left out and the route
 * parameters (by name) are compared instead.
 */
export type FingerprintForm = 'route' | 'shared-scope';

/**
 * SHA-256 of the method, the concrete path, the query with its parameters in
 * a canonical order, the body as canonical typed JSON, and the uploaded files
 * (on a line of their own, present only when multer attached some). Two
 * requests share a fingerprint only when the handler could not tell them
 * apart by these. For every request the 0.2 encoding could already tell
 * apart, the text hashed is the same as 0.2's, so records written before an
 * upgrade keep matching their retries.
 */
export function requestFingerprint(
  parts: FingerprintParts,
  form: FingerprintForm = 'route',
): string {
  const door =
    form === 'route'
      ? `${parts.method.toUpperCase()}\n${parts.path}`
      : // Lower case: no upper-cased method reads `shared`.
        `shared\n${canonicalBody(parts.params ?? {})}`;
  const text = `${door}\n${canonicalQuery(parts.query)}\n${canonicalBody(parts.body)}${
    parts.files === undefined ? '' : `\n${canonicalBody(parts.files)}`
  }`;
  // One-shot hash: no Hash object per request.
  return hash('sha256', text);
}

/**
 * Parameters sorted by name, and encoded the same way whatever the client
 * sent (`a%20b` and `a+b` are one value). The values of a repeated name keep
 * their order: the handler gets them as an array in that order.
 */
export function canonicalQuery(query: string): string {
  if (query === '') return '';
  const params = [...new URLSearchParams(query)];
  // Array.prototype.sort is stable: equal names keep the order they came in.
  params.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return new URLSearchParams(params).toString();
}

/** Deterministic (sorted keys); a cycle, which no body parser makes, throws rather than hashing as a placeholder. */
const stringify = configure({ circularValue: TypeError });

/**
 * The body as canonical JSON, typed where JSON is not: bytes (a `Buffer` or
 * any typed array, found by what the value is, never by its shape) and
 * `±Infinity` (what `JSON.parse` makes of `1e400`) and `NaN` are tagged strings, and a
 * client's string that reads like a tag is escaped, so no string stands for
 * bytes, and an object shaped like a serialized `Buffer` is the object it is.
 */
function canonicalBody(body: unknown): string {
  if (body === undefined || body === null) return 'null';
  if (Buffer.isBuffer(body)) return bytesTag(body);
  return (
    stringify(body, function (this: unknown, key: string, value: unknown): unknown {
      // `value` has been through toJSON (a Buffer's is {type, data}); the holder has the original.
      const original = (this as Record<string, unknown>)[key];
      if (original instanceof ArrayBuffer || ArrayBuffer.isView(original))
        return bytesTag(original);
      if (typeof value === 'number' && !Number.isFinite(value)) return `number:${value}`;
      if (typeof value === 'string' && TAG_LIKE.test(value)) return `${ESCAPE}${value}`;
      return value;
    }) ?? 'null'
  );
}

/**
 * The tags, as 0.2 already wrote bytes, and their escape: a string that is a
 * tag with any number of `~` before it gets one more, so a client's
 * `"bytes:<sha-256>"` reads `"~bytes:<sha-256>"`, and its `"~bytes:…"`
 * reads `"~~bytes:…"`. Any other string is hashed as it is.
 */
const ESCAPE = '~';
const TAG_LIKE = /^~*(?:bytes:[0-9a-f]{64}|number:(?:-?Infinity|NaN))$/;

function bytesTag(bytes: ArrayBuffer | ArrayBufferView): string {
  const view =
    bytes instanceof ArrayBuffer
      ? new Uint8Array(bytes)
      : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return `bytes:${createHash('sha256').update(view).digest('hex')}`;
}

/**
 * A file a multer storage engine kept neither in memory nor on disk (one that
 * streams to object storage, say): what the engine recorded about it (its
 * own fields besides the ones the descriptor already has), since its content
 * cannot be read here.
 */
export function storedFileFields(file: object): Record<string, unknown> {
  const described = new Set(['fieldname', 'originalname', 'mimetype', 'size', 'stream']);
  return Object.fromEntries(
    Object.entries(file).filter(
      ([name, value]) => !described.has(name) && typeof value !== 'function',
    ),
  );
}
