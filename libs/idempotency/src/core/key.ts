import { createHash } from 'node:crypto';
import { IdempotencyKeyError } from './errors';

export const DEFAULT_MAX_KEY_LENGTH = 255;

/** First 12 hex characters of the key's SHA-256: enough to correlate, useless to replay. */
export function keyDigest(scope: string, key: string): string {
  return `${scope}/#${createHash('sha256').update(key).digest('hex').slice(0, 12)}`;
}

// C0 controls and DEL: PostgreSQL text cannot hold NUL, and the rest are never intended.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

/** True when `text` holds a character no key or scope may contain (C0 controls, DEL). */
export function hasControlCharacters(text: string): boolean {
  return CONTROL.test(text);
}

/** Throws `IdempotencyKeyError` unless `key` is a usable key. Never echoes the key itself. */
export function assertValidKey(
  scope: string,
  key: unknown,
  maxLength = DEFAULT_MAX_KEY_LENGTH,
): asserts key is string {
  if (typeof key !== 'string') {
    throw new IdempotencyKeyError(
      `${scope}: idempotency key must be a string, got ${key === null ? 'null' : typeof key}`,
    );
  }
  if (key.length === 0) {
    throw new IdempotencyKeyError(`${scope}: idempotency key is empty`);
  }
  if (key.length > maxLength) {
    throw new IdempotencyKeyError(
      `${scope}: idempotency key ${keyDigest(scope, key)} is ${key.length} characters; the maximum is ${maxLength}`,
    );
  }
  if (hasControlCharacters(key)) {
    throw new IdempotencyKeyError(
      `${scope}: idempotency key ${keyDigest(scope, key)} contains control characters`,
    );
  }
}

export function assertValidScope(scope: unknown): asserts scope is string {
  if (typeof scope !== 'string' || scope.length === 0) {
    throw new IdempotencyKeyError(`idempotency scope must be a non-empty string`);
  }
  if (hasControlCharacters(scope)) {
    throw new IdempotencyKeyError(`idempotency scope contains control characters`);
  }
}
