import * as fs from 'node:fs';
import * as path from 'node:path';
import { IdempotencyStoreUnavailableError } from '../../core/errors';
import type {
  RedisArgument,
  RedisClusterClient,
  RedisCommandOptions,
  RedisIdempotencyClient,
  RedisStandaloneClient,
} from './redis-client';
import { TopologyRefresh } from './topology';

export type {
  RedisArgument,
  RedisClusterClient,
  RedisClusterSubscriber,
  RedisCommandOptions,
  RedisIdempotencyClient,
  RedisStandaloneClient,
  RedisStandaloneSubscriber,
} from './redis-client';

export function isCluster(client: RedisIdempotencyClient): client is RedisClusterClient {
  return typeof (client as RedisClusterClient).nodeClient === 'function';
}

/** RESP3's (and node-redis's) type byte for a bulk string: `$`. */
const BLOB_STRING = 36;
/**
 * The type mapping of every command the store sends, whatever the
 * application configured on its client: bulk strings as Buffers (the payload
 * byte for byte; the store decodes the rest), every other type as node-redis
 * decodes it by default.
 */
export const AS_BUFFERS: RedisCommandOptions['typeMapping'] = { [BLOB_STRING]: Buffer };

/**
 * A command on a ready standalone client: see `RedisCommands.send`. `timeout: 0`
 * overrides the client's own default (node-redis 6 gives every command 5 s
 * unless told otherwise; an application's `commandOptions.timeout` too), and
 * node-redis then makes no abort signal for it.
 */
const READY_OPTIONS: RedisCommandOptions = { timeout: 0, typeMapping: AS_BUFFERS };

/**
 * One command on the application's client, routed by `key` on a Cluster (the
 * client follows MOVED and ASK itself), given up after `timeoutMs` with
 * `IdempotencyStoreUnavailableError`. node-redis drops the command if it was
 * still queued by then (a client reconnecting queues commands; on a standalone
 * client, one sent while it was ready is not dropped); one
 * already written may still run on the server.
 */
export class RedisCommands {
  readonly cluster: boolean;
  private readonly topology?: TopologyRefresh;

  constructor(
    readonly client: RedisIdempotencyClient,
    private readonly timeoutMs: number,
  ) {
    this.cluster = isCluster(client);
    if (isCluster(client)) this.topology = new TopologyRefresh(client);
  }

  send(
    operation: string,
    key: string | undefined,
    args: ReadonlyArray<RedisArgument>,
    options: { timeoutMs?: number } = {},
  ): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const client = this.client;
    if (isCluster(client)) {
      return this.bounded(operation, timeoutMs, () =>
        client.sendCommand(key, false, args, { timeout: timeoutMs, typeMapping: AS_BUFFERS }),
      ).catch((error: unknown) => {
        // Unanswered: its shard's master may be gone, and a replica promoted in its place.
        if (error instanceof IdempotencyStoreUnavailableError) this.topology!.request();
        throw error;
      });
    }
    // A ready client normally writes the command before the event loop's next
    // turn (setImmediate), so the store's own timer alone bounds it; one that is
    // reconnecting queues it, and node-redis's timeout then drops it from the
    // queue when the store gives up. (A ready client can still hold a command
    // back, behind a full socket buffer: it may then run after the store gave up,
    // as one already written may.) Given a timeout, node-redis makes an
    // AbortSignal.timeout per command, about 20 µs on the hot path.
    const commandOptions = client.isReady
      ? READY_OPTIONS
      : { timeout: timeoutMs, typeMapping: AS_BUFFERS };
    return this.bounded(operation, timeoutMs, () => client.sendCommand(args, commandOptions));
  }

  /**
   * One client per master, for what must visit every shard (SCAN, SCRIPT LOAD).
   * Standalone: the application's client itself.
   */
  async masters(operation: string): Promise<Array<Pick<RedisStandaloneClient, 'sendCommand'>>> {
    const client = this.client;
    if (!isCluster(client)) return [client];
    return this.bounded(operation, this.timeoutMs, () =>
      Promise.all(client.masters.map((master) => client.nodeClient(master as never))),
    );
  }

  /** A command on one node's client (from `masters`), bounded like `send`. */
  sendTo(
    node: Pick<RedisStandaloneClient, 'sendCommand'>,
    operation: string,
    args: ReadonlyArray<RedisArgument>,
  ): Promise<unknown> {
    return this.bounded(operation, this.timeoutMs, () =>
      node.sendCommand(args, { timeout: this.timeoutMs, typeMapping: AS_BUFFERS }),
    );
  }

  /**
   * PING on the server, or on a Cluster on every master (its whole key space),
   * all within one `timeoutMs`: a master that does not answer fails it.
   */
  ping(): Promise<void> {
    const client = this.client;
    return this.bounded('ping', this.timeoutMs, async () => {
      if (!isCluster(client)) {
        await client.sendCommand(
          ['PING'],
          client.isReady ? READY_OPTIONS : { timeout: this.timeoutMs, typeMapping: AS_BUFFERS },
        );
        return;
      }
      const nodes = await Promise.all(
        client.masters.map((master) => client.nodeClient(master as never)),
      );
      await Promise.all(
        nodes.map((node) =>
          node.sendCommand(['PING'], { timeout: this.timeoutMs, typeMapping: AS_BUFFERS }),
        ),
      );
    });
  }

  private async bounded<T>(
    operation: string,
    timeoutMs: number,
    call: () => Promise<T>,
  ): Promise<T> {
    if (!this.client.isOpen) {
      throw new IdempotencyStoreUnavailableError(
        `Redis is unavailable during ${operation}: the client is not open (connect it before the store is used; was it closed?)`,
      );
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(new IdempotencyStoreUnavailableError(this.timeoutMessage(operation, timeoutMs))),
        timeoutMs,
      );
    });
    try {
      return await Promise.race([call(), timeout]);
    } catch (error) {
      throw this.translate(operation, timeoutMs, error);
    } finally {
      clearTimeout(timer);
    }
  }

  private timeoutMessage(operation: string, timeoutMs: number): string {
    const state =
      this.client.isReady === false ? ' (the client is not connected: it is reconnecting)' : '';
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

/** Server replies that mean "not now" rather than "wrong": loading, failing over, a busy script, out of memory. */
const UNAVAILABLE_REPLY =
  /^(LOADING|CLUSTERDOWN|MASTERDOWN|READONLY|TRYAGAIN|BUSY|NOREPLICAS|MISCONF|OOM)\b/;

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

/** A reply the server sent (node-redis's `ErrorReply` and its subclasses). */
export function isErrorReply(error: unknown): error is Error {
  return error instanceof Error && classNames(error).includes('ErrorReply');
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
]);
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
  if (isErrorReply(error)) return UNAVAILABLE_REPLY.test(error.message);
  if (classNames(error).some((name) => CLIENT_UNAVAILABLE.has(name))) return true;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && NETWORK_CODES.has(code);
}

