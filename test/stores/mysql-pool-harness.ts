import { createPool, Pool } from 'mysql2';
import { createPool as createPromisePool, Pool as PromisePool } from 'mysql2/promise';
import type { ContractHarness } from 'nest-idempotency/testing';
import { MysqlIdempotencyStore, MysqlIdempotencyStoreOptions } from 'nest-idempotency/mysql';
import { mysqlTestUrl, scratchTable } from '../support/mariadb';

const quiet = { warn: () => undefined, error: () => undefined };

/** Which mysql2 API the application's pool speaks. */
export type MysqlApi = 'callback' | 'promise';

/** A mysql2 pool of the application's own on the test server, of either API. */
export function openMysqlPool(api: MysqlApi, connectionLimit = 10): Pool | PromisePool {
  const options = { uri: mysqlTestUrl(), connectionLimit };
  return api === 'promise' ? createPromisePool(options) : createPool(options);
}

/** Runs one statement on either kind of pool. */
export async function poolQuery<T = unknown>(
  pool: Pool | PromisePool,
  sql: string,
  values: unknown[] = [],
): Promise<T> {
  if ('promise' in pool) {
    const [rows] = await pool.promise().query(sql, values);
    return rows as T;
  }
  const [rows] = await pool.query(sql, values);
  return rows as T;
}

export function endPool(pool: Pool | PromisePool): Promise<void> {
  return 'promise' in pool ? pool.promise().end() : pool.end();
}

/**
 * The contract harness for the mysql2 pool store on MariaDB: instance A, and
 * instance B on a pool of its own, as another process would have. B's
 * fallback poll is a minute: only its cross-instance poll wakes it in time.
 */
export async function mysqlPoolHarness(
  prefix: string,
  api: MysqlApi,
  options: MysqlIdempotencyStoreOptions = {},
): Promise<ContractHarness> {
  const table = scratchTable(prefix);
  const [a, b] = [openMysqlPool(api), openMysqlPool(api)];
  const store = new MysqlIdempotencyStore(a, {
    logger: quiet,
    ...options,
    table,
    ensureSchema: true,
  });
  const other = new MysqlIdempotencyStore(b, {
    logger: quiet,
    ...options,
    table,
    pollIntervalMs: 60_000,
  });
  return {
    store,
    other,
    clock: 'store',
    snapshot: async (scope) =>
      JSON.stringify(
        await poolQuery(
          a,
          `SELECT HEX(id) AS id, scope, \`key\`, state, lease_id, fingerprint, HEX(payload) AS payload,
             CAST(lease_expires_at AS CHAR) AS lease_expires_at, CAST(expires_at AS CHAR) AS expires_at,
             CAST(created_at AS CHAR) AS created_at, CAST(completed_at AS CHAR) AS completed_at
           FROM \`${table}\` WHERE scope = ? ORDER BY id`,
          [scope],
        ),
      ),
    close: async () => {
      await poolQuery(a, `DROP TABLE IF EXISTS \`${table}\``);
      await Promise.all([endPool(a), endPool(b)]);
    },
  };
}
