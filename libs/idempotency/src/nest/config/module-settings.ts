import { Logger } from '@nestjs/common';
import { compileDerivedKeys } from '../../core/derived-key';
import { parseDuration } from '../../core/duration';
import { IdempotencyConfigError } from '../../core/errors';
import { DEFAULT_MAX_KEY_LENGTH } from '../../core/key';
import { closestOption, printable, refuseUnknownOptions } from '../../core/option-keys';
import type { IdempotencyLogger } from '../../core/logger';
import type { IdempotencyStore } from '../../core/store';
import { REPLAY_CACHE_OPTION_KEYS } from '../../stores/cache/replay-cache.store';
// Loads no `redis`: only `fromUrl` does, when `store: { redis }` asks for it.
import { REDIS_FROM_URL_OPTION_KEYS, RedisIdempotencyStore } from '../../stores/redis/redis.store';
import {
  DEFAULT_KEY_HEADER,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_PURGE,
  DEFAULT_RMQ,
  DEFAULTS_OPTION_KEYS,
  HTTP_OPTION_KEYS,
  IdempotencyDefaults,
  IdempotencyModuleOptions,
  IdempotencyRmqOptions,
  IdempotencyStoreFromOptions,
  MODULE_OPTION_KEYS,
  PURGE_OPTION_KEYS,
  RMQ_OPTION_KEYS,
  RmqSettlement,
  STORE_FROM_OPTIONS_KEYS,
  TELEMETRY_OPTION_KEYS,
} from './idempotency.options';
import { compileTenant, type TenantRule } from './tenant';

const WHERE = 'IdempotencyModule';

/** The module's options, checked once when the module starts, whether or not any handler uses them. */
export interface ModuleSettings {
  options: IdempotencyModuleOptions;
  store: IdempotencyStore;
  defaults: IdempotencyDefaults;
  keyHeader: string;
  required: boolean;
  maxKeyLength: number;
  maxBodyBytes: number;
  replayHeaders: string[];
  /** The problem document `type` for a refusal's code. */
  problemType: (code: string) => string;
  rmq: RmqRules;
  /** Document idempotent routes for `@nestjs/swagger`. */
  openapi: boolean;
  purge: { intervalMs: number; batchSize: number } | false;
  /** Whose record a call reads and writes (the `tenant` option, or `request.user` by default). */
  tenantOf: TenantRule;
  /** The `logger` option, else Nest's `Logger` in the context `Idempotency`. */
  logger: IdempotencyLogger;
}

