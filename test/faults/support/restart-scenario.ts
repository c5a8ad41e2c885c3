/**
 * The scenario of case 4 (a server restarted in the middle of actions) for a
 * store whose server a case kills itself: Redis (case 9) and MariaDB (case 11).
 * The engine runs in the test process and a Nest app (store-app.ts) in a
 * child, each with its own connection to the server; executions are rows in
 * PostgreSQL, so they are counted whatever the store's server loses.
 *
 * 1. Before the fault, 3 engine keys and 3 HTTP keys complete.
 * 2. Four calls are held inside their action (engine and HTTP, two each).
 * 3. The server is SIGKILLed (a crash, not a shutdown).
 * 4. While it is down: 3 new keys and a duplicate of a held key, through the
 *    engine and over HTTP, must be refused promptly (unavailable / 503); two of
 *    the held actions return, and their completions fail and are retried.
 * 5. The server is started again on the same data and port.
 * 6. The records are read back; a duplicate of a held key tries to take it;
 *    the held actions return; the outage keys are retried until they run;
 *    every key is called twice more.
 *
 * `durable` says what the server keeps across a crash. Durable (MariaDB, Redis
 * with AOF `appendfsync always`): every record survives, held completions
 * land after the restart, nothing runs twice. Not durable (Redis without
 * persistence): every record is lost, so every key that had a record runs a
 * second time on its next call, and the duplicate of a held key runs while the
 * original is still in its action (docs/redis.md#durability). The counts are
 * asserted exactly in both cases.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import {
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  keyDigest,
} from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { Gate } from '../../support/gate';
import { testDatabaseUrl } from '../../support/postgres';
import { Child, expectNoRawKeys, is, startChild } from './harness';
import { executionCounts, openStoreEngine, recordExecution, StoreConfig } from './stores';

export interface RestartTarget {
  /** SIGKILL the server and wait for it to exit. */
  kill(): Promise<void>;
  /** Start it again on the same data and port; resolves once it answers. */
  start(): Promise<void>;
}

export interface RestartScenario {
  label: string;
  target: RestartTarget;
  config: StoreConfig;
  durable: boolean;
  pg: DataSource;
  schema: string;
  /** A refusal must come within this (the store's operationTimeoutMs plus slack). */
  refusalBoundMs: number;
}

export interface RestartFigures {
  executionsExpected: number;
  executionsObserved: number;
  /** Records that existed when the server was killed and were gone after it restarted. */
  recordsLost: number;
  /** Keys that ran a second time. */
  ranTwice: number;
  refusals: number;
  slowestRefusalMs: number;
  /** From the server answering again to the last of: held completions answered, outage keys run. */
  maxRecoveryMs: number;
  /** How long the server took to start again (crash recovery included). */
  restartMs: number;
  completionRetries: number;
  statuses: Map<number, number>;
}

const ENGINE_SCOPE = 'faults.store';
const HANG_MS = 15_000;

interface HttpReply {
  status: number;
  text: string;
  ms: number;
}

type Engine = Awaited<ReturnType<typeof openStoreEngine>>;

/** Polls `check` (a state with no event of its own) every 10 ms, bounded. */
export async function waitUntil(what: string, check: () => boolean, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await delay(10);
  }
}

export async function runRestartScenario(s: RestartScenario): Promise<RestartFigures> {
  const engine: Engine = await openStoreEngine(s.config);
  let app: Child | undefined;
  try {
    app = await startChild('store-app', `app (${s.label})`, {
      STORE: JSON.stringify(s.config),
      PG_URL: testDatabaseUrl(),
      SCHEMA: s.schema,
      WORK_MS: 20,
    });
    return await scenario(s, engine, app);
  } finally {
    await app?.kill();
    await engine.close();
  }
}

