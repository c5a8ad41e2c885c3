import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { AcquireRequest, encodeValue, IdempotencyStoreSchemaError } from 'nest-idempotency';
import { createIdempotencyMigrations, TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { dropTable, mariadbAvailable, openMysqlDataSource, scratchTable } from '../support/mariadb';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * A table the first two migrations made (before strict mode) and that holds
 * records, brought up to date in place by the third: the store refuses the
 * old shape naming that migration, the migration (or `ensureSchema`) keeps
 * every record as it was, and strict mode then works on the same table, on
 * PostgreSQL and on MariaDB.
 */

const quiet = { warn: () => undefined, error: () => undefined };
const STRICT_MIGRATION = 'AddIdempotencyAmbiguousState1764633600000';
/** The columns the previous migrations made, in the order the rows are compared by. */
const OLD_COLUMNS = [
  'scope',
  'key',
  'state',
  'lease_id',
  'lease_expires_at',
  'expires_at',
  'fingerprint',
  'payload',
  'created_at',
  'completed_at',
];
const STRICT_COLUMNS = ['ambiguous_since', 'ambiguous_reason', 'resolved_by', 'resolved_at'];

interface Database {
  name: string;
  /** A DataSource whose migrations (and TypeORM's own table) are those given. */
  open(migrations: ReturnType<typeof createIdempotencyMigrations>): Promise<DataSource>;
  migrations(): ReturnType<typeof createIdempotencyMigrations>;
  store(dataSource: DataSource, ensureSchema?: boolean): TypeOrmIdempotencyStore;
  /** Rows as the old columns hold them (times as text), and the new columns, ordered. */
  rows(dataSource: DataSource): Promise<Array<Record<string, unknown>>>;
  /** Inserts a row as the store before strict mode wrote it; `leaseSeconds` < 0: the lease ran out. */
  seed(
    dataSource: DataSource,
    row: { key: string; state: string; payload?: string; leaseSeconds?: number },
  ): Promise<void>;
  insertState(dataSource: DataSource, state: string): Promise<unknown>;
  drop(dataSource: DataSource): Promise<unknown>;
}

function postgres(): Database {
  const schema = scratchSchema('strictup');
  const table = `"${schema}".idempotency_records`;
  return {
    name: 'PostgreSQL',
    open: async (migrations) => {
      const dataSource = await openDataSource({
        schema, // TypeORM keeps its own migrations table here too
        migrationsTableName: 'typeorm_migrations',
        migrations,
      });
      await dataSource.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
      return dataSource;
    },
    migrations: () => createIdempotencyMigrations({ schema }),
    store: (dataSource, ensureSchema = false) =>
      new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema, logger: quiet }),
    rows: (dataSource) =>
      dataSource.query(
        `SELECT ${OLD_COLUMNS.map((c) => `"${c}"::text`).join(', ')},
           ${STRICT_COLUMNS.join(', ')} FROM ${table} ORDER BY "key"`,
      ),
    seed: (dataSource, row) =>
      dataSource.query(
        `INSERT INTO ${table} (id, scope, "key", state, lease_id, lease_expires_at, expires_at,
           fingerprint, payload, created_at, completed_at)
         VALUES ($1, 'upgrade', $2, $3, $4, now() + $5 * interval '1 second', now() + interval '1 day',
           'fp', $6, now() - interval '1 hour', $7)`,
        [
          recordIdOf('upgrade', row.key),
          row.key,
          row.state,
          row.state === 'IN_PROGRESS' ? randomUUID() : null,
          row.state === 'IN_PROGRESS' ? (row.leaseSeconds ?? 600) : null,
          row.payload === undefined ? null : encodeValue(row.payload),
          row.state === 'COMPLETE' ? new Date(Date.now() - 60_000) : null,
        ],
      ),
    insertState: (dataSource, state) =>
      dataSource.query(
        `INSERT INTO ${table} (id, scope, "key", state, expires_at, created_at)
         VALUES ($1, 'upgrade', 'bogus', $2, now(), now())`,
        [recordIdOf('upgrade', 'bogus'), state],
      ),
    drop: (dataSource) => dropSchema(dataSource, schema),
  };
}

function mariadb(): Database {
  const table = scratchTable('strictup');
  const migrationsTableName = scratchTable('strictup_migrations');
  return {
    name: 'MariaDB',
    open: (migrations) => openMysqlDataSource({ migrationsTableName, migrations }),
    migrations: () => createIdempotencyMigrations({ table }),
    store: (dataSource, ensureSchema = false) =>
      new TypeOrmIdempotencyStore(dataSource, { table, ensureSchema, logger: quiet }),
    rows: (dataSource) =>
      dataSource.query(
        `SELECT ${OLD_COLUMNS.map((c) => `CAST(\`${c}\` AS CHAR) AS \`${c}\``).join(', ')},
           ${STRICT_COLUMNS.join(', ')} FROM \`${table}\` ORDER BY \`key\``,
      ),
    seed: (dataSource, row) =>
      dataSource.query(
        `INSERT INTO \`${table}\` (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at,
           fingerprint, payload, created_at, completed_at)
         VALUES (?, 'upgrade', ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? SECOND,
           UTC_TIMESTAMP(6) + INTERVAL 1 DAY, 'fp', ?, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, ?)`,
        [
          recordIdOf('upgrade', row.key),
          row.key,
          row.state,
          row.state === 'IN_PROGRESS' ? randomUUID() : null,
          row.state === 'IN_PROGRESS' ? (row.leaseSeconds ?? 600) : null,
          row.payload === undefined ? null : encodeValue(row.payload),
          row.state === 'COMPLETE' ? new Date(Date.now() - 60_000) : null,
        ],
      ),
    insertState: (dataSource, state) =>
      dataSource.query(
        `INSERT INTO \`${table}\` (id, scope, \`key\`, state, expires_at, created_at)
         VALUES (?, 'upgrade', 'bogus', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`,
        [recordIdOf('upgrade', 'bogus'), state],
      ),
    drop: async (dataSource) => {
      await dropTable(dataSource, table);
      await dropTable(dataSource, migrationsTableName);
    },
  };
}

