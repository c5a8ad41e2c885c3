import {
  Body,
  Controller,
  HttpException,
  INestApplication,
  Param,
  ParseIntPipe,
  Post,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyEvent,
  IdempotencyModule,
  IdempotencyNotExecutedError,
  IdempotencyTransaction,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource, EntityManager } from 'typeorm';
import { Test } from '@nestjs/testing';
import { ADAPTERS, send } from '../support/http-app';
import { startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/**
 * completion: 'transaction' over real sockets and a real PostgreSQL: the
 * handler's rows and the record's completion commit together or not at all.
 */
const probe = new Probe();
let schema: string;
const failures = { afterInsert: false };

@Controller('ledger')
class LedgerController {
  constructor(private readonly tx: IdempotencyTransaction<EntityManager>) {}

  @Post('entries')
  @Idempotent({ completion: 'transaction' })
  async record(@Body() body: { account: string; amount: number }) {
    probe.ran('record');
    const [row] = (await this.tx.manager.query(
      `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, $2) RETURNING id`,
      [body.account, body.amount],
    )) as { id: number }[];
    await probe.pass('record');
    if (failures.afterInsert) {
      failures.afterInsert = false;
      throw new Error('declined after the insert');
    }
    return { entry: row.id, account: body.account };
  }

  /** Inserts a row that breaks a deferred constraint: the failure comes at COMMIT. */
  @Post('deferred')
  @Idempotent({ completion: 'transaction' })
  async deferred(@Body() body: { account: string; amount: number }) {
    probe.ran('deferred');
    await this.tx.manager.query(
      `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, $2)`,
      [body.account, body.amount],
    );
    return { ok: true };
  }

  /**
   * Strict mode with the completion in the transaction: a failure after the
   * handler began leaves its record AMBIGUOUS (its effects outside the
   * database are unknown), though its rows roll back.
   */
  @Post('strict/:amount')
  @Idempotent({ completion: 'transaction', onExpiredLease: 'refuse' })
  async strict(
    @Param('amount', ParseIntPipe) amount: number,
    @Body() body: { account: string; fail?: 'throw' | 'declined' },
  ) {
    probe.ran('strict');
    await this.tx.manager.query(
      `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, $2)`,
      [body.account, amount],
    );
    await probe.pass('strict');
    if (body.fail === 'throw') throw new Error('the provider hung up mid-charge');
    if (body.fail === 'declined') {
      throw new HttpException('declined', 402, { cause: new IdempotencyNotExecutedError() });
    }
    return { charged: amount };
  }

  @Post('optional')
  @Idempotent({ completion: 'transaction', required: false })
  async optional(@Body() body: { account: string }) {
    probe.ran('optional');
    await this.tx.manager.query(
      `INSERT INTO "${schema}".entries (account, amount) VALUES ($1, 1)`,
      [body.account],
    );
    return { inTransaction: this.tx.active };
  }
}

describe.each(ADAPTERS)("completion: 'transaction' over %s", (adapter) => {
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let app: INestApplication;
  let url: string;
  const events: IdempotencyEvent[] = [];

  const rows = async (account: string) =>
    (
      (await dataSource.query(
        `SELECT count(*)::int AS n FROM "${schema}".entries WHERE account = $1`,
        [account],
      )) as { n: number }[]
    )[0].n;
  const recordState = async (scope: string, key: string) =>
    (await store.find({ scope, key }))?.state ?? 'absent';

  beforeAll(async () => {
    schema = scratchSchema('tx');
    dataSource = await openDataSource();
    await dataSource.query(`CREATE SCHEMA "${schema}"`);
    // amount < 0 is refused only at COMMIT (a deferred constraint trigger).
    await dataSource.query(`
      CREATE TABLE "${schema}".entries (id serial PRIMARY KEY, account text NOT NULL, amount int NOT NULL);
      CREATE FUNCTION "${schema}".no_negative() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.amount < 0 THEN RAISE EXCEPTION 'negative amount'; END IF; RETURN NEW; END $$;
      CREATE CONSTRAINT TRIGGER no_negative AFTER INSERT ON "${schema}".entries
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${schema}".no_negative();
    `);
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    ({ app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store, onEvent: (e) => events.push(e) })],
      controllers: [LedgerController],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => {
    probe.executions.clear();
    probe.gates.clear();
    events.length = 0;
  });

  it('commits the row and the completion together; a retry replays and writes nothing', async () => {
    const key = randomUUID();
    const account = randomUUID();
    const first = await send(url, 'POST', '/ledger/entries', { key, body: { account, amount: 5 } });
    expect(first.status).toBe(201);
    const again = await send(url, 'POST', '/ledger/entries', { key, body: { account, amount: 5 } });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await rows(account)).toBe(1);
    expect(await recordState('LedgerController.record', key)).toBe('COMPLETE');
    expect(probe.count('record')).toBe(1);
  });

  it('a handler that throws after its insert leaves neither the row nor the record; the retry runs', async () => {
    const key = randomUUID();
    const account = randomUUID();
    failures.afterInsert = true;
    const failed = await send(url, 'POST', '/ledger/entries', {
      key,
      body: { account, amount: 5 },
    });
    expect(failed.status).toBe(500);
    expect(await rows(account)).toBe(0);
    expect(await recordState('LedgerController.record', key)).toBe('absent');
    const retried = await send(url, 'POST', '/ledger/entries', {
      key,
      body: { account, amount: 5 },
    });
    expect(retried.status).toBe(201);
    expect(await rows(account)).toBe(1);
  });

  it('a duplicate waiting on the first is woken by its commit and replays it', async () => {
    const key = randomUUID();
    const account = randomUUID();
    const gate = probe.hold('record');
    const first = send(url, 'POST', '/ledger/entries', { key, body: { account, amount: 7 } });
    await gate.entered.promise;
    const parked = new Promise<void>((resolve) => {
      const stop = store.onWait(() => {
        stop();
        resolve();
      });
    });
    const second = send(url, 'POST', '/ledger/entries', { key, body: { account, amount: 7 } });
    await parked;
    gate.release.open();
    const [a, b] = await Promise.all([first, second]);
    expect(a.status).toBe(201);
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    expect(b.text).toBe(a.text);
    expect(await rows(account)).toBe(1);
  });

  it('a lease lost before the commit rolls the handler back: 409, and only the new owner stands', async () => {
    const key = randomUUID();
    const account = randomUUID();
    const gate = probe.hold('record');
    const first = send(url, 'POST', '/ledger/entries', { key, body: { account, amount: 9 } });
    await gate.entered.promise;
    // Another attempt took the record over (as a steal after a stall would).
    await dataSource.query(
      `UPDATE "${schema}".idempotency_records SET lease_id = $1 WHERE scope = $2 AND "key" = $3`,
      [randomUUID(), 'LedgerController.record', key],
    );
    gate.release.open();
    const reply = await first;
    expect(reply.status).toBe(409);
    expect(reply.json()).toMatchObject({ code: 'idempotency-in-flight' });
    expect(reply.headers.get('retry-after')).toBe('1');
    expect(await rows(account)).toBe(0);
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'lease-lost', during: 'complete' }),
    );
  });

  it('a commit that fails is "nothing happened": 503 with Retry-After, no row, the key free for the retry', async () => {
    const key = randomUUID();
    const account = randomUUID();
    const failed = await send(url, 'POST', '/ledger/deferred', {
      key,
      body: { account, amount: -1 },
    });
    expect(failed.status).toBe(503);
    expect(failed.json()).toMatchObject({ code: 'idempotency-store-unavailable' });
    expect(failed.headers.get('retry-after')).toBe('1');
    expect(await rows(account)).toBe(0);
    expect(await recordState('LedgerController.deferred', key)).toBe('absent');
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'released', reason: 'commit-failed' }),
    );
    const retried = await send(url, 'POST', '/ledger/deferred', {
      key,
      body: { account, amount: 1 },
    });
    expect(retried.status).toBe(201);
    expect(await rows(account)).toBe(1);
    expect(probe.count('deferred')).toBe(2);
  });

  describe("with strict mode (onExpiredLease: 'refuse')", () => {
    const scope = 'LedgerController.strict';

    it('commits the row and the completion together; a retry replays', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const first = await send(url, 'POST', '/ledger/strict/5', { key, body: { account } });
      expect(first.status).toBe(201);
      const retried = await send(url, 'POST', '/ledger/strict/5', { key, body: { account } });
      expect(retried.status).toBe(201);
      expect(retried.headers.get('idempotent-replayed')).toBe('true');
      expect(retried.json()).toEqual({ charged: 5 });
      expect(await rows(account)).toBe(1);
      expect(probe.count('strict')).toBe(1);
    });

    it('a handler that throws after it began: its row rolls back, the record is AMBIGUOUS, and a retry is refused without running', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const failed = await send(url, 'POST', '/ledger/strict/5', {
        key,
        body: { account, fail: 'throw' },
      });
      expect(failed.status).toBe(500);
      expect(await rows(account)).toBe(0);
      expect(await recordState(scope, key)).toBe('AMBIGUOUS');
      expect(events).toContainEqual(
        expect.objectContaining({ type: 'ambiguous', reason: 'action-failed' }),
      );
      const retried = await send(url, 'POST', '/ledger/strict/5', {
        key,
        body: { account, fail: 'throw' },
      });
      expect(retried.status).toBe(409);
      expect(retried.json()).toMatchObject({ code: 'idempotency-outcome-unknown' });
      expect(retried.headers.get('retry-after')).toBeNull();
      expect(probe.count('strict')).toBe(1);
      expect(await rows(account)).toBe(0);
    });

    it('an error that says the action did not execute releases the key: the retry runs', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const declined = await send(url, 'POST', '/ledger/strict/5', {
        key,
        body: { account, fail: 'declined' },
      });
      expect(declined.status).toBe(402);
      expect(await recordState(scope, key)).toBe('absent');
      const retried = await send(url, 'POST', '/ledger/strict/5', { key, body: { account } });
      expect(retried.status).toBe(201);
      expect(probe.count('strict')).toBe(2);
      expect(await rows(account)).toBe(1);
    });

    it('a pipe that refuses before the handler began releases the key', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const refused = await send(url, 'POST', '/ledger/strict/five', { key, body: { account } });
      expect(refused.status).toBe(400);
      expect(probe.count('strict')).toBe(0);
      expect(await recordState(scope, key)).toBe('absent');
    });

    it('a lease lost before the commit (a duplicate moved it to AMBIGUOUS): 409 outcome unknown without Retry-After, no row, and a retry refused', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const gate = probe.hold('strict');
      const first = send(url, 'POST', '/ledger/strict/5', { key, body: { account } });
      await gate.entered.promise;
      // What a duplicate does in strict mode on finding the lease run out.
      await dataSource.query(
        `UPDATE "${schema}".idempotency_records SET state = 'AMBIGUOUS', lease_id = $1,
           lease_expires_at = NULL, ambiguous_since = now(), ambiguous_reason = 'lease-expired'
         WHERE scope = $2 AND "key" = $3`,
        [randomUUID(), scope, key],
      );
      gate.release.open();
      const reply = await first;
      expect(reply.status).toBe(409);
      expect(reply.json()).toMatchObject({
        code: 'idempotency-outcome-unknown',
        detail: expect.stringContaining('its writes were rolled back'),
      });
      expect(reply.headers.get('retry-after')).toBeNull();
      expect(await rows(account)).toBe(0);
      expect(await recordState(scope, key)).toBe('AMBIGUOUS');
      const retried = await send(url, 'POST', '/ledger/strict/5', { key, body: { account } });
      expect(retried.status).toBe(409);
      expect(retried.json()).toMatchObject({ code: 'idempotency-outcome-unknown' });
      expect(probe.count('strict')).toBe(1);
    });

    it('a commit that fails: 503 without Retry-After, no row, and the record AMBIGUOUS', async () => {
      const key = randomUUID();
      const account = randomUUID();
      const failed = await send(url, 'POST', '/ledger/strict/-1', { key, body: { account } });
      expect(failed.status).toBe(503);
      expect(failed.json()).toMatchObject({ code: 'idempotency-store-unavailable' });
      expect(failed.json()).toMatchObject({
        detail: expect.stringContaining('strict mode keeps the key'),
      });
      expect(failed.headers.get('retry-after')).toBeNull();
      expect(await rows(account)).toBe(0);
      expect(await recordState(scope, key)).toBe('AMBIGUOUS');
      const retried = await send(url, 'POST', '/ledger/strict/-1', { key, body: { account } });
      expect(retried.status).toBe(409);
      expect(retried.json()).toMatchObject({ code: 'idempotency-outcome-unknown' });
      expect(probe.count('strict')).toBe(1);
    });
  });

  it('a request without a key (required: false) still runs in a transaction of its own', async () => {
    const account = randomUUID();
    const reply = await send(url, 'POST', '/ledger/optional', { body: { account } });
    expect(reply.status).toBe(201);
    expect(reply.json()).toEqual({ inTransaction: true });
    expect(await rows(account)).toBe(1);
  });
});

describe("completion: 'transaction' at bootstrap", () => {
  it('is refused with a store that cannot complete in a transaction, naming Class.method', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: [LedgerController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    const failure = await app.init().then(
      () => undefined,
      (error: unknown) => error,
    );
    await app.close().catch(() => undefined);
    expect(failure).toBeInstanceOf(IdempotencyConfigError);
    expect((failure as Error).message).toBe(
      "LedgerController.record: option completion: 'transaction' needs a store that completes inside a database transaction (TypeOrmIdempotencyStore); InMemoryIdempotencyStore cannot",
    );
  });
});
