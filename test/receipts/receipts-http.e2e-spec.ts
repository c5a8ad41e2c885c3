import { BadRequestException, Body, Controller, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { keyHash } from '../../libs/idempotency/src/core/key';
import { chainOfRecord } from '../../libs/idempotency/src/core/receipt-writer';
import { cli } from '../cli/cli-harness';
import { startHttpApp, send } from '../support/http-app';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';

const quiet = { log: () => undefined, warn: () => undefined, error: () => undefined };

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  create(@Body() body: { fail?: boolean }) {
    if (body.fail) throw new BadRequestException('declined');
    return { id: randomUUID() };
  }
}

describe('receipts through the Nest module on PostgreSQL', () => {
  const schema = scratchSchema('receipts_http');
  let pool: Pool;

  beforeAll(() => {
    pool = new Pool({ connectionString: testDatabaseUrl(), max: 10 });
    pool.on('error', () => undefined);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('an HTTP handler appends a receipt per first execution (none for a replay); receipts verify passes', async () => {
    const store = new PgIdempotencyStore(pool, { schema, ensureSchema: true });
    const { app, url } = await startHttpApp('express', {
      imports: [IdempotencyModule.forRoot({ store, receipts: true, logger: quiet })],
      controllers: [OrdersController],
    });
    try {
      const [done, failed] = [randomUUID(), randomUUID()];
      const first = await send(url, 'POST', '/orders', { key: done, body: {} });
      const replay = await send(url, 'POST', '/orders', { key: done, body: {} });
      expect(replay.text).toBe(first.text);
      expect(
        (await send(url, 'POST', '/orders', { key: failed, body: { fail: true } })).status,
      ).toBe(400);
      const receiptOf = async (key: string) => {
        const chain = chainOfRecord('OrdersController.create', key);
        const rows = await store.receipts.read(chain, 0, 1000);
        return rows.filter((r) => r.keyDigest === keyHash(key).slice(0, 12)).map((r) => r.outcome);
      };
      expect(await receiptOf(done)).toEqual(['completed']);
      expect(await receiptOf(failed)).toEqual(['released']);
      const verified = await cli(['--schema', schema, 'receipts', 'verify']);
      expect(verified.stdout).toContain('2 receipts in 16 chains verified');
      expect(verified.code).toBe(0);
    } finally {
      await app.close();
    }
  });

  it('receipts: true fails the bootstrap when the receipts tables are missing, naming the migration', async () => {
    await pool.query(`DROP TABLE "${schema}".idempotency_records_receipts`);
    const store = new PgIdempotencyStore(pool, { schema });
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, receipts: true, logger: quiet })],
      controllers: [OrdersController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      await expect(app.init()).rejects.toThrow(
        /idempotency_records_receipts does not exist: run the migration AddIdempotencyReceipts1764979200000/,
      );
    } finally {
      await app.close();
    }
  });
});
