/**
 * Case 12: exactly once for the handler's own database writes. Two routes of
 * one Nest app (tx-app.ts) insert a row per execution: one with
 * `completion: 'transaction'` (the row and the record's completion in one
 * transaction), one with the default `completion: 'separate'` (the row in
 * autocommit, the completion in a statement of its own afterwards).
 *
 * Every key's first call goes to a "doomed" app process and is held at a kill
 * point chosen for it (before the insert, after it, just before the commit,
 * after the commit but before the response: see tx-app.ts); once every call of
 * the round reports that it is there, the process is SIGKILLed. Some keys are
 * sent to the next doomed process and killed a second time. Then a client
 * retries each key on a surviving app until it gets a 2xx (409 and 503 after
 * Retry-After, a connection error at once), and once more to see the replay.
 *
 * Asserted: with 'transaction', every key has exactly one row and one COMPLETE
 * record, whose response is the row's attempt, as are the final answer and its
 * replay. With 'separate', every key has a COMPLETE record and at least one
 * row, and exactly as many as the kills predict: one more for each kill after
 * its insert had committed and before its completion did. That count of keys
 * with two (or three) rows is reported, by kill point: it is why the
 * transaction mode exists.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  expectNoRawKeys,
  is,
  recordResult,
  recordsOf,
  setUpFaultCase,
  startChild,
  tearDownFaultCase,
} from './support/harness';
import { KILL_POINTS, KillPoint, POINT_HEADER, RowReply, TAG_HEADER } from './support/kill-points';

type Mode = 'transaction' | 'separate';
const MODES: Mode[] = ['transaction', 'separate'];
const SCOPES: Record<Mode, string> = { transaction: 'faults.tx', separate: 'faults.separate' };

const KEYS_PER_MODE = 500;
/** New keys per mode in each doomed process (each held in a transaction holds a connection). */
const PER_ROUND = 25;
/** One key in this many (among those a first kill leaves unfinished) is killed a second time. */
const SECOND_KILL_EVERY = 4;
const LEASE = '1s';
/** A held call must report its point within this; a retry must succeed within this. */
const POINT_MS = 20_000;
const SUCCESS_MS = 30_000;
const SPARES = 2;

interface Plan {
  mode: Mode;
  /** Also the key's name in tags (the key itself travels only in its header). */
  index: number;
  key: string;
  /** Where each successive attempt is killed; the attempt after the last one succeeds. */
  points: KillPoint[];
  killedAt: number[];
}

interface Reply {
  status: number;
  text: string;
  replayed: boolean;
  retryAfterMs: number;
}

interface Final {
  plan: Plan;
  success: Reply;
  replay: Reply;
  tries: number;
  recoveryMs: number;
}

/** A seeded generator (mulberry32), so a run can be repeated with FAULTS_SEED. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle<T>(items: T[], next: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/**
 * Each mode's keys, every point the first kill of as many keys as the others;
 * one in SECOND_KILL_EVERY of those not yet completed by it gets a second kill,
 * again spread over the four points.
 */
function plans(next: () => number): Plan[] {
  const all: Plan[] = [];
  for (const mode of MODES) {
    const firsts = shuffle(
      Array.from({ length: KEYS_PER_MODE }, (_, i) => KILL_POINTS[i % KILL_POINTS.length]),
      next,
    );
    let seconds = 0;
    firsts.forEach((first, i) => {
      const points: KillPoint[] = [first];
      if (first !== 'after-commit' && next() < 1 / SECOND_KILL_EVERY)
        points.push(KILL_POINTS[seconds++ % KILL_POINTS.length]);
      all.push({ mode, index: i, key: randomUUID(), points, killedAt: [] });
    });
  }
  return all;
}

/** Rows a plan leaves: a kill after the row committed keeps it, and the final call adds one unless the record was complete. */
function expectedRows(plan: Plan): number {
  const kept = plan.points.filter((p) =>
    plan.mode === 'transaction' ? p === 'after-commit' : p !== 'before-insert',
  ).length;
  return kept + (plan.points.at(-1) === 'after-commit' ? 0 : 1);
}

