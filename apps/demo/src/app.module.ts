import { DynamicModule, Module } from '@nestjs/common';
import { IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { DemoStoreConfig } from './config';
import { DatabaseModule } from './database/database.module';
import { PaymentsConsumer } from './payments/payments.consumer';
import { PaymentsController } from './payments/payments.controller';

@Module({})
export class AppModule {
  /**
   * `withConsumer`: also register the RabbitMQ handler (only when AMQP_URL is set).
   * `telemetry`: the library's OpenTelemetry metrics and spans (DEMO_METRICS).
   * `store`: where the idempotency records live (DEMO_STORE, see config.ts).
   */
  static register(options: {
    withConsumer: boolean;
    telemetry?: boolean;
    store?: DemoStoreConfig;
  }): DynamicModule {
    const redis = options.store?.redis;
    return {
      module: AppModule,
      imports: [
        DatabaseModule.register({ idempotencyRecords: !redis }),
        // Module-wide defaults from the environment, resolved once the DataSource is up.
        IdempotencyModule.forRootAsync({
          inject: [DataSource],
          useFactory: (dataSource: DataSource) => ({
            // In the database (the library's migrations made the table), or in Redis: a
            // store the module builds from its URL, connects at start and closes at shutdown.
            store: redis ? { redis } : new TypeOrmIdempotencyStore(dataSource),
            defaults: {
              lease: process.env.IDEMPOTENCY_LEASE ?? 'PT30S',
              waitTimeout: process.env.IDEMPOTENCY_WAIT_TIMEOUT ?? 'PT10S',
              ttl: process.env.IDEMPOTENCY_TTL ?? 'PT24H',
            },
            // The consumer acks its own work (noAck: false, see main.ts): the library then
            // acks replays, requeues in-flight twins after a delay and dead-letters bad deliveries.
            rmq: { noAck: false },
            telemetry: options.telemetry ?? false,
          }),
        }),
      ],
      controllers: options.withConsumer
        ? [PaymentsController, PaymentsConsumer]
        : [PaymentsController],
    };
  }
}
