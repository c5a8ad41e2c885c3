// The application under test for `npm run bench:http` and `npm run bench`, in its own process.
// BENCH_CACHE_MAX_ENTRIES=n turns on the module's local replay cache (cache: { maxEntries: n }).
// BENCH_STORE=memory uses the in-memory store (no database); default: TypeOrmIdempotencyStore.
// BENCH_STORE=mariadb: TypeOrmIdempotencyStore on a `mariadb` DataSource at DATABASE_URL, table BENCH_SCHEMA;
// BENCH_STORE=redis: RedisIdempotencyStore on the server at DATABASE_URL, key prefix BENCH_SCHEMA, on a
// node-redis client; BENCH_REDIS_CLIENT=ioredis or ioredis-pipelined (enableAutoPipelining) on ioredis instead.
// BENCH_STORE=peer-memory / peer-redis: node-idempotency instead (bench/peer), on its in-memory adapter or on
// Redis at DATABASE_URL (key prefix BENCH_SCHEMA); only its `/idempotent` route.
// Every handler answers with a run counter, so a replay can be told from a second execution.
// IPC: { type: 'trips' } answers { roundTrips } (the store's, counted in the driver: bench/lib/driver-count.ts);
// { type: 'rss' } answers { rss }; { type: 'cpu' } answers { cpuMicros } (user + system); { type: 'memory' } forces a full GC first when the
// process runs with --expose-gc and answers { memory: process.memoryUsage(), gc }.
import 'reflect-metadata';
import {
  Body,
  CallHandler,
  Controller,
  ExecutionContext,
  HttpCode,
  Injectable,
  Module,
  NestInterceptor,
  Post,
  Type,
  UseInterceptors,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { AddressInfo } from 'node:net';
import {
  IdempotencyStore,
  Idempotent,
  IdempotencyModule,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { createClient } from 'redis';
import IORedis from 'ioredis';
import { DataSource } from 'typeorm';
import {
  allQueries,
  countRedis,
  installDriverCounter,
  installMysqlCounter,
} from '../lib/driver-count';
import { PeerStore } from '../peer/load';
import { peerModule } from '../peer/module';

let runs = 0;

/** Does nothing: what Nest's interceptor machinery alone costs a route (a diagnostic baseline). */
@Injectable()
class PassThroughInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle();
  }
}

@Controller()
class BenchController {
  @Post('plain')
  @HttpCode(200)
  plain(@Body() body: { n: number }) {
    return { ok: true, n: body.n };
  }

  @Post('passthrough')
  @HttpCode(200)
  @UseInterceptors(PassThroughInterceptor)
  passthrough(@Body() body: { n: number }) {
    return { ok: true, n: body.n };
  }

  @Post('idempotent')
  @HttpCode(200)
  @Idempotent()
  idempotent(@Body() body: { n: number }) {
    return { ok: true, n: body.n, run: ++runs };
  }
}

/** The application's root module: this library on the store BENCH_STORE names, or the peer. */
async function benchModule(): Promise<{
  module: Type;
  dataSource?: DataSource;
  /** The Redis client the store runs on, closed at shutdown. */
  redis?: { close(): Promise<unknown> };
}> {
  const kind = process.env.BENCH_STORE ?? 'postgres';
  if (kind === 'peer-memory' || kind === 'peer-redis')
    return {
      module: peerModule(
        kind as PeerStore,
        process.env.DATABASE_URL ?? '',
        process.env.BENCH_SCHEMA ?? '',
      ),
    };
  let dataSource: DataSource | undefined;
  let redis: { close(): Promise<unknown> } | undefined;
  let store: IdempotencyStore;
  const poolSize = Number(process.env.POOL_SIZE ?? 32);
  if (process.env.BENCH_STORE === 'memory') {
    store = new InMemoryIdempotencyStore();
  } else if (process.env.BENCH_STORE === 'redis') {
    // One client, as an application shares its own (node-redis pipelines every command on it).
    const client = process.env.BENCH_REDIS_CLIENT ?? 'node-redis';
    if (client === 'ioredis' || client === 'ioredis-pipelined') {
      // Round trips are not counted on this client (bench/lib/driver-count.ts wraps node-redis).
      const io = new IORedis(process.env.DATABASE_URL ?? '', {
        enableAutoPipelining: client === 'ioredis-pipelined',
      });
      io.on('error', (error) => console.error(error));
      redis = { close: () => io.quit() };
      store = new RedisIdempotencyStore(io, { keyPrefix: process.env.BENCH_SCHEMA });
    } else {
      const nodeRedis = countRedis(createClient({ url: process.env.DATABASE_URL }), 'store');
      await nodeRedis.connect();
      redis = nodeRedis;
      store = new RedisIdempotencyStore(nodeRedis, { keyPrefix: process.env.BENCH_SCHEMA });
    }
  } else if (process.env.BENCH_STORE === 'mariadb') {
    installMysqlCounter();
    dataSource = await new DataSource({
      type: 'mariadb',
      url: process.env.DATABASE_URL,
      poolSize,
      extra: { maxIdle: poolSize, idleTimeout: 3_600_000 },
    }).initialize();
    store = new TypeOrmIdempotencyStore(dataSource, { table: process.env.BENCH_SCHEMA });
  } else {
    installDriverCounter();
    dataSource = await new DataSource({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      extra: { max: poolSize },
    }).initialize();
    store = new TypeOrmIdempotencyStore(dataSource, { schema: process.env.BENCH_SCHEMA });
  }

  const cacheEntries = Number(process.env.BENCH_CACHE_MAX_ENTRIES ?? 0);
  const cache = cacheEntries > 0 ? { maxEntries: cacheEntries } : false;

  @Module({
    imports: [IdempotencyModule.forRoot({ store, purge: false, cache })],
    controllers: [BenchController],
  })
  class BenchModule {}
  return { module: BenchModule, dataSource, redis };
}

async function main() {
  const { module: BenchModule, dataSource, redis } = await benchModule();
  const app =
    process.env.ADAPTER === 'fastify'
      ? await NestFactory.create(BenchModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(BenchModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  process.send?.({ port });
  process.on('message', (message: { type?: string }) => {
    if (message?.type === 'rss') process.send?.({ rss: process.memoryUsage().rss });
    if (message?.type === 'trips') process.send?.({ roundTrips: allQueries() });
    // CPU time this process has used (user + system, µs): the per-request cost whatever the load generator gets.
    if (message?.type === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send?.({ cpuMicros: user + system, userMicros: user, systemMicros: system });
    }
    if (message?.type === 'memory') {
      const gc = (globalThis as { gc?: () => void }).gc;
      // Twice: the first pass can leave garbage that only finalizers released.
      gc?.();
      gc?.();
      process.send?.({ memory: process.memoryUsage(), gc: gc !== undefined });
    }
  });
  process.on(
    'SIGTERM',
    () =>
      void app
        .close()
        .then(() => dataSource?.destroy())
        .then(() => redis?.close())
        .then(() => process.exit(0)),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
