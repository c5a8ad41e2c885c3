import { IdempotencyConfigError, IdempotencyStoreUnavailableError } from '../../core/errors';
import type { RedisClientPort, RedisNode } from './client.port';
import {
  IoredisAdapter,
  IoredisClient,
  ioredisKeyPrefix,
  isIoredis,
  missingBufferMethods,
} from './ioredis.adapter';
import { isNodeRedis, NodeRedisAdapter, SUPPORTED_NODE_REDIS } from './node-redis.adapter';
import type { RedisArgument, RedisClusterClient, RedisStandaloneClient } from './redis-client';

export type {
  RedisArgument,
  RedisClusterClient,
  RedisClusterSubscriber,
  RedisCommandOptions,
  RedisStandaloneClient,
  RedisStandaloneSubscriber,
} from './redis-client';
export type {
  IoredisClient,
  IoredisClusterClient,
  IoredisStandaloneClient,
} from './ioredis.adapter';
export type { RedisClientLibrary, RedisClientPort, RedisNode } from './client.port';

/**
 * The application's client: node-redis (`createClient()` or `createCluster()`
 * of `redis` 5 or 6) or ioredis 5 (`new Redis()` or `new Cluster()`). The
 * store never connects, closes or reconfigures it.
 */
export type RedisIdempotencyClient = RedisStandaloneClient | RedisClusterClient | IoredisClient;

/**
 * The client port for the application's client, told apart by shape: neither
 * library is loaded. `where` names the caller in the configuration error.
 */
export function adaptRedisClient(
  client: unknown,
  where = 'RedisIdempotencyStore',
): RedisClientPort {
  if (client && typeof client === 'object') {
    if (isIoredis(client)) {
      const prefix = ioredisKeyPrefix(client);
      if (prefix !== undefined) {
        throw new IdempotencyConfigError(
          `${where}: the ioredis client has option keyPrefix set; ioredis would prefix the store's keys but not the ones SCAN returns. Pass a client without keyPrefix and set the store's own keyPrefix option instead`,
        );
      }
      const missing = missingBufferMethods(client);
      if (missing.length > 0) {
        throw new IdempotencyConfigError(
          `${where}: the ioredis client has enableAutoPipelining on but no ${missing.join(', ')}; with that option the store sends each command through its own Buffer method (ioredis pipelines callBuffer without the command's name, redis/ioredis#1923). Use ioredis 5, or turn enableAutoPipelining off`,
        );
      }
      return new IoredisAdapter(client);
    }
    if (isNodeRedis(client)) return new NodeRedisAdapter(client);
  }
  throw new IdempotencyConfigError(
    `${where} needs a Redis client: createClient() or createCluster() of the redis package (${SUPPORTED_NODE_REDIS}), or new Redis() or new Cluster() of ioredis 5`,
  );
}

/**
 * Commands on the application's client (through its client port), routed by
 * `key` on a Cluster (the client follows MOVED and ASK itself), given up after
 * `timeoutMs` with `IdempotencyStoreUnavailableError`. A command node-redis
 * still queued by then is dropped; a reconnecting ioredis client is not sent
 * any (see IoredisAdapter); one already written may still run on the server.
 */
export class RedisCommands {
  readonly port: RedisClientPort;

  constructor(
    client: RedisIdempotencyClient | RedisClientPort,
    private readonly timeoutMs: number,
  ) {
    this.port = isPort(client) ? client : adaptRedisClient(client);
  }

  get cluster(): boolean {
    return this.port.cluster;
  }

