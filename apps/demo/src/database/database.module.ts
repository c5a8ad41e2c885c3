import { Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { createIdempotencyMigration } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { Payment } from '../payments/payment.entity';
import { CreateDemoPayments1764460800001 } from './create-payments.migration';

/** One TypeORM DataSource for the demo's own table and the idempotency records; migrations run at start. */
@Global()
@Module({
  providers: [
    {
      provide: DataSource,
      useFactory: async () => {
        const dataSource = new DataSource({
          type: 'postgres',
          url: process.env.DATABASE_URL,
          entities: [Payment],
          migrations: [createIdempotencyMigration(), CreateDemoPayments1764460800001],
          migrationsRun: true,
          extra: { max: Number(process.env.DATABASE_POOL_SIZE ?? 10) },
        });
        return dataSource.initialize();
      },
    },
  ],
  exports: [DataSource],
})
export class DatabaseModule implements OnApplicationShutdown {
  constructor(@Inject(DataSource) private readonly dataSource: DataSource) {}

  async onApplicationShutdown(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy();
  }
}
