/**
 * Case 2: the holder is stopped (SIGSTOP) past its lease. A duplicate in
 * another process steals the key and completes; once the stale holder runs
 * again (SIGCONT), its completion is refused, the new owner's result stands,
 * its own caller still gets its own value, and it reports a lease-lost event.
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

const LEASE_MS = 1000;
const SCOPE = 'faults.stalled';

describe('fault 2: the holder is stalled (SIGSTOP) past its lease', () => {
  const schema = scratchSchema('fault_stop');
  let admin: DataSource;
  let stale: Child;
  let thief: Child;

  beforeAll(async () => {
    ({
      admin,
      workers: [stale, thief],
    } = await setUpFaultCase(schema, ['stale holder', 'thief']));
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it("refuses the stale holder's completion after a steal; the new owner's result stands and the stale caller keeps its own value", async () => {
    const key = randomUUID();
    const request = { scope: SCOPE, key, lease: `${LEASE_MS}ms`, ttl: '1h' };

    stale.send({ cmd: 'execute', id: 'a', ...request, waitTimeout: '0s', hold: true });
    const entered = await stale.waitFor('the holder entering its action', is.entered('a'), 30_000);

    const stoppedAt = Date.now();
    stale.proc.kill('SIGSTOP');
    // No heartbeat can run now: the duplicate waits out the lease, steals and completes.
    thief.send({ cmd: 'execute', id: 'b', ...request, waitTimeout: '15s' });
    const b = await thief.waitFor("the thief's result", is.result('b'), 20_000);
    const recoveryMs = b.result.endedAt - stoppedAt;
    expect(b.result.kind).toBe('executed');
    expect(b.result.value!.pid).toBe(thief.pid);
    expect(recoveryMs).toBeLessThan(LEASE_MS + 2000);

    // The stale holder wakes up and finishes its action.
    stale.proc.kill('SIGCONT');
    stale.send({ cmd: 'release', id: 'a' });
    const a = await stale.waitFor("the stale holder's result", is.result('a'), 20_000);
    expect(a.result.kind).toBe('executed');
    expect(a.result.value!.token).toBe(entered.token);
    expect(a.result.value!.token).not.toBe(b.result.value!.token);

    // It noticed the loss: at its first heartbeat (which aborts the signal) and/or at completion.
    const lost = eventsOf(stale).filter((e) => e.type === 'lease-lost');
    expect(lost.length).toBeGreaterThanOrEqual(1);
    expect(lost.map((e) => e.type === 'lease-lost' && e.during)).toContain('complete');
    for (const e of lost) expect(e.keyDigest).toMatch(/^faults\.stalled\/#[0-9a-f]{12}$/);
    expect(stale.output()).toContain('refused: the lease was lost');
    expect(eventsOf(thief).filter((e) => e.type === 'lease-lost')).toEqual([]);

    // The new owner's result stands.
    const records = await recordsOf(admin, schema, SCOPE, key);
    expect(records).toHaveLength(1);
    expect(records[0].state).toBe('COMPLETE');
    expect(records[0].payload).toEqual(b.result.value);
    for (const [child, id] of [
      [stale, 'dup-a'],
      [thief, 'dup-b'],
    ] as const) {
      child.send({ cmd: 'execute', id, ...request, waitTimeout: '5s' });
      const dup = await child.waitFor('a duplicate', is.result(id), 10_000);
      expect(dup.result).toMatchObject({ kind: 'replayed', value: b.result.value });
    }

    const executions = await executionsOf(admin, schema, SCOPE, key);
    expect(executions.map((e) => e.pid)).toEqual([stale.pid, thief.pid]);
    expectNoRawKeys(stale.output() + thief.output(), [key]);

    const during = lost.map((e) => (e.type === 'lease-lost' ? e.during : '')).join(', ');
    recordResult({
      case: 2,
      title: 'Holder stalled (SIGSTOP) past its lease',
      executionsExpected: 2,
      executionsObserved: executions.length,
      recordsLost: records[0].state === 'COMPLETE' ? 0 : 1,
      maxRecoveryMs: recoveryMs,
      notes:
        `lease ${LEASE_MS} ms; the duplicate stole and completed ${recoveryMs} ms after SIGSTOP; ` +
        `after SIGCONT the stale holder reported lease-lost (${during}), its signal aborted: ` +
        `${a.result.value!.aborted}; its caller got its own value; the record kept the thief's result`,
    });
  }, 60_000);
});
