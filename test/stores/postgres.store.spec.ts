import { randomBytes } from 'node:crypto';
import { Client, Pool, QueryConfig } from 'pg';
import { DataSource, DataSourceOptions, Logger } from 'typeorm';
import {
  encodeValue,
  IdempotencyEngine,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import {
  createIdempotencyMigration,
  createIdempotencyMigrations,
  schemaSql,
  TypeOrmIdempotencyStore,
  TypeOrmIdempotencyStoreOptions,
} from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import {
  acquireRequest,
  cleanupsAfterEach,
  expectReplayOf,
  leaseOf,
  quiet,
  rejection,
  settlesWithin,
} from '../support/store-assertions';

/** Counts what TypeORM hands the driver: one `logQuery` per statement sent. */
class CountingLogger implements Logger {
  queries: string[] = [];
  logQuery(query: string): void {
    this.queries.push(query);
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
  count(fragment: string): number {
    return this.queries.filter((q) => q.includes(fragment)).length;
  }
}

function poolOf(dataSource: DataSource): Pool {
  return (dataSource.driver as unknown as { master: Pool }).master;
}

/** Polls a condition that no event announces (a waiter parked, a pool gone idle). */
async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('TypeOrmIdempotencyStore on PostgreSQL: what only PostgreSQL has', () => {
  let admin: DataSource;
  const defer = cleanupsAfterEach();

  beforeAll(async () => {
    admin = await openDataSource();
  });
  afterAll(async () => {
    await admin?.destroy();
  });

  /** A scratch schema, dropped after the test. */
  function newSchema(prefix = 'store'): string {
    const schema = scratchSchema(prefix);
    defer(() => dropSchema(admin, schema));
    return schema;
  }

  async function newDataSource(options: Partial<DataSourceOptions> = {}): Promise<DataSource> {
    const dataSource = await openDataSource(options);
    defer(() => (dataSource.isInitialized ? dataSource.destroy() : Promise.resolve()));
    return dataSource;
  }

  function newStore(
    dataSource: DataSource,
    options: TypeOrmIdempotencyStoreOptions,
  ): TypeOrmIdempotencyStore {
    const store = new TypeOrmIdempotencyStore(dataSource, { logger: quiet, ...options });
    defer(() => store.close());
    return store;
  }

  async function tableExists(schema: string, table = 'idempotency_records'): Promise<boolean> {
    const rows = await admin.query(`SELECT to_regclass($1) IS NOT NULL AS present`, [
      `"${schema}"."${table}"`,
    ]);
    return rows[0].present;
  }

  async function roundTrip(store: TypeOrmIdempotencyStore): Promise<void> {
    const acquired = await store.tryAcquire(acquireRequest('s', 'k', { ttlMs: 60_000 }));
    expect(acquired.kind).toBe('acquired');
    await store.complete(leaseOf(acquired), encodeValue(1));
    expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 1);
  }

  describe('schema', () => {
    it('accepts the table createIdempotencyMigrations creates through TypeORM migrations; the upgrades refuse to be undone', async () => {
      const schema = newSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const migrations = await newDataSource({
        schema, // TypeORM keeps its own migrations table here too
        migrationsTableName: 'typeorm_migrations',
        migrations: createIdempotencyMigrations({ schema }),
      });

      const ran = await migrations.runMigrations();

      expect(ran.map((m) => m.name)).toEqual([
        'CreateIdempotencyRecords1764460800000',
        'UpgradeIdempotencyRecords1764547200000',
        'AddIdempotencyAmbiguousState1764633600000',
        'AddIdempotencySteps1764806400000',
        'AddIdempotencyContinuations1764892800000',
        'AddIdempotencyReceipts1764979200000',
      ]);
      expect(await tableExists(schema)).toBe(true);
      const store = newStore(admin, { schema });
      await store.init();
      await roundTrip(store);
      await expect(migrations.showMigrations()).resolves.toBe(false);

      // Undoing continuations would lose suspended records' answers and states: refused.
      await expect(migrations.undoLastMigration()).rejects.toThrow(
        'AddIdempotencyReceipts1764979200000 cannot be reverted: the receipts would be lost',
      );
      // Undoing continuations would lose suspended records' answers and states: refused.
      await expect(
        new (createIdempotencyMigrations({ schema })[4])().down(undefined as never),
      ).rejects.toThrow(
        'AddIdempotencyContinuations1764892800000 cannot be reverted: suspended records would lose their answer and state, and their resumptions could not be admitted; restore a backup instead',
      );
      // Undoing recorded steps would let a takeover run recorded steps again: refused.
      await expect(
        new (createIdempotencyMigrations({ schema })[3])().down(undefined as never),
      ).rejects.toThrow(
        'AddIdempotencySteps1764806400000 cannot be reverted: recorded steps would be lost and a takeover could run them again; restore a backup instead',
      );
      // Undoing strict mode would lose AMBIGUOUS records (and let their keys run again): refused.
      await expect(
        new (createIdempotencyMigrations({ schema })[2])().down(undefined as never),
      ).rejects.toThrow(
        'AddIdempotencyAmbiguousState1764633600000 cannot be reverted: AMBIGUOUS records would be lost and their keys could run again; restore a backup instead',
      );
      // As is undoing the upgrade, which would lose completed records (bytes jsonb cannot hold).
      const upgrade = new (createIdempotencyMigrations({ schema })[1])();
      const runner = migrations.createQueryRunner();
      defer(() => runner.release());
      await expect(upgrade.down(runner)).rejects.toThrow(
        'UpgradeIdempotencyRecords1764547200000 cannot be reverted: completed records would be lost; restore a backup instead',
      );

      expect(await tableExists(schema)).toBe(true);
      await expect(migrations.showMigrations()).resolves.toBe(false);
      expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 1);
    });

    it('refuses a table from before recorded steps, naming the migration, which adds their column', async () => {
      const schema = newSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const all = createIdempotencyMigrations({ schema });
      const older = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: all.slice(0, 3),
      });
      await older.runMigrations();
      const error = await rejection(newStore(admin, { schema }).init());
      expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
      expect(error.message).toContain('column "steps" is missing');
      expect(error.message).toContain(
        'it predates recorded steps: run the migration AddIdempotencySteps1764806400000 (createIdempotencyMigrations() includes it)',
      );
      const current = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: all,
      });
      const ran = await current.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([
        'AddIdempotencySteps1764806400000',
        'AddIdempotencyContinuations1764892800000',
        'AddIdempotencyReceipts1764979200000',
      ]);
      const store = newStore(admin, { schema });
      await store.init();
      await roundTrip(store);
    });

    it('refuses a table from before continuations, naming the migration, which adds their columns', async () => {
      const schema = newSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const all = createIdempotencyMigrations({ schema });
      const older = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: all.slice(0, 4),
      });
      await older.runMigrations();
      const error = await rejection(newStore(admin, { schema }).init());
      expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
      expect(error.message).toContain('column "continuation" is missing');
      expect(error.message).toContain('column "suspended_state" is missing');
      expect(error.message).toContain(
        'it predates continuations: run the migration AddIdempotencyContinuations1764892800000 (createIdempotencyMigrations() includes it)',
      );
      const current = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: all,
      });
      const ran = await current.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([
        'AddIdempotencyContinuations1764892800000',
        'AddIdempotencyReceipts1764979200000',
      ]);
      const store = newStore(admin, { schema });
      await store.init();
      await roundTrip(store);
    });

    it('still loads the deprecated createIdempotencyMigration: the 0.1 table, which the store refuses until upgraded, and undo drops it', async () => {
      const schema = newSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const migrations = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: [createIdempotencyMigration({ schema })],
      });

      const ran = await migrations.runMigrations();

      expect(ran.map((m) => m.name)).toEqual(['CreateIdempotencyRecords1764460800000']);
      expect(await tableExists(schema)).toBe(true);
      const error = await rejection(newStore(admin, { schema }).init());
      expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
      expect(error.message).toContain(
        'it was made by nest-idempotency 0.1: run the upgrade migration (createIdempotencyMigrations() includes it)',
      );
      await expect(migrations.showMigrations()).resolves.toBe(false);

      await migrations.undoLastMigration();

      expect(await tableExists(schema)).toBe(false);
      await expect(migrations.showMigrations()).resolves.toBe(true);
      await expect(newStore(admin, { schema }).init()).rejects.toThrow(
        `table ${schema}.idempotency_records does not exist`,
      );
    });

    it('names the table it creates through the migration', async () => {
      const schema = newSchema();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const migrations = await newDataSource({
        schema,
        migrationsTableName: 'typeorm_migrations',
        migrations: createIdempotencyMigrations({ schema, table: 'keys' }),
      });
      await migrations.runMigrations();
      expect(await tableExists(schema, 'keys')).toBe(true);
      await newStore(admin, { schema, table: 'keys' }).init();
    });

    it.each([['cockroachdb', { type: 'cockroachdb', url: 'postgres://root@127.0.0.1:26257/app' }]])(
      'refuses a %s DataSource in its constructor',
      (type, options) => {
        const dataSource = new DataSource(options as DataSourceOptions);
        expect(() => new TypeOrmIdempotencyStore(dataSource)).toThrow(IdempotencyStoreSchemaError);
        expect(() => new TypeOrmIdempotencyStore(dataSource)).toThrow(
          `TypeOrmIdempotencyStore supports PostgreSQL; the DataSource is of type "${type}"`,
        );
      },
    );
  });

  describe("time is PostgreSQL's", () => {
    it.each([
      ['an hour ahead', 3_600_000],
      ['an hour behind', -3_600_000],
    ])(
      'with the application clock %s, a live lease is not stolen and a fresh result is replayed',
      async (_label, skewMs) => {
        const schema = newSchema();
        const store = newStore(admin, { schema, ensureSchema: true });
        await store.init();
        const live = await store.tryAcquire(acquireRequest('s', 'live', { leaseMs: 10_000 }));
        expect(live.kind).toBe('acquired');
        const done = await store.tryAcquire(acquireRequest('s', 'done', { ttlMs: 60_000 }));
        await store.complete(leaseOf(done), encodeValue('result'));
        const short = await store.tryAcquire(acquireRequest('s', 'short', { leaseMs: 100 }));
        expect(short.kind).toBe('acquired');
        await new Promise((resolve) => setTimeout(resolve, 200)); // let the 100 ms lease run out

        const realNow = Date.now.bind(Date);
        vi.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);

        const again = await store.tryAcquire(acquireRequest('s', 'live'));
        expect(again.kind).toBe('in-flight');
        expect((again as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(5000);
        expect((again as { retryAfterMs: number }).retryAfterMs).toBeLessThanOrEqual(10_000);
        await expect(store.find({ scope: 's', key: 'live' })).resolves.toMatchObject({
          leaseExpired: false,
        });
        expectReplayOf(await store.tryAcquire(acquireRequest('s', 'done')), 'result');
        // ...and an expired lease is expired whatever the application thinks.
        await expect(store.tryAcquire(acquireRequest('s', 'short'))).resolves.toMatchObject({
          kind: 'acquired',
        });
        expect(Date.now).toHaveBeenCalled();
      },
    );
  });

  describe('round trips, counted from the driver', () => {
    it('costs 2 statements for a first execution (insert, complete) and 1 for a replay (peek), once the scope shows which comes first; a wrong guess costs one more', async () => {
      const schema = newSchema();
      const logger = new CountingLogger();
      const dataSource = await newDataSource({ logger });
      const store = newStore(dataSource, { schema, ensureSchema: true });
      await store.init();
      const engine = new IdempotencyEngine(store, { logger: quiet });
      const run = (key: string) =>
        engine.execute(
          { scope: 'orders', key, lease: '30s', waitTimeout: '10s', ttl: '1h' },
          async () => ({ id: key }),
        );
      await run('warm-up'); // opens the LISTEN connection outside the pool (not a statement per call)
      // Every statement any pg client in this process sends; only this test's DataSource is busy.
      const sent = vi.spyOn(Client.prototype, 'query');
      const names = () =>
        sent.mock.calls.map(([config]) =>
          ((config as unknown as QueryConfig).name ?? '').replace(/_[0-9a-f]{16}$/, ''),
        );
      const measure = async (key: string, kind: string) => {
        sent.mockClear();
        logger.queries = [];
        await expect(run(key)).resolves.toMatchObject({ kind });
        // ...and the DataSource's logger sees each one.
        expect(logger.queries).toHaveLength(sent.mock.calls.length);
        return names();
      };

      // A scope of fresh keys: the insert first.
      expect(await measure('first', 'executed')).toEqual([
        'nest_idem_insert',
        'nest_idem_complete',
      ]);
      expect(logger.queries[0]).toMatch(/^\s*INSERT INTO .* ON CONFLICT \(id\) DO NOTHING$/s);
      expect(logger.queries[1]).toMatch(/^\s*UPDATE .* RETURNING watched$/s);
      // A replay there: the insert finds the record, the peek reads it.
      expect(await measure('first', 'replayed')).toEqual(['nest_idem_insert', 'nest_idem_peek']);

      // Once most of the scope's acquisitions find a record, the peek comes first.
      for (let i = 0; i < 8; i++) await run('first');
      expect(await measure('first', 'replayed')).toEqual(['nest_idem_peek']);
      expect(logger.queries[0]).toMatch(/^\s*SELECT .* WHERE id = \$1$/s);
      // A fresh key there: the peek finds nothing, then the insert.
      expect(await measure('second', 'executed')).toEqual([
        'nest_idem_peek',
        'nest_idem_insert',
        'nest_idem_complete',
      ]);
      // Nobody waited on either record: no NOTIFY.
      expect(logger.queries.some((q) => q.includes('pg_notify'))).toBe(false);
    });

    it('reports a takeover of an expired lease as stolen, and nothing else', async () => {
      const schema = newSchema();
      const store = newStore(admin, { schema, ensureSchema: true });
      const fresh = await store.tryAcquire(acquireRequest('s', 'k', { leaseMs: 100 }));
      expect(fresh).toEqual({ kind: 'acquired', lease: expect.anything() });
      await new Promise((resolve) => setTimeout(resolve, 200));
      const stolen = await store.tryAcquire(acquireRequest('s', 'k'));
      expect(stolen).toMatchObject({ kind: 'acquired', stolen: true });
      await expect(store.complete(leaseOf(fresh), encodeValue('late'))).rejects.toThrow(
        'complete refused',
      );
      await store.complete(leaseOf(stolen), encodeValue('v'));
      expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 'v');
    });
  });

  describe('a DataSource logger that throws', () => {
    it('still lets a failed statement reject with its own error', async () => {
      class ThrowingLogger extends CountingLogger {
        override logQueryError(): void {
          throw new Error('the logger broke');
        }
      }
      const schema = newSchema('throwing-logger');
      const dataSource = await newDataSource({ logger: new ThrowingLogger(), logging: true });
      const store = newStore(dataSource, { schema, ensureSchema: true });
      await store.init();
      await admin.query(`DROP TABLE "${schema}".idempotency_records`);
      await expect(store.tryAcquire(acquireRequest('s', 'k'))).rejects.toThrow(/does not exist/);
    });
  });

  describe('prepared statements', () => {
    /** The prepared statements of the DataSource's only connection (pool of 1). */
    async function preparedOn(
      dataSource: DataSource,
    ): Promise<Array<{ name: string; executions: number }>> {
      return dataSource.query(
        `SELECT name, (generic_plans + custom_plans)::int AS executions
         FROM pg_prepared_statements WHERE name LIKE 'nest_idem_%' ORDER BY name`,
      );
    }

    it('sends the acquisition statements, complete, release and extend by name, parsed once per connection and reused', async () => {
      const schema = newSchema();
      const dataSource = await newDataSource({ extra: { max: 1 } });
      const store = newStore(dataSource, { schema, ensureSchema: true });
      for (const key of ['a', 'b', 'c']) {
        const lease = leaseOf(await store.tryAcquire(acquireRequest('s', key, { ttlMs: 60_000 })));
        await expect(store.extend(lease)).resolves.toBe(true);
        await store.complete(lease, encodeValue(key));
        expectReplayOf(await store.tryAcquire(acquireRequest('s', key)), key);
      }
      await store.release(leaseOf(await store.tryAcquire(acquireRequest('s', 'd'))));
      await store.purgeExpired();
      await store.list();

      const prepared = await preparedOn(dataSource);
      // Only what was sent is prepared (nobody stole, waited or was woken here).
      expect(prepared.map((p) => p.name.replace(/_[0-9a-f]{16}$/, ''))).toEqual([
        'nest_idem_complete',
        'nest_idem_extend',
        'nest_idem_insert',
        'nest_idem_peek',
        'nest_idem_release',
      ]);
      const executions = Object.fromEntries(
        prepared.map((p) => [p.name.replace(/_[0-9a-f]{16}$/, ''), p.executions]),
      );
      // A scope of fresh keys tries the insert first: 4 fresh keys, and 3 replays
      // whose insert found the record and whose peek read it; and init()'s byte
      // probe: its own record inserted, completed, and replayed (insert, then peek).
      expect(executions).toEqual({
        nest_idem_insert: 7 + 2,
        nest_idem_peek: 3 + 1,
        nest_idem_complete: 3 + 1,
        nest_idem_extend: 3,
        nest_idem_release: 1,
      });
    });

    it('sends nothing by name with preparedStatements: false', async () => {
      const schema = newSchema();
      const dataSource = await newDataSource({ extra: { max: 1 } });
      const store = newStore(dataSource, { schema, ensureSchema: true, preparedStatements: false });
      await roundTrip(store);
      await expect(preparedOn(dataSource)).resolves.toEqual([]);
    });

    it('keeps two stores on different tables of one connection apart', async () => {
      const schema = newSchema();
      const dataSource = await newDataSource({ extra: { max: 1 } });
      const first = newStore(dataSource, { schema, ensureSchema: true });
      const second = newStore(dataSource, { schema, table: 'other_records', ensureSchema: true });
      await roundTrip(first);
      await roundTrip(second);
      const rows = await admin.query(
        `SELECT (SELECT count(*) FROM "${schema}".idempotency_records)::int AS first,
                (SELECT count(*) FROM "${schema}".other_records)::int AS second`,
      );
      expect(rows[0]).toEqual({ first: 1, second: 1 });
      // insert, complete and peek, for each table.
      await expect(preparedOn(dataSource)).resolves.toHaveLength(6);
    });

    it('keeps the connection and its statements through a statement error, and follows the table when it is recreated', async () => {
      const schema = newSchema();
      const dataSource = await newDataSource({ extra: { max: 1 } });
      const store = newStore(dataSource, { schema, ensureSchema: true });
      const backend = async () => (await dataSource.query('SELECT pg_backend_pid() AS pid'))[0].pid;
      await roundTrip(store);
      const pid = await backend();

      await admin.query(`DROP TABLE "${schema}".idempotency_records`);
      const error = await rejection(store.tryAcquire(acquireRequest('s', 'after-drop')));
      expect(error).not.toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(error.message).toMatch(/idempotency_records.*does not exist/);

      for (const sql of schemaSql({ schema, table: 'idempotency_records' })) await admin.query(sql);
      await expect(store.tryAcquire(acquireRequest('s', 'after-drop'))).resolves.toMatchObject({
        kind: 'acquired',
      });
      expect(await backend()).toBe(pid);
    });
  });

  describe('waiting', () => {
    it('parks 20 waiting duplicates without a pooled connection (pool of 2), LISTENing outside the pool', async () => {
      const schema = newSchema();
      const applicationName = `idem-waiters-${randomBytes(4).toString('hex')}`;
      const logger = new CountingLogger();
      const dataSource = await newDataSource({ logger, applicationName, extra: { max: 2 } });
      const pool = poolOf(dataSource);
      // Polling far beyond the test: only the NOTIFY can wake the waiters in time.
      const store = newStore(dataSource, { schema, ensureSchema: true, pollIntervalMs: 60_000 });
      await store.init();
      const holder = await store.tryAcquire(acquireRequest('s', 'hot', { ttlMs: 60_000 }));
      expect(holder.kind).toBe('acquired');
      logger.queries = [];
      let waits = 0;
      let allWaiting!: () => void;
      const twentyWaiting = new Promise<void>((resolve) => (allWaiting = resolve));
      const stopCounting = store.onWait((scope) => {
        if (scope === 's' && ++waits === 20) allWaiting();
      });
      defer(async () => stopCounting());

      const waitStarted = Date.now();
      const waiters = Array.from({ length: 20 }, () =>
        store.tryAcquire(acquireRequest('s', 'hot', { waitTimeoutMs: 10_000 })),
      );
      await settlesWithin(twentyWaiting, 5000, 'all 20 duplicates starting to wait');
      await until(
        () => pool.waitingCount === 0 && pool.idleCount === pool.totalCount,
        'the waiters have handed their connections back',
      );
      // Each waited once, after at least one look (a look that raced another waiter's mark looks again).
      expect(waits).toBe(20);
      expect(logger.count('AS lease_left_ms')).toBeGreaterThanOrEqual(20); // the peek
      expect(logger.count('SET watched = true')).toBeGreaterThanOrEqual(1); // the mark

      // Nothing is checked out or queued while 20 callers wait...
      expect(pool.totalCount).toBe(2);
      expect(pool.idleCount).toBe(2);
      expect(pool.waitingCount).toBe(0);
      // ...and the LISTEN connection is a third one, which a pool of 2 cannot hold.
      const backends: Array<{ query: string }> = await admin.query(
        `SELECT query FROM pg_stat_activity WHERE application_name = $1`,
        [applicationName],
      );
      expect(backends).toHaveLength(3);
      expect(backends.filter((b) => b.query.startsWith('LISTEN '))).toHaveLength(1);
      // Both pooled connections are free for other work.
      await Promise.all([dataSource.query('SELECT 1'), dataSource.query('SELECT 2')]);

      expect(waits).toBe(20); // nobody woke before the completion
      await store.complete(leaseOf(holder), encodeValue({ answer: 42 }));
      // A waiter whose wait runs out looks once more and would see the result
      // too: settling well before the 10 s wait ends is what proves the NOTIFY woke them.
      const results = await settlesWithin(
        Promise.all(waiters),
        waitStarted + 8000 - Date.now(),
        'waking the waiters by NOTIFY',
      );
      expect(results.map((r) => r.kind)).toEqual(Array(20).fill('duplicate'));
      for (const result of results) expectReplayOf(result, { answer: 42 });
    });
  });
});
