/**
 * `nest-idempotency/mysql`: the MySQL and MariaDB store on the application's
 * own mysql2 pool (callback or promise API), without an ORM, and its
 * migrations as plain SQL or as a function. Needs `mysql2`.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export { MysqlIdempotencyStore } from './stores/mysql/mysql.store';
export type { MysqlIdempotencyStoreOptions, MysqlPoolLike } from './stores/mysql/mysql.store';
export {
  migrateMysqlIdempotencyTable,
  mysqlIdempotencyMigrationSql,
} from './stores/mysql/mysql.migrations';
export type { MysqlQueryable } from './stores/mysql/mysql.migrations';
export type { MysqlTableName } from './stores/sql/mysql/sql';
