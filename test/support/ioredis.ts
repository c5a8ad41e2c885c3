import { Cluster, Redis } from 'ioredis';
import type { ContractHarness } from 'nest-idempotency/testing';
// Relative until tsconfig and Vitest map `nest-idempotency/redis` (see docs/redis.md).
import { RedisIdempotencyStore } from '../../libs/idempotency/src/redis';
import { AnyRedisClient, deletePrefix, snapshotScope } from './redis';

/**
 * ioredis clients for the store suites, on the same real servers as
 * ./redis.ts. Each client is connected (ready) before it is returned and
 * never retries forever, so a suite that loses its server fails instead of
 * hanging.
 */

/** Client options a suite varies: ioredis's auto-pipelining, which many applications turn on. */
export interface IoredisVariant {
  enableAutoPipelining?: boolean;
  /** Cluster only: where ioredis sends read-only commands. */
  scaleReads?: 'master' | 'slave' | 'all';
}

export async function connectIoredis(
  url: string,
  variant: Omit<IoredisVariant, 'scaleReads'> = {},
): Promise<Redis> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 3, ...variant });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

export async function connectIoredisCluster(
  ports: number[],
  variant: IoredisVariant = {},
): Promise<Cluster> {
  const client = new Cluster(
    ports.map((port) => ({ host: '127.0.0.1', port })),
    { lazyConnect: true, ...variant },
  );
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

const quiet = { warn: () => undefined, error: () => undefined };

/**
 * The contract harness on ioredis: instance A on `client`, instance B on a
 * client of its own polling once a minute (only a real wake-up answers a
 * waiter in time). The raw state is read, and the prefix cleaned up, through
 * `inspector` (a node-redis client: the same helpers as the node-redis suites).
 */
export function ioredisHarness(options: {
  client: Redis | Cluster;
  otherClient: Redis | Cluster;
  inspector: AnyRedisClient;
  prefix: string;
  after?: () => Promise<unknown>;
}): ContractHarness {
  const { client, otherClient, inspector, prefix } = options;
  const store = new RedisIdempotencyStore(client, { logger: quiet, keyPrefix: prefix });
  const other = new RedisIdempotencyStore(otherClient, {
    logger: quiet,
    keyPrefix: prefix,
    pollIntervalMs: 60_000,
  });
  return {
    store,
    other,
    clock: 'store',
    expiry: 'backend',
    snapshot: (scope) => snapshotScope(inspector, store, scope),
    close: async () => {
      await deletePrefix(inspector, prefix);
      client.disconnect();
      otherClient.disconnect();
      inspector.destroy();
      await options.after?.();
    },
  };
}
