import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  mysqlContinuationsUpgrade,
  mysqlCreateTableSql,
  mysqlDropTableSql,
  mysqlStepsUpgrade,
  mysqlStrictModeUpgrade,
} from '../sql/mysql/schema';
import {
  continuationsTableSql,
  createTableSql,
  dropTableSql,
  stepsTableSql,
  strictModeTableSql,
  upgradeTableSql,
} from '../sql/postgres/schema';
import {
  CONTINUATIONS_MIGRATION,
  DEFAULT_TABLE,
  STEPS_MIGRATION,
  STRICT_MODE_MIGRATION,
  TableName,
} from '../sql/table';
import { mysqlReceiptsTableSql } from '../sql/mysql/receipts';
import { receiptsTableSql } from '../sql/postgres/receipts';
import { RECEIPTS_MIGRATION } from '../sql/receipt-tables';

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
 * creates the table as it was before strict mode, and the second has nothing to do
 * (it is there so that one list of migrations serves every database). There,
 * `schema` is the database, by default the DataSource's.
 *
 * The third (strict mode) lets a record be AMBIGUOUS: a wider state CHECK and
 * four nullable columns, added in place with every record kept, on every
 * database. The store checks for them at startup, so run it before deploying
 * a release that has it. The fourth (recorded steps) and the fifth
 * (continuations) add nullable columns only, as the store also checks.
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
    class AddIdempotencyAmbiguousState1764633600000 implements MigrationInterface {
      name = STRICT_MODE_MIGRATION;

      async up(queryRunner: QueryRunner): Promise<void> {
        if (dialectOf(queryRunner) === 'mysql') {
          await mysqlStrictModeUpgrade(
            (sql, params) => queryRunner.query(sql, params),
            mysqlTarget,
          );
          return;
        }
        for (const sql of strictModeTableSql(target)) await queryRunner.query(sql);
      }

      async down(): Promise<void> {
        // Going back would have to delete AMBIGUOUS records, and with them the only trace that
        // their actions may have run: a retry would then run them again.
        throw new Error(
          `${STRICT_MODE_MIGRATION} cannot be reverted: AMBIGUOUS records would be lost and their keys could run again; restore a backup instead`,
        );
      }
    },
    class AddIdempotencySteps1764806400000 implements MigrationInterface {
      name = STEPS_MIGRATION;

      async up(queryRunner: QueryRunner): Promise<void> {
        if (dialectOf(queryRunner) === 'mysql') {
          await mysqlStepsUpgrade((sql, params) => queryRunner.query(sql, params), mysqlTarget);
          return;
        }
        for (const sql of stepsTableSql(target)) await queryRunner.query(sql);
      }

      async down(): Promise<void> {
        // Going back would drop recorded steps, and a takeover would run them again.
        throw new Error(
          `${STEPS_MIGRATION} cannot be reverted: recorded steps would be lost and a takeover could run them again; restore a backup instead`,
        );
      }
    },
    class AddIdempotencyContinuations1764892800000 implements MigrationInterface {
      name = CONTINUATIONS_MIGRATION;

      async up(queryRunner: QueryRunner): Promise<void> {
        if (dialectOf(queryRunner) === 'mysql') {
          await mysqlContinuationsUpgrade(
            (sql, params) => queryRunner.query(sql, params),
            mysqlTarget,
          );
          return;
        }
        for (const sql of continuationsTableSql(target)) await queryRunner.query(sql);
      }

      async down(): Promise<void> {
        // Going back would drop suspended records' answers and states: their resumptions would be lost.
        throw new Error(
          `${CONTINUATIONS_MIGRATION} cannot be reverted: suspended records would lose their answer and state, and their resumptions could not be admitted; restore a backup instead`,
        );
      }
    },
    class AddIdempotencyReceipts1764979200000 implements MigrationInterface {
      name = RECEIPTS_MIGRATION;

      async up(queryRunner: QueryRunner): Promise<void> {
        const sql =
          dialectOf(queryRunner) === 'mysql'
            ? mysqlReceiptsTableSql(mysqlTarget)
            : receiptsTableSql(target);
        for (const statement of sql) await queryRunner.query(statement);
      }

      async down(): Promise<void> {
        // Going back would drop the receipts, the only record of what ended: refused.
        throw new Error(
          `${RECEIPTS_MIGRATION} cannot be reverted: the receipts would be lost; archive them and drop the tables ${target.table}_receipts and ${target.table}_receipt_heads yourself if you mean to`,
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
