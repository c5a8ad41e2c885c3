import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { buildStatements } from '../../libs/idempotency/src/stores/sql/postgres/statements';
import { recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * The PostgreSQL statements' own guards, each run alone on rows set up to be
 * what a contender's peek could no longer see by the time its write arrives:
 * neither steal takes an AMBIGUOUS row (even past its TTL), strict mode's
 * steal never takes an expired lease, and the move to AMBIGUOUS only ever
 * moves an IN_PROGRESS row whose lease ran out.
 */
describe('strict-mode guards in the PostgreSQL statements', () => {
  const schema = scratchSchema('strictsql');
  const table = 'idempotency_records';
  const t = `"${schema}"."${table}"`;
  const sql = buildStatements({ schema, table });
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      logger: { warn: () => undefined, error: () => undefined },
    });
    await store.init();
  });
  afterAll(async () => {
    await store?.close();
    if (dataSource?.isInitialized) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  /** A row in `state`, its lease and TTL one second past (or for `leaseLive`, ten minutes ahead). */
  async function row(state: string, leaseLive = false): Promise<Buffer> {
    const key = randomUUID();
    const id = recordIdOf('guards', key);
    const inProgress = state === 'IN_PROGRESS';
    await dataSource.query(
      `INSERT INTO ${t} (id, scope, "key", state, lease_id, lease_expires_at, expires_at,
         payload, created_at, completed_at, ambiguous_since, ambiguous_reason)
       VALUES ($1, 'guards', $2, $3, $4,
         CASE WHEN $5 THEN now() + interval '10 minutes' WHEN $6 THEN now() - interval '1 second' END,
         now() - interval '1 second', CASE WHEN $3 = 'COMPLETE' THEN '\\x7631'::bytea END,
         now() - interval '1 hour', CASE WHEN $3 = 'COMPLETE' THEN now() - interval '1 minute' END,
         CASE WHEN $3 = 'AMBIGUOUS' THEN now() - interval '1 minute' END,
         CASE WHEN $3 = 'AMBIGUOUS' THEN 'action-failed' END)`,
      [id, key, state, inProgress ? randomUUID() : null, leaseLive, inProgress],
    );
    return id;
  }
  const stealParams = (id: Buffer) => [id, randomUUID(), 60_000, 60_000, null];
  const stateOf = async (id: Buffer) =>
    (await dataSource.query(`SELECT state FROM ${t} WHERE id = $1`, [id]))[0]?.state;
  const affected = async (text: string, params: unknown[]) => {
    const [, count] = (await dataSource.query(text, params)) as [unknown, number];
    return count;
  };

  it('neither steal takes an AMBIGUOUS row past its TTL', async () => {
    const id = await row('AMBIGUOUS');
    expect(await affected(sql.steal, stealParams(id))).toBe(0);
    expect(await affected(sql.stealResult, stealParams(id))).toBe(0);
    expect(await stateOf(id)).toBe('AMBIGUOUS');
  });

  it("strict mode's steal takes an expired result, never an expired lease", async () => {
    const lapsed = await row('IN_PROGRESS');
    expect(await affected(sql.stealResult, stealParams(lapsed))).toBe(0);
    expect(await stateOf(lapsed)).toBe('IN_PROGRESS');
    const expired = await row('COMPLETE');
    expect(await affected(sql.stealResult, stealParams(expired))).toBe(1);
    expect(await stateOf(expired)).toBe('IN_PROGRESS');
  });

  it('the move to AMBIGUOUS takes only an IN_PROGRESS row whose lease ran out, once', async () => {
    for (const [state, leaseLive] of [
      ['IN_PROGRESS', true],
      ['COMPLETE', false],
      ['AMBIGUOUS', false],
    ] as const) {
      const id = await row(state, leaseLive);
      expect(await affected(sql.toAmbiguous, [id])).toBe(0);
      expect(await stateOf(id)).toBe(state);
    }
    const lapsed = await row('IN_PROGRESS');
    expect(await affected(sql.toAmbiguous, [lapsed])).toBe(1);
    expect(await affected(sql.toAmbiguous, [lapsed])).toBe(0);
    const [moved] = await dataSource.query(
      `SELECT state, lease_id, lease_expires_at, ambiguous_reason, ambiguous_since IS NOT NULL AS since
       FROM ${t} WHERE id = $1`,
      [lapsed],
    );
    expect(moved).toEqual({
      state: 'AMBIGUOUS',
      lease_id: null,
      lease_expires_at: null,
      ambiguous_reason: 'lease-expired',
      since: true,
    });
    // And the purge passes it by, past its TTL as it is.
    while ((await store.purgeExpired()) > 0);
    expect(await stateOf(lapsed)).toBe('AMBIGUOUS');
  });
});
