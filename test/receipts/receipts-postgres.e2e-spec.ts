import { Pool } from 'pg';
import { IdempotencyEngine } from 'nest-idempotency';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { keyHash } from '../../libs/idempotency/src/core/key';
import { chainOfRecord } from '../../libs/idempotency/src/core/receipt-writer';
import { cli } from '../cli/cli-harness';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import { expectReceiptsChains } from './receipts-scenario';

const quiet = { warn: () => undefined, error: () => undefined };

describe('receipts on PostgreSQL', () => {
  const schema = scratchSchema('receipts');
  const receipts = `"${schema}".idempotency_records_receipts`;
  let pool: Pool;
  let store: PgIdempotencyStore;

  beforeAll(async () => {
    pool = new Pool({ connectionString: testDatabaseUrl(), max: 10 });
    pool.on('error', () => undefined);
    store = new PgIdempotencyStore(pool, { schema, ensureSchema: true, logger: quiet });
    await store.receipts.check();
  });
  afterAll(async () => {
    await store?.close();
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  it('chains every terminal record; receipts verify passes, then names an altered, a removed and a reordered receipt', async () => {
    await expectReceiptsChains({
      store,
      verify: () => cli(['--schema', schema, 'receipts', 'verify']),
      alter: async (chain, seq) => {
        await pool.query(
          `UPDATE ${receipts} SET outcome = 'resolved-not-executed', result_digest = NULL WHERE chain = $1 AND seq = $2`,
          [chain, seq],
        );
      },
      remove: async (chain, seq) => {
        await pool.query(`DELETE FROM ${receipts} WHERE chain = $1 AND seq = $2`, [chain, seq]);
      },
      swap: async (chain, a, b) => {
        // Through negative seqs: the primary key is checked row by row.
        await pool.query(`UPDATE ${receipts} SET seq = -seq WHERE chain = $1 AND seq IN ($2, $3)`, [
          chain,
          a,
          b,
        ]);
        await pool.query(
          `UPDATE ${receipts} SET seq = CASE seq WHEN -$2::bigint THEN $3::bigint ELSE $2::bigint END WHERE chain = $1 AND seq IN (-$2::bigint, -$3::bigint)`,
          [chain, a, b],
        );
      },
    });
  });

  it('with receipts on, a table without the receipts tables fails the check, naming the migration', async () => {
    const bare = scratchSchema('receipts_bare');
    const made = new PgIdempotencyStore(pool, { schema: bare, ensureSchema: true, logger: quiet });
    const other = new PgIdempotencyStore(pool, { schema: bare, logger: quiet });
    try {
      await made.init();
      await made.close();
      await pool.query(`DROP TABLE "${bare}".idempotency_records_receipts`);
      // The store itself does not need them: it opens, and runs without receipts.
      await other.init();
      await expect(other.receipts.check()).rejects.toThrow(
        /idempotency_records_receipts does not exist: run the migration AddIdempotencyReceipts1764979200000/,
      );
      // receipts verify says the same, as a schema error.
      const verify = await cli(['--schema', bare, 'receipts', 'verify']);
      expect(verify.stderr).toContain(
        'idempotency_records_receipts does not exist: run the migration AddIdempotencyReceipts1764979200000',
      );
      expect(verify.code).toBe(4);
    } finally {
      await other.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${bare}" CASCADE`);
    }
  });
});

describe('receipts of resolutions on PostgreSQL', () => {
  const schema = scratchSchema('receipts_resolve');
  let pool: Pool;
  let store: PgIdempotencyStore;

  beforeAll(async () => {
    pool = new Pool({ connectionString: testDatabaseUrl(), max: 10 });
    pool.on('error', () => undefined);
    store = new PgIdempotencyStore(pool, { schema, ensureSchema: true, logger: quiet });
    await store.receipts.check();
  });
  afterAll(async () => {
    await store?.close();
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  it("the CLI's resolve appends a receipt of its own; the chain still verifies", async () => {
    const engine = new IdempotencyEngine(store, { receipts: true, logger: quiet });
    const policy = engine.policy({
      scope: 'receipts.refund',
      lease: 'PT10S',
      waitTimeout: 0,
      onExpiredLease: 'refuse',
    });
    const key = `resolve-${process.pid}`;
    const begun = await engine.begin(policy, { key });
    if (begun.kind !== 'acquired') throw new Error(begun.kind);
    await begun.execution.fail(new Error('timed out at the provider'));
    const chain = chainOfRecord('receipts.refund', key);
    expect(await store.receipts.read(chain, 0, 100)).toEqual([]); // AMBIGUOUS has not ended

    const resolved = await cli([
      '--schema',
      schema,
      'resolve',
      'receipts.refund',
      key,
      '--not-executed',
    ]);
    expect(resolved.stderr).toBe('');
    expect(resolved.code).toBe(0);
    const rows = await store.receipts.read(chain, 0, 100);
    expect(rows).toEqual([
      expect.objectContaining({
        seq: 1,
        keyDigest: keyHash(key).slice(0, 12),
        outcome: 'resolved-not-executed',
        resultDigest: null,
      }),
    ]);
    const verified = await cli(['--schema', schema, 'receipts', 'verify']);
    expect(verified.stdout).toContain('1 receipts in 16 chains verified');
    expect(verified.code).toBe(0);
  });
});
