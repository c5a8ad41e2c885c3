import type { MigrationInterface, QueryRunner } from 'typeorm';

export class CreateDemoPayments1764460800001 implements MigrationInterface {
  name = 'CreateDemoPayments1764460800001';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE IF NOT EXISTS demo_payments (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      amount integer NOT NULL,
      currency text NOT NULL,
      "orderId" text,
      source text NOT NULL,
      "createdAt" timestamptz NOT NULL DEFAULT now()
    )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE IF EXISTS demo_payments');
  }
}
