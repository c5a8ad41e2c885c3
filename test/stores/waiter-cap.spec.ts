import { randomUUID } from 'node:crypto';
import {
  AcquireRequest,
  AcquireResult,
  encodeValue,
  IdempotencyStore,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Bounds against abuse: past `maxWaiters` parked duplicates, one more is told
 * "in flight" at once instead of holding memory; the parked ones still get the answer.
 */
describe.each(['memory', 'postgres'] as const)('waiter cap (%s store)', (kind) => {
  let store: IdempotencyStore;
  let dataSource: DataSource | undefined;
  const schema = scratchSchema('cap');

  beforeAll(async () => {
    if (kind === 'memory') {
      store = new InMemoryIdempotencyStore({ maxWaiters: 5 });
    } else {
      dataSource = await openDataSource();
      store = new TypeOrmIdempotencyStore(dataSource, {
        schema,
        ensureSchema: true,
        maxWaiters: 5,
      });
    }
    await store.init?.();
  });
  afterAll(async () => {
    await store.close?.();
    if (dataSource) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  it('answers the waiter past the cap at once; the parked ones get the result', async () => {
    const scope = `cap-${randomUUID()}`;
    const request: Omit<AcquireRequest, 'waitTimeoutMs'> = {
      scope,
      key: 'k',
      leaseMs: 30_000,
      ttlMs: 60_000,
      fingerprint: null,
    };
    const holder = await store.tryAcquire({ ...request, waitTimeoutMs: 0 });
    if (holder.kind !== 'acquired') throw new Error('expected to acquire');

    // Six duplicates for five places: one is refused without waiting out its 20 s.
    const calls = Array.from({ length: 6 }, () =>
      store.tryAcquire({ ...request, waitTimeoutMs: 20_000 }),
    );
    const first = await Promise.race(calls);
    expect(first).toMatchObject({ kind: 'in-flight' });

    const done = encodeValue('done');
    await store.complete(holder.lease, done);
    const results: AcquireResult[] = await Promise.all(calls);
    expect(results.filter((r) => r.kind === 'in-flight')).toHaveLength(1);
    expect(results.filter((r) => r.kind === 'duplicate' && r.payload.equals(done))).toHaveLength(5);
  });
});
