/**
 * Case 3: an action that runs three times its lease keeps its key through the
 * heartbeat (every lease/2). Duplicates with waitTimeout 0, from another
 * process, are refused as in flight the whole time; none steals it.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { IdempotencyInFlightError } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  eventsOf,
  executionsOf,
  expectNoRawKeys,
  is,
  openEngine,
  recordResult,
  recordsOf,
  setUpFaultCase,
  tearDownFaultCase,
} from './support/harness';

const LEASE_MS = 1000;
const WORK_MS = 3 * LEASE_MS;
const PROBE_EVERY_MS = 100;
const SCOPE = 'faults.heartbeat';

describe('fault 3: an action three times as long as its lease', () => {
  const schema = scratchSchema('fault_beat');
  let admin: DataSource;
  let holder: Child;

  beforeAll(async () => {
    ({
      admin,
      workers: [holder],
    } = await setUpFaultCase(schema, ['holder']));
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it('keeps the key by heartbeat: every duplicate during the action is in flight, none steals it', async () => {
    const key = randomUUID();
    const request = { scope: SCOPE, key, lease: `${LEASE_MS}ms`, ttl: '1h' };
    const local = await openEngine(testDatabaseUrl(), schema);
    try {
      holder.send({ cmd: 'execute', id: 'h', ...request, waitTimeout: '0s', workMs: WORK_MS });
      await holder.waitFor('the holder entering its action', is.entered('h'), 30_000);
      const enteredAt = Date.now();
      const done = holder.waitFor('the holder result', is.result('h'), WORK_MS + 10_000);
      let finished = false;
      void done.then(() => (finished = true)).catch(() => undefined);

      // Probe at a steady pace until the holder answers: the lease must never look lapsed.
      let inFlight = 0;
      let lastInFlightAt = 0;
      let minLeaseLeftMs = Infinity;
      const others: string[] = [];
      for (let i = 0; i < (WORK_MS * 2) / PROBE_EVERY_MS && !finished; i++) {
        try {
          const outcome = await local.engine.execute({ ...request, waitTimeout: 0 }, async () => {
            throw new Error('a duplicate ran the action: the key was stolen');
          });
          others.push(`${outcome.kind} at ${Date.now() - enteredAt} ms`);
          break; // replayed: the holder has completed
        } catch (error) {
          if (error instanceof IdempotencyInFlightError) {
            inFlight++;
            lastInFlightAt = Date.now() - enteredAt;
            minLeaseLeftMs = Math.min(minLeaseLeftMs, error.retryAfterMs);
          } else {
            others.push(`${(error as Error).message} at ${Date.now() - enteredAt} ms`);
            break;
          }
        }
        await delay(PROBE_EVERY_MS);
      }
      const h = await done;
      expect(h.result.kind).toBe('executed');
      // Refused as in flight well past the first lease, up to the end of the action.
      expect(lastInFlightAt).toBeGreaterThan(WORK_MS - 500);
      expect(inFlight).toBeGreaterThanOrEqual(WORK_MS / PROBE_EVERY_MS / 2);
      expect(others.filter((o) => !o.startsWith('replayed'))).toEqual([]);
      expect(eventsOf(holder)).toEqual([]);
      // Renewed every lease/2: a duplicate never found it close to lapsing.
      expect(minLeaseLeftMs).toBeGreaterThan(LEASE_MS / 4);

      const executions = await executionsOf(admin, schema, SCOPE, key);
      expect(executions).toHaveLength(1);
      const records = await recordsOf(admin, schema, SCOPE, key);
      expect(records).toHaveLength(1);
      expect(records[0]).toMatchObject({ state: 'COMPLETE', payload: h.result.value });
      const after = await local.engine.execute({ ...request, waitTimeout: 0 }, async () => {
        throw new Error('a duplicate must not run the action');
      });
      expect(after).toMatchObject({ kind: 'replayed', value: h.result.value });
      expectNoRawKeys(holder.output() + local.logs.join('\n'), [key]);

      recordResult({
        case: 3,
        title: 'Heartbeat keeps a long action',
        executionsExpected: 1,
        executionsObserved: executions.length,
        recordsLost: records[0].state === 'COMPLETE' ? 0 : 1,
        maxRecoveryMs: null,
        notes:
          `lease ${LEASE_MS} ms, action ${WORK_MS} ms; ${inFlight} duplicates with waitTimeout 0 ` +
          `from another process, all in flight (the last at ${lastInFlightAt} ms), none stole it; ` +
          `the least lease left that a duplicate saw was ${minLeaseLeftMs} ms`,
      });
    } finally {
      await local.close();
    }
  }, 60_000);
});
