import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createClient, createCluster, RedisClientType, RedisClusterType } from 'redis';
import type { IdempotencyStore } from 'nest-idempotency';
import type { ContractHarness } from 'nest-idempotency/testing';
// Relative until tsconfig and Vitest map `nest-idempotency/redis` (see docs/redis.md).
import {
  RedisIdempotencyStore,
  RedisIdempotencyStoreOptions,
} from '../../libs/idempotency/src/redis';

/**
 * Redis for the store suites: the machine's server (IDEMPOTENCY_TEST_REDIS_URL,
 * default redis://127.0.0.1:6379) for the standalone run, and servers the
 * suites start themselves (./redis-server.ts) for the Cluster and the
 * store-specific checks. Real servers only: nothing here imitates Redis.
 */

export const START_REDIS_HINT =
  "start one with `redis-server --daemonize yes --port 6379 --save ''` or set IDEMPOTENCY_TEST_REDIS_URL";

export function redisUrl(): string {
  return process.env.IDEMPOTENCY_TEST_REDIS_URL || 'redis://127.0.0.1:6379';
}

/** With IDEMPOTENCY_TEST_REQUIRE_REDIS=1 (CI) a missing Redis fails the run instead of skipping. */
export const redisRequired = () => process.env.IDEMPOTENCY_TEST_REQUIRE_REDIS === '1';

export type Probe = { available: true } | { available: false; reason: string };

