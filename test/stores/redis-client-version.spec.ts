import { createClient as createClient4 } from 'redis4';
import { createClient } from 'redis';
import { IdempotencyConfigError } from 'nest-idempotency';
import { RedisIdempotencyClient, RedisIdempotencyStore } from 'nest-idempotency/redis';
import { describeIfRedis, probeRedisSync, redisUrl, scratchPrefix } from '../support/redis';

/**
 * Issue 20, item 10: node-redis 4 ignores the per-command type mapping and
 * decodes every reply as text, so each stored result came back corrupted
 * (`stored payload is not a value (tag "\u0000")`). The store refuses such a
 * client at init, naming what it found and what it supports, and proves with
 * a short-lived key that bytes (0x00, 0xff, invalid UTF-8) come back as written.
 */
describeIfRedis(probeRedisSync(), 'Redis')(
  'RedisIdempotencyStore and the node-redis version',
  () => {
    it('refuses a node-redis 4 client at init with IdempotencyConfigError naming the version found and the ones supported', async () => {
      const client = createClient4({ url: redisUrl() });
      await client.connect();
      const prefix = scratchPrefix('v4');
      try {
        const store = new RedisIdempotencyStore(client as unknown as RedisIdempotencyClient, {
          keyPrefix: prefix,
        });
        const refused = await store.init().then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(refused).toBeInstanceOf(IdempotencyConfigError);
        expect((refused as Error).message).toMatch(/@redis\/client 1\.\d+\.\d+ \(node-redis 4\)/);
        expect((refused as Error).message).toMatch(/node-redis 5 or 6/);
        // Nothing was written: not a record, not a probe key.
        expect(await client.keys(`${prefix}*`)).toEqual([]);
        await store.close();
      } finally {
        await client.quit();
      }
    });

    it('proves at init that bytes come back unchanged through node-redis 6, leaving no probe key behind', async () => {
      const client = createClient({ url: redisUrl() });
      await client.connect();
      const prefix = scratchPrefix('probe');
      try {
        const store = new RedisIdempotencyStore(client as unknown as RedisIdempotencyClient, {
          keyPrefix: prefix,
        });
        await store.init();
        expect(await client.keys(`${prefix}*`)).toEqual([]);
        await store.close();
      } finally {
        await client.close();
      }
    });
  },
);
