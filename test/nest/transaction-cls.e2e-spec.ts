import {
  Body,
  Controller,
  Global,
  INestApplication,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { Transactional, TransactionHost, ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyEngine,
  IdempotencyModule,
  IdempotencyTransaction,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { ModuleRef } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { IdempotencyTransactionRunner } from '../../libs/idempotency/src/nest/transaction/transaction-runner';
import { DataSource, EntityManager } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * completion: 'transaction' with @nestjs-cls/transactional: the interceptor
 * runs the handler in TransactionHost.withTransaction, so TransactionHost.tx,
 * a @Transactional() service the handler calls (it joins) and
 * IdempotencyTransaction.manager are one transaction, which also completes
 * the record. And the same without Nest: engine.runInTransaction.
 */
let schema: string;
let dataSource: DataSource;

@Injectable()
class LedgerService {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>) {}

  @Transactional()
  async post(account: string, amount: number): Promise<number> {
    const [row] = (await this.txHost.tx.query(
      `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, $2) RETURNING id`,
      [account, amount],
    )) as { id: number }[];
    if (amount < 0) throw new Error('negative amount');
    return row.id;
  }
}

@Controller('cls')
class ClsLedgerController {
  constructor(
    private readonly ledger: LedgerService,
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly tx: IdempotencyTransaction<EntityManager>,
  ) {}

  @Post('entries')
  @Idempotent({ completion: 'transaction' })
  async record(@Body() body: { account: string; amount: number }) {
    const entry = await this.ledger.post(body.account, body.amount);
    return { entry, sameTransaction: this.tx.manager === this.txHost.tx };
  }
}

@Global()
@Module({
  providers: [{ provide: DataSource, useFactory: () => dataSource }],
  exports: [DataSource],
})
class DataSourceModule {}

/** nestjs-cls with its transactional plugin on the test's DataSource. */
const clsModule = () =>
  ClsModule.forRoot({
    global: true,
    plugins: [
      new ClsPluginTransactional({
        imports: [DataSourceModule],
        adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: DataSource }),
      }),
    ],
  });

const rows = async (account: string) =>
  (
    (await dataSource.query(
      `SELECT count(*)::int AS n FROM "${schema}".entries WHERE account = $1`,
      [account],
    )) as { n: number }[]
  )[0].n;

beforeAll(async () => {
  schema = scratchSchema('txcls');
  dataSource = await openDataSource();
  await dataSource.query(`CREATE SCHEMA "${schema}"`);
  await dataSource.query(
    `CREATE TABLE "${schema}".entries (id serial PRIMARY KEY, account text NOT NULL, amount int NOT NULL)`,
  );
});
afterAll(async () => {
  await dropSchema(dataSource, schema);
  await dataSource.destroy();
});

describe.each(ADAPTERS)(
  'completion in a @nestjs-cls/transactional transaction, over %s',
  (adapter) => {
    let app: INestApplication;
    let url: string;
    let store: TypeOrmIdempotencyStore;

    beforeAll(async () => {
      store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      ({ app, url } = await startHttpApp(adapter, {
        imports: [DataSourceModule, clsModule(), IdempotencyModule.forRoot({ store })],
        controllers: [ClsLedgerController],
        providers: [LedgerService],
      }));
    });
    afterAll(async () => {
      await app?.close();
    });

    it('the handler, the @Transactional() service it calls and the completion are one transaction', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const first = await send(url, 'POST', '/cls/entries', { key, body: { account, amount: 3 } });
      expect(first.status).toBe(201);
      expect(first.json()).toMatchObject({ sameTransaction: true });
      const again = await send(url, 'POST', '/cls/entries', { key, body: { account, amount: 3 } });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.text).toBe(first.text);
      expect(await rows(account)).toBe(1);
      expect((await store.find({ scope: 'ClsLedgerController.record', key }))?.state).toBe(
        'COMPLETE',
      );
    });

    it('a service that throws after its insert rolls the whole transaction back, record included', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const failed = await send(url, 'POST', '/cls/entries', {
        key,
        body: { account, amount: -3 },
      });
      expect(failed.status).toBe(500);
      expect(await rows(account)).toBe(0);
      expect(await store.find({ scope: 'ClsLedgerController.record', key })).toBeNull();
    });
  },
);

describe('engine.runInTransaction, without Nest', () => {
  it("commits the action's writes with the completion; a replay runs nothing; a throw leaves nothing", async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    const engine = new IdempotencyEngine(store);
    const policy = engine.policy({ scope: 'ledger.post' });
    const account = randomUUID();
    const key = randomUUID();
    let runs = 0;
    const action = async (manager: EntityManager) => {
      runs++;
      await manager.query(`INSERT INTO "${schema}".entries (account, amount) VALUES ($1, 1)`, [
        account,
      ]);
      return { posted: account };
    };
    const first = await engine.runInTransaction(policy, { key }, action);
    const second = await engine.runInTransaction(policy, { key }, action);
    expect(first).toEqual({ kind: 'executed', value: { posted: account } });
    expect(second).toMatchObject({ kind: 'replayed', value: { posted: account } });
    expect(runs).toBe(1);
    expect(await rows(account)).toBe(1);

    const failingKey = randomUUID();
    await expect(
      engine.runInTransaction(policy, { key: failingKey }, async (manager: EntityManager) => {
        await action(manager);
        throw new Error('after the insert');
      }),
    ).rejects.toThrow('after the insert');
    expect(await rows(account)).toBe(1);
    expect(await store.find({ scope: 'ledger.post', key: failingKey })).toBeNull();
    await store.close();
  });
});

describe('a transaction asked for while the host is still being looked for', () => {
  it("waits for the lookup and runs in the host's transaction, not the store's own", async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    const moduleRef = await Test.createTestingModule({
      imports: [DataSourceModule, clsModule()],
    }).compile();
    try {
      const txHost = moduleRef.get(TransactionHost, { strict: false });
      const runner = new IdempotencyTransactionRunner(moduleRef.get(ModuleRef));
      // Preparation loads @nestjs-cls/transactional asynchronously: the runner is asked for in between.
      const preparing = runner.prepare();
      const run = runner.runnerFor(store);
      const seen = await run(async (tx) => ({
        hosts: tx === txHost.tx,
        active: txHost.isTransactionActive(),
      }));
      await preparing;
      expect(seen).toEqual({ hosts: true, active: true });
    } finally {
      await moduleRef.close();
      await store.close();
    }
  });
});
