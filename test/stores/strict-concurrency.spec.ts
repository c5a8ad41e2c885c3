import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import type { AcquireRequest, AcquireResult } from 'nest-idempotency';
import type { ContractHarness } from 'nest-idempotency/testing';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { mariadbHarness } from '../support/mariadb-harness';
import { mariadbAvailable, openMysqlDataSource } from '../support/mariadb';
import { openDataSource } from '../support/postgres';
import { postgresHarness } from './pg-harness';

/**
 * Strict mode under contention, on the real databases: many contenders, over
 * two store instances (two pools), find one record whose lease ran out. The
 * database moves it to AMBIGUOUS exactly once; every contender is refused
 * (`ambiguous`), none acquires it, and exactly one says it moved it. Then a
 * duplicate waiting on a live lease on the other instance is woken by the
 * holder's markAmbiguous, not by its timeout.
 */

const CONTENDERS = 20;
const ROUNDS = 10;

interface Target {
  name: string;
  harness: () => Promise<ContractHarness>;
  admin: () => Promise<DataSource>;
  /** Moves the record's lease deadline to a second before the database's clock. */
  expireLease: (admin: DataSource, store: TypeOrmIdempotencyStore, key: RecordKey) => Promise<void>;
}

interface RecordKey {
  scope: string;
  key: string;
}

const targets: Target[] = [
  {
    name: 'PostgreSQL',
    harness: () => postgresHarness('strictrace'),
    admin: () => openDataSource(),
    expireLease: async (admin, store, id) => {
      const { schema, table } = store.tableName;
      await admin.query(
        `UPDATE "${schema}"."${table}" SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
        [recordIdOf(id.scope, id.key)],
      );
    },
  },
  ...(mariadbAvailable()
    ? (['mariadb', 'mysql'] as const).map((type): Target => ({
        name: `MariaDB (DataSource type ${type})`,
        harness: () => mariadbHarness('strictrace', { type }),
        admin: () => openMysqlDataSource(),
        expireLease: async (admin, store, id) => {
          await admin.query(
            `UPDATE \`${store.tableName.table}\` SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`,
            [recordIdOf(id.scope, id.key)],
          );
        },
      }))
    : []),
];

describe.each(targets)('strict mode under contention: $name', (target) => {
  let harness: ContractHarness;
  let admin: DataSource;
  let stores: [TypeOrmIdempotencyStore, TypeOrmIdempotencyStore];

  beforeAll(async () => {
    harness = await target.harness();
    admin = await target.admin();
    stores = [
      harness.store as TypeOrmIdempotencyStore,
      (harness.other ?? harness.store) as TypeOrmIdempotencyStore,
    ];
    await stores[0].init(); // creates the table
    await stores[1].init();
  });

  afterAll(async () => {
    await Promise.all((stores ?? []).map((store) => store.close()));
    await harness?.close?.();
    await admin?.destroy();
  });

  const request = (id: RecordKey, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
    ...id,
    leaseMs: 60_000,
    waitTimeoutMs: 0,
    ttlMs: 60_000,
    fingerprint: 'f',
    ...overrides,
  });

  it(`${CONTENDERS} contenders on one expired lease: exactly one moves it to AMBIGUOUS, all are refused, none acquires (${ROUNDS} rounds)`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const id = { scope: `race-${randomUUID()}`, key: 'k' };
      const held = await stores[0].tryAcquire(request(id));
      expect(held.kind).toBe('acquired');
      await target.expireLease(admin, stores[0], id);

      const results: AcquireResult[] = await Promise.all(
        Array.from({ length: CONTENDERS }, (_, i) =>
          stores[i % 2].tryAcquire(
            // Half would wait for an in-flight record: they must be refused at once too.
            request(id, { onExpiredLease: 'refuse', waitTimeoutMs: i % 4 < 2 ? 0 : 5_000 }),
          ),
        ),
      );

      const kinds = results.map((result) => result.kind);
      expect(kinds).toEqual(results.map(() => 'ambiguous'));
      const moved = results.filter((r) => r.kind === 'ambiguous' && r.transitioned === true);
      expect(moved).toHaveLength(1);
      const since = results.map((r) => (r.kind === 'ambiguous' ? r.since.getTime() : NaN));
      expect(new Set(since).size).toBe(1); // every contender saw the one move
      const view = await stores[1].find(id);
      expect(view).toMatchObject({ state: 'AMBIGUOUS', ambiguousReason: 'lease-expired' });
      expect(view?.ambiguousSince?.getTime()).toBe(since[0]);
      // The stale holder is fenced out.
      if (held.kind === 'acquired') {
        await expect(stores[0].complete(held.lease, Buffer.from('late'))).rejects.toThrow(
          'no longer held',
        );
      }
    }
  }, 60_000);

  it('wakes a duplicate waiting on the other instance when the holder marks the record AMBIGUOUS', async () => {
    const id = { scope: `wake-${randomUUID()}`, key: 'k' };
    const held = await stores[0].tryAcquire(request(id));
    if (held.kind !== 'acquired') throw new Error(`setup: ${held.kind}`);
    const waiting = new Promise<void>((resolve) => {
      const stop = stores[1].onWait(() => {
        stop();
        resolve();
      });
    });
    const started = performance.now();
    // The other instance polls once a minute: only a wake-up answers it within the bound below.
    const waiter = stores[1].tryAcquire(request(id, { waitTimeoutMs: 30_000 }));
    await waiting;
    await stores[0].strictMode.markAmbiguous(held.lease, 'action-failed');
    const result = await waiter;
    expect(result).toMatchObject({ kind: 'ambiguous', reason: 'action-failed' });
    expect(performance.now() - started).toBeLessThan(10_000);
    await expect(stores[0].strictMode.markAmbiguous(held.lease, 'action-failed')).rejects.toThrow(
      'no longer held',
    );
  }, 60_000);
});
