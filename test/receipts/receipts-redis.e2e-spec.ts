import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { cli } from '../cli/cli-harness';
import {
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
  type StandaloneClient,
} from '../support/redis';
import { expectReceiptsChains } from './receipts-scenario';

const quiet = { warn: () => undefined, error: () => undefined };

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)('receipts on Redis', () => {
  const prefix = scratchPrefix('receipts');
  let admin: StandaloneClient;
  let store: RedisIdempotencyStore;
  const listOf = (chain: number) => store.receipts.keysOf(chain)[0];

  beforeAll(async () => {
    admin = await connectStandalone(redisUrl());
    store = new RedisIdempotencyStore(admin, { keyPrefix: prefix, logger: quiet });
    await store.init();
  });
  afterAll(async () => {
    if (admin) {
      await deletePrefix(admin, prefix);
      admin.destroy();
    }
  });

  it('chains every terminal record; receipts verify passes, then names an altered, a removed and a reordered receipt', async () => {
    await expectReceiptsChains({
      store,
      verify: () =>
        cli(['--key-prefix', prefix, 'receipts', 'verify'], { env: { REDIS_URL: redisUrl() } }),
      alter: async (chain, seq) => {
        const entry = JSON.parse((await admin.lIndex(listOf(chain), seq - 1))!);
        entry.outcome = 'resolved-not-executed';
        entry.resultDigest = null;
        await admin.lSet(listOf(chain), seq - 1, JSON.stringify(entry));
      },
      remove: async (chain, seq) => {
        await admin.lSet(listOf(chain), seq - 1, 'gone');
        await admin.lRem(listOf(chain), 1, 'gone');
      },
      swap: async (chain, a, b) => {
        const [first, second] = await Promise.all([
          admin.lIndex(listOf(chain), a - 1),
          admin.lIndex(listOf(chain), b - 1),
        ]);
        await admin.lSet(listOf(chain), a - 1, second!);
        await admin.lSet(listOf(chain), b - 1, first!);
      },
    });
  });
});
