import type { MigrationInterface, QueryRunner } from 'typeorm';
import { mysqlCreateTableSql, mysqlDropTableSql } from './mysql/schema';
import { createTableSql, dropTableSql, upgradeTableSql } from './postgres/schema';
import { DEFAULT_TABLE, TableName } from './table';

type MigrationClass = new () => MigrationInterface;

/** The dialect a migration runs on, from the DataSource of its QueryRunner. */
function dialectOf(queryRunner: QueryRunner): 'postgres' | 'mysql' {
  const type = queryRunner.connection.options.type;
  if (type === 'postgres') return 'postgres';
  if (type === 'mysql' || type === 'mariadb') return 'mysql';
  throw new Error(
    `the nest-idempotency migrations support PostgreSQL, MySQL and MariaDB; this DataSource is of type "${type}"`,
  );
}

/**
 * The TypeORM migrations for the records table, oldest first. Add them to
 * your DataSource's `migrations` and run them as you run your own (the
 * TypeORM CLI, or `migrationsRun: true`); the store never uses `synchronize`.
 *
 *   migrations: [...createIdempotencyMigrations(), ...yourMigrations]
 *
 * Each writes the DDL of the database it runs on. On PostgreSQL, a database
 * migrated by 0.1 has run the first already; the second brings its table up
 * to date in place, keeping every record. On MySQL and MariaDB the first
 * creates the table in its current shape, and the second has nothing to do
 * (it is there so that one list of migrations serves every database). There,
 * `schema` is the database, by default the DataSource's.
 */
export function createIdempotencyMigrations(name: Partial<TableName> = {}): MigrationClass[] {
  const target = { ...DEFAULT_TABLE, ...name };
  const mysqlTarget = { schema: name.schema, table: target.table };
  return [
    class CreateIdempotencyRecords1764460800000 implements MigrationInterface {
      name = 'CreateIdempotencyRecords1764460800000';

      async up(queryRunner: QueryRunner): Promise<void> {
        const sql =
          dialectOf(queryRunner) === 'mysql'
            ? mysqlCreateTableSql(mysqlTarget)
            : createTableSql(target);
        for (const statement of sql) await queryRunner.query(statement);
      }

      async down(queryRunner: QueryRunner): Promise<void> {
        const sql =
          dialectOf(queryRunner) === 'mysql'
            ? mysqlDropTableSql(mysqlTarget)
            : dropTableSql(target);
        for (const statement of sql) await queryRunner.query(statement);
      }
    },
    class UpgradeIdempotencyRecords1764547200000 implements MigrationInterface {
      name = 'UpgradeIdempotencyRecords1764547200000';

      async up(queryRunner: QueryRunner): Promise<void> {
        // MySQL and MariaDB tables were first made in the current shape: nothing to upgrade.
        if (dialectOf(queryRunner) === 'mysql') return;
        for (const sql of upgradeTableSql(target)) await queryRunner.query(sql);
      }

      async down(queryRunner: QueryRunner): Promise<void> {
        if (dialectOf(queryRunner) === 'mysql') return;
        // 0.2's payloads are bytes that jsonb cannot hold; going back would drop completed
        // records and let their keys run again.
        throw new Error(
          'UpgradeIdempotencyRecords1764547200000 cannot be reverted: completed records would be lost; restore a backup instead',
        );
      }
    },
  ];
}

/**
 * 0.1's single migration (the table as 0.1 made it). Kept so existing
 * configurations still load; use `createIdempotencyMigrations()`, which adds
 * the upgrade the store needs.
 *
 * @deprecated since 0.2: use `createIdempotencyMigrations()`.
 */
export function createIdempotencyMigration(name: Partial<TableName> = {}): MigrationClass {
  return createIdempotencyMigrations(name)[0];
}
