/**
 * The Nest HTTP application of fault-app.ts on another store: Redis or MariaDB,
 * built from FS_STORE (a JSON StoreConfig, see stores.ts). Executions are
 * still rows in PostgreSQL (FS_PG_URL, schema FS_SCHEMA, table `executions`).
 * Started with `node -r @swc-node/register test/faults/support/store-app.ts`;
 * sends `{ type: 'ready', port, pid }` over IPC.
 *
 * POST /charges  inserts an execution row, works FS_WORK_MS, returns { charge, pid, amount }.
 * POST /held     inserts an execution row, reports `entered` with the body's `tag`,
 *                and answers only after the parent sends `{ cmd: 'release', id: tag }`.
 */
import 'reflect-metadata';
import { Body, Controller, Headers, INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import type { ChildCommand, ChildMessage } from './protocol';
import { OpenedStore, openStore, recordExecution, StoreConfig } from './stores';

const config = JSON.parse(required('FS_STORE')) as StoreConfig;
const schema = required('FS_SCHEMA');
const workMs = Number(process.env.FS_WORK_MS ?? 20);
const pg = new DataSource({ type: 'postgres', url: required('FS_PG_URL'), extra: { max: 5 } });

const gates = new Map<string, () => void>();
const released = new Set<string>();

function send(message: ChildMessage): void {
  if (process.connected) process.send!(message);
}

@Controller()
class StoreFaultController {
  @Post('charges')
  @Idempotent({ scope: 'charges', waitTimeout: '5s' })
  async charge(@Headers('idempotency-key') key: string, @Body() body: { amount: number }) {
    const charge = await recordExecution(pg, schema, 'charges', key);
    await delay(workMs);
    return { charge, pid: process.pid, amount: body.amount };
  }

  @Post('held')
  @Idempotent({ scope: 'held', lease: '10s', waitTimeout: '0s' })
  async held(@Headers('idempotency-key') key: string, @Body() body: { tag: string }) {
    const charge = await recordExecution(pg, schema, 'held', key);
    send({ type: 'entered', id: body.tag, token: charge });
    if (!released.has(body.tag)) await new Promise<void>((r) => gates.set(body.tag, r));
    return { charge, pid: process.pid };
  }
}

let app: INestApplication | undefined;
let opened: OpenedStore | undefined;

async function main(): Promise<void> {
  await pg.initialize();
  opened = await openStore(config, {
    warn: (m) => console.warn(`[app ${process.pid}] store warn: ${m}`),
    error: (m) => console.error(`[app ${process.pid}] store error: ${m}`),
  });
  @Module({
    imports: [IdempotencyModule.forRoot({ store: opened.store, purge: false })],
    controllers: [StoreFaultController],
  })
  class StoreFaultAppModule {}
  app = await NestFactory.create(StoreFaultAppModule, {
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
  await opened?.close().catch(() => undefined);
  if (pg.isInitialized) await pg.destroy().catch(() => undefined);
  process.exit(code);
}

process.on('SIGTERM', () => void stop(0));
process.on('disconnect', () => void stop(0));
main().catch((error: unknown) => {
  console.error(error);
  void stop(1);
});
