/**
 * `nest-idempotency/typeorm`: the store through a TypeORM DataSource, and
 * its migrations. Needs `typeorm`, and `pg` for PostgreSQL or `mysql2` for
 * MySQL and MariaDB.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export { TypeOrmIdempotencyStore } from './stores/typeorm/typeorm.store';
export type { TypeOrmIdempotencyStoreOptions } from './stores/typeorm/typeorm.store';
export {
  createIdempotencyMigration,
  createIdempotencyMigrations,
} from './stores/typeorm/migration';
export {
  createTableSql,
  schemaSql,
  strictModeTableSql,
  upgradeTableSql,
} from './stores/sql/postgres/schema';
export { mysqlSchemaSql } from './stores/sql/mysql/schema';
export type { MysqlTableName } from './stores/sql/mysql/sql';
export type { TableName } from './stores/sql/table';