const request = (key: string, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
  scope: 'upgrade',
  key,
  leaseMs: 30_000,
  waitTimeoutMs: 0,
  ttlMs: 3_600_000,
  fingerprint: 'fp',
  ...overrides,
});

function describeUpgrade(make: () => Database) {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  /** The table as the previous migrations left it, with a result, a live lease and a lapsed one. */
  async function before(db: Database): Promise<DataSource> {
    const previous = await db.open(db.migrations().slice(0, 2));
    cleanups.push(() => previous.destroy());
    cleanups.push(() => db.drop(previous));
    const ran = await previous.runMigrations();
    expect(ran.map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764460800000',
      'UpgradeIdempotencyRecords1764547200000',
    ]);
    await db.seed(previous, { key: 'done', state: 'COMPLETE', payload: 'the result' });
    await db.seed(previous, { key: 'running', state: 'IN_PROGRESS' });
    await db.seed(previous, { key: 'lapsed', state: 'IN_PROGRESS', leaseSeconds: -5 });
    return previous;
  }

  async function expectStrictModeWorks(db: Database, dataSource: DataSource) {
    const store = db.store(dataSource);
    cleanups.push(() => store.close());
    await store.init(); // the shape check passes
    const replay = await store.tryAcquire(request('done'));
    expect(replay.kind === 'duplicate' && replay.payload.equals(encodeValue('the result'))).toBe(
      true,
    );
    expect((await store.tryAcquire(request('running', { onExpiredLease: 'refuse' }))).kind).toBe(
      'in-flight',
    );
    // The lease 0.2 left running out: strict mode moves it to AMBIGUOUS, once.
    expect(await store.tryAcquire(request('lapsed', { onExpiredLease: 'refuse' }))).toMatchObject({
      kind: 'ambiguous',
      reason: 'lease-expired',
      transitioned: true,
    });
    expect(await store.tryAcquire(request('lapsed'))).toMatchObject({ kind: 'ambiguous' });
    expect(await store.list({ scope: 'upgrade', state: 'AMBIGUOUS' })).toMatchObject([
      { key: 'lapsed', ambiguousReason: 'lease-expired' },
    ]);
    const resolved = await store.strictMode.resolve(
      { scope: 'upgrade', key: 'lapsed' },
      { outcome: 'completed', payload: encodeValue('ran'), ttlMs: 60_000, resolvedBy: 'ops' },
    );
    expect(resolved.kind).toBe('resolved');
    expect(await store.find({ scope: 'upgrade', key: 'lapsed' })).toMatchObject({
      state: 'COMPLETE',
      resolvedBy: 'ops',
    });
    // The widened CHECK still refuses what is not a state.
    await expect(db.insertState(dataSource, 'BOGUS')).rejects.toThrow();
  }

  it('refuses the table naming the migration; the migration adds strict mode keeping every record', async () => {
    const db = make();
    const previous = await before(db);
    const rows = await db.rows(previous).catch(() => undefined);
    expect(rows).toBeUndefined(); // the new columns are not there yet

    const error = await db
      .store(previous)
      .init()
      .then(
        () => undefined,
        (e: Error) => e,
      );
    expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
    expect(error!.message).toContain('has the wrong shape');
    expect(error!.message).toContain('column "ambiguous_since" is missing');
    expect(error!.message).toContain(
      `it predates strict mode: run the migration ${STRICT_MIGRATION} (createIdempotencyMigrations() includes it)`,
    );

    const current = await db.open(db.migrations());
    cleanups.push(() => current.destroy());
    const ran = await current.runMigrations();
    expect(ran.map((m) => m.name)).toEqual([
      STRICT_MIGRATION,
      'AddIdempotencySteps1764806400000',
      'AddIdempotencyContinuations1764892800000',
      'AddIdempotencyReceipts1764979200000',
    ]);
    await expect(current.showMigrations()).resolves.toBe(false);

    const upgraded = await db.rows(current);
    expect(upgraded.map((row) => row.key)).toEqual(['done', 'lapsed', 'running']);
    for (const row of upgraded) {
      for (const column of STRICT_COLUMNS) expect(row[column]).toBeNull();
    }
    await expectStrictModeWorks(db, current);
    // Every other record as it was, column for column.
    const after = await db.rows(current);
    const old = (row: Record<string, unknown>) =>
      Object.fromEntries(OLD_COLUMNS.map((column) => [column, row[column]]));
    expect(after.filter((r) => r.key !== 'lapsed').map(old)).toEqual(
      upgraded.filter((r) => r.key !== 'lapsed').map(old),
    );
  });

  it('ensureSchema brings the table up the same way, and a second run changes nothing', async () => {
    const db = make();
    const previous = await before(db);
    for (let run = 0; run < 2; run++) {
      const store = db.store(previous, true);
      await store.init();
      await store.close();
    }
    const upgraded = await db.rows(previous);
    expect(upgraded.map((row) => row.state)).toEqual(['COMPLETE', 'IN_PROGRESS', 'IN_PROGRESS']);
    await expectStrictModeWorks(db, previous);
  });
}

describe('strict mode on a table made before it: PostgreSQL', () => {
  describeUpgrade(postgres);
});

describe.runIf(mariadbAvailable())('strict mode on a table made before it: MariaDB', () => {
  describeUpgrade(mariadb);
});
