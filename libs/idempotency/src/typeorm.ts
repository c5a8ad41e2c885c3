/**
 * `nest-idempotency/typeorm`: the PostgreSQL store through a TypeORM
 * DataSource, and its migrations. Needs `typeorm` and `pg`.
 */
export { TypeOrmIdempotencyStore } from './stores/typeorm/typeorm.store';
export type { TypeOrmIdempotencyStoreOptions } from './stores/typeorm/typeorm.store';
export {
  createIdempotencyMigration,
  createIdempotencyMigrations,
} from './stores/typeorm/migration';
export { createTableSql, schemaSql, upgradeTableSql } from './stores/typeorm/postgres/schema';
export type { TableName } from './stores/typeorm/table';
