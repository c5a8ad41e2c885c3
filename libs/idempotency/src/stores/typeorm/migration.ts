import type { MigrationInterface, QueryRunner } from 'typeorm';
import { createTableSql, dropTableSql } from './schema';
import { DEFAULT_TABLE, TableName } from './table';

/**
 * A TypeORM migration class for the records table. Add it to your DataSource's
 * `migrations` and run them as you run your own; the store never uses `synchronize`.
 *
 *   migrations: [createIdempotencyMigration()]
 */
export function createIdempotencyMigration(
  name: Partial<TableName> = {},
): new () => MigrationInterface {
  const target = { ...DEFAULT_TABLE, ...name };
  return class CreateIdempotencyRecords1764460800000 implements MigrationInterface {
    name = 'CreateIdempotencyRecords1764460800000';

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const sql of createTableSql(target)) await queryRunner.query(sql);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      for (const sql of dropTableSql(target)) await queryRunner.query(sql);
    }
  };
}
