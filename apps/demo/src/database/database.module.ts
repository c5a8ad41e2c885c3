import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { createIdempotencyMigrations } from 'nest-idempotency/typeorm';
import { Payment } from '../payments/payment.entity';
import { CreateDemoPayments1764460800001 } from './create-payments.migration';

/**
 * One TypeORM DataSource (through @nestjs/typeorm, as most Nest applications
 * have it) for the demo's own table and the idempotency records; the
 * library's migrations run with the application's own at start.
 */
@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres' as const,
        url: process.env.DATABASE_URL,
        entities: [Payment],
        migrations: [...createIdempotencyMigrations(), CreateDemoPayments1764460800001],
        migrationsRun: true,
        extra: { max: Number(process.env.DATABASE_POOL_SIZE ?? 10) },
      }),
    }),
  ],
})
export class DatabaseModule {}
