import { createHash, createHmac } from 'node:crypto';
import { IdempotencyConfigError, IdempotencyError } from './errors';
import { hasControlCharacters } from './key';
import { optionKeys, refuseUnknownOptions } from './option-keys';

/**
 * Keys for the calls an action makes outside the process (a payment
 * provider, another service): one per record and name, the same on every
 * attempt at that record, so a provider that de-duplicates by idempotency
 * key sees a takeover's repeat call as the same call.
 */
export interface DerivedKeyOptions {
  /**
   * Makes derived keys unguessable from the raw key: HMAC-SHA256 under this
   * secret (a string of at least 32 bytes as UTF-8, or at least 32 bytes).
   * Without one, a derived key is a plain SHA-256, which anyone who knows the
   * raw key, the scope (and the tenant) can compute. Changing it changes
   * every derived key, so an attempt after the change no longer matches the
   * calls made before it.
   */
  secret?: string | Uint8Array;
}

export const DERIVED_KEY_OPTION_KEYS = optionKeys<DerivedKeyOptions>()(['secret']);

/** The least secret accepted, in bytes: as much as the HMAC's output. */
export const MIN_DERIVED_KEY_SECRET_BYTES = 32;

/** Longest `name` for `deriveKey`, in UTF-16 units. */
export const MAX_DERIVED_KEY_NAME_LENGTH = 200;

/** The checked options: the secret's bytes, or none. */
export interface DerivedKeySecret {
  secret: Buffer | undefined;
}

/**
 * Checks `derivedKeys` once (`where` is `IdempotencyModule` or
 * `IdempotencyEngine`); throws `IdempotencyConfigError` naming the option.
 */
export function compileDerivedKeys(given: unknown, where: string): DerivedKeySecret {
  if (given === undefined) return { secret: undefined };
  if (!given || typeof given !== 'object' || Array.isArray(given)) {
    throw new IdempotencyConfigError(
      `${where}: option "derivedKeys" must be an object such as { secret }`,
    );
  }
  refuseUnknownOptions(given, DERIVED_KEY_OPTION_KEYS, where, 'derivedKeys.');
  const { secret } = given as DerivedKeyOptions;
  if (secret === undefined) return { secret: undefined };
  let bytes: Buffer;
  if (typeof secret === 'string') bytes = Buffer.from(secret, 'utf8');
  else if (secret instanceof Uint8Array) bytes = Buffer.from(secret);
  else {
    throw new IdempotencyConfigError(
      `${where}: option "derivedKeys.secret" must be a string or a Buffer, got ${secret === null ? 'null' : typeof secret}`,
    );
  }
  if (bytes.length < MIN_DERIVED_KEY_SECRET_BYTES) {
    // The length only: the secret itself is never echoed.
    throw new IdempotencyConfigError(
      `${where}: option "derivedKeys.secret" must be at least ${MIN_DERIVED_KEY_SECRET_BYTES} bytes, got ${bytes.length} (for example crypto.randomBytes(32).toString('base64url'), kept with the application's other secrets)`,
    );
  }
  return { secret: bytes };
}

/** Throws `IdempotencyError` unless `name` can name a derived key; `record` names the record. */
export function assertDerivedKeyName(name: unknown, record: string): asserts name is string {
  const problem =
    typeof name !== 'string'
      ? `must be a string, got ${name === null ? 'null' : typeof name}`
      : name.length === 0
        ? 'must not be empty'
        : name.length > MAX_DERIVED_KEY_NAME_LENGTH
          ? `must be at most ${MAX_DERIVED_KEY_NAME_LENGTH} characters, got ${name.length}`
          : hasControlCharacters(name)
            ? 'must not contain control characters'
            : !name.isWellFormed()
              ? 'must be well-formed Unicode'
              : undefined;
  if (problem !== undefined) {
    throw new IdempotencyError(`${record}: deriveKey(name): the name ${problem}`);
  }
}

const LABEL = 'nest-idempotency derived key v1';

/**
 * The derived key of one record (its scope, and the full SHA-256 of its
 * tenant and key that its digest is cut from) and one name: 43 characters
 * of base64url, from HMAC-SHA256 under the secret, or SHA-256 without one.
 * The fields are JSON-encoded, so no two (scope, record, name) give one input.
 */
export function deriveKeyOf(
  keys: DerivedKeySecret,
  scope: string,
  recordHash: string,
  name: string,
): string {
  const input = JSON.stringify([LABEL, scope, recordHash, name]);
  const mac =
    keys.secret === undefined
      ? createHash('sha256').update(input, 'utf8')
      : createHmac('sha256', keys.secret).update(input, 'utf8');
  return mac.digest('base64url');
}
