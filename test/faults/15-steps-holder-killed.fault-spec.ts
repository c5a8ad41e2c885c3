/**
 * Case 15: recorded steps across a SIGKILL. The holder records a step (its
 * side effect a row of `executions` under `<scope>#charge`) and is killed;
 * the successor, in another process, takes the record over and gets the
 * step's recorded value: the step's side effect happened exactly once. In
 * strict mode a holder killed inside its step (begun, not recorded) leaves
 * the record AMBIGUOUS with reason step-unknown naming the step.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { scratchSchema } from '../support/postgres';
import {
  Child,
  executionsOf,
  is,
  recordResult,
  setUpFaultCase,
  tearDownFaultCase,
} from './support/harness';

const LEASE_MS = 1000;
const SCOPE = 'faults.steps';

describe('fault 15: recorded steps when the holder is killed with SIGKILL', () => {
  const schema = scratchSchema('fault_steps');
  let admin: DataSource;
  let holder: Child;
  let successor: Child;
  let strictHolder: Child;
  /** Each test's step side effects (rows under `<scope>#charge`) and the takeover's time. */
  const figures: { charges: number[]; recoveryMs?: number } = { charges: [] };

  beforeAll(async () => {
    ({
      admin,
      workers: [holder, successor, strictHolder],
    } = await setUpFaultCase(schema, ['holder', 'successor', 'strict-holder']));
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it('runs a recorded step once: the successor gets its value without running it', async () => {
    const key = randomUUID();
    const request = {
      scope: SCOPE,
      key,
      lease: `${LEASE_MS}ms`,
      ttl: '1h',
      step: 'after' as const,
    };
    holder.send({ cmd: 'execute', id: 'h', ...request, waitTimeout: '0s', hold: true });
    // `entered` comes after the step recorded.
    const entered = await holder.waitFor('the holder past its step', is.entered('h'), 30_000);
    holder.proc.kill('SIGKILL');
    const killedAt = Date.now();
    expect((await holder.exited).signal).toBe('SIGKILL');

    successor.send({ cmd: 'execute', id: 's', ...request, waitTimeout: '15s' });
    const taken = await successor.waitFor('the successor result', is.result('s'), 20_000);
    expect(taken.result.kind).toBe('executed');
    figures.recoveryMs = taken.result.endedAt - killedAt;

    const actions = await executionsOf(admin, schema, SCOPE, key);
    expect(actions.map((e) => e.pid)).toEqual([holder.pid, successor.pid]);
    const charges = await executionsOf(admin, schema, `${SCOPE}#charge`, key);
    expect(charges).toHaveLength(1);
    expect(charges[0].pid).toBe(holder.pid);
    expect(charges[0].token).toBe(entered.token);
    figures.charges.push(charges.length);
  }, 60_000);

  it('strict mode: a holder killed inside its step leaves the record AMBIGUOUS, step-unknown', async () => {
    const key = randomUUID();
    const request = {
      scope: `${SCOPE}.strict`,
      key,
      lease: `${LEASE_MS}ms`,
      ttl: '1h',
      step: 'inside' as const,
      strict: true,
    };
    strictHolder.send({ cmd: 'execute', id: 'h', ...request, waitTimeout: '0s', hold: true });
    await strictHolder.waitFor('the holder inside its step', is.entered('h'), 30_000);
    strictHolder.proc.kill('SIGKILL');
    await strictHolder.exited;
    // Wait out the lease by the database's clock, then ask once.
    await admin.query(`SELECT pg_sleep($1)`, [(LEASE_MS + 300) / 1000]);

    successor.send({ cmd: 'execute', id: 'strict', ...request, waitTimeout: '0s' });
    const refused = await successor.waitFor('the strict successor', is.result('strict'), 20_000);
    expect(refused.result.kind).toBe('error');
    expect(refused.result.error?.name).toBe('IdempotencyOutcomeUnknownError');
    expect(refused.result.error?.message).toContain('step-unknown');
    expect(refused.result.error?.message).toContain('"charge"');
    const charges = await executionsOf(admin, schema, `${SCOPE}.strict#charge`, key);
    expect(charges.map((e) => e.pid)).toEqual([strictHolder.pid]);
    figures.charges.push(charges.length);
  }, 60_000);

  it('records its figures', () => {
    expect(figures.charges).toEqual([1, 1]);
    recordResult({
      case: 15,
      title: 'Recorded steps across a SIGKILL of the holder',
      executionsExpected: 2,
      executionsObserved: figures.charges.reduce((a, b) => a + b, 0),
      recordsLost: 0,
      maxRecoveryMs: figures.recoveryMs ?? null,
      notes:
        `lease ${LEASE_MS} ms; counted: the step's side effect (a charge row). Default mode: the ` +
        `holder recorded its step and was killed; the successor took the record over ` +
        `${figures.recoveryMs} ms after the kill and got the recorded value without running the ` +
        `step. Strict mode: a holder killed inside its step left the record AMBIGUOUS; the next ` +
        `caller was refused with step-unknown naming the step, which never ran again`,
    });
  });
});
