import { DynamicModule, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { createIdempotencyMigrations } from 'nest-idempotency/typeorm';
import { Payment } from '../payments/payment.entity';
import { demoDialect } from '../config';
import { CreateDemoPayments1764460800001 } from './create-payments.migration';

/**
 * One TypeORM DataSource (through @nestjs/typeorm, as most Nest applications
 * have it) for the demo's own table and, unless they live in Redis, the
 * idempotency records; the library's migrations run with the application's
 * own at start. PostgreSQL, MySQL or MariaDB, by DATABASE_URL's scheme.
 */
@Module({})
export class DatabaseModule {
  static register(options: { idempotencyRecords: boolean }): DynamicModule {
    return {
      module: DatabaseModule,
      imports: [
        TypeOrmModule.forRootAsync({
          useFactory: () => {
            const type = demoDialect();
            const poolSize = Number(process.env.DATABASE_POOL_SIZE ?? 10);
            return {
              type,
              url: process.env.DATABASE_URL,
              entities: [Payment],
              migrations: [
                ...(options.idempotencyRecords ? createIdempotencyMigrations() : []),
                CreateDemoPayments1764460800001,
              ],
              migrationsRun: true,
              ...(type === 'postgres' ? { extra: { max: poolSize } } : { poolSize }),
            };
          },
        }),
      ],
    };
  }
}
