import {
  mysqlContinuationsUpgrade,
  mysqlCurrentTableSql,
  mysqlStepsUpgrade,
  mysqlStrictModeUpgrade,
} from '../sql/mysql/schema';
import type { MysqlTableName } from '../sql/mysql/sql';
import { DEFAULT_TABLE } from '../sql/table';

/**
 * Anything of mysql2 that runs a statement: a pool or a connection, of the
 * callback API (`query(sql, values, callback)`) or of `mysql2/promise`
 * (`query(sql, values)` resolving to `[rows, fields]`).
 */
export interface MysqlQueryable {
  query(sql: string, values: unknown[], ...callback: never[]): unknown;
}

/**
 * The records table's DDL as one plain SQL script, for a migration tool that
 * takes SQL files: the table in its current shape (strict mode included).
 * `schema` is the database; without it the table is created in the
 * connection's current database. It creates a table that is missing; a table
 * an older release made needs `migrateMysqlIdempotencyTable` (or the TypeORM
 * migrations), which read the catalog to add only what is missing.
 */
export function mysqlIdempotencyMigrationSql(name: Partial<MysqlTableName> = {}): string {
  const target = { schema: name.schema, table: name.table ?? DEFAULT_TABLE.table };
  return `${mysqlCurrentTableSql(target).join(';\n\n')};\n`;
}

/**
 * Runs the migrations on `db` (a mysql2 pool or connection, callback or
 * promise API), for a migration tool that runs functions or a deploy script:
 * creates the table if it is missing, then brings a table an older release
 * made up to date in place, keeping every record. Each step is idempotent
 * (and atomic under the server's metadata lock), so a second run, or two at
 * once, change nothing more.
 */
export async function migrateMysqlIdempotencyTable(
  db: MysqlQueryable,
  name: Partial<MysqlTableName> = {},
): Promise<void> {
  const target = { schema: name.schema, table: name.table ?? DEFAULT_TABLE.table };
  const run = runnerOf(db);
  for (const sql of mysqlCurrentTableSql(target)) await run(sql, []);
  await mysqlStrictModeUpgrade(run, target);
  await mysqlStepsUpgrade(run, target);
  await mysqlContinuationsUpgrade(run, target);
}

/** One statement's rows (or OK packet), whichever API `db` speaks. */
function runnerOf(db: MysqlQueryable): (sql: string, values: unknown[]) => Promise<unknown> {
  const query = db.query as (...args: unknown[]) => unknown;
  // The callback API's pools and connections have promise() (their promise wrapper).
  if (typeof (db as { promise?: unknown }).promise === 'function') {
    return (sql, values) =>
      new Promise((resolve, reject) => {
        query.call(db, sql, values, (error: Error | null, rows: unknown) =>
          error ? reject(error) : resolve(rows),
        );
      });
  }
  return async (sql, values) => {
    const [rows] = (await query.call(db, sql, values)) as [unknown, unknown];
    return rows;
  };
}
