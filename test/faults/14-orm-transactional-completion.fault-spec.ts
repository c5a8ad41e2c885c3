/**
 * Case 14: case 12's exactly-once run with the handler's transaction opened
 * by @nestjs-cls/transactional over each ORM's adapter (Prisma, Drizzle,
 * Kysely, TypeORM), the record completed by `PgIdempotencyStore` through that
 * same transaction (orm-tx-app.ts).
 *
 * Per ORM, every key's first call goes to a "doomed" app process and is held
 * at one of the four kill points (before the insert, after it, just before
 * the commit, after the commit but before the response); once every call of
 * the round is there, the process is SIGKILLed. A client then retries each
 * key on a surviving app until it gets a 2xx (409 and 503 after Retry-After),
 * and once more to see the replay.
 *
 * Asserted: every key has exactly one row and one COMPLETE record, whose
 * response is the row's attempt, as are the final answer and its replay; a
 * retry after a kill after the commit is a replay, any other runs anew.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import { generatePrismaClient } from '../support/prisma/generate';
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

const ORMS = ['prisma', 'drizzle', 'kysely', 'typeorm'] as const;
const KEYS_PER_ORM = Number(process.env.FAULTS_ORM_KEYS ?? 100);
const PER_ROUND = 25;
const LEASE = '1s';
const POINT_MS = 20_000;
const SUCCESS_MS = 30_000;

interface Plan {
  index: number;
  key: string;
  point: KillPoint;
  killedAt: number;
}

interface Reply {
  status: number;
  text: string;
  replayed: boolean;
  retryAfterMs: number;
}

async function post(
  child: Child,
  plan: Plan,
  headers: Record<string, string> = {},
  timeoutMs = SUCCESS_MS,
): Promise<Reply> {
  const response = await fetch(`http://127.0.0.1:${child.port}/transaction`, {
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

describe.each(ORMS)(
  "fault 14: SIGKILL around the handler's insert, completion in a %s transaction through @nestjs-cls/transactional",
  (orm) => {
    const schema = scratchSchema(`fault_orm_${orm}`);
    let admin: DataSource;
    let survivor: Child;
    const env = () => ({ PG_URL: testDatabaseUrl(), SCHEMA: schema, ORM: orm, LEASE, POOL: 40 });

    beforeAll(async () => {
      if (orm === 'prisma') generatePrismaClient();
      ({ admin } = await setUpFaultCase(schema, []));
      await admin.query(
        `CREATE TABLE "${schema}".rows (
           n bigserial PRIMARY KEY, mode text NOT NULL, "key" text NOT NULL, attempt uuid NOT NULL,
           pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      );
      survivor = await startChild('orm-tx-app', `surviving ${orm} app`, {
        ...env(),
        POOL: 20,
        WAIT: '0s',
      });
    }, 120_000);

    afterAll(async () => {
      await tearDownFaultCase(admin, schema);
    });

    async function succeed(plan: Plan) {
      const deadline = Date.now() + SUCCESS_MS;
      for (let tries = 1; ; tries++) {
        const reply = await post(survivor, plan);
        if (reply.status >= 200 && reply.status < 300) {
          const recoveryMs = Date.now() - plan.killedAt;
          return { plan, success: reply, replay: await post(survivor, plan), tries, recoveryMs };
        }
        if ((reply.status !== 409 && reply.status !== 503) || Date.now() > deadline) {
          throw new Error(`${orm} key #${plan.index}: ${reply.status} ${reply.text}`);
        }
        await delay(reply.retryAfterMs);
      }
    }

    it(`${KEYS_PER_ORM} keys, each killed at one of ${KILL_POINTS.length} points, then retried until it succeeds`, async () => {
      const started = Date.now();
      const queue: Plan[] = Array.from({ length: KEYS_PER_ORM }, (_, index) => ({
        index,
        key: randomUUID(),
        point: KILL_POINTS[index % KILL_POINTS.length],
        killedAt: 0,
      }));
      const finals: ReturnType<typeof succeed>[] = [];
      const doomed: Child[] = [];
      let rounds = 0;
      while (queue.length > 0) {
        const armed = queue.splice(0, PER_ROUND);
        const child = await startChild('orm-tx-app', `doomed ${orm} app ${++rounds}`, env());
        doomed.push(child);
        const calls = armed.map((plan) => {
          const tag = `${orm}.${plan.index}`;
          const reply = post(
            child,
            plan,
            { [POINT_HEADER]: plan.point, [TAG_HEADER]: tag },
            POINT_MS,
          );
          const reached = Promise.race([
            child.waitFor(`${tag} at ${plan.point}`, is.entered(tag), POINT_MS),
            reply.then((r) => {
              throw new Error(
                `${tag} answered ${r.status} ${r.text} instead of reaching ${plan.point}`,
              );
            }),
          ]);
          return {
            plan,
            reached,
            reply: reply.then(
              () => undefined,
              (error: Error) => error,
            ),
          };
        });
        const reached = await Promise.all(calls.map((call) => call.reached));
        expect(reached.map((m) => m.token)).toEqual(calls.map((call) => call.plan.point));
        await child.kill();
        const killedAt = Date.now();
        expect((await child.exited).signal).toBe('SIGKILL');
        for (const call of calls) {
          expect(await call.reply).toHaveProperty('message', 'fetch failed');
          call.plan.killedAt = killedAt;
          finals.push(succeed(call.plan));
        }
      }
      const results = await Promise.all(finals);

      const rows = (await admin.query(
        `SELECT "key", attempt::text AS attempt, pid FROM "${schema}".rows ORDER BY n`,
      )) as { key: string; attempt: string; pid: number }[];
      const records = new Map(
        (await recordsOf(admin, schema, 'faults.orm')).map((record) => [record.key, record]),
      );
      for (const { plan, success, replay } of results) {
        const where = `${orm} key #${plan.index} (killed at ${plan.point})`;
        const attempts = rows.filter((row) => row.key === plan.key);
        const body = JSON.parse(success.text) as RowReply;
        expect(success.status, where).toBe(201);
        expect(replay, where).toMatchObject({ status: 201, replayed: true, text: success.text });
        expect(attempts, where).toEqual([{ key: plan.key, attempt: body.attempt, pid: body.pid }]);
        expect(records.get(plan.key)?.state, where).toBe('COMPLETE');
        expect(records.get(plan.key)?.payload, where).toEqual({ status: 201, body });
        expect(success.replayed, where).toBe(plan.point === 'after-commit');
        if (plan.point !== 'after-commit') expect(body.pid, where).toBe(survivor.pid);
      }
      expect(rows).toHaveLength(KEYS_PER_ORM);
      for (const child of [survivor, ...doomed])
        expectNoRawKeys(
          child.output(),
          results.map((r) => r.plan.key),
        );
      const tries = results.reduce((n, r) => n + r.tries, 0);
      const trafficMs = Date.now() - started;
      console.log(
        `[fault 14 ${orm}] ${rounds} doomed processes SIGKILLed; ${KEYS_PER_ORM} keys, ${rows.length} rows; ${tries} retries to a 2xx; ${trafficMs} ms`,
      );
      recordResult({
        case: 14,
        title: `Killed around the handler's insert (${orm} transaction via @nestjs-cls/transactional)`,
        executionsExpected: KEYS_PER_ORM,
        executionsObserved: rows.length,
        recordsLost: results.filter((r) => records.get(r.plan.key)?.state !== 'COMPLETE').length,
        maxRecoveryMs: Math.max(...results.map((r) => r.recoveryMs)),
        notes: `Nest app (orm-tx-app.ts) on PgIdempotencyStore, ${orm} through @nestjs-cls/transactional, lease 1 s; ${KEYS_PER_ORM} keys, each first call held at one of 4 points and its process SIGKILLed (${rounds} processes, ${PER_ROUND} calls each), then retried on a surviving app to a 2xx and replayed byte for byte: ${rows.length} rows, one per key; ${Math.round(trafficMs / 1000)} s.`,
      });
    }, 600_000);
  },
);
