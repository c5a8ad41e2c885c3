import { encodeValue, keyDigest } from 'nest-idempotency';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { scratchSchema } from '../support/postgres';
import { openPool } from '../stores/pg-pool-harness';
import { cli, rowsMentioning } from './cli-harness';

// Raw keys that must never show up in the CLI's tables.
const DONE = 'raw-key-pool-done-3e81a0';
const LIVE = 'raw-key-pool-live-9b27c4';

/**
 * The CLI reads the table through its own connection (DATABASE_URL): records
 * written by the `pg` pool store, which shares the table's format with the
 * TypeORM front, are listed, inspected and purged as any other.
 */
describe('nest-idempotency on records a PgIdempotencyStore wrote', () => {
  const pool = openPool();
  const schema = scratchSchema('cli_pgpool');
  const store = new PgIdempotencyStore(pool, {
    schema,
    ensureSchema: true,
    logger: { warn: () => undefined, error: () => undefined },
  });
  const at = (...args: string[]) => cli(['--schema', schema, ...args]);

  beforeAll(async () => {
    const acquire = async (key: string, ttlMs: number) => {
      const result = await store.tryAcquire({
        scope: 'Pool.orders',
        key,
        leaseMs: 600_000,
        ttlMs,
        waitTimeoutMs: 0,
        fingerprint: null,
      });
      if (result.kind !== 'acquired') throw new Error(`seed: ${result.kind}`);
      return result.lease;
    };
    await store.complete(await acquire(DONE, 3_600_000), encodeValue({ id: 42 }));
    await acquire(LIVE, 3_600_000);
  });
  afterAll(async () => {
    await store.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('lists them by digest, never by raw key', async () => {
    const { code, stdout, stderr } = await at('list');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout).not.toContain(DONE);
    expect(stdout).not.toContain(LIVE);
    const done = rowsMentioning(stdout, `#${keyDigest('Pool.orders', DONE).slice(-12)}`);
    expect(done).toHaveLength(1);
    expect(done[0]).toMatch(/ COMPLETE /);
    const live = rowsMentioning(stdout, `#${keyDigest('Pool.orders', LIVE).slice(-12)}`);
    expect(live[0]).toMatch(/ IN_PROGRESS /);
  });

  it('inspects one, showing its stored result', async () => {
    const { code, stdout } = await at('inspect', 'Pool.orders', DONE, '--json');
    expect(code).toBe(0);
    const output = JSON.parse(stdout) as { record: { state: string } };
    expect(output.record.state).toBe('COMPLETE');
    expect(stdout).toContain('42');
  });
});
