import { errorText } from '../../core/error-text';
import { IdempotencyConfigError, IdempotencyStoreUnavailableError } from '../../core/errors';
import type { IdempotencyLogger } from '../../core/logger';
import { optionalPeer } from '../../core/optional-peer';
import type { RedisClusterClient, RedisStandaloneClient } from './redis-client';

/**
 * How `RedisIdempotencyStore.fromUrl` (and the module's `store: { redis }`)
 * connects: the client it creates, and owns.
 */
export interface RedisConnectionOptions {
  /**
   * The URLs are seed nodes of a Redis Cluster (`createCluster`), not one
   * server (`createClient`). Credentials in the first URL apply to every node
   * the client discovers. Default false.
   */
  cluster?: boolean;
  /** Bound on the first connection, made by `init()`. Default 10,000 ms. */
  connectTimeoutMs?: number;
  /**
   * More options for node-redis, passed as they are: to `createClient`, or as
   * `defaults` (every node's) to `createCluster`. TLS, `RESP`, socket options.
   */
  clientOptions?: Record<string, unknown>;
}

/** The client the store created for itself, and how it opens and closes it. */
export interface OwnedRedisConnection {
  readonly client: RedisStandaloneClient | RedisClusterClient;
  /** `host:port` (or the seed nodes of a Cluster), never a user or a password: safe to print. */
  readonly target: string;
  /** Connects, unless open already; bounded by `connectTimeoutMs`, after which the client is dropped. */
  connect(): Promise<void>;
  /** Closes the client gracefully (pending replies first), if it is open. */
  close(): Promise<void>;
}

type RedisPackage = {
  createClient(options: Record<string, unknown>): OwnedClient;
  createCluster(options: Record<string, unknown>): OwnedClient;
};

/** What the store needs of a client it owns, besides what the store itself uses. */
interface OwnedClient {
  readonly isOpen: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<unknown>;
  quit?(): Promise<unknown>;
  destroy(): void;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/**
 * Creates the node-redis client for `url` (one server, or a Cluster's seed
 * nodes), without connecting it. `redis` is loaded here, and only here: an
 * application that passes its own client, or uses another store, never loads
 * it. Misconfiguration is an `IdempotencyConfigError` that never echoes a
 * URL (it may hold a password).
 */
export function createOwnedConnection(
  url: string | readonly string[],
  options: RedisConnectionOptions,
  logger: IdempotencyLogger,
  where = 'RedisIdempotencyStore.fromUrl',
): OwnedRedisConnection {
  const urls = (typeof url === 'string' ? [url] : [...(url ?? [])]).map((u, i) =>
    parseRedisUrl(u, i, where),
  );
  if (urls.length === 0) {
    throw new IdempotencyConfigError(`${where}: a redis:// or rediss:// URL is required`);
  }
  if (urls.length > 1 && !options.cluster) {
    throw new IdempotencyConfigError(
      `${where}: ${urls.length} URLs were given; several URLs are the seed nodes of a Redis Cluster: pass cluster: true`,
    );
  }
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!Number.isFinite(connectTimeoutMs) || connectTimeoutMs <= 0) {
    throw new IdempotencyConfigError(
      `${where}: connectTimeoutMs must be a positive number, got ${connectTimeoutMs}`,
    );
  }
  const redis = loadRedis(where);
  const extra = options.clientOptions ?? {};
  const client = options.cluster
    ? redis.createCluster({
        rootNodes: urls.map((u) => ({ url: u.href })),
        // Nodes the client discovers get the seed's credentials.
        defaults: { ...credentials(urls[0]), ...extra },
      })
    : redis.createClient({ ...extra, url: urls[0].href });
  const target = options.cluster
    ? `Redis Cluster via ${urls.map(hostPort).join(', ')}`
    : `Redis at ${hostPort(urls[0])}`;
  const secrets = urls.flatMap((u) => (u.password ? [u.password, decode(u.password)] : []));
  const redact = (text: string) =>
    secrets.reduce((out, secret) => out.split(secret).join('***'), text);

