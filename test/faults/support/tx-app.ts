/**
 * The Nest HTTP application of case 12 (completion in the handler's
 * transaction), in a child process. Started with
 *   node -r @swc-node/register test/faults/support/tx-app.ts
 * Env: FT_PG_URL, FT_SCHEMA (records table and `rows` already created),
 * FT_POOL (pool size, default 20), FT_LEASE (default 1s), FT_WAIT (waitTimeout,
 * default 5s). Sends `{ type: 'ready', port, pid }` over IPC.
 *
 * POST /transaction  `completion: 'transaction'`: inserts a row through
 *                    IdempotencyTransaction.manager, returns { attempt, row, pid }.
 * POST /separate     the default `completion: 'separate'`: inserts the same row
 *                    through the DataSource (autocommit), returns the same.
 *
 * A request may name a kill point (header x-fault-point, with x-fault-tag): when
 * its call reaches that point the app reports `{ type: 'entered', id: tag,
 * token: point }` and holds that call there for good; the test then SIGKILLs
 * the process. The points, in the order a call passes them:
 *
 *   before-insert  the handler began (transaction: its transaction is open).
 *   after-insert   the insert returned (transaction: not committed; separate:
 *                  committed, the record still IN_PROGRESS).
 *   before-commit  transaction: the handler returned and the record's completion
 *                  ran in its transaction; COMMIT is next (TypeORM's
 *                  beforeTransactionCommit). Separate: the handler returned; the
 *                  completion statement is next (store.complete).
 *   after-commit   the record is COMPLETE and committed; the response is about to
 *                  be written (its res.end), not one byte of it sent.
 */
import 'reflect-metadata';
import { Controller, Headers, INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { ServerResponse } from 'node:http';
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { Idempotent, IdempotencyModule, IdempotencyTransaction } from 'nest-idempotency';
import type { Lease, StoredPayload } from 'nest-idempotency/core';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  DataSource,
  EntityManager,
  EntitySubscriberInterface,
  EventSubscriber,
  QueryRunner,
  TransactionCommitEvent,
} from 'typeorm';
import { KILL_POINTS, KillPoint, POINT_HEADER, RowReply, TAG_HEADER } from './kill-points';
import type { ChildMessage } from './protocol';

const schema = required('FT_SCHEMA');
const lease = process.env.FT_LEASE ?? '1s';
const waitTimeout = process.env.FT_WAIT ?? '5s';

/** The kill point the current request asked for, if any. */
const current = new AsyncLocalStorage<{ tag: string; point: KillPoint }>();
/** The query runners of handlers' transactions (so no other transaction's commit is held). */
const handlerTransactions = new WeakSet<QueryRunner>();

function send(message: ChildMessage): void {
  if (process.connected) process.send!(message);
}

/** Resolves at once, unless the request asked to be killed here: then it reports and never resolves. */
function reach(point: KillPoint): Promise<void> {
  const at = current.getStore();
  if (at?.point !== point) return Promise.resolve();
  send({ type: 'entered', id: at.tag, token: point });
  return new Promise<void>(() => undefined);
}

@EventSubscriber()
class CommitGate implements EntitySubscriberInterface {
  beforeTransactionCommit(event: TransactionCommitEvent): Promise<void> | void {
    if (event.queryRunner && handlerTransactions.has(event.queryRunner))
      return reach('before-commit');
  }
}

/** The separate completion's statement, held at `before-commit` when asked. */
class GatedStore extends TypeOrmIdempotencyStore {
  override async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    await reach('before-commit');
    return super.complete(lease, payload);
  }
}

const dataSource = new DataSource({
  type: 'postgres',
  url: required('FT_PG_URL'),
  extra: { max: Number(process.env.FT_POOL ?? 20) },
  subscribers: [CommitGate],
});
const store = new GatedStore(dataSource, {
  schema,
  logger: {
    warn: (m) => console.warn(`[tx-app ${process.pid}] store warn: ${m}`),
    error: (m) => console.error(`[tx-app ${process.pid}] store error: ${m}`),
  },
});

const INSERT = `INSERT INTO "${schema}".rows (mode, "key", attempt, pid) VALUES ($1, $2, $3, $4) RETURNING n`;

@Controller()
class RowsController {
  constructor(private readonly tx: IdempotencyTransaction<EntityManager>) {}

  @Post('transaction')
  @Idempotent({ scope: 'faults.tx', completion: 'transaction', lease, waitTimeout, ttl: '1h' })
  async inTransaction(@Headers('idempotency-key') key: string): Promise<RowReply> {
    await reach('before-insert');
    const manager = this.tx.manager;
    handlerTransactions.add(manager.queryRunner!);
    const attempt = randomUUID();
    const [{ n }] = (await manager.query(INSERT, ['transaction', key, attempt, process.pid])) as {
      n: string;
    }[];
    await reach('after-insert');
    return { attempt, row: Number(n), pid: process.pid };
  }

  @Post('separate')
  @Idempotent({ scope: 'faults.separate', lease, waitTimeout, ttl: '1h' })
  async separate(@Headers('idempotency-key') key: string): Promise<RowReply> {
    await reach('before-insert');
    const attempt = randomUUID();
    const [{ n }] = (await dataSource.query(INSERT, ['separate', key, attempt, process.pid])) as {
      n: string;
    }[];
    await reach('after-insert');
    return { attempt, row: Number(n), pid: process.pid };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store, purge: false })],
  controllers: [RowsController],
})
class TxAppModule {}

let app: INestApplication | undefined;

async function main(): Promise<void> {
  await dataSource.initialize();
  app = await NestFactory.create(TxAppModule, { logger: ['error', 'warn'], abortOnError: false });
  // First in the chain, so the rest of the request (interceptor, handler, completion) sees the
  // point, and so that its res.end sits under the one the adapter holds the response with.
  app.use((req: { headers: Record<string, unknown> }, res: ServerResponse, next: () => void) => {
    const point = req.headers[POINT_HEADER] as KillPoint | undefined;
    const tag = req.headers[TAG_HEADER] as string | undefined;
    if (!point || !tag || !KILL_POINTS.includes(point)) return next();
    if (point === 'after-commit') {
      // Reached once the adapter lets the held response go: after the commit (transaction)
      // or the completion (separate). Nothing is written; the process is killed here.
      res.end = (() => {
        send({ type: 'entered', id: tag, token: point });
        return res;
      }) as ServerResponse['end'];
    }
    current.run({ tag, point }, next);
  });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
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
