import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import {
  connectStandalone,
  describeIfRedis,
  probeRedisSync,
  redisHarness,
  redisUrl,
  scratchPrefix,
} from '../support/redis';

// The machine's Redis (IDEMPOTENCY_TEST_REDIS_URL, default 127.0.0.1:6379), under a
// key prefix of this file's own; instance B has a client (and subscriber) of its own.
const probe = probeRedisSync();

describeIfRedis(probe, `Redis at ${redisUrl()}`)('Redis, standalone', () => {
  // node-redis 6 speaks RESP3 by default; RESP2 is what node-redis 5 (and many setups) use.
  for (const resp of [3, 2] as const) {
    describeIdempotencyStoreContract(
      `RedisIdempotencyStore (standalone, RESP${resp})`,
      async () =>
        redisHarness({
          client: await connectStandalone(redisUrl(), { resp }),
          otherClient: await connectStandalone(redisUrl(), { resp }),
          prefix: scratchPrefix(`contract-resp${resp}`),
        }),
      { expiry: 'backend', strictMode: true, steps: true, continuations: true },
    );
  }
});
