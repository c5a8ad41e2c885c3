import { DataSource } from 'typeorm';
import {
  AcquireResult,
  encodeValue,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore, TypeOrmIdempotencyStoreOptions } from 'nest-idempotency/typeorm';
import { recordLocator } from '../../libs/idempotency/src/core/key';
import { mariadbDialect, postgresDialect, SqlDialect, TablePlace } from '../support/sql-dialects';
import { SilentForwarder, TcpProxy } from '../support/tcp-proxy';
import {
  acquireRequest,
  cleanupsAfterEach,
  expectReplayOf,
  leaseOf,
  quiet,
  rejection,
  settlesWithin,
} from '../support/store-assertions';

// What the SQL store does the same way on every database it supports, checked
// once per database. What only one database has (NOTIFY, prepared statements
// by name, MariaDB's round trips and packet limits) stays in
// postgres.store.spec.ts and mariadb.store.spec.ts.

const DIALECTS: SqlDialect[] = [postgresDialect, mariadbDialect];

describe.each(DIALECTS.filter((d) => d.available()))('TypeOrmIdempotencyStore on $name', (db) => {
  let admin: DataSource;
  const defer = cleanupsAfterEach();

  beforeAll(async () => {
    admin = await db.openDataSource();
  });
  afterAll(async () => {
    await admin?.destroy();
  });

  /** A table place of this test's own, dropped after it. */
  function newPlace(): TablePlace {
    const place = db.newPlace(admin);
    defer(() => place.drop());
    return place;
  }

  async function newDataSource(options?: { url?: string; poolSize?: number }) {
    const dataSource = await db.openDataSource(options);
    defer(() => (dataSource.isInitialized ? dataSource.destroy() : Promise.resolve()));
    return dataSource;
  }

  function newStore(
    dataSource: DataSource,
    place: TablePlace,
    options: TypeOrmIdempotencyStoreOptions = {},
  ): TypeOrmIdempotencyStore {
    const store = new TypeOrmIdempotencyStore(dataSource, {
      logger: quiet,
      ...place.options,
      ...options,
    });
    defer(() => store.close());
    return store;
  }

  describe('schema', () => {
    it('refuses to start without the table, naming it and saying how to fix it', async () => {
      const place = newPlace();
      const error = await rejection(newStore(admin, place).init());
      expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
      expect(error.message).toBe(
        `table ${place.printed()} does not exist; run the nest-idempotency migrations (createIdempotencyMigrations()) or pass { ensureSchema: true } in development`,
      );

      const custom = await rejection(newStore(admin, place, { table: 'payment_keys' }).init());
      expect(custom.message).toContain(`table ${place.printed('payment_keys')} does not exist`);
    });

    it.each(db.wrongShapes)(
      'refuses a table whose %s, listing what is wrong',
      async (_label, alterations, problems) => {
        const place = newPlace();
        for (const sql of db.schemaSql(place)) await admin.query(sql);
        for (const sql of alterations(place.sql)) await admin.query(sql);

        const error = await rejection(newStore(admin, place).init());

        expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
        expect(error.message.startsWith(`table ${place.printed()} has the wrong shape: `)).toBe(
          true,
        );
        for (const problem of problems) expect(error.message).toMatch(problem);
        expect(error.message.split('; ')).toHaveLength(problems.length);
      },
    );

    it('creates the table with ensureSchema, even when several instances start together', async () => {
      const place = newPlace();
      const others = await Promise.all([newDataSource(), newDataSource(), newDataSource()]);
      const stores = [admin, ...others].map((ds) => newStore(ds, place, { ensureSchema: true }));

      await Promise.all(stores.map((s) => s.init()));

      expect(await db.tableExists(admin, place)).toBe(true);
      await newStore(admin, place).init(); // the shape check passes without ensureSchema
      const acquired = await stores[2].tryAcquire(acquireRequest('s', 'k', { ttlMs: 60_000 }));
      await stores[2].complete(leaseOf(acquired), encodeValue(1));
      expectReplayOf(await stores[1].tryAcquire(acquireRequest('s', 'k')), 1);
    });
  });

  describe('continuations', () => {
    it('refuses a table from before continuations, naming the migration; ensureSchema adds the columns', async () => {
      const place = newPlace();
      for (const sql of db.schemaSql(place)) await admin.query(sql);
      await admin.query(
        `ALTER TABLE ${place.sql} DROP COLUMN continuation, DROP COLUMN suspended_answer, DROP COLUMN suspended_state`,
      );

      const error = await rejection(newStore(admin, place).init());

      expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
      expect(error.message).toContain('column "continuation" is missing');
      expect(error.message).toContain('column "suspended_answer" is missing');
      expect(error.message).toContain('column "suspended_state" is missing');
      expect(error.message).toContain(
        '; it predates continuations: run the migration AddIdempotencyContinuations1764892800000 (createIdempotencyMigrations() includes it)',
      );
      await newStore(admin, place, { ensureSchema: true }).init();
      await newStore(admin, place).init(); // the shape check passes now
    });

    it('counts answer and state together against maxPayloadBytes; a resumption clears both and keeps the continuation', async () => {
      const place = newPlace();
      const store = newStore(admin, place, { ensureSchema: true, maxPayloadBytes: 1000 });
      const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'k', { ttlMs: 60_000 })));
      const suspension = {
        continuation: 'c-1',
        answer: Buffer.alloc(600, 1),
        state: Buffer.alloc(401, 2),
        holdMs: 10_000,
      };

      const tooLarge = await rejection(store.continuations.suspend(lease, suspension));
      expect(tooLarge).toBeInstanceOf(IdempotencyPayloadError);
      expect(tooLarge.message).toBe(
        "the suspension's answer and state are 1001 bytes stored; the store accepts at most 1000",
      );
      // Refused before anything was written: the lease still holds the record.
      expect(await store.extend(lease)).toBe(true);
      const state = Buffer.alloc(400, 2);
      await store.continuations.suspend(lease, { ...suspension, state });

      const resumed = await store.continuations.resume({
        scope: 's',
        locator: recordLocator('s', 'k'),
        continuation: 'c-1',
        leaseMs: 10_000,
        ttlMs: 60_000,
      });
      expect(resumed.kind).toBe('admitted');
      expect(state.equals((resumed as { state: Buffer }).state)).toBe(true);
      const [row] = (await admin.query(
        `SELECT continuation, suspended_answer, suspended_state FROM ${place.sql}`,
      )) as Array<Record<string, unknown>>;
      expect(row).toEqual({ continuation: 'c-1', suspended_answer: null, suspended_state: null });
    });
  });

  describe('a lease the store did not hand out', () => {
    it('refuses one whose id is not a UUID as lost, on every fenced call, and leaves the record to its holder', async () => {
      const place = newPlace();
      const store = newStore(admin, place, { ensureSchema: true });
      await store.init();
      const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'k', { ttlMs: 60_000 })));
      const forged = { ...lease, leaseId: 'not-a-uuid' };
      const lost = IdempotencyLeaseLostError;
      await expect(store.complete(forged, encodeValue(2))).rejects.toBeInstanceOf(lost);
      await expect(store.release(forged)).rejects.toBeInstanceOf(lost);
      await expect(store.strictMode!.markAmbiguous(forged, 'action-failed')).rejects.toBeInstanceOf(
        lost,
      );
      await expect(store.steps!.begin(forged, 'charge')).rejects.toBeInstanceOf(lost);
      await expect(store.steps!.record(forged, 'charge', encodeValue(1))).rejects.toBeInstanceOf(
        lost,
      );
      await expect(
        store.continuations!.suspend(forged, {
          continuation: 'c',
          answer: encodeValue(1),
          state: encodeValue(null),
          holdMs: 10_000,
        }),
      ).rejects.toBeInstanceOf(lost);
      expect(await store.extend(forged)).toBe(false);
      // The holder's own lease still completes it.
      await store.complete(lease, encodeValue(1));
      expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 1);
    });
  });

  describe('when the database cannot be reached', () => {
    it('throws IdempotencyStoreUnavailableError at once when the port is closed, and recovers when it is back', async () => {
      const place = newPlace();
      await newStore(admin, place, { ensureSchema: true }).init();
      const target = db.target();
      const proxy = new TcpProxy(target.host, target.port);
      const port = await proxy.start();
      const dataSource = await newDataSource({ url: db.urlThroughPort(port), poolSize: 4 });
      defer(() => proxy.cut());
      // A long operation timeout: a refusal must surface as itself, not as a timeout.
      const store = newStore(dataSource, place, { operationTimeoutMs: 60_000 });
      await store.init();
      const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'held', { ttlMs: 60_000 })));
      // Open the wake-up connection too (PostgreSQL's LISTEN), so it is cut as well.
      await expect(
        store.tryAcquire(acquireRequest('s', 'held', { waitTimeoutMs: 50 })),
      ).resolves.toMatchObject({ kind: 'in-flight' });

      await proxy.cut(); // existing connections dropped; nothing listens on the port now

      const id = { scope: 's', key: 'held' };
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['tryAcquire', () => store.tryAcquire(acquireRequest('s', 'other'))],
        [
          'tryAcquire (waiting)',
          () => store.tryAcquire(acquireRequest('s', 'held', { waitTimeoutMs: 5000 })),
        ],
        ['complete', () => store.complete(lease, encodeValue('v'))],
        ['release', () => store.release(lease)],
        ['extend', () => store.extend(lease)],
        ['find', () => store.find(id)],
        ['list', () => store.list()],
        ['purgeExpired', () => store.purgeExpired()],
        ['init of a new store', () => newStore(dataSource, place).init()],
      ];
      for (const [name, call] of calls) {
        const error = await settlesWithin(rejection(call()), 10_000, name);
        expect([name, error]).toEqual([name, expect.any(IdempotencyStoreUnavailableError)]);
        expect(error.message).toMatch(new RegExp(`^${db.name} is unavailable during `));
        expect((error as IdempotencyStoreUnavailableError).retryAfterMs).toBeGreaterThan(0);
      }

      await proxy.restore();
      await expect(store.extend(lease)).resolves.toBe(true);
      await store.complete(lease, encodeValue('after the outage'));
      expectReplayOf(await store.tryAcquire(acquireRequest('s', 'held')), 'after the outage');
    });

    it('throws IdempotencyStoreUnavailableError after operationTimeoutMs when the database goes silent', async () => {
      const place = newPlace();
      await newStore(admin, place, { ensureSchema: true }).init();
      const partition = new SilentForwarder(db.target());
      await partition.start();
      const dataSource = await newDataSource({
        url: db.urlThroughPort(partition.port),
        poolSize: 2,
      });
      defer(() => partition.cut()); // runs before the DataSource is destroyed
      const store = newStore(dataSource, place, { operationTimeoutMs: 300 });
      await store.init();
      const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'k')));

      partition.goSilent();

      for (const [name, call] of [
        ['tryAcquire', () => store.tryAcquire(acquireRequest('s', 'other'))],
        ['complete', () => store.complete(lease, encodeValue('v'))],
        ['find', () => store.find({ scope: 's', key: 'k' })],
        [
          'init of a new store',
          () => newStore(dataSource, place, { operationTimeoutMs: 300 }).init(),
        ],
      ] as Array<[string, () => Promise<unknown>]>) {
        const error = await settlesWithin(rejection(call()), 5000, name);
        expect([name, error]).toEqual([name, expect.any(IdempotencyStoreUnavailableError)]);
        expect(error.message).toMatch(new RegExp(`^${db.name} did not answer .+ within 300 ms$`));
      }
    });
  });

  describe('several instances on one table', () => {
    it('purges concurrently from several stores without touching a live record; the counts add up', async () => {
      const place = newPlace();
      await newStore(admin, place, { ensureSchema: true }).init();
      const seed = (
        prefix: string,
        n: number,
        state: 'COMPLETE' | 'IN_PROGRESS',
        expiresInS: number,
        leaseEndsInS: number,
      ) => db.seed(admin, place, { prefix, n, state, expiresInS, leaseEndsInS });
      // Purgeable: past their TTL (and, if IN_PROGRESS, past their lease too).
      await seed('expired-complete-', 2600, 'COMPLETE', -60, 0);
      await seed('abandoned-', 300, 'IN_PROGRESS', -60, -60);
      // Live: within their TTL, or still under a lease.
      await seed('live-complete-', 200, 'COMPLETE', 3600, 0);
      await seed('running-past-ttl-', 100, 'IN_PROGRESS', -60, 3600);
      await seed('lease-out-ttl-in-', 100, 'IN_PROGRESS', 3600, -60);
      const stores = await Promise.all(
        Array.from({ length: 4 }, async () =>
          newStore(await newDataSource({ poolSize: 2 }), place),
        ),
      );
      await Promise.all(stores.map((s) => s.init()));

      // Live traffic on the same table while four instances purge, twice each.
      const traffic = Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          const store = stores[i % stores.length];
          const lease = leaseOf(
            await store.tryAcquire(acquireRequest('purge', `traffic-${i}`, { ttlMs: 60_000 })),
          );
          await store.complete(lease, encodeValue(i));
        }),
      );
      // What a purging caller does: batches (1000 by default) until one comes back short.
      const purgeAll = async (store: TypeOrmIdempotencyStore) => {
        const batches: number[] = [];
        do batches.push(await store.purgeExpired());
        while (batches[batches.length - 1] === 1000);
        return batches;
      };
      const batches = await Promise.all([...stores, ...stores].map(purgeAll));
      await traffic;

      const counts = batches.flat();
      expect(Math.max(...counts)).toBeLessThanOrEqual(1000); // one batch never exceeds its limit
      expect(counts.reduce((a, b) => a + b, 0)).toBe(2900);
      expect(await db.countsByPrefix(admin, place)).toEqual([
        ['lease-out-ttl-in-', 100],
        ['live-complete-', 200],
        ['running-past-ttl-', 100],
        ['traffic-', 40],
      ]);
      await expect(stores[0].countExpired()).resolves.toBe(0);
      await expect(stores[0].purgeExpired()).resolves.toBe(0);
    });

    it.each([
      ['wait for the winner and replay its result', 15_000],
      ['do not wait and are told it is in flight', 0],
    ])(
      'gives exactly one of 50 acquirers split over two instances the key; the others %s',
      async (_label, waitTimeoutMs) => {
        const place = newPlace();
        const [a, b] = await Promise.all([newDataSource(), newDataSource()]);
        const stores = [
          newStore(a, place, { ensureSchema: true, pollIntervalMs: 60_000 }),
          newStore(b, place, { ensureSchema: true, pollIntervalMs: 60_000 }),
        ];
        await Promise.all(stores.map((s) => s.init()));

        // Settling well before the 15 s wait runs out proves the other instance's wake-up reached them.
        const results: AcquireResult[] = await settlesWithin(
          Promise.all(
            Array.from({ length: 50 }, async (_, i) => {
              const store = stores[i % 2];
              const result = await store.tryAcquire(
                acquireRequest('race', 'hot', { waitTimeoutMs }),
              );
              // Without waiting, the winner holds on, so nobody can see a result yet.
              if (result.kind === 'acquired' && waitTimeoutMs > 0) {
                await new Promise((resolve) => setImmediate(resolve));
                await store.complete(
                  result.lease,
                  encodeValue({ winner: result.lease.leaseId, instance: i % 2 }),
                );
              }
              return result;
            }),
          ),
          10_000,
          'the race and the wake-up of every waiter',
        );

        const winners = results.filter((r) => r.kind === 'acquired');
        expect(winners).toHaveLength(1);
        const winner = leaseOf(winners[0]).leaseId;
        const others = results.filter((r) => r.kind !== 'acquired');
        if (waitTimeoutMs > 0) {
          expect(others).toHaveLength(49);
          const instance = results.indexOf(winners[0]) % 2;
          for (const r of others) expectReplayOf(r, { winner, instance });
        } else {
          expect(others.map((r) => r.kind)).toEqual(Array(49).fill('in-flight'));
        }
      },
    );
  });
});
