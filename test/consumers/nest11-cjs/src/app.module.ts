import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { PaymentsConsumer } from './payments.consumer';
import { PaymentsController } from './payments.controller';

export const DATA_SOURCE = Symbol('DATA_SOURCE');

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: async () => {
        const dataSource = await new DataSource({
          type: 'postgres',
          url: process.env.DATABASE_URL,
        }).initialize();
        return {
          store: new TypeOrmIdempotencyStore(dataSource, { ensureSchema: true }),
          rmq: { noAck: false },
        };
      },
    }),
  ],
  controllers: [PaymentsController, PaymentsConsumer],
})
export class AppModule {}
