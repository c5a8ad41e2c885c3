import type { ExecutionContext } from '@nestjs/common';
import type { Duration } from '../core/duration';
import type { IdempotencyLogger } from '../core/logger';
import type { IdempotencyStore } from '../core/store';
import type { ReplayCacheOptions } from '../stores/cache/replay-cache.store';

/** What an HTTP replay needs: stored after the sanitizer ran, never with Set-Cookie or Authorization. */
export interface StoredHttpResponse {
  kind: 'http';
  status: number;
  headers: Record<string, string | string[]>;
  body: unknown;
}

/** What a message-handler replay needs: the handler's return value. */
export interface StoredRpcResult {
  kind: 'rpc';
  value: unknown;
}

export type StoredResult = StoredHttpResponse | StoredRpcResult;

export interface IdempotencyDefaults {
  /** How long a holder is protected before a duplicate may steal the key. Default `PT30S`. */
  lease?: Duration;
  /** How long a duplicate blocks, inside the store, for the holder's answer. Default `PT10S`. */
  waitTimeout?: Duration;
  /** How long a completed result is replayed. Default `PT24H`. */
  ttl?: Duration;
}

export interface IdempotencyHttpOptions {
  /** Request header carrying the key. Default `Idempotency-Key`. */
  keyHeader?: string;
  /** Reject requests without a key (400). Default true; false runs them without idempotency. */
  required?: boolean;
  /** Longest key accepted (also for message keys). Default 255. */
  maxKeyLength?: number;
  /** Largest request body accepted on an idempotent route (413 above). Default 1 MiB. */
  maxBodyBytes?: number;
  /** Response headers stored and replayed, in addition to Content-Type, Location, ETag and the route's @Header() names. */
  replayHeaders?: string[];
}

export interface IdempotencyRmqOptions {
  /** With `noAck: false`: nack (requeue) a message whose key is still in flight after the wait. Default false. */
  nackOnInFlight?: boolean;
  /** With `noAck: false`: ack a duplicate that was answered from the store (its handler, which would ack, does not run). Default false. */
  ackOnReplay?: boolean;
}

export interface IdempotencyPurgeOptions {
  /** How often each instance purges expired records. Default `PT1H`. */
  interval?: Duration;
  /** Rows deleted per statement; a run repeats batches until one comes back short. Default 1000. */
  batchSize?: number;
}

export interface IdempotencyModuleOptions {
  /** Where records live. Required: there is no in-memory fallback. */
  store: IdempotencyStore;
  defaults?: IdempotencyDefaults;
  http?: IdempotencyHttpOptions;
  /**
   * The principal a request acts for. When it returns a string, that string is
   * part of the record's identity: one client's key never replays another's response.
   */
  tenant?: (context: ExecutionContext) => string | undefined;
  /** Applied to every result before it is stored (and so to every replay). */
  sanitize?: (result: StoredResult) => StoredResult;
  rmq?: IdempotencyRmqOptions;
  /**
   * Scheduled `purgeExpired` in every instance (safe side by side: batches skip
   * rows another instance holds). On by default, hourly; `false` leaves purging
   * to the CLI or your own scheduler.
   */
  purge?: IdempotencyPurgeOptions | false;
  /**
   * Keep COMPLETE records in process memory (bounded LRU) until their own
   * expiry, so a replay touches no database. Off by default.
   */
  cache?: ReplayCacheOptions | false;
  logger?: IdempotencyLogger;
}

export const BUILT_IN_DEFAULTS = { lease: 'PT30S', waitTimeout: 'PT10S', ttl: 'PT24H' } as const;
export const DEFAULT_PURGE = { interval: 'PT1H', batchSize: 1000 } as const;
export const DEFAULT_KEY_HEADER = 'Idempotency-Key';
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export const DEFAULT_REPLAY_HEADERS = ['content-type', 'location', 'etag'];
/** Never stored, whatever the allowlist says. */
export const NEVER_STORED_HEADERS = ['set-cookie', 'authorization', 'proxy-authorization'];
