/**
 * Case 1: the holder is killed (SIGKILL) in the middle of its action. The next
 * caller, in another process, waits for the lease to lapse, steals the key,
 * runs and completes; every later duplicate replays that second result.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  executionsOf,
  expectNoRawKeys,
  is,
  openEngine,
  recordResult,
  recordsOf,
  setUpFaultCase,
  startChild,
  tearDownFaultCase,
} from './support/harness';

const LEASE_MS = 1000;
const SCOPE = 'faults.killed';

describe('fault 1: the holder is killed with SIGKILL mid-action', () => {
  const schema = scratchSchema('fault_kill');
  let admin: DataSource;
  let holder: Child;
  let successor: Child;
  const figures: { engine?: { executions: number; lost: number; recoveryMs: number } } = {};

  beforeAll(async () => {
    ({
      admin,
      workers: [holder, successor],
    } = await setUpFaultCase(schema, ['holder', 'successor']));
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it('runs the action exactly twice: the killed holder, then one successor after the lease lapses; duplicates replay the successor', async () => {
    const key = randomUUID();
    const request = { scope: SCOPE, key, lease: `${LEASE_MS}ms`, ttl: '1h' };

    holder.send({ cmd: 'execute', id: 'h', ...request, waitTimeout: '0s', hold: true });
    await holder.waitFor('the holder entering its action', is.entered('h'), 30_000);

    // The successor sees the key held, then starts waiting for it.
    successor.send({ cmd: 'execute', id: 'probe', ...request, waitTimeout: '0s' });
    const probe = await successor.waitFor('the probe', is.result('probe'), 10_000);
    expect(probe.result.kind).toBe('error');
    expect(probe.result.error?.name).toBe('IdempotencyInFlightError');
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
    expect(records[0].payload).toEqual(stolen.result.value);

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

    figures.engine = {
      executions: executions.length,
      lost: records.filter((r) => r.state === 'COMPLETE').length === 1 ? 0 : 1,
      recoveryMs,
    };
  }, 60_000);

  it("over HTTP: a Nest app killed mid-handler; the other app's waiting request steals the key after the lease and answers 201, then replays", async () => {
    const env = { PG_URL: testDatabaseUrl(), SCHEMA: schema, HELD_LEASE: `${LEASE_MS}ms` };
    const [victim, survivor] = await Promise.all([
      startChild('app', 'app to kill', env),
      startChild('app', 'surviving app', env),
    ]);
    const key = randomUUID();
    const post = (app: Child) =>
      fetch(`http://127.0.0.1:${app.port}/held`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ tag: 'held' }),
        signal: AbortSignal.timeout(30_000),
      });

    const first = post(victim).catch((error: Error) => error); // its connection dies with the app
    await victim.waitFor('the handler entering', is.entered('held'), 30_000);
    const second = post(survivor);
    survivor.send({ cmd: 'release', id: 'held' }); // once it runs, let it finish at once

    const killedAt = Date.now();
    victim.proc.kill('SIGKILL');
    expect((await victim.exited).signal).toBe('SIGKILL');
    const reply = await second;
    const recoveryMs = Date.now() - killedAt;
    const text = await reply.text();
    expect(reply.status).toBe(201);
    expect(reply.headers.get('idempotent-replayed')).toBeNull();
    expect(JSON.parse(text)).toMatchObject({ pid: survivor.pid });
    expect(recoveryMs).toBeLessThan(LEASE_MS + 2000);
    expect(await first).toHaveProperty('message', 'fetch failed'); // the killed app never answered

    const executions = await executionsOf(admin, schema, 'held', key);
    expect(executions.map((e) => e.pid)).toEqual([victim.pid, survivor.pid]);
    const records = await recordsOf(admin, schema, 'held', key);
    expect(records).toMatchObject([{ state: 'COMPLETE' }]);
    for (let i = 0; i < 3; i++) {
      const dup = await post(survivor);
      expect(dup.status).toBe(201);
      expect(dup.headers.get('idempotent-replayed')).toBe('true');
      expect(await dup.text()).toBe(text);
    }
    expect(await executionsOf(admin, schema, 'held', key)).toHaveLength(2);
    expectNoRawKeys(victim.output() + survivor.output(), [key]);

    const engine = figures.engine!;
    recordResult({
      case: 1,
      title: 'Holder killed (SIGKILL) mid-action',
      executionsExpected: 4,
      executionsObserved: engine.executions + executions.length,
      recordsLost: engine.lost + (records[0].state === 'COMPLETE' ? 0 : 1),
      maxRecoveryMs: Math.max(engine.recoveryMs, recoveryMs),
      notes:
        `lease ${LEASE_MS} ms, two keys (2 executions each: the killed holder's, the successor's). ` +
        `Engine worker: the waiting successor (another process) stole the key ${engine.recoveryMs} ms after ` +
        `the kill; 6 later duplicates replayed its result. Nest app: the other app's waiting request ` +
        `answered 201 ${recoveryMs} ms after the kill; 3 later duplicates replayed it byte for byte`,
    });
  }, 60_000);
});
