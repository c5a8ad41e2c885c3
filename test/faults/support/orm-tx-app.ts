/**
 * The Nest HTTP application of case 14 (case 12's kill points, with the
 * handler's transaction opened by @nestjs-cls/transactional over an ORM), in a
 * child process. Started with
 *   node -r @swc-node/register test/faults/support/orm-tx-app.ts
 * Env: FO_PG_URL, FO_SCHEMA (records table and `rows` already created),
 * FO_ORM (prisma, drizzle, kysely or typeorm), FO_POOL (default 20), FO_LEASE
 * (default 1s), FO_WAIT (default 5s). Sends `{ type: 'ready', port, pid }` over IPC.
 *
 * POST /transaction  `completion: 'transaction'` on `PgIdempotencyStore`: inserts a
 *                    row through `TransactionHost.tx` (the ORM's transaction, which
 *                    also completes the record), returns { attempt, row, pid }.
 *
 * Kill points as tx-app.ts has them; `before-commit` is reached once the
 * record's completion ran in the ORM's transaction, whose COMMIT is next.
 */
import 'reflect-metadata';
import { Controller, Global, Headers, INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClsPluginTransactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { TransactionalAdapterPrisma } from '@nestjs-cls/transactional-adapter-prisma';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql } from 'drizzle-orm';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import { ClsModule } from 'nestjs-cls';
import type { ServerResponse } from 'node:http';
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { Pool } from 'pg';
import { DataSource, EntityManager } from 'typeorm';
import { TransactionalAdapterKysely } from '../../support/transactional-adapter-kysely';
import { KILL_POINTS, KillPoint, POINT_HEADER, RowReply, TAG_HEADER } from './kill-points';
import type { ChildMessage } from './protocol';

const schema = required('FO_SCHEMA');
const orm = required('FO_ORM');
const lease = process.env.FO_LEASE ?? '1s';
const waitTimeout = process.env.FO_WAIT ?? '5s';
const url = required('FO_PG_URL');
const pool = new Pool({ connectionString: url, max: Number(process.env.FO_POOL ?? 20) });

const ORM_CLIENT = Symbol('ORM_CLIENT');
const INSERT = `INSERT INTO "${schema}".rows (mode, "key", attempt, pid) VALUES ($1, $2, $3, $4) RETURNING n`;

/** The kill point the current request asked for, if any. */
const current = new AsyncLocalStorage<{ tag: string; point: KillPoint }>();

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

const store = new PgIdempotencyStore(pool, {
  schema,
  logger: {
    warn: (m) => console.warn(`[orm-tx-app ${process.pid}] store warn: ${m}`),
    error: (m) => console.error(`[orm-tx-app ${process.pid}] store error: ${m}`),
  },
});
// `before-commit`: the completion ran in the ORM's transaction; its COMMIT is next.
const transactional = store.transactional;
Object.assign(store, {
  transactional: {
    ...transactional,
    completeIn: async (...args: Parameters<typeof transactional.completeIn>) => {
      const stored = await transactional.completeIn(...args);
      await reach('before-commit');
      return stored;
    },
  },
});

interface Orm {
  client: unknown;
  adapter: ConstructorParameters<typeof ClsPluginTransactional>[0]['adapter'];
  /** Inserts the row through the transaction; its `n`. */
  insert(tx: unknown, values: unknown[]): Promise<number>;
  close(): Promise<void>;
}

interface PrismaRaw {
  $queryRawUnsafe(text: string, ...values: unknown[]): Promise<{ n: bigint }[]>;
  $disconnect(): Promise<void>;
}

