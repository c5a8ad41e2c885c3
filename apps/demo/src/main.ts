import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Transport } from '@nestjs/microservices';
import { IdempotencyEngine } from 'nest-idempotency';
import path from 'node:path';
import { EmbeddedServer, startEmbeddedPostgres } from '../../../tools/embedded-postgres';
import { AppModule } from './app.module';
import { demoDialect, demoStore } from './config';
import { startDemoMetrics } from './metrics';

const logger = new Logger('Demo');

async function main(): Promise<void> {
  const store = demoStore();
  let embedded: EmbeddedServer | undefined;
  if (!process.env.DATABASE_URL) {
    // Kept across restarts under a git-ignored folder of the project.
    const dataDir =
      process.env.DEMO_DATA_DIR ?? path.resolve(__dirname, '../../../.embedded-pg/demo');
    embedded = await startEmbeddedPostgres({
      dataDir,
      persistent: true,
      port: Number(process.env.DEMO_PG_PORT ?? 54329),
    });
    process.env.DATABASE_URL = embedded.url;
    logger.log(`embedded PostgreSQL at ${embedded.url} (data in ${dataDir})`);
  } else {
    const names = { postgres: 'PostgreSQL', mysql: 'MySQL', mariadb: 'MariaDB' } as const;
    logger.log(`using DATABASE_URL (${names[demoDialect()]})`);
  }
  logger.log(
    store.redis
      ? `idempotency records in Redis at REDIS_URL, key prefix ${store.redis.keyPrefix}; payments in the database`
      : 'idempotency records in the database, beside the payments (set DEMO_STORE=redis and REDIS_URL for Redis)',
  );

  // Before the application: the module's telemetry uses the global meter provider.
  const demoMetrics = await startDemoMetrics(process.env.DEMO_METRICS);
  if (demoMetrics) logger.log(`metrics (OpenTelemetry) ${demoMetrics.description}`);
  else logger.log('metrics off (set DEMO_METRICS=console or DEMO_METRICS=prometheus)');

  const amqpUrl = process.env.AMQP_URL;
  const app = await NestFactory.create(
    AppModule.register({
      withConsumer: Boolean(amqpUrl),
      telemetry: Boolean(demoMetrics),
      store,
    }),
  );
  // What the library did with each request or message, by key digest (never the key).
  const events = new Logger('Idempotency');
  app
    .get(IdempotencyEngine)
    .onEvent((event) =>
      events.log(`${event.type} ${'keyDigest' in event ? event.keyDigest : event.scope}`),
    );
  if (amqpUrl) {
    // A hybrid application, without inheritAppConfig: @Idempotent brings its own
    // interceptor, so the message handler is protected all the same.
    app.connectMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [amqpUrl],
        queue: process.env.AMQP_QUEUE ?? 'demo-payments',
        noAck: false,
        queueOptions: { durable: true },
      },
    });
    await app.startAllMicroservices();
    logger.log(`RabbitMQ consumer listening on queue ${process.env.AMQP_QUEUE ?? 'demo-payments'}`);
  } else {
    logger.log(
      'RabbitMQ consumer off (set AMQP_URL, e.g. amqp://guest:guest@127.0.0.1:5672, to start it)',
    );
  }

  await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
  const url = await app.getUrl();
  const base = url.replace('[::1]', 'localhost');
  logger.log(`listening on ${base}`);
  console.log(`
Try a payment twice with the same key; the second answer is a replay (Idempotent-Replayed: true)
and only one row is written:

  curl -i -X POST ${base}/payments -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' -d '{"amount":1000}'
  curl -i -X POST ${base}/payments -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' -d '{"amount":1000}'
  curl -s ${base}/payments
`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.log(`${signal}: shutting down`);
    await app.close();
    await demoMetrics?.shutdown();
    // Ctrl-C in a terminal also reaches the server itself, which may already be stopping.
    await embedded?.stop().catch(() => undefined);
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

main().catch((error: unknown) => {
  logger.error(error instanceof Error ? error.message : String(error));
  process.exit(1);
});
