import { Body, Controller, Global, Inject, INestApplication, Module, Post } from '@nestjs/common';
import { ClsPluginTransactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { TransactionalAdapterPrisma } from '@nestjs-cls/transactional-adapter-prisma';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, serial, text } from 'drizzle-orm/pg-core';
import { Generated, Kysely, PostgresDialect } from 'kysely';
import { ClsModule } from 'nestjs-cls';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyStore,
} from 'nest-idempotency';
import type { Lease } from 'nest-idempotency/core';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { Pool } from 'pg';
import { DataSource, EntityManager } from 'typeorm';
import { send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { generatePrismaClient } from '../support/prisma/generate';
import { TransactionalAdapterKysely } from '../support/transactional-adapter-kysely';

/**
 * completion: 'transaction' with @nestjs-cls/transactional over each ORM's
 * adapter (Prisma, Drizzle, Kysely, TypeORM), on the real PostgreSQL: the
 * handler writes through `TransactionHost.tx`, and the store completes the
 * record through the same transaction (the pg pool store, or the TypeORM
 * store as the front). Looked at from other sessions: the handler's row and
 * the completion appear together at the commit; a commit that fails (a
 * deferred foreign key) leaves neither, and the key runs again; a duplicate
 * replays without running.
 */
const ORM_CLIENT = Symbol('ORM_CLIENT');
const INSERT = Symbol('INSERT');
const SCOPE = 'EntriesController.record';

type Insert = (tx: unknown, account: string, amount: number) => Promise<void>;

interface Orm {
  /** The application's client (the token the adapter injects). */
  client: unknown;
  adapter: ConstructorParameters<typeof ClsPluginTransactional>[0]['adapter'];
  insert: Insert;
  close(): Promise<void>;
}

interface Case {
  orm: 'Prisma' | 'Drizzle' | 'Kysely' | 'TypeORM';
  store: 'pg Pool' | 'TypeORM DataSource';
}

const CASES: Case[] = [
  { orm: 'Prisma', store: 'pg Pool' },
  { orm: 'Drizzle', store: 'pg Pool' },
  { orm: 'Kysely', store: 'pg Pool' },
  { orm: 'TypeORM', store: 'TypeORM DataSource' },
  { orm: 'Prisma', store: 'TypeORM DataSource' },
  { orm: 'Kysely', store: 'TypeORM DataSource' },
];

let schema: string;
let dataSource: DataSource;

/** Handlers told to wait: the test opens each one's gate once it has looked from outside. */
const gates = new Map<string, { reached: () => void; open: Promise<void> }>();

function hold(account: string): { reached: Promise<void>; open: () => void } {
  let reached!: () => void;
  let open!: () => void;
  const reachedP = new Promise<void>((resolve) => (reached = resolve));
  const openP = new Promise<void>((resolve) => (open = resolve));
  gates.set(account, { reached, open: openP });
  return { reached: reachedP, open };
}

@Controller('orm')
class EntriesController {
  constructor(
    private readonly txHost: TransactionHost,
    @Inject(INSERT) private readonly insert: Insert,
  ) {}

  @Post('entries')
  @Idempotent({ completion: 'transaction' })
  async record(@Body() body: { account: string; amount: number }) {
    await this.insert(this.txHost.tx, body.account, body.amount);
    const gate = gates.get(body.account);
    if (gate) {
      gate.reached();
      await gate.open;
    }
    return { account: body.account, amount: body.amount };
  }
}

interface PrismaEntries {
  entry: { create(args: { data: { account: string; amount: number } }): Promise<unknown> };
  $disconnect(): Promise<void>;
}

async function open(orm: Case['orm']): Promise<Orm> {
  if (orm === 'TypeORM') {
    return {
      client: dataSource,
      adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: ORM_CLIENT }),
      insert: async (tx, account, amount) => {
        await (tx as EntityManager).query(
          `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, $2)`,
          [account, amount],
        );
      },
      close: async () => undefined,
    };
  }
  const pool = new Pool({ connectionString: testDatabaseUrl(), max: 5 });
  if (orm === 'Prisma') {
    generatePrismaClient();
    // Generated at run time (gitignored): loaded by path, typed by what the test uses.
    const file = path.join(__dirname, '../support/prisma/generated/client.ts');
    const { PrismaClient } = (await import(file)) as {
      PrismaClient: new (options: { adapter: PrismaPg }) => PrismaEntries;
    };
    const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema }) });
    return {
      client: prisma,
      adapter: new TransactionalAdapterPrisma({ prismaInjectionToken: ORM_CLIENT }),
      insert: async (tx, account, amount) => {
        await (tx as PrismaEntries).entry.create({ data: { account, amount } });
      },
      close: async () => {
        await prisma.$disconnect();
        await pool.end();
      },
    };
  }
  if (orm === 'Drizzle') {
    const entries = pgSchema(schema).table('entries', {
      id: serial('id').primaryKey(),
      account: text('account').notNull(),
      amount: integer('amount').notNull(),
    });
    const db = drizzle({ client: pool });
    return {
      client: db,
      adapter: new TransactionalAdapterDrizzleOrm({ drizzleInstanceToken: ORM_CLIENT }),
      insert: async (tx, account, amount) => {
        await (tx as typeof db).insert(entries).values({ account, amount });
      },
      close: () => pool.end(),
    };
  }
  interface Database {
    entries: { id: Generated<number>; account: string; amount: number };
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    client: db,
    adapter: new TransactionalAdapterKysely({ kyselyInstanceToken: ORM_CLIENT }),
    insert: async (tx, account, amount) => {
      await (tx as Kysely<Database>)
        .withSchema(schema)
        .insertInto('entries')
        .values({ account, amount })
        .execute();
    },
    close: () => db.destroy(),
  };
}

