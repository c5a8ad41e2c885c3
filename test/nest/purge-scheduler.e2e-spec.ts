import { INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import {
  encodeValue,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyPurgeScheduler,
  IdempotencyStore,
  InMemoryIdempotencyStore,
  PurgeRun,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

describe('scheduled purge', () => {
  const schema = scratchSchema('purge');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    await store.init();
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    await store.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  const boot = async (
    purge: Parameters<typeof IdempotencyModule.forRoot>[0]['purge'],
    s: IdempotencyStore = store,
  ) => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: s, purge })],
    }).compile();
    const app = await moduleRef.init();
    apps.push(app);
    return app.get(IdempotencyPurgeScheduler);
  };

  /** Records that are expired by the time the scheduler looks, plus one live IN_PROGRESS past its TTL. */
  const seed = async (scope: string, expired: number) => {
    for (let i = 0; i < expired; i++) {
      const acquired = await store.tryAcquire({
        scope,
        key: `k${i}`,
        leaseMs: 10_000,
        waitTimeoutMs: 0,
        ttlMs: 1,
        fingerprint: null,
      });
      if (acquired.kind !== 'acquired') throw new Error('seed failed');
      await store.complete(acquired.lease, encodeValue(i));
    }
    const live = await store.tryAcquire({
      scope,
      key: 'live',
      leaseMs: 60_000,
      waitTimeoutMs: 0,
      ttlMs: 1,
      fingerprint: null,
    });
    expect(live.kind).toBe('acquired');
  };

  const runsUntil = async (
    scheduler: IdempotencyPurgeScheduler,
    done: (runs: PurgeRun[]) => boolean,
  ) => {
    const runs: PurgeRun[] = [];
    while (!done(runs)) runs.push(((await once(scheduler.events, 'run')) as [PurgeRun])[0]);
    return runs;
  };

  it('purges expired records on its timer in bounded batches, and keeps a live record', async () => {
    const scope = `purge-${randomUUID()}`;
    await seed(scope, 5);
    const scheduler = await boot({ interval: '100ms', batchSize: 2 });
    const runs = await runsUntil(scheduler, (r) => r.reduce((n, run) => n + run.purged, 0) >= 5);
    expect(runs.every((r) => r.error === undefined)).toBe(true);
    expect(runs.reduce((n, run) => n + run.batches, 0)).toBeGreaterThanOrEqual(3);
    await expect(store.list({ scope })).resolves.toEqual([
      expect.objectContaining({ key: 'live', state: 'IN_PROGRESS' }),
    ]);
  });

  it('is safe with several instances purging at once: every expired record purged once, live ones kept', async () => {
    const scope = `purge-${randomUUID()}`;
    const schedulers = await Promise.all([boot(false), boot(false), boot(false)]);
    await seed(scope, 30);
    const runs = await Promise.all(schedulers.map((s) => s.runOnce()));
    expect(runs.reduce((n, run) => n + run.purged, 0)).toBe(30);
    await expect(store.list({ scope })).resolves.toEqual([
      expect.objectContaining({ key: 'live' }),
    ]);
  });

  it('can be switched off', async () => {
    const scheduler = await boot(false, new InMemoryIdempotencyStore());
    expect(scheduler.enabled).toBe(false);
  });

  it.each([
    [{ interval: 'soon' }, /purge\.interval/],
    [{ interval: '1h', batchSize: 0 }, /purge\.batchSize/],
  ])('refuses %j at bootstrap', async (purge, message) => {
    const attempt = Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge })],
    }).compile();
    await expect(attempt).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(attempt).rejects.toThrow(message);
  });
});
