import type { DataSource } from 'typeorm';
import type { IdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore, TypeOrmIdempotencyStoreOptions } from 'nest-idempotency/typeorm';
import type { ContractHarness } from 'nest-idempotency/testing';
import { dropTable, openMysqlDataSource, scratchTable } from './mariadb';

const quiet = { warn: () => undefined, error: () => undefined };

/**
 * The contract harness for MariaDB: instance A, and instance B on a
 * DataSource (a pool) of its own, as another process would have. There is no
 * NOTIFY to wake B: its waiters are woken by its own poll for changes to the
 * records they wait on, at the store's default settings (B's fallback poll is
 * a minute, so only that poll can wake it in time). `type` picks the
 * statements: `mariadb` reads rows back with RETURNING, `mysql` sends what
 * MySQL 8 gets (no RETURNING).
 */
export async function mariadbHarness(
  prefix: string,
  options: TypeOrmIdempotencyStoreOptions & { type?: 'mysql' | 'mariadb' } = {},
  wrap: (store: TypeOrmIdempotencyStore) => IdempotencyStore = (store) => store,
): Promise<ContractHarness & { tables: TypeOrmIdempotencyStore[] }> {
  const { type = 'mariadb', ...storeOptions } = options;
  const table = scratchTable(prefix);
  const [a, b] = await Promise.all([openMysqlDataSource({ type }), openMysqlDataSource({ type })]);
  const store = new TypeOrmIdempotencyStore(a, {
    logger: quiet,
    ...storeOptions,
    table,
    ensureSchema: true,
  });
  const other = new TypeOrmIdempotencyStore(b, {
    logger: quiet,
    ...storeOptions,
    table,
    pollIntervalMs: 60_000,
  });
  return {
    store: wrap(store),
    other: wrap(other),
    tables: [store, other],
    clock: 'store',
    snapshot: (scope) => mysqlSnapshot(a, table, scope),
    close: async () => {
      await dropTable(a, table);
      await Promise.all([a.destroy(), b.destroy()]);
    },
  };
}

/**
 * Every column of a scope's rows, times to the microsecond and bytes in hex:
 * equal snapshots mean no value was written. (InnoDB shows no row version
 * such as PostgreSQL's xmin, so a write of the same values would not show;
 * the store's statements assign a live row its own values, which InnoDB does
 * not write.)
 */
export async function mysqlSnapshot(
  dataSource: DataSource,
  table: string,
  scope: string,
): Promise<string> {
  const rows: unknown[] = await dataSource.query(
    `SELECT HEX(id) AS id, scope, \`key\`, state, lease_id, fingerprint, HEX(payload) AS payload,
       CAST(lease_expires_at AS CHAR) AS lease_expires_at, CAST(expires_at AS CHAR) AS expires_at,
       CAST(created_at AS CHAR) AS created_at, CAST(completed_at AS CHAR) AS completed_at
     FROM \`${table}\` WHERE scope = ? ORDER BY id`,
    [scope],
  );
  return JSON.stringify(rows);
}
