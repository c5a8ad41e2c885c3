/**
 * Case 7: volume. 20,000 distinct keys at a concurrency of 64, through the
 * engine directly (in this process, on the real PostgreSQL store; HTTP would
 * measure Nest rather than the store), with an action that counts its
 * executions in PostgreSQL. Every key runs exactly once and ends COMPLETE.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  expectNoRawKeys,
  openEngine,
  recordResult,
  setUpFaultCase,
  tearDownFaultCase,
} from './support/harness';

const KEYS = 20_000;
const CONCURRENCY = 64;
const SCOPE = 'faults.volume';

describe('fault 7: 20,000 distinct keys at concurrency 64', () => {
  const schema = scratchSchema('fault_volume');
  let admin: DataSource;

  beforeAll(async () => {
    ({ admin } = await setUpFaultCase(schema, []));
  });

  afterAll(() => tearDownFaultCase(admin, schema));

  it('executes every key exactly once and leaves every record COMPLETE', async () => {
    const local = await openEngine(testDatabaseUrl(), schema, { pool: 16 });
    const keys = Array.from({ length: KEYS }, () => randomUUID());
    const outcomes = { executed: 0, replayed: 0, errors: [] as string[] };
    const started = Date.now();
    try {
      let next = 0;
      const lane = async () => {
        while (next < keys.length) {
          const key = keys[next++];
          try {
            const outcome = await local.engine.execute(
              { scope: SCOPE, key, lease: '30s', waitTimeout: '10s', ttl: '1h' },
              async () => {
                await local.dataSource.query(
                  `INSERT INTO "${schema}".executions (scope, "key", pid, token) VALUES ($1, $2, $3, gen_random_uuid())`,
                  [SCOPE, key, process.pid],
                );
                return { key };
              },
            );
            if (outcome.kind === 'suspended') throw new Error('no action here suspends');
            outcomes[outcome.kind]++;
          } catch (error) {
            outcomes.errors.push((error as Error).message);
          }
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, lane));
    } finally {
      await local.close();
    }
    const elapsedMs = Date.now() - started;

    expect(outcomes.errors.slice(0, 5)).toEqual([]);
    expect(outcomes).toMatchObject({ executed: KEYS, replayed: 0 });
    const [counts] = await admin.query(
      `SELECT
         (SELECT count(*)::int FROM "${schema}".executions) AS executions,
         (SELECT count(DISTINCT "key")::int FROM "${schema}".executions) AS keys,
         (SELECT count(*)::int FROM "${schema}".idempotency_records WHERE state = 'COMPLETE') AS complete,
         (SELECT count(*)::int FROM "${schema}".idempotency_records) AS records,
         (SELECT count(*)::int FROM "${schema}".executions e WHERE NOT EXISTS (
            SELECT 1 FROM "${schema}".idempotency_records r
            WHERE r.scope = e.scope AND r."key" = e."key" AND r.state = 'COMPLETE')) AS lost`,
    );
    expect(counts).toEqual({
      executions: KEYS,
      keys: KEYS,
      complete: KEYS,
      records: KEYS,
      lost: 0,
    });
    expectNoRawKeys(local.logs.join('\n'), keys);

    recordResult({
      case: 7,
      title: 'Volume: 20,000 keys at concurrency 64',
      executionsExpected: KEYS,
      executionsObserved: counts.executions,
      recordsLost: counts.lost,
      maxRecoveryMs: null,
      notes:
        `through the engine directly (test process, pool 16), not HTTP; ${counts.keys} distinct keys executed, ` +
        `${counts.complete} COMPLETE records, in ${elapsedMs} ms (${Math.round((KEYS * 1000) / elapsedMs)} keys/s)`,
    });
  }, 240_000);
});