async function scenario(s: RestartScenario, local: Engine, app: Child): Promise<RestartFigures> {
  const appUrl = `http://127.0.0.1:${app.port}`;
  /** Every key of this run, `scope|key` → the executions it may have. */
  const expected = new Map<string, number>();
  const keys = new Set<string>();
  const statuses = new Map<number, number>();
  const refusalMs: number[] = [];
  const recoveryMs: number[] = [];

  function newKey(scope: string, runs: number): string {
    const key = randomUUID();
    keys.add(key);
    expected.set(`${scope}|${key}`, runs);
    return key;
  }
  const twice = s.durable ? 1 : 2;

  async function post(pathname: string, key: string, body: unknown): Promise<HttpReply> {
    const started = Date.now();
    const response = await fetch(`${appUrl}${pathname}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(HANG_MS),
    });
    const text = await response.text();
    statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
    return { status: response.status, text, ms: Date.now() - started };
  }

  async function run(key: string, action: () => Promise<unknown>, waitTimeout = '5s') {
    const started = Date.now();
    try {
      const outcome = await local.engine.execute(
        { scope: ENGINE_SCOPE, key, lease: '10s', waitTimeout, ttl: '1h' },
        action,
      );
      return { outcome, ms: Date.now() - started };
    } catch (error) {
      return { error: error as Error, ms: Date.now() - started };
    }
  }

  const charge = (key: string, waitTimeout?: string) =>
    run(key, () => recordExecution(s.pg, s.schema, ENGINE_SCOPE, key), waitTimeout);

  async function holdInAction(tag: string, runs: number) {
    const engineKey = newKey(ENGINE_SCOPE, runs);
    const httpKey = newKey('held', runs);
    const gate = new Gate();
    const entered = new Gate();
    const engineCall = run(engineKey, async () => {
      const token = await recordExecution(s.pg, s.schema, ENGINE_SCOPE, engineKey);
      entered.open();
      await gate.promise;
      return token;
    });
    const httpCall = post('/held', httpKey, { tag });
    // Awaited later; a failure before then must not surface as an unhandled rejection.
    httpCall.catch(() => undefined);
    await entered.promise;
    await app.waitFor('the held handler', is.entered(tag), 10_000);
    const release = () => {
      gate.open();
      app.send({ cmd: 'release', id: tag });
    };
    return { tag, engineKey, httpKey, engineCall, httpCall, release };
  }

  function expectUnavailable(result: { error?: Error; ms: number }): void {
    expect(result.error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(result.ms).toBeLessThan(s.refusalBoundMs);
    refusalMs.push(result.ms);
  }

  function expect503(reply: HttpReply): void {
    expect(reply.status).toBe(503);
    expect(JSON.parse(reply.text)).toMatchObject({ code: 'idempotency-store-unavailable' });
    expect(reply.ms).toBeLessThan(s.refusalBoundMs);
    refusalMs.push(reply.ms);
  }

  async function untilRecovered<T>(
    since: number,
    attempt: () => Promise<T>,
    ok: (value: T) => boolean,
  ): Promise<T> {
    let last: T | undefined;
    for (let i = 0; i < 100; i++) {
      last = await attempt();
      if (ok(last)) {
        recoveryMs.push(Date.now() - since);
        return last;
      }
      await delay(50);
    }
    throw new Error(`no recovery after the restart: ${JSON.stringify(last)}`);
  }

  // 1. Before the fault.
  const before = { engine: [] as string[], http: [] as string[] };
  for (let i = 0; i < 3; i++) {
    const key = newKey(ENGINE_SCOPE, twice);
    expect((await charge(key)).outcome?.kind).toBe('executed');
    before.engine.push(key);
    const httpKey = newKey('charges', twice);
    expect((await post('/charges', httpKey, { amount: 0 })).status).toBe(201);
    before.http.push(httpKey);
  }

  // 2. Held in their action. The engine key of `action` runs twice without persistence:
  // once held, once by the duplicate that finds its record gone after the restart.
  const action = await holdInAction('held-action', twice);
  const completion = await holdInAction('held-complete', twice);

  // 3. The crash.
  await s.target.kill();

  // 4. While the server is down.
  const outage = Array.from({ length: 3 }, () => newKey(ENGINE_SCOPE, 1));
  const httpOutage = Array.from({ length: 3 }, () => newKey('charges', 1));
  const engineRefusals = await Promise.all([
    ...outage.map((k) => charge(k)),
    run(action.engineKey, async () => 'a duplicate must not run'),
  ]);
  for (const r of engineRefusals) expectUnavailable(r);
  const httpRefusals = await Promise.all([
    ...httpOutage.map((k) => post('/charges', k, { amount: 9 })),
    post('/held', action.httpKey, { tag: action.tag }),
  ]);
  for (const r of httpRefusals) expect503(r);

  const completionDigest = keyDigest(ENGINE_SCOPE, completion.engineKey);
  const retries = () =>
    local.events.filter((e) => e.type === 'completion-retry' && e.keyDigest === completionDigest)
      .length;
  completion.release();
  await waitUntil('the engine retries the completion', () => retries() >= 1);
  await waitUntil('the app retries its completion', () =>
    /completion of held\/#[0-9a-f]{12} failed \(attempt 1\)/.test(app.output()),
  );

  // 5. Back up.
  const startedAt = Date.now();
  await s.target.start();
  const restartedAt = Date.now();
  const restartMs = restartedAt - startedAt;

  // 6. What survived: the completed records and the held ones (the completing pair may land any
  // moment). The client reconnects on its own back-off (node-redis's default grows to 2 s plus
  // jitter during the outage), so a read right after the restart may still be refused: retried.
  const survived = await untilRecovered(
    restartedAt,
    () =>
      Promise.all(
        [
          ...before.engine.map((k) => [ENGINE_SCOPE, k]),
          ...before.http.map((k) => ['charges', k]),
          [ENGINE_SCOPE, action.engineKey],
          ['held', action.httpKey],
        ].map(([scope, key]) => local.store.find({ scope, key })),
      ).catch((error: unknown) => {
        if (error instanceof IdempotencyStoreUnavailableError) return undefined;
        throw error;
      }),
    (found) => found !== undefined,
  ).then((found) => found!);
  const recordsLost = survived.filter((r) => r === null).length;
  if (s.durable) {
    expect(survived.map((r) => r?.state)).toEqual([
      ...Array(6).fill('COMPLETE'),
      'IN_PROGRESS',
      'IN_PROGRESS',
    ]);
  } else {
    expect(recordsLost).toBe(survived.length);
  }

  // A duplicate of the held engine key: refused as in flight if the record survived; otherwise
  // it takes the key and runs while the original is still in its action.
  const duplicate = await charge(action.engineKey, '0s');
  if (s.durable) expect(duplicate.error).toBeInstanceOf(IdempotencyInFlightError);
  else expect(duplicate.outcome?.kind).toBe('executed');

  action.release();
  const [actionDone, actionHttp, completionDone, completionHttp] = await Promise.all([
    action.engineCall,
    action.httpCall,
    completion.engineCall,
    completion.httpCall,
  ]);
  recoveryMs.push(Date.now() - restartedAt);
  for (const done of [actionDone, completionDone]) expect(done.outcome?.kind).toBe('executed');
  expect([actionHttp.status, completionHttp.status]).toEqual([201, 201]);
  const leaseLost = local.events.filter(
    (e) => e.type === 'lease-lost' && e.during === 'complete',
  ).length;
  const completed = local.events.some(
    (e) => e.type === 'completed' && e.keyDigest === completionDigest,
  );
  // Durable: the retried completion landed. Otherwise it found no record (or the duplicate's).
  expect(completed).toBe(s.durable);
  expect(leaseLost).toBe(s.durable ? 0 : 2);

  // The outage keys run now, once, without a restart of either process.
  for (const k of outage) {
    await untilRecovered(
      restartedAt,
      () => charge(k),
      (r) => r.outcome?.kind === 'executed',
    );
  }
  for (const k of httpOutage) {
    await untilRecovered(
      restartedAt,
      () => post('/charges', k, { amount: 9 }),
      (r) => r.status === 201,
    );
  }

  // Every key, twice more: the first call replays (durable) or runs again (lost records,
  // except the held engine key, which the duplicate completed); the second always replays.
  const engineKeys = [...before.engine, action.engineKey, completion.engineKey, ...outage];
  const first = new Map<string, unknown>();
  for (const k of engineKeys) {
    const r = await charge(k);
    const again =
      !s.durable && k !== action.engineKey && !outage.includes(k) ? 'executed' : 'replayed';
    expect(r.outcome?.kind, `engine key ${engineKeys.indexOf(k)}`).toBe(again);
    first.set(k, r.outcome?.value);
  }
  for (const k of engineKeys) {
    expect((await charge(k)).outcome).toMatchObject({ kind: 'replayed', value: first.get(k) });
  }
  const httpCalls: Array<[string, string, unknown]> = [
    ...before.http.map((k): [string, string, unknown] => ['/charges', k, { amount: 0 }]),
    ['/held', action.httpKey, { tag: action.tag }],
    ['/held', completion.httpKey, { tag: completion.tag }],
    ...httpOutage.map((k): [string, string, unknown] => ['/charges', k, { amount: 9 }]),
  ];
  for (const [pathname, k, body] of httpCalls) {
    const once = await post(pathname, k, body);
    expect(once.status).toBe(201);
    const replayed = once.text;
    expect(await post(pathname, k, body)).toMatchObject({ status: 201, text: replayed });
  }

  // The counts, exactly.
  const counts = await executionCounts(s.pg, s.schema);
  const mine = [...expected.keys()];
  const observed = mine.map((id) => counts.get(id)?.length ?? 0);
  expect(mine.filter((id, i) => observed[i] !== expected.get(id))).toEqual([]);
  expect([...statuses.keys()].filter((status) => status !== 201 && status !== 503)).toEqual([]);
  expect(app.alive).toBe(true);
  expectNoRawKeys(app.output() + local.logs.join('\n'), keys);

  return {
    executionsExpected: [...expected.values()].reduce((a, b) => a + b, 0),
    executionsObserved: observed.reduce((a, b) => a + b, 0),
    recordsLost,
    ranTwice: observed.filter((n) => n > 1).length,
    refusals: refusalMs.length,
    slowestRefusalMs: Math.max(...refusalMs),
    maxRecoveryMs: Math.max(...recoveryMs),
    restartMs,
    completionRetries: retries(),
    statuses,
  };
}
