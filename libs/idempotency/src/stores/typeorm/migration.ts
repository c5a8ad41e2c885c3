import type { MigrationInterface, QueryRunner } from 'typeorm';
import { createTableSql, dropTableSql, upgradeTableSql } from './postgres/schema';
import { DEFAULT_TABLE, TableName } from './table';

type MigrationClass = new () => MigrationInterface;

/**
 * The TypeORM migrations for the records table, oldest first. Add them to
 * your DataSource's `migrations` and run them as you run your own (the
 * TypeORM CLI, or `migrationsRun: true`); the store never uses `synchronize`.
 *
 *   migrations: [...createIdempotencyMigrations(), ...yourMigrations]
 *
 * A database migrated by 0.1 has run the first already; the second brings
 * its table up to date in place, keeping every record.
 */
export function createIdempotencyMigrations(name: Partial<TableName> = {}): MigrationClass[] {
  const target = { ...DEFAULT_TABLE, ...name };
  return [
    class CreateIdempotencyRecords1764460800000 implements MigrationInterface {
      name = 'CreateIdempotencyRecords1764460800000';

      async up(queryRunner: QueryRunner): Promise<void> {
        for (const sql of createTableSql(target)) await queryRunner.query(sql);
      }

      async down(queryRunner: QueryRunner): Promise<void> {
        for (const sql of dropTableSql(target)) await queryRunner.query(sql);
      }
    },
    class UpgradeIdempotencyRecords1764547200000 implements MigrationInterface {
      name = 'UpgradeIdempotencyRecords1764547200000';

      async up(queryRunner: QueryRunner): Promise<void> {
        for (const sql of upgradeTableSql(target)) await queryRunner.query(sql);
      }

      async down(): Promise<void> {
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
