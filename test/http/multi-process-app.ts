/**
 * One application process for http-multi-process.e2e-spec.ts, started with
 *   node -r @swc-node/register test/http/multi-process-app.ts
 * Env: the records' store as test/support/stores.ts describes it (IDEM_STORE,
 * IDEM_STORE_URL, IDEM_STORE_NAMESPACE: PostgreSQL, Redis or MariaDB; the
 * records table already created by the parent), MP_LEDGER_URL and
 * MP_LEDGER_SCHEMA (the PostgreSQL schema holding `executions`, one row per
 * execution), MP_ADAPTER (express | fastify). Listens on port 0 and sends
 * `{ port }` to the parent over IPC; shuts down on SIGTERM or when the parent goes away.
 */
import 'reflect-metadata';
import { Body, Controller, INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Idempotent, IdempotencyModule, IdempotencyStore } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { storeFromEnv } from '../support/stores';

const ledgerUrl = required('MP_LEDGER_URL');
const ledger = required('MP_LEDGER_SCHEMA');
const adapter = process.env.MP_ADAPTER === 'fastify' ? 'fastify' : 'express';
/** How long the handler works, so that duplicates really overlap it. */
const WORK_MS = 250;

const dataSource = new DataSource({ type: 'postgres', url: ledgerUrl, extra: { max: 10 } });
let records: { store: IdempotencyStore; close: () => Promise<void> } | undefined;

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent({ waitTimeout: '20s' })
  async charge(@Body() body: { amount: number }) {
    const charge = randomUUID();
    await dataSource.query(`INSERT INTO "${ledger}".executions (pid, charge) VALUES ($1, $2)`, [
      process.pid,
      charge,
    ]);
    await delay(WORK_MS);
    return { charge, amount: body.amount, pid: process.pid };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: async () => {
        records = await storeFromEnv(process.env);
        return { store: records.store };
      },
    }),
  ],
  controllers: [ChargesController],
})
class AppModule {}

let app: INestApplication | undefined;

async function main(): Promise<void> {
  await dataSource.initialize();
  app =
    adapter === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), {
          logger: ['error', 'warn'],
          abortOnError: false,
        })
      : await NestFactory.create(AppModule, { logger: ['error', 'warn'], abortOnError: false });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  process.send!({ port });
}

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  await app?.close().catch(() => undefined);
  await records?.close().catch(() => undefined);
  if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
  process.exit(code);
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

process.on('SIGTERM', () => void stop(0));
process.on('disconnect', () => void stop(0));
main().catch((error: unknown) => {
  console.error(error);
  void stop(1);
});
