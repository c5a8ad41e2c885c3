/**
 * Case 5: more waiting duplicates than pooled connections. Two worker
 * processes with a pool of 3 each park 30 duplicates apiece on a key held by
 * the first worker (whose action and completion need the same 3 connections).
 * Waiters hold no connection while they wait, so the holder still completes,
 * every waiter wakes with the replay, and nothing deadlocks, although the
 * wake-up storm queues up to ~27 calls per pool at once.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { scratchSchema } from '../support/postgres';
import {
  Child,
  eventsOf,
  executionsOf,
  expectNoRawKeys,
  is,
  recordResult,
  recordsOf,
  setUpFaultCase,
  tearDownFaultCase,
} from './support/harness';

const POOL = 3;
const WAITERS = 30;
const SCOPE = 'faults.pool';

describe('fault 5: the connection pool is exhausted by waiting duplicates', () => {
  const schema = scratchSchema('fault_pool');
  let admin: DataSource;
  let holderSide: Child;
  let otherSide: Child;
  let parkedFigures:
    | {
        executions: number;
        lost: number;
        wake: number[];
        queued: number[];
        completedAfterRelease: number;
      }
    | undefined;

  beforeAll(async () => {
    ({
      admin,
      workers: [holderSide, otherSide],
    } = await setUpFaultCase(schema, ['holder + 30 waiters', '30 waiters'], { POOL }));
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  /**
   * On a new key: the holder (in holderSide) enters its action and holds it,
   * then both sides start WAITERS duplicates of the key as burst `burstId`.
   */
  async function holdThenBurst(holdId: string, burstId: string): Promise<string> {
    const key = randomUUID();
    const request = { scope: SCOPE, key, lease: '5s', ttl: '1h' };
    holderSide.send({ cmd: 'execute', id: holdId, ...request, waitTimeout: '0s', hold: true });
    await holderSide.waitFor('the holder entering its action', is.entered(holdId), 30_000);
    for (const side of [holderSide, otherSide]) {
      side.send({
        cmd: 'burst',
        id: burstId,
        count: WAITERS,
        request: { ...request, waitTimeout: '30s' },
      });
    }
    return key;
  }

  /** One execution and one COMPLETE record with the holder's value; no event; no raw key printed. */
  async function expectExecutedOnce(key: string, value: unknown) {
    const executions = await executionsOf(admin, schema, SCOPE, key);
    expect(executions).toHaveLength(1);
    const records = await recordsOf(admin, schema, SCOPE, key);
    expect(records).toMatchObject([{ state: 'COMPLETE', payload: value }]);
    expect([...eventsOf(holderSide), ...eventsOf(otherSide)]).toEqual([]);
    expectNoRawKeys(holderSide.output() + otherSide.output(), [key]);
    return { executions, records };
  }

  it(`wakes ${WAITERS} waiters per process (pool ${POOL}) with the replay; no deadlock, one execution`, async () => {
    const key = await holdThenBurst('h', 'w');
    // Every waiter parked, holding no connection, in both processes.
    for (const side of [holderSide, otherSide]) {
      side.send({ cmd: 'waiters', id: 'parked', count: WAITERS });
      const parked = await side.waitFor('the waiters parked', is.waiters('parked'), 30_000);
      expect(parked.count).toBe(WAITERS);
    }

    const releasedAt = Date.now();
    holderSide.send({ cmd: 'release', id: 'h' });
    const h = await holderSide.waitFor('the holder result', is.result('h'), 20_000);
    expect(h.result.kind).toBe('executed');

    const wake: number[] = [];
    const queued: number[] = [];
    for (const side of [holderSide, otherSide]) {
      const burst = await side.waitFor('the waiters', is.burst('w'), 40_000);
      expect(burst.results).toHaveLength(WAITERS);
      for (const r of burst.results) {
        expect(r).toMatchObject({ kind: 'replayed', value: h.result.value });
      }
      wake.push(Math.max(...burst.results.map((r) => r.endedAt)) - h.result.endedAt);
      queued.push(burst.maxPoolWaiting);
    }
    // The wake-up really queued calls on the exhausted pool.
    expect(Math.max(...queued)).toBeGreaterThan(POOL);
    // Woken by the notification, not by the 1 s fallback poll (nor the 30 s wait).
    expect(Math.max(...wake)).toBeLessThan(500);

    const { executions, records } = await expectExecutedOnce(key, h.result.value);

    parkedFigures = {
      executions: executions.length,
      lost: records[0].state === 'COMPLETE' ? 0 : 1,
      wake,
      queued,
      completedAfterRelease: h.result.endedAt - releasedAt,
    };
  }, 60_000);

  it('completes while the pool queue is full of first looks, and every duplicate still gets the replay', async () => {
    const key = await holdThenBurst('h2', 'w2');
    // Released at once: the holder's completion queues behind the waiters' first looks.
    holderSide.send({ cmd: 'release', id: 'h2' });
    const h = await holderSide.waitFor('the holder result', is.result('h2'), 20_000);
    expect(h.result.kind).toBe('executed');
    const queued: number[] = [];
    for (const side of [holderSide, otherSide]) {
      const burst = await side.waitFor('the waiters', is.burst('w2'), 40_000);
      for (const r of burst.results) {
        expect(r).toMatchObject({ kind: 'replayed', value: h.result.value });
      }
      queued.push(burst.maxPoolWaiting);
    }
    expect(Math.max(...queued)).toBeGreaterThan(POOL);
    const { executions, records } = await expectExecutedOnce(key, h.result.value);

    const { wake } = parkedFigures!;
    recordResult({
      case: 5,
      title: 'Connection pool exhausted by waiters',
      executionsExpected: 2,
      executionsObserved: parkedFigures!.executions + executions.length,
      recordsLost: parkedFigures!.lost + (records[0].state === 'COMPLETE' ? 0 : 1),
      maxRecoveryMs: Math.max(...wake),
      notes:
        `pool ${POOL} per process, 2 processes × ${WAITERS} waiters (the holder in one of them), two keys; ` +
        `parked waiters: all ${2 * WAITERS} woke with the replay, the last ${wake.join(' / ')} ms after the ` +
        `completion (${parkedFigures!.completedAfterRelease} ms after the release), up to ` +
        `${parkedFigures!.queued.join(' / ')} calls queued for a connection; holder released into a full ` +
        `queue: completed, all ${2 * WAITERS} replayed, up to ${queued.join(' / ')} queued`,
    });
  }, 60_000);
});