  // node-redis emits 'error' on every failed (re)connection; without a listener
  // the process would crash. Say it once per outage: after the next 'ready', again.
  // While connecting, the error is kept for init()'s message instead.
  let quiet = true;
  let lastError: unknown;
  // While init() connects: called with an error no retry can mend (nobody listens there).
  let refused: ((error: unknown) => void) | undefined;
  client.on('error', (error: unknown) => {
    lastError = error;
    if (refused && isRefusal(error)) refused(error);
    if (quiet) return;
    quiet = true;
    logger.warn(`${target}: ${redact(errorText(error))} (the client reconnects by itself)`);
  });
  client.on('ready', () => {
    quiet = false;
  });

  return {
    client: client as unknown as RedisStandaloneClient | RedisClusterClient,
    target,
    async connect() {
      if (client.isOpen) return;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), connectTimeoutMs);
      });
      lastError = undefined;
      // A refused connection or an unknown host fails init() at once, not after connectTimeoutMs.
      // Not for a Cluster: its client tries the next seed node after one that refuses.
      const refusal = new Promise<'refused'>((resolve) => {
        if (!options.cluster) refused = () => resolve('refused');
      });
      const connecting = client.connect().then(() => 'connected' as const);
      // Dropped after the timeout, it rejects later: nobody awaits it then.
      connecting.catch(() => undefined);
      try {
        const outcome = await Promise.race([connecting, timeout, refusal]);
        if (outcome === 'refused') {
          destroyQuietly(client);
          throw new IdempotencyStoreUnavailableError(
            `cannot connect to ${target}: ${redact(errorText(lastError))} (is Redis running there, and is the address right?)`,
            1000,
            { cause: lastError },
          );
        }
        if (outcome === 'timeout') {
          // Stop the client retrying in the background.
          client.destroy();
          const why = lastError === undefined ? 'no answer' : redact(errorText(lastError));
          throw new IdempotencyStoreUnavailableError(
            `cannot connect to ${target} within ${connectTimeoutMs} ms: ${why}`,
          );
        }
      } catch (error) {
        if (error instanceof IdempotencyStoreUnavailableError) throw error;
        if (client.isOpen) client.destroy();
        throw new IdempotencyStoreUnavailableError(
          `cannot connect to ${target}: ${redact(errorText(error))}`,
          1000,
          { cause: error },
        );
      } finally {
        refused = undefined;
        clearTimeout(timer);
      }
    },
    async close() {
      if (!client.isOpen) return;
      if (typeof client.close === 'function') await client.close();
      else if (typeof client.quit === 'function') await client.quit();
      else client.destroy();
    },
  };
}

/** Stops a client that may have closed itself already (older clients throw then). */
function destroyQuietly(client: { destroy(): void }): void {
  try {
    client.destroy();
  } catch {
    // Closed already: nothing to stop.
  }
}

/** Connection errors that mean nothing listens at the address, or the address does not exist. */
const REFUSALS = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_NONAME']);

function isRefusal(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && REFUSALS.has(code);
}

/** node-redis is CommonJS, so `require` loads it in every runtime, when `fromUrl` is called. */
function loadRedis(where: string): RedisPackage {
  try {
    return optionalPeer<RedisPackage>('redis');
  } catch (error) {
    throw new IdempotencyConfigError(
      `${where} needs the redis package (node-redis 5 or 6: npm install redis), which could not be loaded: ${errorText(error)}`,
      { cause: error },
    );
  }
}

function parseRedisUrl(value: unknown, index: number, where: string): URL {
  const which = index === 0 ? 'the URL' : `URL #${index + 1}`;
  if (typeof value !== 'string' || value.length === 0) {
    throw new IdempotencyConfigError(`${where}: ${which} must be a redis:// or rediss:// URL`);
  }
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    // Not echoed: it may hold a password.
    throw new IdempotencyConfigError(
      `${where}: ${which} is not a URL; expected redis://[[user]:password@]host[:port][/db] or rediss://…`,
    );
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new IdempotencyConfigError(
      `${where}: ${which} must start with redis:// or rediss://, not ${parsed.protocol}//`,
    );
  }
  return parsed;
}

function credentials(url: URL): Record<string, string> {
  const out: Record<string, string> = {};
  if (url.username) out.username = decode(url.username);
  if (url.password) out.password = decode(url.password);
  return out;
}

/** `host:port` of a URL, the default port filled in. */
export function hostPort(url: URL): string {
  return `${url.hostname || '127.0.0.1'}:${url.port || '6379'}`;
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
