import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { connectCluster, describeIfRedis, redisHarness, scratchPrefix } from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';

// A real Redis Cluster of three masters, started here from the redis-server binary
// on free loopback ports and killed afterwards. Records spread over the three
// shards; waiters are woken by sharded pub/sub; list SCANs every master.
let servers: RedisServers | undefined;
afterAll(async () => {
  await servers?.stop();
  servers = undefined;
}, 30_000);

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')('Redis Cluster (3 masters)', () => {
  describeIdempotencyStoreContract(
    'RedisIdempotencyStore (Redis Cluster, 3 masters)',
    async () => {
      servers = await startCluster();
      const ports = servers.ports;
      return redisHarness({
        client: await connectCluster(ports),
        otherClient: await connectCluster(ports),
        prefix: scratchPrefix('cluster'),
        after: async () => {
          await servers?.stop();
          servers = undefined;
        },
      });
    },
    { expiry: 'backend', strictMode: true, steps: true, continuations: true },
  );
});
