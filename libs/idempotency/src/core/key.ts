import { hash } from 'node:crypto';
import { IdempotencyKeyError } from './errors';

/**
 * What a key is, everywhere: a non-empty, well-formed Unicode string of at
 * most `maxLength` characters (code points), without control characters.
 * Stored as UTF-8. A key sent in an HTTP header is further limited to
 * printable ASCII, as the IETF draft's structured-field string is (see
 * nest/doors/http/key-header.ts); keys from bodies and messages may be any Unicode.
 */
export const DEFAULT_MAX_KEY_LENGTH = 255;

const TENANT_MARK = '#tenant:';

/**
 * How a record is named in logs, events and error messages: the scope and
 * the first 12 hex characters of a SHA-256 over the key (and the tenant,
 * when there is one), never the key or the tenant themselves.
 */
export function keyDigest(scope: string, key: string, tenant?: string): string {
  return `${scope}/#${keyHash(key, tenant).slice(0, 12)}`;
}

/** The full SHA-256 (hex) over the key and its tenant that `keyDigest` is cut from. */
export function keyHash(key: string, tenant?: string): string {
  // One-shot hash (Node ≥ 20.12; engines ask for 20.19): no Hash object per call.
  return hash('sha256', tenant === undefined ? key : `${tenant}\u0000${key}`);
}

/**
 * Where a store finds a record without its raw key: SHA-256 (hex) of
 * `[storedScope, key]` as JSON. The SQL stores' primary key and the Redis
 * store's hash tag are this value; a continuation token carries it.
 */
export function recordLocator(scope: string, key: string): string {
  return hash('sha256', JSON.stringify([scope, key]));
}

/** The scope a store keeps for a tenant's record: the tenant is part of the record's identity. */
export function storedScope(scope: string, tenant: string | undefined): string {
  return tenant === undefined ? scope : `${scope}${TENANT_MARK}${tenant}`;
}

/** The handler's scope of a stored scope, without its tenant (for logs, metrics and spans). */
export function scopeOfStored(stored: string): string {
  const at = stored.indexOf(TENANT_MARK);
  return at < 0 ? stored : stored.slice(0, at);
}

/** The digest logs show for a record as a store holds it (its stored scope may carry a tenant). */
export function storedKeyDigest(stored: string, key: string): string {
  const at = stored.indexOf(TENANT_MARK);
  return at < 0
    ? keyDigest(stored, key)
    : keyDigest(stored.slice(0, at), key, stored.slice(at + TENANT_MARK.length));
}

// C0 controls and DEL: PostgreSQL text cannot hold NUL, and the rest are never intended.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

/** True when `text` holds a character no key or scope may contain (C0 controls, DEL). */
export function hasControlCharacters(text: string): boolean {
  return CONTROL.test(text);
}

/** Characters as a person counts them (code points), not UTF-16 units or bytes. */
function codePoints(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) i++;
    count++;
  }
  return count;
}

/**
 * Throws `IdempotencyKeyError` unless `key` is a usable key. `where` names the
 * handler (`Class.method`) or scope; the message carries the key's digest,
 * never the key.
 */
export function assertValidKey(
  where: string,
  key: unknown,
  maxLength = DEFAULT_MAX_KEY_LENGTH,
  /** How the record is named in logs (with its scope and tenant); by default `where` and the key. */
  digestOf: (key: string) => string = (k) => keyDigest(where, k),
): asserts key is string {
  if (typeof key !== 'string') {
    throw new IdempotencyKeyError(
      `${where}: idempotency key must be a string, got ${key === null ? 'null' : typeof key}`,
    );
  }
  if (key.length === 0) {
    throw new IdempotencyKeyError(`${where}: idempotency key is empty`);
  }
  // UTF-16 length bounds the code points from above, so most keys skip the count.
  if (key.length > maxLength && codePoints(key) > maxLength) {
    throw new IdempotencyKeyError(
      `${where}: idempotency key ${digestOf(key)} is ${codePoints(key)} characters; the maximum is ${maxLength}`,
    );
  }
  if (hasControlCharacters(key)) {
    throw new IdempotencyKeyError(
      `${where}: idempotency key ${digestOf(key)} contains control characters`,
    );
  }
  if (!key.isWellFormed()) {
    // A lone surrogate would turn into U+FFFD on the way to UTF-8, and two keys into one.
    throw new IdempotencyKeyError(
      `${where}: idempotency key ${digestOf(key)} is not well-formed Unicode (a lone surrogate)`,
    );
  }
}

/** A scope is fixed per handler: non-empty, no control characters, no tenant mark of its own. */
export function scopeProblem(scope: unknown): string | undefined {
  if (typeof scope !== 'string' || scope.length === 0) return 'must be a non-empty string';
  if (hasControlCharacters(scope)) return 'must not contain control characters';
  if (scope.includes(TENANT_MARK)) return `must not contain "${TENANT_MARK}" (it marks a tenant)`;
  if (!scope.isWellFormed()) return 'must be well-formed Unicode';
  return undefined;
}

const HEX_PREFIX = 'hex:';
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Bytes from a broker (a Kafka key or header) as a key, without loss: valid
 * UTF-8 text without control characters stays that text; anything else (a
 * binary key, schema-registry framing that starts with 0x00) becomes `hex:`
 * and its hex digits. Text that itself starts with `hex:` is hex-encoded too,
 * so two different byte strings never give the same key.
 */
export function keyFromBytes(bytes: Uint8Array): string {
  let text: string | undefined;
  try {
    text = decoder.decode(bytes);
  } catch {
    text = undefined;
  }
  if (text !== undefined && !hasControlCharacters(text) && !text.startsWith(HEX_PREFIX))
    return text;
  return `${HEX_PREFIX}${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex')}`;
}