const rows = async (account: string) =>
  (
    (await dataSource.query(
      `SELECT count(*)::int AS n FROM "${schema}".entries WHERE account = $1`,
      [account],
    )) as { n: number }[]
  )[0].n;

/** An account the deferred foreign key accepts at commit. */
const newAccount = async () => {
  const account = randomUUID();
  await dataSource.query(`INSERT INTO "${schema}".accounts (name) VALUES ($1)`, [account]);
  return account;
};

beforeAll(async () => {
  schema = scratchSchema('txorm');
  dataSource = await openDataSource();
  await dataSource.query(`CREATE SCHEMA "${schema}"`);
  await dataSource.query(`CREATE TABLE "${schema}".accounts (name text PRIMARY KEY)`);
  // Checked at COMMIT, not at the insert: an insert for an unknown account fails the commit.
  await dataSource.query(
    `CREATE TABLE "${schema}".entries (id serial PRIMARY KEY,
       account text NOT NULL REFERENCES "${schema}".accounts (name) DEFERRABLE INITIALLY DEFERRED,
       amount int NOT NULL)`,
  );
});
afterAll(async () => {
  await dropSchema(dataSource, schema);
  await dataSource.destroy();
});

describe.each(CASES)(
  'completion inside a $orm transaction (store on a $store)',
  ({ orm, store: on }) => {
    let app: INestApplication;
    let url: string;
    let orm_: Orm;
    let store: IdempotencyStore & { find: PgIdempotencyStore['find']; close(): Promise<void> };
    let storePool: Pool | undefined;

    beforeAll(async () => {
      orm_ = await open(orm);
      if (on === 'pg Pool') {
        storePool = new Pool({ connectionString: testDatabaseUrl(), max: 5 });
        store = new PgIdempotencyStore(storePool, { schema, ensureSchema: true });
      } else {
        store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      }
      @Global()
      @Module({
        providers: [
          { provide: ORM_CLIENT, useValue: orm_.client },
          { provide: INSERT, useValue: orm_.insert },
        ],
        exports: [ORM_CLIENT, INSERT],
      })
      class OrmModule {}
      ({ app, url } = await startHttpApp('express', {
        imports: [
          OrmModule,
          ClsModule.forRoot({
            global: true,
            plugins: [new ClsPluginTransactional({ imports: [OrmModule], adapter: orm_.adapter })],
          }),
          IdempotencyModule.forRoot({ store }),
        ],
        controllers: [EntriesController],
      }));
    });
    afterAll(async () => {
      await app?.close();
      await store?.close();
      await orm_?.close();
      await storePool?.end();
    });

    it("the handler's row and the completion are invisible to other sessions until the commit; duplicates replay", async () => {
      const key = randomUUID();
      const account = await newAccount();
      const gate = hold(account);
      const first = send(url, 'POST', '/orm/entries', { key, body: { account, amount: 3 } });
      await gate.reached;
      // The row is written, in the open transaction: no other session sees it, nor the completion.
      expect(await rows(account)).toBe(0);
      expect((await store.find({ scope: SCOPE, key }))?.state).toBe('IN_PROGRESS');
      // A duplicate meanwhile waits (the record is then watched: the completion also
      // sends its notification through the application's transaction).
      const parked = new Promise<void>((resolve) => {
        const off = store.onWait!(() => {
          off();
          resolve();
        });
      });
      const waiting = send(url, 'POST', '/orm/entries', { key, body: { account, amount: 3 } });
      await parked;
      gate.open();
      const done = await first;
      expect(done.status).toBe(201);
      expect(done.json()).toEqual({ account, amount: 3 });
      expect(await rows(account)).toBe(1);
      expect((await store.find({ scope: SCOPE, key }))?.state).toBe('COMPLETE');

      const waited = await waiting;
      expect(waited.status).toBe(201);
      expect(waited.headers.get('idempotent-replayed')).toBe('true');
      expect(waited.text).toBe(done.text);
      gates.delete(account);
      const again = await send(url, 'POST', '/orm/entries', { key, body: { account, amount: 3 } });
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.text).toBe(done.text);
      expect(await rows(account)).toBe(1);
    });

    it("refuses the ORM's client outside a transaction, whose statements would commit alone", () => {
      const completeIn = store.transactional!.completeIn;
      expect(() => completeIn(orm_.client, {} as Lease, Buffer.from('{}'))).toThrow(
        IdempotencyConfigError,
      );
      expect(() => completeIn(orm_.client, {} as Lease, Buffer.from('{}'))).toThrow(
        /not one of its transactions/,
      );
    });

    it('a commit that fails leaves neither the row nor the completion, and the key runs again', async () => {
      const key = randomUUID();
      const account = randomUUID(); // not in accounts: the deferred foreign key fails the commit
      const failed = await send(url, 'POST', '/orm/entries', { key, body: { account, amount: 5 } });
      expect(failed.status).toBeGreaterThanOrEqual(500);
      expect(await rows(account)).toBe(0);
      expect(await store.find({ scope: SCOPE, key })).toBeNull();

      await dataSource.query(`INSERT INTO "${schema}".accounts (name) VALUES ($1)`, [account]);
      const retried = await send(url, 'POST', '/orm/entries', {
        key,
        body: { account, amount: 5 },
      });
      expect(retried.status).toBe(201);
      expect(retried.headers.get('idempotent-replayed')).toBeNull();
      expect(await rows(account)).toBe(1);
      expect((await store.find({ scope: SCOPE, key }))?.state).toBe('COMPLETE');
    });
  },
);

describe('the Kysely adapter of docs/kysely.md', () => {
  it('is the one these tests run', () => {
    const root = path.join(__dirname, '../..');
    const page = fs.readFileSync(path.join(root, 'docs/kysely.md'), 'utf8');
    const support = fs.readFileSync(
      path.join(root, 'test/support/transactional-adapter-kysely.ts'),
      'utf8',
    );
    const code = (text: string) => text.slice(text.indexOf('import type { TransactionalAdapter }'));
    const block = /```ts\n(\/\/ src\/transactional-adapter-kysely\.ts\n[\s\S]*?)```/.exec(page);
    expect(
      block,
      'docs/kysely.md has a block // src/transactional-adapter-kysely.ts',
    ).not.toBeNull();
    expect(code(block![1])).toBe(code(support));
  });
});
