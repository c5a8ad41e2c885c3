import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { connectIoredis, ioredisHarness } from '../support/ioredis';
import {
  connectStandalone,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
} from '../support/redis';

// The store on ioredis clients, against the machine's Redis (as redis.contract.spec.ts
// on node-redis): the same catalogue, under a key prefix of this file's own.
const probe = probeRedisSync();

describeIfRedis(probe, `Redis at ${redisUrl()}`)('Redis, standalone, on ioredis', () => {
  describeIdempotencyStoreContract(
    'RedisIdempotencyStore (standalone, ioredis)',
    async () =>
      ioredisHarness({
        client: await connectIoredis(redisUrl()),
        otherClient: await connectIoredis(redisUrl()),
        inspector: await connectStandalone(redisUrl()),
        prefix: scratchPrefix('contract-ioredis'),
      }),
    { expiry: 'backend', strictMode: true, steps: true, continuations: true },
  );
});
