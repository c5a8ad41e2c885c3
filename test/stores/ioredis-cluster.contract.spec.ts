import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { connectIoredisCluster, ioredisHarness } from '../support/ioredis';
import { connectCluster, describeIfRedis, scratchPrefix } from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';

// A real Redis Cluster of three masters (as redis-cluster.contract.spec.ts), the
// stores on ioredis Cluster clients: keys routed by ioredis, waiters woken by
// sharded pub/sub (SSUBSCRIBE through ioredis's sharded subscribers).
let servers: RedisServers | undefined;
afterAll(async () => {
  await servers?.stop();
  servers = undefined;
}, 30_000);

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'Redis Cluster (3 masters), on ioredis',
  () => {
    describeIdempotencyStoreContract(
      'RedisIdempotencyStore (Redis Cluster, 3 masters, ioredis)',
      async () => {
        servers = await startCluster();
        const ports = servers.ports;
        return ioredisHarness({
          client: await connectIoredisCluster(ports),
          otherClient: await connectIoredisCluster(ports),
          inspector: await connectCluster(ports),
          prefix: scratchPrefix('cluster-ioredis'),
          after: async () => {
            await servers?.stop();
            servers = undefined;
          },
        });
      },
      { expiry: 'backend', strictMode: true, steps: true, continuations: true },
    );
  },
);