async function post(
  child: Child,
  plan: Plan,
  headers: Record<string, string> = {},
  timeoutMs = SUCCESS_MS,
): Promise<Reply> {
  const response = await fetch(`http://127.0.0.1:${child.port}/${plan.mode}`, {
    method: 'POST',
    headers: { 'idempotency-key': plan.key, ...headers },
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  return {
    status: response.status,
    text,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    retryAfterMs: Number(response.headers.get('retry-after') ?? 1) * 1000,
  };
}

describe("fault 12: SIGKILL around the handler's insert, completion 'transaction' against 'separate'", () => {
  const schema = scratchSchema('fault_tx');
  const seed = Number(process.env.FAULTS_SEED ?? Date.now() % 2 ** 31);
  let admin: DataSource;
  let survivor: Child;
  const doomed: Child[] = [];
  let spares: Promise<Child>[] = [];
  /** Answers the retrying client saw before its 2xx, by status ('network' for a connection error). */
  const retries = new Map<string, number>();

  const env = () => ({ PG_URL: testDatabaseUrl(), SCHEMA: schema, LEASE, POOL: 40 });
  const spawn = () =>
    startChild('tx-app', `doomed app ${doomed.length + spares.length + 1}`, env()).then((child) => {
      doomed.push(child);
      return child;
    });

  beforeAll(async () => {
    ({ admin } = await setUpFaultCase(schema, []));
    await admin.query(
      `CREATE TABLE "${schema}".rows (
         n bigserial PRIMARY KEY, mode text NOT NULL, "key" text NOT NULL, attempt uuid NOT NULL,
         pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    );
    // waitTimeout 0: a retry that finds the key still held is told 409 at once and comes back.
    survivor = await startChild('tx-app', 'surviving app', { ...env(), POOL: 20, WAIT: '0s' });
  }, 120_000);

  afterAll(async () => {
    await Promise.allSettled(spares);
    await tearDownFaultCase(admin, schema);
  });

  /** Retries on the surviving app until a 2xx, then asks once more for the replay. */
  async function succeed(plan: Plan): Promise<Final> {
    const deadline = Date.now() + SUCCESS_MS;
    for (let tries = 1; ; tries++) {
      let reply: Reply | undefined;
      try {
        reply = await post(survivor, plan);
      } catch (error) {
        // The surviving app is never killed: a connection error is retried, a dead app is not.
        retries.set('network', (retries.get('network') ?? 0) + 1);
        if (!survivor.alive || Date.now() > deadline) {
          const tail = survivor.output().split('\n').slice(-40).join('\n');
          throw new Error(
            `key ${plan.mode} #${plan.index} (killed at ${plan.points.join(', ')}), try ${tries}: ${(error as Error).message}; the surviving app's last lines:\n${tail}`,
            { cause: error },
          );
        }
        await delay(100);
        continue;
      }
      if (reply.status >= 200 && reply.status < 300) {
        const recoveryMs = Date.now() - plan.killedAt.at(-1)!;
        return { plan, success: reply, replay: await post(survivor, plan), tries, recoveryMs };
      }
      if ((reply.status !== 409 && reply.status !== 503) || Date.now() > deadline) {
        throw new Error(`key ${plan.mode} #${plan.index}: ${reply.status} ${reply.text}`);
      }
      retries.set(String(reply.status), (retries.get(String(reply.status)) ?? 0) + 1);
      await delay(reply.retryAfterMs);
    }
  }

  it(`${KEYS_PER_MODE} keys per mode, each killed at one or two of ${KILL_POINTS.length} points, then retried until it succeeds`, async () => {
    const started = Date.now();
    const queue = plans(random(seed));
    const finals: Promise<Final>[] = [];
    let again: Plan[] = [];
    let rounds = 0;
    let maxHeld = 0;
    spares = Array.from({ length: SPARES }, spawn);

    while (queue.length > 0 || again.length > 0) {
      const child = await spares.shift()!;
      spares.push(spawn());
      const fresh = MODES.flatMap((mode) => {
        const taken = queue.filter((p) => p.mode === mode).slice(0, PER_ROUND);
        for (const p of taken) queue.splice(queue.indexOf(p), 1);
        return taken;
      });
      const armed = [...fresh, ...again];
      again = [];
      rounds++;
      maxHeld = Math.max(maxHeld, armed.length);

      // Every call reaches its point and stays there (or answers, which fails the case).
      const calls = armed.map((plan) => {
        const attempt = plan.killedAt.length;
        const point = plan.points[attempt];
        const tag = `${plan.mode}.${plan.index}.${attempt}`;
        const reply = post(child, plan, { [POINT_HEADER]: point, [TAG_HEADER]: tag }, POINT_MS);
        const reached = Promise.race([
          child.waitFor(`${tag} at ${point}`, is.entered(tag), POINT_MS),
          reply.then((r) => {
            throw new Error(
              `${tag} answered ${r.status} ${r.text} instead of reaching ${point}:\n${child.output()}`,
            );
          }),
        ]);
        return {
          plan,
          point,
          reply: reply.then(
            () => undefined,
            (error: Error) => error,
          ),
          reached,
        };
      });
      const reached = await Promise.all(calls.map((call) => call.reached));
      expect(reached.map((m) => m.token)).toEqual(calls.map((call) => call.point));

      await child.kill();
      const killedAt = Date.now();
      expect((await child.exited).signal).toBe('SIGKILL');
      for (const call of calls) {
        // The client got no answer, not one byte of a response: its connection died.
        expect(await call.reply).toHaveProperty('message', 'fetch failed');
        call.plan.killedAt.push(killedAt);
        if (call.plan.killedAt.length < call.plan.points.length) again.push(call.plan);
        else finals.push(succeed(call.plan));
      }
    }
    const results = await Promise.all(finals);
    const trafficMs = Date.now() - started;

    // The database's word: every row each mode's handler committed, every record.
    const rows = (await admin.query(
      `SELECT mode, "key", attempt::text AS attempt, pid FROM "${schema}".rows ORDER BY n`,
    )) as { mode: Mode; key: string; attempt: string; pid: number }[];
    const rowsOf = new Map<string, { attempt: string; pid: number }[]>();
    for (const row of rows) {
      const id = `${row.mode}:${row.key}`;
      rowsOf.set(id, [...(rowsOf.get(id) ?? []), { attempt: row.attempt, pid: row.pid }]);
    }
    const records = new Map<string, Awaited<ReturnType<typeof recordsOf>>[number]>();
    for (const mode of MODES)
      for (const record of await recordsOf(admin, schema, SCOPES[mode]))
        records.set(`${mode}:${record.key}`, record);

    type Tally = { keys: number; rows: number; twice: number };
    const byPlan = new Map<string, Tally>();
    const total = { transaction: 0, separate: 0 };
    const expectedTotal = { transaction: 0, separate: 0 };
    let lost = 0;
    for (const { plan, success, replay } of results) {
      const id = `${plan.mode}:${plan.key}`;
      const attempts = rowsOf.get(id) ?? [];
      const record = records.get(id);
      const body = JSON.parse(success.text) as RowReply;
      const where = `${plan.mode} key #${plan.index} (killed at ${plan.points.join(', ')})`;

      expect(success.status, where).toBe(201);
      // The replay is the final answer, byte for byte.
      expect(replay, where).toMatchObject({ status: 201, replayed: true, text: success.text });
      expect(record?.state, where).toBe('COMPLETE');
      if (record?.state !== 'COMPLETE') lost++;
      expect(record?.payload, where).toEqual({ status: 201, body });
      // The stored answer is the last row's attempt: the one that completed the record.
      expect(attempts.at(-1), where).toEqual({ attempt: body.attempt, pid: body.pid });
      // Unless the last kill came after the commit, the surviving app ran it.
      if (plan.points.at(-1) !== 'after-commit') expect(body.pid, where).toBe(survivor.pid);
      expect(attempts, where).toHaveLength(expectedRows(plan));
      if (plan.mode === 'transaction') expect(attempts, where).toHaveLength(1);
      // A kill after the commit: the retry replays what the killed process committed.
      expect(success.replayed, where).toBe(plan.points.at(-1) === 'after-commit');

      total[plan.mode] += attempts.length;
      expectedTotal[plan.mode] += expectedRows(plan);
      const label = `${plan.mode}|${plan.points.join(' + ')}`;
      const tally = byPlan.get(label) ?? { keys: 0, rows: 0, twice: 0 };
      tally.keys++;
      tally.rows += attempts.length;
      if (attempts.length > 1) tally.twice++;
      byPlan.set(label, tally);
    }
    expect(results).toHaveLength(KEYS_PER_MODE * MODES.length);
    expect(total.transaction).toBe(KEYS_PER_MODE);
    expect(rows).toHaveLength(total.transaction + total.separate); // no row of another key
    for (const child of [survivor, ...doomed])
      expectNoRawKeys(
        child.output(),
        results.map((r) => r.plan.key),
      );

    const twice = (mode: Mode) =>
      [...byPlan].filter(([l]) => l.startsWith(`${mode}|`)).reduce((n, [, t]) => n + t.twice, 0);
    const recoveries = results.map((r) => r.recoveryMs).sort((a, b) => a - b);
    const maxRecoveryMs = recoveries.at(-1)!;
    const medianRecoveryMs = recoveries[Math.floor(recoveries.length / 2)];
    const kills = results.reduce((n, r) => n + r.plan.points.length, 0);
    const tries = results.reduce((n, r) => n + r.tries, 0);
    const table = [...byPlan]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(
        ([label, t]) => `  ${label.padEnd(42)} keys ${t.keys}, rows ${t.rows}, >1 row ${t.twice}`,
      );
    console.log(
      [
        `[fault 12] seed ${seed}; ${rounds} doomed processes SIGKILLed with up to ${maxHeld} calls held each;`,
        `${kills} kills over ${results.length} keys; ${trafficMs} ms from the first request to the last success;`,
        `retrying client: ${tries} requests to its 2xx, before them ${JSON.stringify(Object.fromEntries(retries))};`,
        `recovery (last kill to 2xx): median ${medianRecoveryMs} ms, max ${maxRecoveryMs} ms`,
        `transaction: ${total.transaction} rows for ${KEYS_PER_MODE} keys, ${twice('transaction')} keys with more than one`,
        `separate: ${total.separate} rows for ${KEYS_PER_MODE} keys, ${twice('separate')} keys with more than one`,
        ...table,
      ].join('\n'),
    );

    const byPoint = (mode: Mode) =>
      KILL_POINTS.map((point) => {
        const t = byPlan.get(`${mode}|${point}`) ?? { keys: 0, rows: 0, twice: 0 };
        return `${point} ${t.twice}/${t.keys}`;
      }).join(', ');
    const doubles = (mode: Mode) =>
      [...byPlan]
        .filter(([l]) => l.startsWith(`${mode}|`) && l.includes(' + '))
        .reduce((a, [, t]) => ({ keys: a.keys + t.keys, twice: a.twice + t.twice }), {
          keys: 0,
          twice: 0,
        });
    recordResult({
      case: 12,
      title: "Killed around the handler's insert (transaction vs separate)",
      executionsExpected: expectedTotal.transaction + expectedTotal.separate,
      executionsObserved: total.transaction + total.separate,
      recordsLost: lost,
      maxRecoveryMs,
      notes:
        `Nest app (tx-app.ts), lease 1 s; ${KEYS_PER_MODE} keys per mode, each first call held at one of 4 points ` +
        `and its process SIGKILLed (${rounds} processes, up to ${maxHeld} calls each), ${kills - results.length} keys ` +
        `killed a second time, then retried on a surviving app to a 2xx (median ${medianRecoveryMs} ms after the ` +
        `last kill) and replayed byte for byte; ${Math.round(trafficMs / 1000)} s. completion 'transaction': ` +
        `${total.transaction} rows, one per key, ${twice('transaction')} keys with two. completion 'separate': ` +
        `${total.separate} rows, ${twice('separate')} keys with two or more; keys with two rows by the point of a ` +
        `single kill: ${byPoint('separate')}; killed twice: ${doubles('separate').twice}/${doubles('separate').keys}`,
    });
  }, 600_000);
});
