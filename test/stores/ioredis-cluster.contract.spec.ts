import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { connectIoredisCluster, ioredisHarness, IoredisVariant } from '../support/ioredis';
import { connectCluster, describeIfRedis, scratchPrefix } from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';

// A real Redis Cluster of three masters (as redis-cluster.contract.spec.ts), the
// stores on ioredis Cluster clients: keys routed by ioredis, waiters woken by
// sharded pub/sub (SSUBSCRIBE through ioredis's sharded subscribers); once as
// ioredis comes, once with its auto-pipelining on (commands batched per slot group).
let servers: RedisServers | undefined;
afterAll(async () => {
  await servers?.stop();
  servers = undefined;
}, 30_000);

const variants: [string, IoredisVariant][] = [
  ['ioredis', {}],
  ['ioredis, enableAutoPipelining', { enableAutoPipelining: true }],
];

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'Redis Cluster (3 masters), on ioredis',
  () => {
    for (const [name, variant] of variants) {
      describeIdempotencyStoreContract(
        `RedisIdempotencyStore (Redis Cluster, 3 masters, ${name})`,
        async () => {
          // A cluster the previous catalogue left running (its harness never made) goes first.
          await servers?.stop();
          servers = await startCluster();
          const ports = servers.ports;
          return ioredisHarness({
            client: await connectIoredisCluster(ports, variant),
            otherClient: await connectIoredisCluster(ports, variant),
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
    }
  },
);
