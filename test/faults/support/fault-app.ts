/**
 * A Nest HTTP application in a child process for the fault specs. Started with
 *   node -r @swc-node/register test/faults/support/fault-app.ts
 * Env: FA_PG_URL, FA_SCHEMA (records table and `executions` already created),
 * FA_POOL (pool size, default 10), FA_OP_TIMEOUT_MS, FA_WORK_MS (time /charges
 * spends in its handler), FA_HELD_LEASE (the lease of /held, default 5s).
 * Sends `{ type: 'ready', port, pid }` over IPC.
 *
 * POST /charges  inserts an execution row, works FA_WORK_MS, returns { charge, pid, amount }.
 * POST /held     inserts an execution row, reports `entered` with the body's `tag`,
 *                and answers only after the parent sends `{ cmd: 'release', id: tag }`.
 */
import 'reflect-metadata';
import { Body, Controller, Headers, INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import type { ChildCommand, ChildMessage } from './protocol';

const url = required('FA_PG_URL');
const schema = required('FA_SCHEMA');
const workMs = Number(process.env.FA_WORK_MS ?? 200);

const dataSource = new DataSource({
  type: 'postgres',
  url,
  extra: { max: Number(process.env.FA_POOL ?? 10) },
});
const store = new TypeOrmIdempotencyStore(dataSource, {
  schema,
  operationTimeoutMs: Number(process.env.FA_OP_TIMEOUT_MS ?? 5000),
  logger: {
    warn: (m) => console.warn(`[app ${process.pid}] store warn: ${m}`),
    error: (m) => console.error(`[app ${process.pid}] store error: ${m}`),
  },
});

const gates = new Map<string, () => void>();
const released = new Set<string>();

function send(message: ChildMessage): void {
  if (process.connected) process.send!(message);
}

async function recordExecution(scope: string, key: string, token: string): Promise<void> {
  await dataSource.query(
    `INSERT INTO "${schema}".executions (scope, "key", pid, token) VALUES ($1, $2, $3, $4)`,
    [scope, key, process.pid, token],
  );
}

@Controller()
class FaultController {
  @Post('charges')
  @Idempotent({ scope: 'charges', waitTimeout: '20s' })
  async charge(@Headers('idempotency-key') key: string, @Body() body: { amount: number }) {
    const charge = randomUUID();
    await recordExecution('charges', key, charge);
    await delay(workMs);
    return { charge, pid: process.pid, amount: body.amount };
  }

  @Post('held')
  @Idempotent({ scope: 'held', lease: process.env.FA_HELD_LEASE ?? '5s', waitTimeout: '10s' })
  async held(@Headers('idempotency-key') key: string, @Body() body: { tag: string }) {
    const charge = randomUUID();
    await recordExecution('held', key, charge);
    send({ type: 'entered', id: body.tag, token: charge });
    if (!released.has(body.tag)) await new Promise<void>((r) => gates.set(body.tag, r));
    return { charge, pid: process.pid };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store, purge: false })],
  controllers: [FaultController],
})
class FaultAppModule {}

let app: INestApplication | undefined;

async function main(): Promise<void> {
  await dataSource.initialize();
  app = await NestFactory.create(FaultAppModule, {
    logger: ['error', 'warn'],
    abortOnError: false,
  });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  process.on('message', (command: ChildCommand) => {
    if (command.cmd !== 'release') return;
    released.add(command.id);
    gates.get(command.id)?.();
    gates.delete(command.id);
  });
  send({ type: 'ready', port, pid: process.pid });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  await app?.close().catch(() => undefined);
  if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
  process.exit(code);
}

process.on('SIGTERM', () => void stop(0));
process.on('disconnect', () => void stop(0));
main().catch((error: unknown) => {
  console.error(error);
  void stop(1);
});
