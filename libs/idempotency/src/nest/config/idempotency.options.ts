import type { ExecutionContext } from '@nestjs/common';
import type { DerivedKeyOptions } from '../../core/derived-key';
import type { Duration } from '../../core/duration';
import type { ReconcileHook } from '../../core/policy';
import type { IdempotencyEvent } from '../../core/events';
import type { IdempotencyLogger } from '../../core/logger';
import { optionKeys } from '../../core/option-keys';
import type { IdempotencyStore } from '../../core/store';
import type { ReplayCacheOptions } from '../../stores/cache/replay-cache.store';
import type { RedisIdempotencyStoreFromUrlOptions } from '../../stores/redis/redis.store';

/**
 * What `sanitize` is shown for an HTTP response before it is stored: a copy,
 * never the response the first caller receives. `body` is the parsed JSON for
 * a JSON response, otherwise the bytes as sent.
 */
export interface StoredHttpResponse {
  kind: 'http';
  status: number;
  headers: Record<string, string | string[]>;
  body: unknown;
}

/** What `sanitize` is shown for a message handler's result: a copy of the returned value, as JSON. */
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
  /** How long a completed result is replayed. Default `PT24H`; at most 100 years. */
  ttl?: Duration;
  /** `enforce` (default), or `observe`: run every handler as if there were no idempotency, and report. */
  mode?: 'enforce' | 'observe';
  /** `separate` (default) or `transaction`: see `@Idempotent({ completion })`. */
  completion?: 'separate' | 'transaction';
  /** `steal` (default) or `refuse` (strict mode): see `@Idempotent({ onExpiredLease })`. */
  onExpiredLease?: 'steal' | 'refuse';
  /** Strict handlers: see `@Idempotent({ notExecuted })`. */
  notExecuted?: (error: unknown) => boolean;
  /** Strict handlers: see `@Idempotent({ reconcile })`. */
  reconcile?: ReconcileHook;
  /** `error` (default) or `return`: see `@Idempotent({ onCompletionFailure })`. */
  onCompletionFailure?: 'error' | 'return';
}

/** Every key of `IdempotencyDefaults` (`tsc` fails when the two disagree); any other is refused. */
export const DEFAULTS_OPTION_KEYS = optionKeys<IdempotencyDefaults>()([
  'lease',
  'waitTimeout',
  'ttl',
  'mode',
  'completion',
  'onExpiredLease',
  'notExecuted',
  'reconcile',
  'onCompletionFailure',
]);

export interface IdempotencyHttpOptions {
  /** Request header carrying the key. Default `Idempotency-Key`. */
  keyHeader?: string;
  /** Reject requests without a key (400). Default true; false runs them without idempotency. */
  required?: boolean;
  /** Longest key accepted, in characters (also for message keys). Default 255. */
  maxKeyLength?: number;
  /** Largest request body accepted on an idempotent route (413 above). Default 1 MiB. */
  maxBodyBytes?: number;
  /** Response headers stored and replayed, in addition to Content-Type, Location, ETag and the route's @Header() names. */
  replayHeaders?: string[];
  /**
   * The problem documents' `type`: a base URI the code is appended to (e.g.
   * `https://docs.example.com/errors/` gives `…/errors/idempotency-in-flight`),
   * or a function of the code. Default `about:blank`.
   */
  problemTypes?: string | ((code: string) => string);
  /**
   * With `@nestjs/swagger` installed, document each idempotent route's key
   * header and refusals in the OpenAPI document. Default true.
   */
  openapi?: boolean;
}

export const HTTP_OPTION_KEYS = optionKeys<IdempotencyHttpOptions>()([
  'keyHeader',
  'required',
  'maxKeyLength',
  'maxBodyBytes',
  'replayHeaders',
  'problemTypes',
  'openapi',
]);

/**
 * What happens to a RabbitMQ delivery whose handler does not run. Only when
 * the consumer acknowledges manually (the transport's `noAck: false`); with
 * `noAck: true` the broker needs nothing and the library settles nothing.
 *
 * - `ack`: done with it (a replay: its twin already ran).
 * - `requeue`: nack with requeue, after a delay (the twin's remaining lease,
 *   at least 100 ms and at most `maxRequeueDelayMs`), so a redelivery is not a hot loop.
 * - `dead-letter`: nack without requeue: the queue's dead-letter exchange gets
 *   it, or, without one, RabbitMQ drops it.
 */
export type RmqSettlement = 'ack' | 'requeue' | 'dead-letter';

export interface IdempotencyRmqOptions {
  /**
   * The consumer's own `noAck`, for a transport whose setting the library
   * cannot read (a custom strategy). Nest's RMQ transport says its own
   * `options.noAck` at each delivery, and that wins: an `rmq.noAck` that
   * contradicts it is ignored, with a warning. Default true, as Nest's; per
   * handler with `@Idempotent({ rmq })`.
   */
  noAck?: boolean;
  /** A duplicate answered from the store. Default `ack`. */
  replayed?: RmqSettlement;
  /** A duplicate still in flight after the wait. Default `requeue`. */
  inFlight?: RmqSettlement;
  /** The store could not answer. Default `requeue`. */
  unavailable?: RmqSettlement;
  /** A delivery that can never succeed as sent: no key, an invalid key, a reused key. Default `dead-letter`. */
  rejected?: RmqSettlement;
  /** Longest delay before a requeue. Default 1000 ms. */
  maxRequeueDelayMs?: number;
}