export function isNoScript(error: unknown): boolean {
  return isErrorReply(error) && error.message.startsWith('NOSCRIPT');
}

/** The node-redis majors the store works with (the `redis` peer range). */
export const SUPPORTED_NODE_REDIS = 'node-redis 5 or 6 (the redis package ^5 || ^6)';

/**
 * Whether the client can be told to hand bulk strings back as Buffers: node-redis
 * 5 and 6 take `typeMapping` per command (and have `withTypeMapping`); 4 and
 * older ignore it and decode every reply as UTF-8 text, which no stored payload
 * survives.
 */
export function takesTypeMapping(client: RedisIdempotencyClient): boolean {
  return typeof (client as { withTypeMapping?: unknown }).withTypeMapping === 'function';
}

/**
 * The package (and version) that made the client, for messages: found by its
 * class among the CommonJS modules loaded so far, then that module's nearest
 * package.json (node-redis 4's client is `@redis/client` 1.x, 5's and 6's their
 * own major). Undefined when it cannot be told (an ES-module build, a bundle).
 */
export function clientPackageOf(client: RedisIdempotencyClient): string | undefined {
  try {
    const classes = new Set<unknown>();
    for (
      let p = Object.getPrototypeOf(client);
      p && p !== Object.prototype;
      p = Object.getPrototypeOf(p)
    ) {
      classes.add(p.constructor);
    }
    const cache = typeof require === 'function' ? require.cache : undefined;
    for (const loaded of Object.values(cache ?? {})) {
      const exports = loaded?.exports as Record<string, unknown> | undefined;
      if (!exports || (typeof exports !== 'object' && typeof exports !== 'function')) continue;
      const defines =
        classes.has(exports) || Object.values(exports).some((value) => classes.has(value));
      if (!defines) continue;
      for (
        let dir = path.dirname(loaded!.filename);
        dir !== path.dirname(dir);
        dir = path.dirname(dir)
      ) {
        const manifest = path.join(dir, 'package.json');
        if (!fs.existsSync(manifest)) continue;
        const { name, version } = JSON.parse(fs.readFileSync(manifest, 'utf8')) as {
          name?: string;
          version?: string;
        };
        if (name && version) {
          // node-redis 4 is `redis` 4.x around `@redis/client` 1.x.
          const four = name === '@redis/client' && /^1\./.test(version) ? ' (node-redis 4)' : '';
          return `${name} ${version}${four}`;
        }
      }
    }
  } catch {
    // Only for a message: nothing to say, then.
  }
  return undefined;
}
