import { schemaSql } from '../sql/postgres/schema';
import { DEFAULT_TABLE, TableName } from '../sql/table';

/** Anything that runs a SQL text: a `pg` Pool, Client or PoolClient. */
export interface PgQueryable {
  query(text: string): Promise<unknown>;
}

/**
 * The records table's migrations as one plain SQL script, for a migration
 * tool that takes SQL files (node-pg-migrate, dbmate, Flyway, Atlas, psql).
 * Every step is idempotent: run on an empty database it creates the table in
 * its current shape; on a table an older release made, it brings it up to
 * date in place, keeping every record. The same SQL `ensureSchema` runs.
 */
export function pgIdempotencyMigrationSql(name: Partial<TableName> = {}): string {
  return `${schemaSql({ ...DEFAULT_TABLE, ...name }).join(';\n\n')};\n`;
}

/**
 * Runs the migrations on `db` (a `pg` Pool, Client or PoolClient), for a
 * migration tool that runs functions (umzug, a knex or node-pg-migrate
 * migration's `up`, a deploy script): one implicit transaction, under an
 * advisory lock, so instances that start together do not race.
 */
export async function migratePgIdempotencyTable(
  db: PgQueryable,
  name: Partial<TableName> = {},
): Promise<void> {
  const target = { ...DEFAULT_TABLE, ...name };
  const id = `nest-idempotency:${target.schema}.${target.table}`.replace(/'/g, "''");
  // One text, one implicit transaction (the simple query protocol); the lock ends with it.
  const lock = `SELECT pg_advisory_xact_lock(hashtext('${id}'))`;
  await db.query([lock, ...schemaSql(target)].join(';\n'));
}
