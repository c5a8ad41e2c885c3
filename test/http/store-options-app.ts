/**
 * For http-store-options.e2e-spec.ts: boots the module in a fresh process,
 *   node -r @swc-node/register test/http/store-options-app.ts
 * on the in-memory store (STORE=memory) or on `store: { redis: { url } }`
 * (STORE=redis, REDIS_URL, KEY_PREFIX), closes it, and prints whether the
 * `redis` package was loaded (any file of `redis` or `@redis/*` in the
 * require cache) as `{"loaded":true|false}`.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  IdempotencyModule,
  IdempotencyModuleOptions,
  InMemoryIdempotencyStore,
} from '../../libs/idempotency/src/index';

const store: IdempotencyModuleOptions['store'] =
  process.env.STORE === 'redis'
    ? { redis: { url: process.env.REDIS_URL!, keyPrefix: process.env.KEY_PREFIX } }
    : new InMemoryIdempotencyStore();

@Module({ imports: [IdempotencyModule.forRoot({ store, purge: false })] })
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  await app.close();
  const loaded = Object.keys(require.cache).some((file) =>
    /[\\/]node_modules[\\/](redis|@redis[\\/][^\\/]+)[\\/]/.test(file),
  );
  process.stdout.write(JSON.stringify({ loaded }));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