  send(
    operation: string,
    key: string | undefined,
    args: ReadonlyArray<RedisArgument>,
    options: { timeoutMs?: number } = {},
  ): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const sent = this.bounded(operation, timeoutMs, () => this.port.send(key, args, timeoutMs));
    if (!this.port.cluster) return sent;
    return sent.catch((error: unknown) => {
      // Unanswered: its shard's master may be gone, and a replica promoted in its place.
      if (error instanceof IdempotencyStoreUnavailableError) this.port.unanswered();
      throw error;
    });
  }

  /** One node per master, for what must visit every shard (SCAN, SCRIPT LOAD). */
  masters(operation: string): Promise<RedisNode[]> {
    return this.bounded(operation, this.timeoutMs, () => this.port.masters());
  }

  /** A command on one node (from `masters`), bounded like `send`. */
  sendTo(node: RedisNode, operation: string, args: ReadonlyArray<RedisArgument>): Promise<unknown> {
    return this.bounded(operation, this.timeoutMs, () => node.send(args, this.timeoutMs));
  }

  /**
   * PING on the server, or on a Cluster on every master (its whole key space),
   * all within one `timeoutMs`: a master that does not answer fails it.
   */
  ping(): Promise<void> {
    return this.bounded('ping', this.timeoutMs, async () => {
      if (!this.port.cluster) {
        await this.port.send(undefined, ['PING'], this.timeoutMs);
        return;
      }
      const nodes = await this.port.masters();
      await Promise.all(nodes.map((node) => node.send(['PING'], this.timeoutMs)));
    });
  }

  /** `call`, answered within `timeoutMs` or refused as unavailable; one promise per command. */
  private bounded<T>(operation: string, timeoutMs: number, call: () => Promise<T>): Promise<T> {
    if (!this.port.isOpen) {
      return Promise.reject(
        new IdempotencyStoreUnavailableError(
          `Redis is unavailable during ${operation}: the client is not open (connect it before the store is used; was it closed?)`,
        ),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new IdempotencyStoreUnavailableError(this.timeoutMessage(operation, timeoutMs))),
        timeoutMs,
      );
      const failed = (error: unknown) => {
        clearTimeout(timer);
        reject(this.translate(operation, timeoutMs, error));
      };
      let sent: Promise<T>;
      try {
        sent = call();
      } catch (error) {
        failed(error);
        return;
      }
      sent.then((value) => {
        clearTimeout(timer);
        resolve(value);
      }, failed);
    });
  }

  private timeoutMessage(operation: string, timeoutMs: number): string {
    const state =
      this.port.isReady === false ? ' (the client is not connected: it is reconnecting)' : '';
    return `Redis did not answer ${operation} within ${timeoutMs} ms${state}`;
  }

  private translate(operation: string, timeoutMs: number, error: unknown): unknown {
    if (error instanceof IdempotencyStoreUnavailableError) return error;
    if (!isUnavailable(error)) return error;
    const message = isTimeout(error)
      ? this.timeoutMessage(operation, timeoutMs)
      : `Redis is unavailable during ${operation}: ${(error as Error).message}`;
    return new IdempotencyStoreUnavailableError(message, 1000, { cause: error });
  }
}

function isPort(value: unknown): value is RedisClientPort {
  return value instanceof NodeRedisAdapter || value instanceof IoredisAdapter;
}

/**
 * Server replies that mean "not now" rather than "wrong": loading, failing
 * over, a busy script, out of memory, and a slot that moved when the client
 * did not follow it (ioredis hands a MOVED inside an auto-pipelined batch
 * back as it came).
 */
const UNAVAILABLE_REPLY =
  /^(LOADING|CLUSTERDOWN|MASTERDOWN|READONLY|TRYAGAIN|BUSY|NOREPLICAS|MISCONF|OOM|MOVED|ASK)\b/;

function classNames(error: object): string[] {
  const names: string[] = [];
  for (
    let p = Object.getPrototypeOf(error);
    p && p !== Error.prototype;
    p = Object.getPrototypeOf(p)
  )
    names.push(p.constructor?.name);
  return names;
}

/** A reply the server sent (node-redis's `ErrorReply` and its subclasses, ioredis's `ReplyError`). */
export function isErrorReply(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  const names = classNames(error);
  return names.includes('ErrorReply') || names.includes('ReplyError');
}

function isTimeout(error: unknown): boolean {
  return error instanceof Error && classNames(error).includes('TimeoutError');
}

/** node-redis's own errors for a connection that is gone, not yet there, or too slow. */
const CLIENT_UNAVAILABLE = new Set([
  'ClientClosedError',
  'ClientOfflineError',
  'ConnectionTimeoutError',
  'SocketTimeoutError',
  'SocketClosedUnexpectedlyError',
  'DisconnectsClientError',
  'RootNodesUnavailableError',
  'ReconnectStrategyError',
  'MaxCommandRedirectionsError',
  'TimeoutError',
  'AbortError',
  // ioredis, and the store's own refusal to queue on a reconnecting ioredis client
  'MaxRetriesPerRequestError',
  'IoredisNotReadyError',
  'ClusterAllFailedError',
]);
/** ioredis's plain `Error`s for a connection that is gone or not there yet. */
const IOREDIS_UNAVAILABLE =
  /^(Connection is closed|Stream isn't writeable|None of startup nodes is available|Failed to refresh slots cache|Cluster isn't ready|Too many Cluster redirections)/;
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EAI_AGAIN',
]);

/**
 * True when an error means "Redis cannot answer right now": the client's
 * connection errors, a socket error, and the server's not-now replies. A
 * reply such as a script error or WRONGTYPE is a fault, reported as it is.
 */
export function isUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const message = error.message;
  if (isErrorReply(error)) return UNAVAILABLE_REPLY.test(message);
  if (classNames(error).some((name) => CLIENT_UNAVAILABLE.has(name))) return true;
  if (IOREDIS_UNAVAILABLE.test(message)) return true;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && NETWORK_CODES.has(code);
}

export function isNoScript(error: unknown): boolean {
  return isErrorReply(error) && error.message.startsWith('NOSCRIPT');
}
