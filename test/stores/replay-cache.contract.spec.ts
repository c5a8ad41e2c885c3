import { InMemoryIdempotencyStore, ReplayCachingStore } from 'nest-idempotency';
import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { postgresHarness } from './pg-harness';

// The replay cache must be invisible: the whole contract holds through it.
describeIdempotencyStoreContract(
  'ReplayCachingStore over InMemoryIdempotencyStore',
  async () => ({ store: new ReplayCachingStore(new InMemoryIdempotencyStore()), clock: 'process' }),
  { clock: 'process', strictMode: true, steps: true },
);

// Each instance with a cache of its own, as two processes would have.
describeIdempotencyStoreContract(
  'ReplayCachingStore over TypeOrmIdempotencyStore',
  () => postgresHarness('cache', {}, (store) => new ReplayCachingStore(store)),
  // Passed through: a suspended answer is never cached as a replay.
  { strictMode: true, steps: true, continuations: true },
);
