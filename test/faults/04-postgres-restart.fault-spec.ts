/**
 * Case 4: PostgreSQL is restarted (fast shutdown, then started again on the
 * same data folder and port) while a call is in its acquire, in its action and
 * in its completion. The server is an embedded one this spec starts for itself,
 * whatever IDEMPOTENCY_TEST_PG_URL says, because it must stop it.
 *
 * Callers, through the engine (this process) and over HTTP (a Nest app in a
 * child process), get IdempotencyStoreUnavailableError / 503 within a bounded
 * time, never a hang or a 500; after the restart both recover without a
 * process restart; every action that ran has its COMPLETE record, and none
 * ran twice.
 *
 * "In its acquire" and "in its completion" are made exact with a trigger that
 * stalls the store's own statement inside PostgreSQL (pg_sleep, for keys the
 * spec lists in a `stall` table), so the statement is provably running
 * (pg_stat_activity) when the server goes down, and cannot finish before it.
 * (A row lock held by another session is not enough: the shutdown may end
 * that session first, and the waiting statement then commits just in time.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { IdempotencyCompletionError, IdempotencyStoreUnavailableError } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { Gate } from '../support/gate';
import { scratchSchema } from '../support/postgres';
import {
  Child,
  createFaultTables,
  expectNoRawKeys,
  is,
  openEngine,
  recordResult,
  startChild,
  stopAllChildren,
} from './support/harness';

const OP_TIMEOUT_MS = 2000;
/** A refusal must come well within this; a request still pending then is a hang. */
const REFUSAL_BOUND_MS = OP_TIMEOUT_MS + 1500;
const HANG_MS = 15_000;
const ENGINE_SCOPE = 'faults.restart';

type Engine = Awaited<ReturnType<typeof openEngine>>;

interface HttpReply {
  status: number;
  text: string;
  ms: number;
}

