import type { DataSource } from 'typeorm';
import type { IdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore, TypeOrmIdempotencyStoreOptions } from 'nest-idempotency/typeorm';
import type { ContractHarness } from 'nest-idempotency/testing';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

const quiet = { warn: () => undefined, error: () => undefined };

/**
 * The contract harness for PostgreSQL: instance A, and instance B on a
 * DataSource (a pool and a LISTEN connection) of its own, as another process
 * would have. B polls once a minute, so only a NOTIFY wakes it in time.
 * `wrap` puts each instance behind a decorator (the replay cache).
 */
export async function postgresHarness(
  prefix: string,
  options: TypeOrmIdempotencyStoreOptions = {},
  wrap: (store: TypeOrmIdempotencyStore) => IdempotencyStore = (store) => store,
): Promise<ContractHarness> {
  const schema = scratchSchema(prefix);
  const [a, b] = await Promise.all([openDataSource(), openDataSource()]);
  const store = new TypeOrmIdempotencyStore(a, {
    logger: quiet,
    ...options,
    schema,
    ensureSchema: true,
  });
  const other = new TypeOrmIdempotencyStore(b, {
    logger: quiet,
    ...options,
    schema,
    pollIntervalMs: 60_000,
  });
  return {
    store: wrap(store),
    other: wrap(other),
    clock: 'store',
    snapshot: (scope) => snapshotOf(a, `"${schema}"."${store.tableName.table}"`, scope),
    close: async () => {
      await dropSchema(a, schema);
      await Promise.all([a.destroy(), b.destroy()]);
    },
  };
}

/** Every column of a scope's rows and each row's version (xmin): equal snapshots mean nothing was written. */
async function snapshotOf(dataSource: DataSource, table: string, scope: string): Promise<string> {
  const rows: Array<{ xmin: string; row: string }> = await dataSource.query(
    `SELECT xmin::text AS xmin, row_to_json(r)::text AS row FROM ${table} r WHERE scope = $1 ORDER BY id`,
    [scope],
  );
  return JSON.stringify(rows);
}