/** Whether the server at `url` answers PING within 2 s. */
export async function probeRedis(url = redisUrl()): Promise<Probe> {
  const client = createClient({
    url,
    socket: { connectTimeout: 2000, reconnectStrategy: false },
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.ping();
    return { available: true };
  } catch (error) {
    return { available: false, reason: error instanceof Error ? error.message : String(error) };
  } finally {
    if (client.isOpen) client.destroy();
  }
}

/**
 * `probeRedis`, answered before any test is registered (a test file cannot
 * await at its top level here): a child Node process connects with the
 * same client and PINGs.
 */
export function probeRedisSync(url = redisUrl()): Probe {
  const code = `
    const { createClient } = require('redis');
    const client = createClient({ url: process.env.PROBE_URL, socket: { connectTimeout: 2000, reconnectStrategy: false } });
    client.on('error', () => undefined);
    client.connect().then(() => client.ping()).then(
      () => { client.destroy(); process.exit(0); },
      (error) => { console.error(error && error.message ? error.message : String(error)); process.exit(1); },
    );`;
  const probe = spawnSync(process.execPath, ['-e', code], {
    env: { ...process.env, PROBE_URL: url },
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (probe.status === 0) return { available: true };
  const reason = (probe.stderr || probe.error?.message || `exit ${probe.status}`).trim();
  return { available: false, reason: reason.split('\n').pop() ?? reason };
}

/**
 * `describe` when the probe succeeded; otherwise a skipped block, with a
 * warning saying why and how to start Redis, or (IDEMPOTENCY_TEST_REQUIRE_REDIS=1)
 * a failing test.
 */
export function describeIfRedis(
  probe: Probe,
  what: string,
): (name: string, body: () => void) => void {
  if (probe.available) return describe;
  const message = `${what} is unreachable (${probe.reason})`;
  if (redisRequired()) {
    return (name) =>
      describe(name, () => {
        it('needs Redis (IDEMPOTENCY_TEST_REQUIRE_REDIS=1)', () => {
          throw new Error(`${message}; ${START_REDIS_HINT}`);
        });
      });
  }
  console.warn(`\n[tests] Redis suite skipped: ${message}; ${START_REDIS_HINT}.`);
  return describe.runIf(probe.available);
}

/** A key prefix per test file (and per run), so files running side by side never meet. */
export function scratchPrefix(name: string): string {
  return `idem-test:${name}:${randomBytes(4).toString('hex')}:`;
}

export type StandaloneClient = RedisClientType;
export type ClusterClient = RedisClusterType;
export type AnyRedisClient = StandaloneClient | ClusterClient;

/**
 * A connected standalone client. node-redis 6 speaks RESP3 unless told
 * otherwise; `resp: 2` gives the protocol of node-redis 5 and older servers.
 */
export async function connectStandalone(
  url = redisUrl(),
  options: { resp?: 2 | 3 } = {},
): Promise<StandaloneClient> {
  const client = createClient({ url, RESP: options.resp ?? 3 }) as unknown as StandaloneClient;
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

export async function connectCluster(ports: number[]): Promise<ClusterClient> {
  const client: ClusterClient = createCluster({
    rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
  });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

export const isClusterClient = (client: AnyRedisClient): client is ClusterClient =>
  'masters' in client;

/** One node client per master (the client itself when standalone). */
export async function mastersOf(client: AnyRedisClient): Promise<StandaloneClient[]> {
  if (!isClusterClient(client)) return [client];
  const nodes: StandaloneClient[] = [];
  for (const master of client.masters) nodes.push(await client.nodeClient(master));
  return nodes;
}

/** Every key matching `pattern`, on every master (SCAN). */
export async function scanAll(client: AnyRedisClient, pattern: string): Promise<string[]> {
  const keys = new Set<string>();
  for (const node of await mastersOf(client)) {
    let cursor = '0';
    do {
      const reply = await node.scan(cursor, { MATCH: pattern, COUNT: 1000 });
      cursor = String(reply.cursor);
      reply.keys.forEach((key) => keys.add(String(key)));
    } while (cursor !== '0');
  }
  return [...keys].sort();
}

/** Deletes every key under `prefix` (UNLINK, one key at a time: keys of a Cluster live in many slots). */
export async function deletePrefix(client: AnyRedisClient, prefix: string): Promise<number> {
  const keys = await scanAll(client, `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`);
  await Promise.all(keys.map((key) => client.unlink(key)));
  return keys.length;
}

/**
 * The raw state of a scope's records: every field of each hash (the payload
 * as hex) and the key's absolute expiry (PEXPIRETIME, which does not move
 * with time as PTTL does). Equal snapshots mean nothing was written.
 */
export async function snapshotScope(
  client: AnyRedisClient,
  store: RedisIdempotencyStore,
  scope: string,
): Promise<string> {
  const keys = await scanAll(client, store.keys.pattern(scope));
  const records = await Promise.all(
    keys.map(async (key) => {
      const fields = await command(client, key, ['HGETALL', key], true);
      const flat = toFlat(fields);
      const entries: Array<[string, string]> = [];
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const name = flat[i].toString('utf8');
        entries.push([
          name,
          name === 'p' ? flat[i + 1].toString('hex') : flat[i + 1].toString('utf8'),
        ]);
      }
      entries.sort(([a], [b]) => a.localeCompare(b));
      const expireAt = await command(client, key, ['PEXPIRETIME', key]);
      return { key, fields: entries, expireAt: String(expireAt) };
    }),
  );
  return JSON.stringify(records);
}

/** One raw command, routed by `key` on a Cluster; bulk strings as Buffers when `buffers`. */
export function command(
  client: AnyRedisClient,
  key: string | undefined,
  args: string[],
  buffers = false,
): Promise<unknown> {
  const options = buffers ? { typeMapping: { 36: Buffer } } : undefined;
  return isClusterClient(client)
    ? client.sendCommand(key, false, args, options as never)
    : client.sendCommand(args, options as never);
}

/** HGETALL's reply as a flat [field, value, …] list, whether RESP2 (array) or RESP3 (map). */
function toFlat(reply: unknown): Buffer[] {
  if (Array.isArray(reply)) return reply as Buffer[];
  if (reply instanceof Map) return [...reply].flat() as Buffer[];
  return Object.entries(reply as Record<string, Buffer>).flatMap(([k, v]) => [Buffer.from(k), v]);
}

const quiet = { warn: () => undefined, error: () => undefined };

/**
 * The contract harness: instance A on `client`, instance B on a client of its
 * own (`otherClient`, its own connections and its own subscriber), polling
 * once a minute, so only a real wake-up answers a waiter in time. Cleans up
 * the prefix and closes both clients at the end.
 */
export async function redisHarness(options: {
  client: AnyRedisClient;
  otherClient: AnyRedisClient;
  prefix: string;
  storeOptions?: RedisIdempotencyStoreOptions;
  wrap?: (store: RedisIdempotencyStore) => IdempotencyStore;
  /** Runs after the clients are closed (stop the servers). */
  after?: () => Promise<unknown>;
}): Promise<ContractHarness> {
  const { client, otherClient, prefix } = options;
  const wrap = options.wrap ?? ((store) => store);
  const store = new RedisIdempotencyStore(client, {
    logger: quiet,
    ...options.storeOptions,
    keyPrefix: prefix,
  });
  const other = new RedisIdempotencyStore(otherClient, {
    logger: quiet,
    ...options.storeOptions,
    keyPrefix: prefix,
    pollIntervalMs: 60_000,
  });
  return {
    store: wrap(store),
    other: wrap(other),
    clock: 'store',
    expiry: 'backend',
    snapshot: (scope) => snapshotScope(client, store, scope),
    close: async () => {
      await deletePrefix(client, prefix);
      client.destroy();
      otherClient.destroy();
      await options.after?.();
    },
  };
}
