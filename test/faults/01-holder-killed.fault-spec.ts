/**
 * Case 1: the holder is killed (SIGKILL) in the middle of its action. The next
 * caller, in another process, waits for the lease to lapse, steals the key,
 * runs and completes; every later duplicate replays that second result.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  createFaultTables,
  executionsOf,
  expectNoRawKeys,
  is,
  openEngine,
  recordResult,
  recordsOf,
  startChild,
  stopAllChildren,
} from './support/harness';

const LEASE_MS = 1000;
const SCOPE = 'faults.killed';

describe('fault 1: the holder is killed with SIGKILL mid-action', () => {
  const schema = scratchSchema('fault_kill');
  let admin: DataSource;
  let holder: Child;
  let successor: Child;

  beforeAll(async () => {
    admin = await openDataSource();
    await createFaultTables(admin, schema);
    const env = { PG_URL: testDatabaseUrl(), SCHEMA: schema };
    [holder, successor] = await Promise.all([
      startChild('worker', 'holder', env),
      startChild('worker', 'successor', env),
    ]);
  }, 120_000);

  afterAll(async () => {
    await stopAllChildren();
    await dropSchema(admin, schema);
    await admin.destroy();
  });

  it('runs the action exactly twice: the killed holder, then one successor after the lease lapses; duplicates replay the successor', async () => {
    const key = randomUUID();
    const request = { scope: SCOPE, key, lease: `${LEASE_MS}ms`, ttl: '1h' };

    holder.send({ cmd: 'execute', id: 'h', ...request, waitTimeout: '0s', hold: true });
    await holder.waitFor('the holder entering its action', is.entered('h'), 30_000);

    // The successor sees the key held, then starts waiting for it.
    successor.send({ cmd: 'execute', id: 'probe', ...request, waitTimeout: '0s' });
    const probe = await successor.waitFor('the probe', is.result('probe'), 10_000);
    expect(probe.result.kind).toBe('error');
    expect(probe.result.error?.name).toBe('IdempotencyInFlightException');
    successor.send({ cmd: 'execute', id: 's', ...request, waitTimeout: '15s' });

    const killedAt = Date.now();
    holder.proc.kill('SIGKILL');
    const exit = await holder.exited;
    expect(exit.signal).toBe('SIGKILL');

    const stolen = await successor.waitFor('the successor result', is.result('s'), 20_000);
    const recoveryMs = stolen.result.endedAt - killedAt;
    expect(stolen.result.kind).toBe('executed');
    expect(stolen.result.value!.pid).toBe(successor.pid);
    // It waited for the lease to lapse (the holder's last heartbeat renewed it at most
    // lease/2 before the kill), and not much longer.
    expect(recoveryMs).toBeLessThan(LEASE_MS + 2000);

    const executions = await executionsOf(admin, schema, SCOPE, key);
    expect(executions.map((e) => e.pid)).toEqual([holder.pid, successor.pid]);
    expect(executions[1].token).toBe(stolen.result.value!.token);

    const records = await recordsOf(admin, schema, SCOPE, key);
    expect(records).toHaveLength(1);
    expect(records[0].state).toBe('COMPLETE');
    expect(records[0].payload).toEqual({ v: stolen.result.value });

    // Later duplicates, from the successor's process and from this one, replay the second result.
    successor.send({ cmd: 'execute', id: 'dup', ...request, waitTimeout: '5s' });
    const dup = await successor.waitFor('the duplicate', is.result('dup'), 10_000);
    expect(dup.result.kind).toBe('replayed');
    expect(dup.result.value).toEqual(stolen.result.value);
    const local = await openEngine(testDatabaseUrl(), schema);
    try {
      for (let i = 0; i < 5; i++) {
        const outcome = await local.engine.execute({ ...request, waitTimeout: '5s' }, async () => {
          throw new Error('a duplicate must not run the action');
        });
        expect(outcome).toMatchObject({ kind: 'replayed', value: stolen.result.value });
      }
      expectNoRawKeys(local.logs.join('\n'), [key]);
    } finally {
      await local.close();
    }
    expect(await executionsOf(admin, schema, SCOPE, key)).toHaveLength(2);
    expectNoRawKeys(holder.output() + successor.output(), [key]);

    recordResult({
      case: 1,
      title: 'Holder killed (SIGKILL) mid-action',
      executionsExpected: 2,
      executionsObserved: executions.length,
      recordsLost: records.filter((r) => r.state === 'COMPLETE').length === 1 ? 0 : 1,
      maxRecoveryMs: recoveryMs,
      notes: `lease ${LEASE_MS} ms; the waiting successor (another process) stole the key ${recoveryMs} ms after the kill; 6 later duplicates replayed its result`,
    });
  }, 60_000);
});