export const RMQ_OPTION_KEYS = optionKeys<IdempotencyRmqOptions>()([
  'noAck',
  'replayed',
  'inFlight',
  'unavailable',
  'rejected',
  'maxRequeueDelayMs',
]);

export interface IdempotencyPurgeOptions {
  /** How often each instance purges expired records. Default `PT1H`. */
  interval?: Duration;
  /** Rows deleted per statement; a run repeats batches until one comes back short. Default 1000. */
  batchSize?: number;
}

export const PURGE_OPTION_KEYS = optionKeys<IdempotencyPurgeOptions>()(['interval', 'batchSize']);

/**
 * A store the module builds from options, and owns: it connects it at
 * bootstrap (`init()`) and closes it at shutdown.
 */
export interface IdempotencyStoreFromOptions {
  /**
   * `RedisIdempotencyStore.fromUrl(url, options)`: a client of its own on
   * `url` (`redis://` or `rediss://`), or on a Cluster's seed nodes with
   * `cluster: true`, and the Redis store's options (`keyPrefix`, …). Needs
   * the `redis` package, which is loaded only then.
   */
  redis: { url: string | readonly string[] } & RedisIdempotencyStoreFromUrlOptions;
}

export const STORE_FROM_OPTIONS_KEYS = optionKeys<IdempotencyStoreFromOptions>()(['redis']);

export interface IdempotencyModuleOptions {
  /**
   * Where records live: an `IdempotencyStore`, or options the module builds
   * one from (`{ redis: { url } }`). Required: there is no implicit fallback.
   */
  store: IdempotencyStore | IdempotencyStoreFromOptions;
  defaults?: IdempotencyDefaults;
  http?: IdempotencyHttpOptions;
  /**
   * The principal a request acts for. When it returns a string, that string is
   * part of the record's identity: one client's key never replays another's
   * response. It is never logged. Not given: `request.user`'s `id` (else
   * `sub`), as a digest, on HTTP routes and GraphQL mutations whose request
   * has one. `false`: no tenant, every caller shares a key's record.
   */
  tenant?: ((context: ExecutionContext) => string | undefined) | false;
  /** Applied to a copy of every result before it is stored (and so to every replay). */
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
  /** Called with every engine event (one per edge and outcome; see `IdempotencyEvent`). */
  onEvent?: (event: IdempotencyEvent) => void;
  /**
   * OpenTelemetry metrics and spans through `@opentelemetry/api` (which must be
   * installed): `true` for the global meter and tracer, or your own.
   */
  telemetry?: boolean | IdempotencyTelemetryOptions;
  logger?: IdempotencyLogger;
  /**
   * How `IdempotencyContext.deriveKey` derives the keys of outbound calls:
   * with `{ secret }` (at least 32 bytes) they cannot be computed from the
   * raw key; without, anyone who knows the raw key and the scope can.
   */
  derivedKeys?: DerivedKeyOptions;
  /**
   * Append a receipt (digests, outcome, the store's time, a hash chain) for
   * every record that reaches a terminal state; `nest-idempotency receipts
   * verify` checks the chains. Needs a store that keeps them; on SQL, the
   * receipts tables (checked at bootstrap). Default false. See docs/receipts.md.
   */
  receipts?: boolean;
}

export interface IdempotencyTelemetryOptions {
  meter?: unknown;
  tracer?: unknown;
}

export const MODULE_OPTION_KEYS = optionKeys<IdempotencyModuleOptions>()([
  'store',
  'defaults',
  'http',
  'tenant',
  'sanitize',
  'rmq',
  'purge',
  'cache',
  'onEvent',
  'telemetry',
  'logger',
  'derivedKeys',
  'receipts',
]);

export const TELEMETRY_OPTION_KEYS = optionKeys<IdempotencyTelemetryOptions>()(['meter', 'tracer']);

export const DEFAULT_PURGE = { interval: 'PT1H', batchSize: 1000 } as const;
export const DEFAULT_KEY_HEADER = 'Idempotency-Key';
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export const DEFAULT_REPLAY_HEADERS = ['content-type', 'location', 'etag'];
/** Never stored, whatever the allowlist says. */
export const NEVER_STORED_HEADERS = ['set-cookie', 'authorization', 'proxy-authorization'];
export const DEFAULT_RMQ = {
  noAck: true,
  replayed: 'ack',
  inFlight: 'requeue',
  unavailable: 'requeue',
  rejected: 'dead-letter',
  maxRequeueDelayMs: 1000,
} as const satisfies Required<IdempotencyRmqOptions>;