async function openOrm(): Promise<Orm> {
  if (orm === 'typeorm') {
    const dataSource = await new DataSource({
      type: 'postgres',
      url,
      extra: { max: 20 },
    }).initialize();
    return {
      client: dataSource,
      adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: ORM_CLIENT }),
      insert: async (tx, values) =>
        Number(((await (tx as EntityManager).query(INSERT, values)) as { n: string }[])[0].n),
      close: () => dataSource.destroy(),
    };
  }
  if (orm === 'prisma') {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { PrismaClient } = require('../../support/prisma/generated/client') as {
      PrismaClient: new (options: { adapter: PrismaPg }) => PrismaRaw;
    };
    const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
    return {
      client: prisma,
      adapter: new TransactionalAdapterPrisma({ prismaInjectionToken: ORM_CLIENT }),
      insert: async (tx, values) =>
        Number((await (tx as PrismaRaw).$queryRawUnsafe(INSERT, ...values))[0].n),
      close: () => prisma.$disconnect(),
    };
  }
  if (orm === 'drizzle') {
    const db = drizzle({ client: pool });
    return {
      client: db,
      adapter: new TransactionalAdapterDrizzleOrm({ drizzleInstanceToken: ORM_CLIENT }),
      insert: async (tx, [mode, key, attempt, pid]) => {
        const done = await (tx as NodePgDatabase).execute<{ n: string }>(
          sql`INSERT INTO ${sql.identifier(schema)}.rows (mode, "key", attempt, pid) VALUES (${mode}, ${key}, ${attempt}, ${pid}) RETURNING n`,
        );
        return Number(done.rows[0].n);
      },
      close: async () => undefined,
    };
  }
  if (orm === 'kysely') {
    const db = new Kysely<object>({ dialect: new PostgresDialect({ pool }) });
    return {
      client: db,
      adapter: new TransactionalAdapterKysely({ kyselyInstanceToken: ORM_CLIENT }),
      insert: async (tx, values) => {
        const done = await (tx as Kysely<object>).executeQuery<{ n: string }>(
          CompiledQuery.raw(INSERT, values),
        );
        return Number(done.rows[0].n);
      },
      close: async () => undefined,
    };
  }
  throw new Error(`FO_ORM: unknown ORM ${orm}`);
}

let app: INestApplication | undefined;
let opened: Orm | undefined;

async function main(): Promise<void> {
  const o = (opened = await openOrm());

  @Controller()
  class RowsController {
    constructor(private readonly txHost: TransactionHost) {}

    @Post('transaction')
    @Idempotent({ scope: 'faults.orm', completion: 'transaction', lease, waitTimeout, ttl: '1h' })
    async inTransaction(@Headers('idempotency-key') key: string): Promise<RowReply> {
      await reach('before-insert');
      const attempt = randomUUID();
      const row = await o.insert(this.txHost.tx, [orm, key, attempt, process.pid]);
      await reach('after-insert');
      return { attempt, row, pid: process.pid };
    }
  }

  @Global()
  @Module({ providers: [{ provide: ORM_CLIENT, useValue: o.client }], exports: [ORM_CLIENT] })
  class OrmModule {}

  @Module({
    imports: [
      OrmModule,
      ClsModule.forRoot({
        global: true,
        plugins: [new ClsPluginTransactional({ imports: [OrmModule], adapter: o.adapter })],
      }),
      IdempotencyModule.forRoot({ store, purge: false }),
    ],
    controllers: [RowsController],
  })
  class OrmTxAppModule {}

  app = await NestFactory.create(OrmTxAppModule, {
    logger: ['error', 'warn'],
    abortOnError: false,
  });
  // As in tx-app.ts: first in the chain, so the whole request sees its point.
  app.use((req: { headers: Record<string, unknown> }, res: ServerResponse, next: () => void) => {
    const point = req.headers[POINT_HEADER] as KillPoint | undefined;
    const tag = req.headers[TAG_HEADER] as string | undefined;
    if (!point || !tag || !KILL_POINTS.includes(point)) return next();
    if (point === 'after-commit') {
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
  await opened?.close().catch(() => undefined);
  await pool.end().catch(() => undefined);
  process.exit(code);
}

process.on('SIGTERM', () => void stop(0));
process.on('disconnect', () => void stop(0));
main().catch((error: unknown) => {
  console.error(error);
  void stop(1);
});
