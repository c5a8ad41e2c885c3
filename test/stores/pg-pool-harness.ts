import { Pool } from 'pg';
import type { ContractHarness } from 'nest-idempotency/testing';
import { PgIdempotencyStore, PgIdempotencyStoreOptions } from 'nest-idempotency/pg';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';

const quiet = { warn: () => undefined, error: () => undefined };

/** A pg Pool of the application's own, on the test database. */
export function openPool(max = 10): Pool {
  const pool = new Pool({ connectionString: testDatabaseUrl(), max });
  // An idle pooled connection that fails must not crash the test process.
  pool.on('error', () => undefined);
  return pool;
}

/**
 * The contract harness for the `pg` pool store: instance A, and instance B
 * on a pool (and a LISTEN client) of its own, as another process would have.
 * B polls once a minute, so only a NOTIFY wakes it in time.
 */
export async function pgPoolHarness(
  prefix: string,
  options: PgIdempotencyStoreOptions = {},
): Promise<ContractHarness> {
  const schema = scratchSchema(prefix);
  const [a, b] = [openPool(), openPool()];
  const store = new PgIdempotencyStore(a, {
    logger: quiet,
    ...options,
    schema,
    ensureSchema: true,
  });
  const other = new PgIdempotencyStore(b, {
    logger: quiet,
    ...options,
    schema,
    pollIntervalMs: 60_000,
  });
  const table = `"${schema}"."${store.tableName.table}"`;
  return {
    store,
    other,
    clock: 'store',
    snapshot: async (scope) => {
      const { rows } = await a.query<{ xmin: string; row: string }>(
        `SELECT xmin::text AS xmin, row_to_json(r)::text AS row FROM ${table} r WHERE scope = $1 ORDER BY id`,
        [scope],
      );
      return JSON.stringify(rows);
    },
    close: async () => {
      await a.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await Promise.all([a.end(), b.end()]);
    },
  };
}
