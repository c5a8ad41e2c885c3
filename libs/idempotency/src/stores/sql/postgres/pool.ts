import type { Pool } from 'pg';
import type { DataSource } from 'typeorm';
import type { QueryLog } from '../query-log';

/**
 * The `pg` pool under a postgres DataSource (TypeORM keeps it as the driver's
 * `master`); undefined before `initialize()` and after `destroy()`.
 */
export function poolOf(dataSource: DataSource): Pool | undefined {
  return (dataSource.driver as unknown as { master?: Pool }).master;
}

/**
 * The SQL connection a PostgreSQL dialect runs on: a `pg` pool (the
 * application's own, or the one under a DataSource) for every statement and,
 * built from the pool's own settings, one dedicated client for LISTEN.
 */
export interface PgConnection {
  /** The pool; undefined when it cannot be used now (a DataSource not initialized, or destroyed). */
  pool(): Pool | undefined;
  /** Where statements are reported. */
  readonly log: QueryLog;
  /** Why `pool()` gave nothing, as an error says it. */
  readonly unready: string;
}
