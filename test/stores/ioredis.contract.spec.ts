import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { connectIoredis, ioredisHarness, IoredisVariant } from '../support/ioredis';
import {
  connectStandalone,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
} from '../support/redis';

// The store on ioredis clients, against the machine's Redis (as redis.contract.spec.ts
// on node-redis): the same catalogue, under a key prefix of this file's own; once as
// ioredis comes, once with its auto-pipelining on (commands batched per event-loop turn).
const probe = probeRedisSync();

const variants: [string, IoredisVariant][] = [
  ['ioredis', {}],
  ['ioredis, enableAutoPipelining', { enableAutoPipelining: true }],
];

describeIfRedis(probe, `Redis at ${redisUrl()}`)('Redis, standalone, on ioredis', () => {
  for (const [name, variant] of variants) {
    describeIdempotencyStoreContract(
      `RedisIdempotencyStore (standalone, ${name})`,
      async () =>
        ioredisHarness({
          client: await connectIoredis(redisUrl(), variant),
          otherClient: await connectIoredis(redisUrl(), variant),
          inspector: await connectStandalone(redisUrl()),
          prefix: scratchPrefix('contract-ioredis'),
        }),
      { expiry: 'backend', strictMode: true, steps: true, continuations: true },
    );
  }
});
