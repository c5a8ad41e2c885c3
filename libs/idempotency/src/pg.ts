/**
 * `nest-idempotency/pg`: the PostgreSQL store on the application's own `pg`
 * Pool, without an ORM, and its migrations as plain SQL or as a function.
 * Needs `pg`.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export { PgIdempotencyStore } from './stores/pg/pg.store';
export type { PgIdempotencyStoreOptions } from './stores/pg/pg.store';
export { migratePgIdempotencyTable, pgIdempotencyMigrationSql } from './stores/pg/pg.migrations';
export type { PgQueryable } from './stores/pg/pg.migrations';
export type { TableName } from './stores/sql/table';
