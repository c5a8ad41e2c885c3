import type { MigrationInterface, QueryRunner } from 'typeorm';

export class CreateDemoPayments1764460800001 implements MigrationInterface {
  name = 'CreateDemoPayments1764460800001';

  /** The same table in each database's types (see payment.entity.ts). */
  async up(queryRunner: QueryRunner): Promise<void> {
    if (queryRunner.connection.options.type === 'postgres') {
      await queryRunner.query(`CREATE TABLE IF NOT EXISTS demo_payments (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        amount integer NOT NULL,
        currency text NOT NULL,
        "orderId" text,
        source text NOT NULL,
        "createdAt" timestamptz NOT NULL DEFAULT now()
      )`);
      return;
    }
    // MySQL and MariaDB: TypeORM generates the uuid; times in UTC to the microsecond.
    await queryRunner.query(`CREATE TABLE IF NOT EXISTS demo_payments (
      id CHAR(36) NOT NULL PRIMARY KEY,
      amount INT NOT NULL,
      currency VARCHAR(16) NOT NULL,
      orderId VARCHAR(255) NULL,
      source VARCHAR(16) NOT NULL,
      createdAt DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE IF EXISTS demo_payments');
  }
}
