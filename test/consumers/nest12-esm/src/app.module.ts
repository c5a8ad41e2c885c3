import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nest-idempotency';
import { createIdempotencyMigrations, TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { PaymentsController } from './payments.controller.js';
import { PaymentsMessages } from './payments.messages.js';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        migrations: [...createIdempotencyMigrations()],
        migrationsRun: true,
      }),
    }),
    IdempotencyModule.forRootAsync({
      inject: [DataSource],
      useFactory: (dataSource: DataSource) => ({ store: new TypeOrmIdempotencyStore(dataSource) }),
    }),
  ],
  controllers: [PaymentsController, PaymentsMessages],
})
export class AppModule {}
