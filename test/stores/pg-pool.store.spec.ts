import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import {
  encodeValue,
  IdempotencyConfigError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import {
  migratePgIdempotencyTable,
  pgIdempotencyMigrationSql,
  PgIdempotencyStore,
} from 'nest-idempotency/pg';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { channelFor, recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { openPool } from './pg-pool-harness';
import { acquireRequest, leaseOf, quiet } from '../support/store-assertions';

/**
 * What the `pg` pool store adds to the contract (pg-pool.contract.spec.ts):
 * its LISTEN/NOTIFY wake-ups across pools, its migrations (plain SQL and a
 * function), the application's pool left open, the records it shares with
 * the TypeORM front, and completion in a transaction on a pool client.
 */

describe('PgIdempotencyStore (a pg Pool of the application)', () => {
  const pools: ReturnType<typeof openPool>[] = [];
  const schemas: string[] = [];
  const pool = (max = 10) => {
    const made = openPool(max);
    pools.push(made);
    return made;
  };
  const schema = (prefix: string) => {
    const made = scratchSchema(prefix);
    schemas.push(made);
    return made;
  };
  const acquire = (store: PgIdempotencyStore, scope: string, key: string, waitTimeoutMs = 0) =>
    store.tryAcquire(acquireRequest(scope, key, { ttlMs: 60_000, waitTimeoutMs }));

  afterAll(async () => {
    const admin = pool();
    for (const name of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
    await Promise.all(pools.filter((p) => !p.ending).map((p) => p.end()));
  });

  it('refuses what is not a pg Pool, and unknown options, with IdempotencyConfigError', () => {
    const client = new Client({ connectionString: testDatabaseUrl() });
    expect(() => new PgIdempotencyStore(client as never)).toThrow(IdempotencyConfigError);
    expect(() => new PgIdempotencyStore(client as never)).toThrow(/needs a pg Pool/);
    expect(() => new PgIdempotencyStore(undefined as never)).toThrow(/got undefined/);
    expect(() => new PgIdempotencyStore(pool(), { crossInstancePollMs: 5 } as never)).toThrow(
      IdempotencyConfigError,
    );
  });

  it('wakes a duplicate waiting on another pool through LISTEN/NOTIFY, long before its poll', async () => {
    const name = schema('pgpool_wake');
    const first = pool();
    const a = new PgIdempotencyStore(first, { schema: name, ensureSchema: true, logger: quiet });
    // B would look again only after a minute: only a notification wakes it in time.
    const b = new PgIdempotencyStore(pool(), {
      schema: name,
      pollIntervalMs: 60_000,
      logger: quiet,
    });
    await a.init();
    await b.init();
    const spy = new Client({ connectionString: testDatabaseUrl() });
    await spy.connect();
    const heard: string[] = [];
    const channel = channelFor({ schema: name, table: 'idempotency_records' });
    spy.on('notification', (message) => {
      if (message.channel === channel) heard.push(message.payload ?? '');
    });
    await spy.query(`LISTEN "${channel}"`);
    try {
      const scope = 'Orders.place';
      const lease = leaseOf(await acquire(a, scope, 'wake-1'));
      const waiting = Array.from({ length: 5 }, () => acquire(b, scope, 'wake-1', 30_000));
      // Every waiter marked the record watched before the holder completes.
      await vi.waitFor(
        async () => {
          const { rows } = await first.query<{ watched: boolean }>(
            `SELECT watched FROM "${name}".idempotency_records WHERE scope = $1`,
            [scope],
          );
          expect(rows[0]?.watched).toBe(true);
        },
        { timeout: 10_000, interval: 20 },
      );
      const started = Date.now();
      await a.complete(lease, encodeValue({ id: 1 }));
      const results = await Promise.all(waiting);
      expect(Date.now() - started).toBeLessThan(10_000);
      for (const result of results) expect(result.kind).toBe('duplicate');
      // One notification, naming the record by its hashed id, never by its key.
      await vi.waitFor(() => expect(heard).toHaveLength(1), { timeout: 5000, interval: 10 });
      expect(heard[0]).toBe(recordIdOf(scope, 'wake-1').toString('hex'));
    } finally {
      await spy.end();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('works on a table the plain SQL migration made, and runs that SQL twice without change', async () => {
    const name = schema('pgpool_sql');
    const db = pool();
    const sql = pgIdempotencyMigrationSql({ schema: name });
    expect(sql).toContain(`"${name}"."idempotency_records"`);
    await db.query(sql);
    await db.query(sql);
    const store = new PgIdempotencyStore(db, { schema: name, logger: quiet });
    try {
      await store.init();
      const lease = leaseOf(await acquire(store, 'Sql.migrated', 'k'));
      await store.complete(lease, encodeValue('done'));
      expect((await store.find({ scope: 'Sql.migrated', key: 'k' }))?.state).toBe('COMPLETE');
    } finally {
      await store.close();
    }
  });

  it('works on a table the migration function made, run by several instances at once', async () => {
    const name = schema('pgpool_fn');
    const db = pool();
    const client = await db.connect();
    try {
      // Pools, a client: whatever runs SQL; all at once, under the advisory lock.
      await Promise.all([
        migratePgIdempotencyTable(db, { schema: name, table: 'records' }),
        migratePgIdempotencyTable(db, { schema: name, table: 'records' }),
        migratePgIdempotencyTable(client, { schema: name, table: 'records' }),
      ]);
    } finally {
      client.release();
    }
    const store = new PgIdempotencyStore(db, { schema: name, table: 'records', logger: quiet });
    try {
      await store.init();
      expect((await acquire(store, 'Fn.migrated', 'k')).kind).toBe('acquired');
    } finally {
      await store.close();
    }
  });

  it('refuses to start on a missing table, naming it, without ensureSchema', async () => {
    const store = new PgIdempotencyStore(pool(), { schema: schema('pgpool_none'), logger: quiet });
    await expect(store.init()).rejects.toThrow(
      /idempotency_records does not exist; run the nest-idempotency migrations \(migratePgIdempotencyTable\(\)/,
    );
  });

  it('never ends the application pool: close() leaves it serving, and the store starts again', async () => {
    const name = schema('pgpool_owned');
    const db = pool(2);
    const store = new PgIdempotencyStore(db, { schema: name, ensureSchema: true, logger: quiet });
    await store.init();
    leaseOf(await acquire(store, 'Owned.pool', 'k1'));
    await store.close();
    expect(db.ending).toBe(false);
    expect((await db.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    // Nothing checked out by the store: both connections can be taken at once.
    const [c1, c2] = await Promise.all([db.connect(), db.connect()]);
    c1.release();
    c2.release();
    expect((await acquire(store, 'Owned.pool', 'k2')).kind).toBe('acquired');
    await store.close();
    expect(db.ending).toBe(false);
  });

  it('answers IdempotencyStoreUnavailableError once the application ended its pool', async () => {
    const name = schema('pgpool_ended');
    const db = pool();
    const store = new PgIdempotencyStore(db, { schema: name, ensureSchema: true, logger: quiet });
    await store.init();
    await db.end();
    await expect(acquire(store, 'Ended.pool', 'k')).rejects.toThrow(
      IdempotencyStoreUnavailableError,
    );
    await store.close();
  });

  it('shares its records with TypeOrmIdempotencyStore on the same table', async () => {
    const name = schema('pgpool_shared');
    const store = new PgIdempotencyStore(pool(), {
      schema: name,
      ensureSchema: true,
      logger: quiet,
    });
    const dataSource = await openDataSource();
    const front = new TypeOrmIdempotencyStore(dataSource, { schema: name, logger: quiet });
    try {
      await store.complete(
        leaseOf(await acquire(store, 'Shared.table', 'k')),
        encodeValue({ ok: true }),
      );
      const replay = await front.tryAcquire({
        scope: 'Shared.table',
        key: 'k',
        leaseMs: 30_000,
        ttlMs: 60_000,
        waitTimeoutMs: 0,
        fingerprint: null,
      });
      expect(replay.kind).toBe('duplicate');
      if (replay.kind === 'duplicate') expect(replay.payload).toEqual(encodeValue({ ok: true }));
    } finally {
      await Promise.all([store.close(), front.close()]);
      await dataSource.destroy();
    }
  });

  describe("completion in the application's transaction (a pool client)", () => {
    const name = scratchSchema('pgpool_tx');
    let db: ReturnType<typeof openPool>;
    let store: PgIdempotencyStore;

    beforeAll(async () => {
      schemas.push(name);
      db = pool();
      store = new PgIdempotencyStore(db, { schema: name, ensureSchema: true, logger: quiet });
      await store.init();
      await db.query(`CREATE TABLE "${name}".orders (id text PRIMARY KEY)`);
    });
    afterAll(() => store.close());

    const orders = async () =>
      (await db.query<{ id: string }>(`SELECT id FROM "${name}".orders ORDER BY id`)).rows.map(
        (r) => r.id,
      );

    it('commits the handler row and the completion together; neither is seen before the commit', async () => {
      const key = randomUUID();
      const lease = leaseOf(await acquire(store, 'Tx.commit', key));
      await store.transactional.transaction(async (tx) => {
        await tx.query(`INSERT INTO "${name}".orders (id) VALUES ($1)`, [key]);
        expect(await store.transactional.completeIn(tx, lease, encodeValue('paid'))).toBe('stored');
        // Other sessions see neither yet.
        expect(await orders()).not.toContain(key);
        expect((await store.find({ scope: 'Tx.commit', key }))?.state).toBe('IN_PROGRESS');
      });
      store.transactional.afterCommit?.(lease);
      expect(await orders()).toContain(key);
      expect((await store.find({ scope: 'Tx.commit', key }))?.state).toBe('COMPLETE');
    });

    it('rolls both back when the work throws after the completion', async () => {
      const key = randomUUID();
      const lease = leaseOf(await acquire(store, 'Tx.rollback', key));
      await expect(
        store.transactional.transaction(async (tx) => {
          await tx.query(`INSERT INTO "${name}".orders (id) VALUES ($1)`, [key]);
          await store.transactional.completeIn(tx, lease, encodeValue('paid'));
          throw new Error('the handler failed after its writes');
        }),
      ).rejects.toThrow('the handler failed');
      expect(await orders()).not.toContain(key);
      expect((await store.find({ scope: 'Tx.rollback', key }))?.state).toBe('IN_PROGRESS');
      // The lease still holds: the engine can release or retry.
      await store.release(lease);
    });

    it('answers lease-lost for a lease no longer held, writing nothing', async () => {
      const key = randomUUID();
      const lease = leaseOf(await acquire(store, 'Tx.lost', key));
      await store.release(lease);
      const outcome = await store.transactional.transaction((tx) =>
        store.transactional.completeIn(tx, lease, encodeValue('late')),
      );
      expect(outcome).toBe('lease-lost');
      expect(await store.find({ scope: 'Tx.lost', key })).toBeNull();
    });

    it('refuses a tx that is not a pg client', async () => {
      const lease = leaseOf(await acquire(store, 'Tx.refused', randomUUID()));
      expect(() => store.transactional.completeIn({} as never, lease, encodeValue('x'))).toThrow(
        IdempotencyConfigError,
      );
      await store.release(lease);
    });
  });
});