/** Throws `IdempotencyConfigError` naming the option, so a typo fails the bootstrap rather than a request. */
export function compileModuleSettings(given: IdempotencyModuleOptions | undefined): ModuleSettings {
  // `isGlobal` is the module's extra (see idempotency.module-definition.ts), not an option.
  const { isGlobal: _extra, ...named } = (given ?? {}) as Record<string, unknown>;
  refuseUnknownOptions(named, MODULE_OPTION_KEYS, WHERE);
  refuseUnknownOptions(given?.defaults, DEFAULTS_OPTION_KEYS, WHERE, 'defaults.');
  refuseUnknownOptions(given?.http, HTTP_OPTION_KEYS, WHERE, 'http.');
  refuseUnknownOptions(given?.rmq, RMQ_OPTION_KEYS, WHERE, 'rmq.');
  refuseUnknownOptions(given?.purge, PURGE_OPTION_KEYS, WHERE, 'purge.');
  refuseUnknownOptions(given?.cache, REPLAY_CACHE_OPTION_KEYS, WHERE, 'cache.');
  refuseUnknownOptions(given?.telemetry, TELEMETRY_OPTION_KEYS, WHERE, 'telemetry.');
  compileDerivedKeys(given?.derivedKeys, WHERE);
  const store = compileStore(given?.store);
  // compileStore threw if there were no options.
  const options = given as IdempotencyModuleOptions;
  const defaults = options.defaults ?? {};
  for (const kind of ['lease', 'waitTimeout', 'ttl'] as const) {
    if (defaults[kind] !== undefined)
      parseDuration(defaults[kind], kind, `defaults.${kind}`, WHERE);
  }
  for (const [name, allowed] of [
    ['onExpiredLease', ['steal', 'refuse']],
    ['onCompletionFailure', ['error', 'return']],
  ] as const) {
    const value = defaults[name];
    if (value !== undefined && !(allowed as readonly string[]).includes(value)) {
      throw new IdempotencyConfigError(
        `${WHERE}: option "defaults.${name}" must be '${allowed[0]}' or '${allowed[1]}', got ${JSON.stringify(value)}`,
      );
    }
  }
  for (const name of ['notExecuted', 'reconcile'] as const) {
    if (defaults[name] !== undefined && typeof defaults[name] !== 'function') {
      throw new IdempotencyConfigError(`${WHERE}: option "defaults.${name}" must be a function`);
    }
  }
  if (defaults.mode !== undefined && defaults.mode !== 'enforce' && defaults.mode !== 'observe') {
    throw new IdempotencyConfigError(
      `${WHERE}: option "defaults.mode" must be 'enforce' or 'observe', got ${JSON.stringify(defaults.mode)}`,
    );
  }
  if (
    defaults.completion !== undefined &&
    defaults.completion !== 'separate' &&
    defaults.completion !== 'transaction'
  ) {
    throw new IdempotencyConfigError(
      `${WHERE}: option "defaults.completion" must be 'separate' or 'transaction', got ${JSON.stringify(defaults.completion)}`,
    );
  }
  const http = options.http ?? {};
  for (const name of ['maxKeyLength', 'maxBodyBytes'] as const) {
    const value = http[name];
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new IdempotencyConfigError(
        `${WHERE}: option "http.${name}" must be a positive integer, got ${String(value)}`,
      );
    }
  }
  if (
    http.keyHeader !== undefined &&
    (typeof http.keyHeader !== 'string' || !/^[!#$%&'*+\-.^_`|~\w]+$/.test(http.keyHeader))
  ) {
    throw new IdempotencyConfigError(
      `${WHERE}: option "http.keyHeader" must be a header name, got ${JSON.stringify(http.keyHeader)}`,
    );
  }
  if (http.openapi !== undefined && typeof http.openapi !== 'boolean') {
    throw new IdempotencyConfigError(
      `${WHERE}: option "http.openapi" must be true or false, got ${JSON.stringify(http.openapi)}`,
    );
  }
  return {
    options,
    store,
    defaults,
    keyHeader: http.keyHeader ?? DEFAULT_KEY_HEADER,
    required: http.required ?? true,
    maxKeyLength: http.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH,
    maxBodyBytes: http.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    replayHeaders: http.replayHeaders ?? [],
    problemType: compileProblemTypes(http.problemTypes),
    rmq: compileRmq(options.rmq, `${WHERE}: option "rmq`),
    openapi: http.openapi ?? true,
    purge: compilePurge(options.purge),
    tenantOf: compileTenant(options.tenant),
    logger: options.logger ?? new Logger('Idempotency'),
  };
}

/** The configured store, or the one `{ redis: { url } }` describes (created here, connected by `init()`). */
function compileStore(option: IdempotencyModuleOptions['store'] | undefined): IdempotencyStore {
  if (typeof (option as IdempotencyStore | undefined)?.tryAcquire === 'function') {
    return option as IdempotencyStore;
  }
  if (isDataSource(option)) {
    throw new IdempotencyConfigError(
      `${WHERE}: option "store" is a TypeORM DataSource, not a store; wrap it: store: new TypeOrmIdempotencyStore(dataSource) (from nest-idempotency/typeorm)`,
    );
  }
  if (option && typeof option === 'object' && 'redis' in option) {
    refuseUnknownOptions(option, STORE_FROM_OPTIONS_KEYS, WHERE, 'store.');
    return redisStoreFrom((option as IdempotencyStoreFromOptions).redis);
  }
  const unknown = option && typeof option === 'object' ? Object.keys(option)[0] : undefined;
  if (unknown !== undefined && Object.getPrototypeOf(option) === Object.prototype) {
    // A plain object that is no store: store options with a typo ({ redsi: … }), or a store's own options.
    const near = closestOption(unknown, STORE_FROM_OPTIONS_KEYS);
    throw new IdempotencyConfigError(
      `${WHERE}: unknown option "store.${printable(unknown)}"${near ? ` (did you mean "store.${near}"?)` : ''}; option "store" is an IdempotencyStore (such as new TypeOrmIdempotencyStore(dataSource) from nest-idempotency/typeorm) or { redis: { url } }`,
    );
  }
  throw new IdempotencyConfigError(
    `${WHERE}: option "store" is required (an IdempotencyStore such as new TypeOrmIdempotencyStore(dataSource) from nest-idempotency/typeorm)`,
  );
}

function redisStoreFrom(redis: IdempotencyStoreFromOptions['redis'] | undefined): IdempotencyStore {
  if (!redis || typeof redis !== 'object') {
    throw new IdempotencyConfigError(
      `${WHERE}: option "store.redis" must be an object such as { url: 'redis://host:6379' }`,
    );
  }
  refuseUnknownOptions(redis, ['url', ...REDIS_FROM_URL_OPTION_KEYS], WHERE, 'store.redis.');
  const { url, ...options } = redis;
  if (url === undefined || url === null || url === '') {
    throw new IdempotencyConfigError(
      `${WHERE}: option "store.redis.url" is required: a redis:// or rediss:// URL (with cluster: true, one or more seed nodes)`,
    );
  }
  try {
    return RedisIdempotencyStore.fromUrl(url, options);
  } catch (error) {
    if (!(error instanceof IdempotencyConfigError)) throw error;
    const message = error.message.replace(/^RedisIdempotencyStore(\.fromUrl)?:?\s*/, '');
    throw new IdempotencyConfigError(`${WHERE}: option "store.redis": ${message}`, {
      cause: error,
    });
  }
}

/** A TypeORM `DataSource` (or anything shaped like one), told apart from a store by its `options.type`. */
function isDataSource(option: unknown): boolean {
  if (!option || typeof option !== 'object') return false;
  const candidate = option as { options?: { type?: unknown }; initialize?: unknown };
  return typeof candidate.initialize === 'function' && typeof candidate.options?.type === 'string';
}

function compileProblemTypes(option: unknown): (code: string) => string {
  if (option === undefined) return () => 'about:blank';
  if (typeof option === 'function') return option as (code: string) => string;
  if (typeof option === 'string' && URL.canParse(option)) return (code) => `${option}${code}`;
  throw new IdempotencyConfigError(
    `${WHERE}: option "http.problemTypes" must be an absolute URI (the codes are appended to it) or a function of the code, got ${JSON.stringify(option)}`,
  );
}

const SETTLEMENTS: readonly RmqSettlement[] = ['ack', 'requeue', 'dead-letter'];

/** The RabbitMQ rules of a handler: `rmq` with its defaults, and whether `noAck` was stated. */
export interface RmqRules extends Required<IdempotencyRmqOptions> {
  /** `rmq.noAck` was given (module-wide or on the handler), rather than defaulted. */
  noAckStated: boolean;
}

/** Module-level `rmq`, or a handler's own over it; `label` starts the option's name in messages. */
export function compileRmq(
  rmq: IdempotencyRmqOptions | undefined,
  label: string,
  base: RmqRules = { ...DEFAULT_RMQ, noAckStated: false },
): RmqRules {
  const out = { ...base };
  if (!rmq) return out;
  if (rmq.noAck !== undefined) {
    if (typeof rmq.noAck !== 'boolean')
      throw new IdempotencyConfigError(`${label}.noAck" must be true or false`);
    out.noAck = rmq.noAck;
    out.noAckStated = true;
  }
  for (const name of ['replayed', 'inFlight', 'unavailable', 'rejected'] as const) {
    const value = rmq[name];
    if (value === undefined) continue;
    if (!SETTLEMENTS.includes(value)) {
      throw new IdempotencyConfigError(
        `${label}.${name}" must be one of ${SETTLEMENTS.join(', ')}, got ${JSON.stringify(value)}`,
      );
    }
    out[name] = value;
  }
  if (rmq.maxRequeueDelayMs !== undefined) {
    if (!Number.isInteger(rmq.maxRequeueDelayMs) || rmq.maxRequeueDelayMs < 0) {
      throw new IdempotencyConfigError(
        `${label}.maxRequeueDelayMs" must be a whole number of milliseconds`,
      );
    }
    out.maxRequeueDelayMs = rmq.maxRequeueDelayMs;
  }
  return out;
}

function compilePurge(purge: IdempotencyModuleOptions['purge']): ModuleSettings['purge'] {
  if (purge === false) return false;
  const merged = { ...DEFAULT_PURGE, ...purge };
  const intervalMs = parseDuration(merged.interval, 'interval', 'purge.interval', WHERE);
  if (!Number.isInteger(merged.batchSize) || merged.batchSize < 1) {
    throw new IdempotencyConfigError(
      `${WHERE}: option "purge.batchSize" must be a positive integer, got ${String(merged.batchSize)}`,
    );
  }
  return { intervalMs, batchSize: merged.batchSize };
}