describe('fault 4: PostgreSQL restarted during acquire, action and completion', () => {
  const schema = scratchSchema('fault_restart');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-restart-'));
  const dataDir = path.join(root, 'data');
  let server: Child;
  let url: string;
  let admin: DataSource;
  let local: Engine;
  let app: Child;
  let appUrl: string;
  const keys = new Set<string>();
  /** Keys whose completion could not be stored at all: they may run twice. */
  const twice = new Set<string>();
  const statuses: number[] = [];
  const refusalMs: number[] = [];
  const recoveryMs: number[] = [];
  const notes: string[] = [];

  /** Fast shutdown (what SIGINT to the postmaster does), then a start on the same data and port. */
  async function restart(between?: () => Promise<void>): Promise<number> {
    await server.command('pg-stop');
    await between?.();
    await server.command('pg-start');
    return Date.now();
  }

  function newKey(): string {
    const key = randomUUID();
    keys.add(key);
    return key;
  }

  async function post(pathname: string, key: string, body: unknown): Promise<HttpReply> {
    const started = Date.now();
    const response = await fetch(`${appUrl}${pathname}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(HANG_MS),
    });
    const text = await response.text();
    statuses.push(response.status);
    return { status: response.status, text, ms: Date.now() - started };
  }

  /** An engine call that resolves to its outcome or its error, timed. */
  async function run(key: string, action: () => Promise<unknown>, waitTimeout = '5s') {
    const started = Date.now();
    try {
      const outcome = await local.engine.execute(
        { scope: ENGINE_SCOPE, key, lease: '2s', waitTimeout, ttl: '1h' },
        action,
      );
      return { outcome, ms: Date.now() - started };
    } catch (error) {
      return { error: error as Error, ms: Date.now() - started };
    }
  }

  async function recordExecution(scope: string, key: string): Promise<string> {
    const token = randomUUID();
    await local.dataSource.query(
      `INSERT INTO "${schema}".executions (scope, "key", pid, token) VALUES ($1, $2, $3, $4)`,
      [scope, key, process.pid, token],
    );
    return token;
  }

  /** An engine call whose action records an execution and returns at once. */
  function charge(key: string) {
    return run(key, () => recordExecution(ENGINE_SCOPE, key));
  }

  /**
   * An engine call and a POST /held (`tag`), each on a new key, both held inside
   * their action once this resolves; `release` lets both actions return.
   */
  async function holdInAction(tag: string) {
    const engineKey = newKey();
    const httpKey = newKey();
    const gate = new Gate();
    const entered = new Gate();
    const engineCall = run(engineKey, async () => {
      const token = await recordExecution(ENGINE_SCOPE, engineKey);
      entered.open();
      await gate.promise;
      return token;
    });
    const httpCall = post('/held', httpKey, { tag });
    await entered.promise;
    await app.waitFor('the held handler', is.entered(tag), 10_000);
    const release = () => {
      gate.open();
      app.send({ cmd: 'release', id: tag });
    };
    return { engineKey, httpKey, engineCall, httpCall, release };
  }

  /** Resolves once `count` store statements containing `marker` are stalled by the trigger (bounded poll). */
  async function stalled(marker: string, count: number): Promise<void> {
    for (let i = 0; i < 500; i++) {
      const [{ n }] = await admin.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE wait_event = 'PgSleep' AND query LIKE $1 AND pid <> pg_backend_pid()`,
        [`%${marker}%`],
      );
      if (n >= count) return;
      await delay(10);
    }
    throw new Error(`no ${count} statements "${marker}" stalled`);
  }

  /**
   * Stalls the acquire (insert) or the completion (update to COMPLETE) of these
   * keys until the server goes down: a stall applies to the running postmaster
   * only, so nothing stalls once it has restarted.
   */
  async function stall(operation: 'acquire' | 'complete', keys: string[]): Promise<void> {
    await admin.query(
      `INSERT INTO "${schema}".stall (operation, "key") SELECT $1, unnest($2::text[])`,
      [operation, keys],
    );
  }

  /** Retries a call after the restart until it succeeds; the time it took is the recovery time. */
  async function untilRecovered<T>(
    restartedAt: number,
    attempt: () => Promise<T>,
    ok: (value: T) => boolean,
  ): Promise<T> {
    let last: T | undefined;
    for (let i = 0; i < 100; i++) {
      last = await attempt();
      if (ok(last)) {
        recoveryMs.push(Date.now() - restartedAt);
        return last;
      }
      await delay(50);
    }
    throw new Error(`no recovery after the restart: ${JSON.stringify(last)}`);
  }

  function expectUnavailable(result: { error?: Error; ms: number }, during: string): void {
    expect(result.error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(result.error!.message).toContain(during);
    expect(result.ms).toBeLessThan(REFUSAL_BOUND_MS);
    refusalMs.push(result.ms);
  }

  function expect503(reply: HttpReply): void {
    expect(reply.status).toBe(503);
    expect(JSON.parse(reply.text)).toMatchObject({ code: 'idempotency-store-unavailable' });
    expect(reply.ms).toBeLessThan(REFUSAL_BOUND_MS);
    refusalMs.push(reply.ms);
  }

  beforeAll(async () => {
    server = await startChild('pg', 'embedded PostgreSQL', { DATA_DIR: dataDir });
    url = server.url!;
    admin = await new DataSource({ type: 'postgres', url, extra: { max: 2 } }).initialize();
    await createFaultTables(admin, schema);
    await admin.query(
      `CREATE TABLE "${schema}".stall (operation text NOT NULL, "key" text NOT NULL,
         postmaster timestamptz NOT NULL DEFAULT pg_postmaster_start_time())`,
    );
    await admin.query(
      `CREATE FUNCTION "${schema}".stall() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF EXISTS (SELECT 1 FROM "${schema}".stall s
                    WHERE s."key" = NEW."key" AND s.postmaster = pg_postmaster_start_time() AND s.operation =
                    CASE WHEN TG_OP = 'INSERT' THEN 'acquire' WHEN NEW.state = 'COMPLETE' THEN 'complete' END)
         THEN PERFORM pg_sleep(60); END IF;
         RETURN NEW;
       END $$`,
    );
    await admin.query(
      `CREATE TRIGGER stall BEFORE INSERT OR UPDATE ON "${schema}".idempotency_records
       FOR EACH ROW EXECUTE FUNCTION "${schema}".stall()`,
    );
    local = await openEngine(url, schema, { store: { operationTimeoutMs: OP_TIMEOUT_MS } });
    app = await startChild('app', 'app', {
      PG_URL: url,
      SCHEMA: schema,
      OP_TIMEOUT_MS: OP_TIMEOUT_MS,
      WORK_MS: 20,
    });
    appUrl = `http://127.0.0.1:${app.port}`;
  }, 120_000);

  afterAll(async () => {
    await app?.kill();
    await local?.close();
    await admin?.destroy();
    await server?.kill(); // stops the server first
    await stopAllChildren();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('during acquire: the waiting acquire fails as unavailable (engine) / 503 (HTTP) and the key runs once after the restart', async () => {
    const engineKey = newKey();
    const httpKey = newKey();
    await stall('acquire', [engineKey, httpKey]);
    const engineCall = charge(engineKey);
    const httpCall = post('/charges', httpKey, { amount: 1 });
    await stalled('ON CONFLICT (id) DO NOTHING', 2); // the acquiring insert

    const restartedAt = await restart();
    expectUnavailable(await engineCall, 'unavailable during acquire');
    expect503(await httpCall);

    const engineRetry = await untilRecovered(
      restartedAt,
      () => charge(engineKey),
      (r) => r.outcome?.kind === 'executed',
    );
    const httpRetry = await untilRecovered(
      restartedAt,
      () => post('/charges', httpKey, { amount: 1 }),
      (r) => r.status === 201,
    );
    expect((await charge(engineKey)).outcome).toEqual({
      kind: 'replayed',
      value: engineRetry.outcome!.value,
      completedAt: expect.any(Date),
    });
    const replay = await post('/charges', httpKey, { amount: 1 });
    expect(replay).toMatchObject({ status: 201, text: httpRetry.text });
    notes.push(`acquire: refused in ${Math.max(...refusalMs)} ms`);
  }, 60_000);

  it('during the action: outage callers are refused in bounded time; the running actions complete once it is back', async () => {
    const { engineKey, httpKey, engineCall, httpCall, release } = await holdInAction('held-action');

    const outageKeys = Array.from({ length: 5 }, newKey);
    const before = refusalMs.length;
    const restartedAt = await restart(async () => {
      // While the server is down: new keys and duplicates of the running ones are refused.
      const engineOutage = await Promise.all([
        ...outageKeys.map((k) => charge(k)),
        run(engineKey, async () => 'a duplicate must not run'),
      ]);
      for (const r of engineOutage) expectUnavailable(r, 'unavailable during acquire');
      const httpOutage = await Promise.all([
        ...outageKeys.map((k) => post('/charges', k, { amount: 2 })),
        post('/held', httpKey, { tag: 'held-action' }),
      ]);
      for (const r of httpOutage) expect503(r);
      // The holder's heartbeat fails meanwhile, and keeps trying.
      for (let i = 0; i < 300 && !local.logs.some((l) => l.includes('heartbeat for')); i++)
        await delay(10);
      expect(local.logs.join('\n')).toMatch(/heartbeat for faults\.restart\/#[0-9a-f]{12} failed/);
    });
    release();
    const engineDone = await engineCall;
    expect(engineDone.outcome?.kind).toBe('executed');
    const httpDone = await httpCall;
    expect(httpDone.status).toBe(201);
    recoveryMs.push(Date.now() - restartedAt);

    // The service is back without a restart of either process: outage keys now run, once.
    for (const k of outageKeys) {
      await untilRecovered(
        restartedAt,
        () => charge(k),
        (r) => r.outcome?.kind === 'executed',
      );
      await untilRecovered(
        restartedAt,
        () => post('/charges', k, { amount: 2 }),
        (r) => r.status === 201,
      );
    }
    const dup = await run(engineKey, async () => 'a duplicate must not run');
    expect(dup.outcome).toMatchObject({ kind: 'replayed', value: engineDone.outcome!.value });
    expect(await post('/held', httpKey, { tag: 'held-action' })).toMatchObject({
      status: 201,
      text: httpDone.text,
    });
    notes.push(
      `action: ${refusalMs.length - before} outage callers refused in at most ${Math.max(...refusalMs.slice(before))} ms`,
    );
  }, 60_000);

  it('during completion: the completion waiting in PostgreSQL is retried after the restart and lands', async () => {
    const { engineKey, httpKey, engineCall, httpCall, release } =
      await holdInAction('held-complete');

    // Let the actions return into a completion that stalls inside PostgreSQL.
    await stall('complete', [engineKey, httpKey]);
    const eventsBefore = local.events.length;
    release();
    await stalled("SET state = 'COMPLETE'", 2); // the completing update

    const restartedAt = await restart();
    const engineDone = await engineCall;
    expect(engineDone.outcome?.kind).toBe('executed');
    const httpDone = await httpCall;
    expect(httpDone.status).toBe(201);
    recoveryMs.push(Date.now() - restartedAt);
    const retries = local.events
      .slice(eventsBefore)
      .filter((e) => e.type === 'completion-retry').length;
    expect(retries).toBeGreaterThanOrEqual(1);
    expect(app.output()).toMatch(/completion of held\/#[0-9a-f]{12} failed \(attempt 1\)/);

    const dup = await run(engineKey, async () => 'a duplicate must not run');
    expect(dup.outcome).toMatchObject({ kind: 'replayed', value: engineDone.outcome!.value });
    expect(await post('/held', httpKey, { tag: 'held-complete' })).toMatchObject({
      status: 201,
      text: httpDone.text,
    });
    notes.push(`completion: retried ${retries}x by the engine, then stored`);
  }, 60_000);

  it('down for longer than the completion retries: the caller is told the outcome was not recorded; the key runs a second time after the restart, never a third', async () => {
    const { engineKey, httpKey, engineCall, httpCall, release } = await holdInAction('held-long');
    twice.add(engineKey).add(httpKey);

    // The actions return while the server is down, and it stays down until every
    // completion attempt has failed and both callers have their answer.
    let engineFailed: Awaited<typeof engineCall> | undefined;
    let httpFailed: HttpReply | undefined;
    const restartedAt = await restart(async () => {
      release();
      [engineFailed, httpFailed] = await Promise.all([engineCall, httpCall]);
    });
    expect(engineFailed!.error).toBeInstanceOf(IdempotencyCompletionError);
    expect(engineFailed!.error!.message).toMatch(/could not be stored after 6 attempts/);
    expect(httpFailed!.status).toBe(503);
    expect(JSON.parse(httpFailed!.text)).toMatchObject({ code: 'idempotency-completion-failed' });
    const answeredIn = Math.max(engineFailed!.ms, httpFailed!.ms);
    expect(answeredIn).toBeLessThan(15_000);

    // The records stayed IN_PROGRESS (the work happened); once their leases lapse, a retry runs again.
    const engineAgain = await untilRecovered(
      restartedAt,
      () => charge(engineKey),
      (r) => r.outcome?.kind === 'executed',
    );
    const httpAgain = await untilRecovered(
      restartedAt,
      () => post('/held', httpKey, { tag: 'held-long' }),
      (r) => r.status === 201,
    );
    const rerunMs = recoveryMs.slice(-2);
    for (let i = 0; i < 3; i++) {
      expect((await run(engineKey, async () => 'must not run')).outcome).toMatchObject({
        kind: 'replayed',
        value: engineAgain.outcome!.value,
      });
      expect(await post('/held', httpKey, { tag: 'held-long' })).toMatchObject({
        status: 201,
        text: httpAgain.text,
      });
    }
    notes.push(
      `down past the completion retries: callers told in ${answeredIn} ms ` +
        `(IdempotencyCompletionError / 503 idempotency-completion-failed); the keys ran a second ` +
        `time ${rerunMs.join(' / ')} ms after the restart, once their leases lapsed, and never a third`,
    );
  }, 60_000);

  it('lost nothing: every action that ran has its COMPLETE record, none ran more often than allowed, no 500, no process restarted', async () => {
    const executions: { scope: string; key: string; n: number }[] = await admin.query(
      `SELECT scope, "key", count(*)::int AS n FROM "${schema}".executions GROUP BY scope, "key"`,
    );
    const records: { scope: string; key: string; state: string }[] = await admin.query(
      `SELECT scope, "key", state FROM "${schema}".idempotency_records`,
    );
    const complete = new Set(
      records.filter((r) => r.state === 'COMPLETE').map((r) => `${r.scope}|${r.key}`),
    );
    const lost = executions.filter((e) => !complete.has(`${e.scope}|${e.key}`));
    expect(lost).toEqual([]);
    // Once each; twice only where the completion was never stored (the documented limitation).
    expect(executions.filter((e) => e.n !== (twice.has(e.key) ? 2 : 1))).toEqual([]);
    expect(records.filter((r) => r.state !== 'COMPLETE')).toEqual([]);
    // Engine keys and HTTP keys: 2 (acquire) + 2 + 10 (action) + 2 (completion) + 2 (long outage).
    expect(executions).toHaveLength(18);
    expect(statuses.filter((s) => s !== 201 && s !== 503)).toEqual([]);
    expect(app.alive).toBe(true);
    // The store's LISTEN connection (outside the pool) is back too, so waiters are woken by
    // NOTIFY again rather than by polling. No event says so: look, bounded (its backoff is ≤ 5 s).
    const listener = (local.store as unknown as { dialect?: { listener?: { listening: boolean } } })
      .dialect?.listener;
    for (let i = 0; i < 120 && !listener?.listening; i++) await delay(50);
    expect(listener?.listening).toBe(true);
    expectNoRawKeys(app.output() + local.logs.join('\n'), keys);

    recordResult({
      case: 4,
      title: 'PostgreSQL restarted (acquire, action, completion)',
      executionsExpected: 20,
      executionsObserved: executions.reduce((sum, e) => sum + e.n, 0),
      recordsLost: lost.length,
      maxRecoveryMs: Math.max(...recoveryMs),
      notes:
        `4 restarts of an embedded PostgreSQL (engine in the test process + Nest app in a child); ` +
        `${refusalMs.length} refusals (unavailable / 503), slowest ${Math.max(...refusalMs)} ms ` +
        `(bound ${REFUSAL_BOUND_MS} ms); ${statuses.filter((s) => s === 503).length} × 503, 0 × 500; ` +
        notes.join('; '),
    });
  }, 60_000);
});
