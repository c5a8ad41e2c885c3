import { encodeValue } from '../../core/payload';
import { InMemoryIdempotencyStore } from '../memory/in-memory.store';
import { ReplayCachingStore } from './replay-cache.store';

const acquire = (scope: string, key: string) => ({
  scope,
  key,
  leaseMs: 30_000,
  waitTimeoutMs: 0,
  ttlMs: 60_000,
  fingerprint: null,
});

describe('ReplayCachingStore', () => {
  it('keeps records apart whose scope and key join to the same text', async () => {
    const store = new ReplayCachingStore(new InMemoryIdempotencyStore());
    const first = await store.tryAcquire(acquire('a', 'bc'));
    if (first.kind !== 'acquired') throw new Error(`expected acquired, got ${first.kind}`);
    const payload = encodeValue('a/bc');
    await store.complete(first.lease, payload);
    // The first replay is answered by the inner store and fills the cache.
    const replay = await store.tryAcquire(acquire('a', 'bc'));
    expect(replay.kind === 'duplicate' && replay.payload.equals(payload)).toBe(true);
    expect(store.size).toBe(1);

    await expect(store.tryAcquire(acquire('ab', 'c'))).resolves.toMatchObject({
      kind: 'acquired',
    });
    const cached = await store.tryAcquire(acquire('a', 'bc'));
    expect(cached.kind === 'duplicate' && cached.payload.equals(payload)).toBe(true);
  });

  it('hands a cached replay the same bytes, with its remaining TTL counting down', async () => {
    const store = new ReplayCachingStore(new InMemoryIdempotencyStore());
    const first = await store.tryAcquire(acquire('s', 'k'));
    if (first.kind !== 'acquired') throw new Error(`expected acquired, got ${first.kind}`);
    await store.complete(first.lease, encodeValue({ b: 1, a: 2 }));
    const fromStore = await store.tryAcquire(acquire('s', 'k'));
    const fromCache = await store.tryAcquire(acquire('s', 'k'));
    if (fromStore.kind !== 'duplicate' || fromCache.kind !== 'duplicate')
      throw new Error('no replay');
    expect(fromCache.payload).toBe(fromStore.payload);
    expect(fromCache.expiresInMs).toBeLessThanOrEqual(fromStore.expiresInMs);
    expect(fromCache.expiresInMs).toBeGreaterThan(59_000);
  });
});
