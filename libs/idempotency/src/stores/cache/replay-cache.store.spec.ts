import { InMemoryIdempotencyStore } from '../memory/in-memory.store';
import { ReplayCachingStore } from './replay-cache.store';

const acquire = (scope: string, key: string) => ({
  scope,
  key,
  leaseMs: 30_000,
  waitTimeoutMs: 0,
  ttlMs: 60_000,
});

describe('ReplayCachingStore', () => {
  it('keeps records apart whose scope and key join to the same text', async () => {
    const store = new ReplayCachingStore(new InMemoryIdempotencyStore());
    const first = await store.tryAcquire(acquire('a', 'bc'));
    if (first.kind !== 'acquired') throw new Error(`expected acquired, got ${first.kind}`);
    await store.complete({ scope: 'a', key: 'bc' }, first.leaseId, 'a/bc', 60_000);
    // The first replay is answered by the inner store and fills the cache.
    await expect(store.tryAcquire(acquire('a', 'bc'))).resolves.toMatchObject({
      kind: 'duplicate',
      payload: 'a/bc',
    });
    expect(store.size).toBe(1);

    await expect(store.tryAcquire(acquire('ab', 'c'))).resolves.toMatchObject({
      kind: 'acquired',
    });
    await expect(store.tryAcquire(acquire('a', 'bc'))).resolves.toMatchObject({
      kind: 'duplicate',
      payload: 'a/bc',
    });
  });
});
