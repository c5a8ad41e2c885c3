import { createHash } from 'node:crypto';
import { IdempotencyConfigError } from '../../core/errors';
import { recordLocator } from '../../core/key';

/** Default prefix of every key and channel the store uses. */
export const DEFAULT_KEY_PREFIX = 'idempotency:';

/**
 * Where one record lives. Every name a record uses carries the same hash tag,
 * `{<id>}`, so on Redis Cluster the record's hash and its wake-up channel are
 * in one slot: one script can touch both, and SPUBLISH from that script goes
 * to the shard that holds the record.
 */
export interface RecordNames {
  /** The record's locator (`recordLocator`: SHA-256 of `[scope, key]` as JSON, in hex), as the SQL stores' id. */
  readonly id: string;
  /** The hash holding the record: `<prefix>r:<scope digest>:{<id>}`. */
  readonly key: string;
  /** The sharded channel a Cluster store publishes the record's wake-up on: `<prefix>w:{<id>}`. */
  readonly channel: string;
}

/**
 * The key and channel names of one store (one prefix). The scope's digest sits
 * in the key before the hash tag so that `list({ scope })` can SCAN with a
 * MATCH pattern for that scope alone; the hash tag is the record's own id, so
 * records of one scope spread over every slot (a scope per slot would put a
 * busy handler's whole traffic on one shard).
 */
export class RedisKeys {
  /** Standalone: the one plain channel every wake-up of this prefix goes to. */
  readonly wakeChannel: string;

  constructor(readonly prefix: string = DEFAULT_KEY_PREFIX) {
    if (typeof prefix !== 'string' || prefix.length === 0) {
      throw new IdempotencyConfigError(
        'RedisIdempotencyStore: keyPrefix must be a non-empty string',
      );
    }
    if (/[{}]/.test(prefix)) {
      // The first {…} of a key is its hash tag; braces in the prefix would put every record in one slot.
      throw new IdempotencyConfigError(
        'RedisIdempotencyStore: keyPrefix must not contain "{" or "}" (the store sets the hash tag itself)',
      );
    }
    this.wakeChannel = `${prefix}w`;
  }

  record(scope: string, key: string): RecordNames {
    return this.recordAt(scope, recordLocator(scope, key));
  }

  /**
   * The names of the record of `scope` at `locator` (`recordLocator`), as a
   * resumption finds it without the key. The locator becomes the hash tag,
   * so only 64 lowercase hex characters are accepted.
   */
  recordAt(scope: string, locator: string): RecordNames {
    if (!LOCATOR.test(locator)) {
      throw new TypeError('RedisKeys.recordAt: the locator must be 64 lowercase hex characters');
    }
    return {
      id: locator,
      key: `${this.prefix}r:${scopeDigest(scope)}:{${locator}}`,
      channel: `${this.prefix}w:{${locator}}`,
    };
  }

  /** SCAN MATCH pattern for every record of this prefix, or of one scope. */
  pattern(scope?: string): string {
    const base = `${escapeGlob(this.prefix)}r:`;
    return scope === undefined ? `${base}*` : `${base}${scopeDigest(scope)}:*`;
  }
}

/** What `recordLocator` makes: SHA-256 in lowercase hex. */
const LOCATOR = /^[0-9a-f]{64}$/;

/** Scope digests already computed: an application has a few scopes (times its tenants). */
const scopeDigests = new Map<string, string>();
const MAX_REMEMBERED_SCOPES = 10_000;

/** 16 hex characters of SHA-256 over the scope: fixed width whatever the scope's length. */
function scopeDigest(scope: string): string {
  let digest = scopeDigests.get(scope);
  if (digest === undefined) {
    digest = createHash('sha256').update(scope).digest('hex').slice(0, 16);
    if (scopeDigests.size >= MAX_REMEMBERED_SCOPES) scopeDigests.clear();
    scopeDigests.set(scope, digest);
  }
  return digest;
}

/** The prefix as a literal inside a SCAN MATCH glob. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}
