import { randomBytes, randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { Command } from 'commander';
import type { DataSource } from 'typeorm';
import { IdempotencyLeaseLostError } from '../core/errors';
import { AcquireRequest, AcquireResult, RecordId } from '../core/store';
import { poolOf } from '../stores/typeorm/pool';
import { createTableSql } from '../stores/typeorm/schema';
import { qualified, quoteIdent, TableName } from '../stores/typeorm/table';
import { TypeOrmIdempotencyStore } from '../stores/typeorm/typeorm.store';
import { wholeNumber } from './arguments';
import {
  boundedQuery,
  Connection,
  describeError,
  openDataSource,
  quietLogger,
  sqlState,
  toCliError,
} from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import { renderTable } from './format';

export type Grade = 'PASS' | 'FAIL' | 'N/A';

export interface GuaranteeResult {
  id: string;
  guarantee: string;
  grade: Grade;
  /** What was measured, or for N/A why it could not be. */
  measured: string;
}

interface Graded {
  grade: Grade;
  measured: string;
}

const pass = (measured: string): Graded => ({ grade: 'PASS', measured });
const fail = (measured: string): Graded => ({ grade: 'FAIL', measured });
const notApplicable = (reason: string): Graded => ({ grade: 'N/A', measured: reason });

/** Long enough that nothing a check leaves behind expires while verify runs. */
const TTL_MS = 600_000;
const PURGE_TABLE = 'purge_rules';
/** How far the process clock is moved in the database-clock check. */
const CLOCK_SHIFT_MS = 3_600_000;

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The scratch environment: a schema of its own holding the records table and a
 * second table for the purge check, and store instances on separate
 * connection pools, as separate application instances would be.
 */
interface Bench {
  connection: Connection;
  schema: string;
  table: TableName;
  /** Instance A: its own pool. */
  a: TypeOrmIdempotencyStore;
  /** Instance B: another pool, as another process would have. */
  b: TypeOrmIdempotencyStore;
  /** A waiter that polls once a minute, so only a notification wakes it quickly. Its pool is watched. */
  waiter: TypeOrmIdempotencyStore;
  waiterQueries: AnsweredQueries;
  /** On its own table, so the records the other checks leave do not count. */
  purge: TypeOrmIdempotencyStore;
  admin: DataSource;
  roundTripMs: number;
  concurrency: number;
}

interface Guarantee {
  id: string;
  title: (bench: Pick<Bench, 'concurrency'>) => string;
  check: (bench: Bench) => Promise<Graded>;
}

export const GUARANTEES: Guarantee[] = [
  {
    id: 'one-winner',
    title: ({ concurrency }) => `One winner among ${concurrency} concurrent acquirers`,
    check: oneWinner,
  },
  { id: 'replay', title: () => 'Replay of a completed key', check: replay },
  { id: 'steal', title: () => 'Steal after lease expiry', check: steal },
  {
    id: 'fencing',
    title: () => 'Fencing of a stale owner (complete/release/extend refused)',
    check: fencing,
  },
  { id: 'wake', title: () => 'Waiter woken by completion', check: wake },
  {
    id: 'purge',
    title: () => 'Purge: COMPLETE past TTL; IN_PROGRESS only past TTL and lease',
    check: purgeRules,
  },
  { id: 'database-clock', title: () => 'Database clock decides leases and TTLs', check: clock },
  { id: 'reads', title: () => 'Reads move nothing (find, list, opening a store)', check: reads },
];

interface VerifyOptions {
  concurrency: number;
  json?: boolean;
}

/**
 * `verify`: grades the store's guarantees on the configured PostgreSQL, in a
 * scratch schema it creates and always drops. The configured table is never
 * touched. Exit 0 only when every guarantee is PASS: a FAIL or an N/A exits 1.
 */
export function addVerifyCommand(program: Command, context: CommandContext): void {
  program
    .command('verify')
    .description(
      "grade the store's guarantees on this database, in a scratch schema that is created and dropped",
    )
    .option(
      '--concurrency <n>',
      'concurrent acquirers in the one-winner check',
      wholeNumber(2, 500),
      50,
    )
    .option('--json', 'print JSON')
    .action(async (options: VerifyOptions, command: Command) => {
      const connection = context.connection(command);
      // Ctrl-C stops between checks; the scratch schema is still dropped.
      if (context.io.interrupt) context.io.interrupt.handled = true;
      const outcome = await runVerify(
        connection,
        options.concurrency,
        context.io.interrupt?.signal,
      );
      const counts = { PASS: 0, FAIL: 0, 'N/A': 0 };
      for (const result of outcome.results) counts[result.grade]++;
      if (options.json) {
        context.printJson({
          target: connection.target,
          serverVersion: outcome.serverVersion,
          roundTripMs: outcome.roundTripMs,
          scratchSchema: outcome.schema,
          scratchSchemaDropped: outcome.dropError === undefined,
          interrupted: outcome.interrupted,
          results: outcome.results,
          summary: { pass: counts.PASS, fail: counts.FAIL, notApplicable: counts['N/A'] },
        });
      } else {
        context.print(
          renderTable(
            ['Guarantee', 'Grade', 'Measured'],
            outcome.results.map((r) => [r.guarantee, r.grade, r.measured]),
            [34, 7, 72],
          ),
        );
        const verdict = outcome.interrupted
          ? `NOT VERIFIED: interrupted after ${outcome.results.length} of ${GUARANTEES.length} checks`
          : counts.FAIL > 0
            ? 'NOT VERIFIED: a guarantee failed'
            : counts['N/A'] > 0
              ? 'NOT VERIFIED: a guarantee could not be checked (N/A is not a pass)'
              : 'verified';
        context.print(
          `${counts.PASS} PASS, ${counts.FAIL} FAIL, ${counts['N/A']} N/A: ${verdict}. ` +
            `PostgreSQL ${outcome.serverVersion} at ${connection.target}, round trip ${outcome.roundTripMs} ms; ` +
            `scratch schema ${outcome.schema} ${outcome.dropError === undefined ? 'dropped' : 'NOT dropped'}.`,
        );
      }
      if (outcome.dropError !== undefined) {
        throw new CliError(
          `could not drop the scratch schema ${outcome.schema}: ${outcome.dropError}; drop it with: DROP SCHEMA ${quoteIdent(outcome.schema)} CASCADE`,
          ExitCode.ERROR,
        );
      }
      if (outcome.interrupted) throw new CliError('interrupted', ExitCode.INTERRUPTED);
      if (counts.FAIL > 0 || counts['N/A'] > 0) context.exitCode = ExitCode.VERIFY_FAILED;
    });
}

interface VerifyOutcome {
  schema: string;
  results: GuaranteeResult[];
  serverVersion: string;
  roundTripMs: number;
  interrupted: boolean;
  /** Set when the scratch schema could not be dropped. */
  dropError?: string;
}

export async function runVerify(
  connection: Connection,
  concurrency: number,
  signal?: AbortSignal,
): Promise<VerifyOutcome> {
  const schema = `nest_idempotency_verify_${randomBytes(6).toString('hex')}`;
  const table: TableName = { schema, table: connection.table };
  const admin = await openDataSource(connection, 6);
  const opened: DataSource[] = [];
  const stores: TypeOrmIdempotencyStore[] = [];
  const outcome: VerifyOutcome = {
    schema,
    results: [],
    serverVersion: '?',
    roundTripMs: 0,
    interrupted: false,
  };
  let created = false;
  try {
    const query = <T>(sql: string, what: string) =>
      boundedQuery<T>(admin, connection.timeoutMs, what, sql);
    const [version] = await query<{ server_version: string }>('SHOW server_version', 'SHOW');
    outcome.serverVersion = version.server_version;
    outcome.roundTripMs = await measureRoundTrip(admin, connection.timeoutMs);
    try {
      await query(`CREATE SCHEMA ${quoteIdent(schema)}`, 'CREATE SCHEMA');
      created = true;
    } catch (error) {
      if (sqlState(error) === '42501') {
        throw new CliError(
          `verify needs to create a scratch schema, and this login may not: ${describeError(error)}`,
          ExitCode.SCHEMA,
        );
      }
      throw error;
    }
    for (const name of [table, { schema, table: PURGE_TABLE }]) {
      for (const sql of createTableSql(name)) await query(sql, 'CREATE TABLE');
    }

    const open = async (poolSize: number) => {
      const dataSource = await openDataSource(connection, poolSize);
      opened.push(dataSource);
      return dataSource;
    };
    const store = (dataSource: DataSource, name: TableName, pollIntervalMs?: number) => {
      const instance = new TypeOrmIdempotencyStore(dataSource, {
        schema: name.schema,
        table: name.table,
        operationTimeoutMs: Math.max(connection.timeoutMs, 5000),
        pollIntervalMs,
        logger: quietLogger,
      });
      stores.push(instance);
      return instance;
    };
    const waiterSource = await open(1);
    const bench: Bench = {
      connection,
      schema,
      table,
      a: store(admin, table),
      b: store(await open(6), table),
      waiter: store(waiterSource, table, 60_000),
      waiterQueries: new AnsweredQueries(waiterSource),
      purge: store(admin, { schema, table: PURGE_TABLE }),
      admin,
      roundTripMs: outcome.roundTripMs,
      concurrency,
    };
    for (const instance of stores) await instance.init();

    for (const guarantee of GUARANTEES) {
      if (signal?.aborted) {
        outcome.interrupted = true;
        break;
      }
      let graded: Graded;
      try {
        graded = await guarantee.check(bench);
      } catch (error) {
        graded = fail(`error: ${describeError(error)}`);
      }
      outcome.results.push({ id: guarantee.id, guarantee: guarantee.title(bench), ...graded });
    }
  } catch (error) {
    throw toCliError(error, connection);
  } finally {
    for (const instance of stores) await instance.close().catch(() => undefined);
    for (const dataSource of opened) await dataSource.destroy().catch(() => undefined);
    if (created) {
      try {
        await boundedQuery(
          admin,
          Math.max(connection.timeoutMs, 5000),
          'DROP SCHEMA',
          `DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`,
        );
      } catch (error) {
        outcome.dropError = describeError(error);
      }
    }
    await admin.destroy().catch(() => undefined);
  }
  return outcome;
}

async function measureRoundTrip(dataSource: DataSource, timeoutMs: number): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    await boundedQuery(dataSource, timeoutMs, 'SELECT 1', 'SELECT 1');
    samples.push(performance.now() - started);
  }
  return round(median(samples));
}

// ---------------------------------------------------------------------------
// The checks. Each works in a scope of its own and awaits everything it starts.

function request(scope: string, key: string, overrides: Partial<AcquireRequest> = {}) {
  return { scope, key, leaseMs: 30_000, waitTimeoutMs: 0, ttlMs: TTL_MS, ...overrides };
}

async function acquire(
  store: TypeOrmIdempotencyStore,
  scope: string,
  key: string,
  overrides: Partial<AcquireRequest> = {},
): Promise<string> {
  const result = await store.tryAcquire(request(scope, key, overrides));
  if (result.kind !== 'acquired') throw new Error(`setup: acquire returned ${result.kind}`);
  return result.leaseId;
}

async function oneWinner(bench: Bench): Promise<Graded> {
  const scope = 'verify.one-winner';
  const key = randomUUID();
  const instances = [bench.a, bench.b];
  let executions = 0;
  const started = performance.now();
  const settled = await Promise.allSettled(
    Array.from({ length: bench.concurrency }, async (_, i) => {
      const store = instances[i % instances.length];
      const result = await store.tryAcquire(
        request(scope, key, { leaseMs: 30_000, waitTimeoutMs: 20_000 }),
      );
      if (result.kind === 'acquired') {
        executions++;
        await delay(50); // the "action": long enough for every other acquirer to arrive
        await store.complete({ scope, key }, result.leaseId, { winner: result.leaseId }, TTL_MS);
      }
      return result;
    }),
  );
  const elapsed = round(performance.now() - started);
  const errors = settled.filter((s) => s.status === 'rejected');
  const results = settled
    .filter((s): s is PromiseFulfilledResult<AcquireResult> => s.status === 'fulfilled')
    .map((s) => s.value);
  const winners = results.filter((r) => r.kind === 'acquired');
  const expected = winners.length === 1 ? { winner: winners[0].leaseId } : undefined;
  const replays = results.filter(
    (r) => r.kind === 'duplicate' && isDeepStrictEqual(r.payload, expected),
  ).length;
  const other = bench.concurrency - winners.length - replays;
  const measured =
    `${winners.length} winner (${executions} execution), ${replays} replays of its result, ${other} other, ` +
    `of ${bench.concurrency} acquirers on 2 instances; ${elapsed} ms`;
  if (errors.length > 0) {
    return fail(`${measured}; first error: ${describeError(errors[0].reason)}`);
  }
  return winners.length === 1 && replays === bench.concurrency - 1
    ? pass(measured)
    : fail(measured);
}

async function replay(bench: Bench): Promise<Graded> {
  const scope = 'verify.replay';
  const key = randomUUID();
  const payload = {
    id: 42,
    amount: '19.99',
    tags: ['a', 'b'],
    nested: { ok: true, none: null, empty: [] },
    text: 'ünïcødé ✓ "quoted" \\ back',
  };
  const leaseId = await acquire(bench.a, scope, key);
  await bench.a.complete({ scope, key }, leaseId, payload, TTL_MS);
  const before = await snapshot(bench, scope);
  const started = performance.now();
  const result = await bench.b.tryAcquire(request(scope, key));
  const elapsed = round(performance.now() - started);
  const after = await snapshot(bench, scope);
  if (result.kind !== 'duplicate') {
    return fail(`the other instance got ${result.kind}, not the stored result`);
  }
  if (!isDeepStrictEqual(result.payload, payload)) {
    return fail('the replayed payload differs from the stored one');
  }
  if (before !== after) return fail('the replay wrote to the record');
  return pass(`deep-equal payload on the other instance in ${elapsed} ms; the row was not written`);
}

async function steal(bench: Bench): Promise<Graded> {
  const scope = 'verify.steal';
  const key = randomUUID();
  const leaseMs = 1000;
  const first = await acquire(bench.a, scope, key, { leaseMs });
  const acquiredAt = performance.now();
  const early = await bench.b.tryAcquire(request(scope, key));
  if (early.kind !== 'in-flight') {
    return fail(`a contender got ${early.kind} while the ${leaseMs} ms lease was live`);
  }
  await delay(leaseMs + 150); // let the lease run out
  const late = await bench.b.tryAcquire(request(scope, key));
  const waited = round(performance.now() - acquiredAt);
  if (late.kind !== 'acquired') {
    return fail(`${waited} ms after a ${leaseMs} ms lease began, a contender got ${late.kind}`);
  }
  if (late.leaseId === first) return fail('the contender was handed the old lease id');
  return pass(
    `refused while live (retry after ${early.retryAfterMs} ms); taken over ${waited} ms after a ${leaseMs} ms lease began`,
  );
}

async function fencing(bench: Bench): Promise<Graded> {
  const scope = 'verify.fencing';
  const key = randomUUID();
  const id: RecordId = { scope, key };
  const stale = await acquire(bench.a, scope, key, { leaseMs: 300 });
  await delay(450); // let the lease run out
  const taken = await bench.b.tryAcquire(request(scope, key));
  if (taken.kind !== 'acquired') {
    return notApplicable(
      `no stale owner to fence: taking over the expired lease returned ${taken.kind}`,
    );
  }
  const attempts: Array<[string, () => Promise<boolean>]> = [
    ['extend', async () => (await bench.a.extend(id, stale, 30_000)) === false],
    ['complete', () => refused(bench.a.complete(id, stale, 'stale', TTL_MS))],
    ['release', () => refused(bench.a.release(id, stale))],
  ];
  const accepted: string[] = [];
  for (const [name, attempt] of attempts) if (!(await attempt())) accepted.push(name);
  await bench.b.complete(id, taken.leaseId, 'fresh', TTL_MS);
  if (!(await refused(bench.a.complete(id, stale, 'stale', TTL_MS)))) {
    accepted.push('complete after the new owner completed');
  }
  const final = await bench.a.tryAcquire(request(scope, key));
  const stands = final.kind === 'duplicate' && final.payload === 'fresh';
  const measured = `${4 - accepted.length}/4 stale calls refused (extend, complete, release, complete after the new owner finished)`;
  if (accepted.length > 0) return fail(`${measured}; accepted: ${accepted.join(', ')}`);
  if (!stands) return fail(`${measured}; but the new owner's result does not stand`);
  return pass(`${measured}; the new owner's result stands`);
}

async function refused(call: Promise<unknown>): Promise<boolean> {
  try {
    await call;
    return false;
  } catch (error) {
    if (error instanceof IdempotencyLeaseLostError) return true;
    throw error;
  }
}

async function wake(bench: Bench): Promise<Graded> {
  const scope = 'verify.wake';
  const samples: number[] = [];
  const limitMs = 250 + 2 * bench.roundTripMs;
  for (let i = 0; i < 3; i++) {
    const key = randomUUID();
    const leaseId = await acquire(bench.a, scope, key);
    const looked = bench.waiterQueries.next();
    let settledAt = 0;
    const waiting = bench.waiter
      .tryAcquire(request(scope, key, { waitTimeoutMs: 10_000 }))
      .finally(() => (settledAt = performance.now()));
    // Its first look has answered (the key is in flight), so it is now waiting.
    // It registered for the notification before looking, so none can be missed.
    const first = await Promise.race([looked.then(() => 'looked' as const), waiting]);
    if (first !== 'looked') {
      return fail(`the waiter returned ${first.kind} before the holder completed`);
    }
    const completing = performance.now();
    await bench.a.complete({ scope, key }, leaseId, { sample: i }, TTL_MS);
    const result = await waiting;
    if (result.kind !== 'duplicate' || !isDeepStrictEqual(result.payload, { sample: i })) {
      return fail(
        `the waiter got ${result.kind} instead of the result (not woken within its 10 s wait)`,
      );
    }
    samples.push(settledAt - completing);
  }
  const worst = round(Math.max(...samples));
  const measured =
    `woken ${round(median(samples))} ms after complete() was called (median of ${samples.length}; ` +
    `max ${worst} ms; bound ${limitMs} ms; the waiter's own poll is 60 s)`;
  return worst < limitMs ? pass(measured) : fail(measured);
}

async function purgeRules(bench: Bench): Promise<Graded> {
  const store = bench.purge;
  const scope = 'verify.purge';
  const short = 500;
  const id = (key: string): RecordId => ({ scope, key });
  const completeExpired = await acquire(store, scope, 'complete-expired');
  await store.complete(id('complete-expired'), completeExpired, 1, short);
  const completeLive = await acquire(store, scope, 'complete-live');
  await store.complete(id('complete-live'), completeLive, 2, TTL_MS);
  await acquire(store, scope, 'in-progress-both-out', { leaseMs: short, ttlMs: short });
  const extended = await acquire(store, scope, 'in-progress-lease-live', {
    leaseMs: short,
    ttlMs: short,
  });
  if (!(await store.extend(id('in-progress-lease-live'), extended, TTL_MS))) {
    return notApplicable('could not set up a long-running record: extend was refused');
  }
  await acquire(store, scope, 'in-progress-ttl-live', { leaseMs: short, ttlMs: TTL_MS });
  await delay(short + 200); // let the short TTLs and leases run out

  const counted = await store.countExpired();
  const purged = await store.purgeExpired();
  const left = await store.countExpired();
  const expectations: Array<[string, string, boolean]> = [
    ['complete-expired', 'COMPLETE past its TTL', false],
    ['in-progress-both-out', 'IN_PROGRESS past TTL and lease', false],
    ['complete-live', 'COMPLETE within its TTL', true],
    ['in-progress-lease-live', 'IN_PROGRESS past TTL, lease live', true],
    ['in-progress-ttl-live', 'IN_PROGRESS lease out, TTL live', true],
  ];
  const wrong: string[] = [];
  for (const [key, label, kept] of expectations) {
    const present = (await store.find(id(key))) !== null;
    if (present !== kept) wrong.push(`${kept ? 'purged' : 'kept'} ${label}`);
  }
  const measured = `purged ${purged} of 5 (dry-run count ${counted}, ${left} due after)`;
  if (wrong.length > 0) return fail(`${measured}; ${wrong.join('; ')}`);
  if (counted !== 2 || purged !== 2 || left !== 0) return fail(measured);
  return pass(
    `${measured}: COMPLETE past TTL and IN_PROGRESS past TTL and lease went; ` +
      'kept COMPLETE within TTL, IN_PROGRESS with a live lease, IN_PROGRESS within TTL',
  );
}

async function clock(bench: Bench): Promise<Graded> {
  const scope = 'verify.database-clock';
  const skew = await measureSkew(bench);
  const problems: string[] = [];

  // A holder whose clock is an hour slow, a contender whose clock is an hour fast:
  // if either clock decided, the contender would take a live lease over.
  const live = randomUUID();
  const leaseMs = 5000;
  const leaseId = await shiftedClock(-CLOCK_SHIFT_MS, () =>
    acquire(bench.a, scope, live, { leaseMs }),
  );
  const contended = await shiftedClock(CLOCK_SHIFT_MS, () =>
    bench.b.tryAcquire(request(scope, live)),
  );
  if (contended.kind !== 'in-flight') {
    problems.push(`a live lease was ${contended.kind} for a contender whose clock is 1 h fast`);
  }
  const [view, serverNow] = [await bench.a.find({ scope, key: live }), await serverTime(bench)];
  const leaseLeft = view?.leaseExpiresAt ? view.leaseExpiresAt.getTime() - serverNow : NaN;
  if (!(leaseLeft > 0 && leaseLeft <= leaseMs)) {
    problems.push(
      `the lease ends ${round(leaseLeft)} ms after the server's now, not within ${leaseMs} ms`,
    );
  }
  // The same for a TTL: completed by the slow clock, replayed to the fast one.
  if (contended.kind === 'in-flight') {
    await shiftedClock(-CLOCK_SHIFT_MS, () =>
      bench.a.complete({ scope, key: live }, leaseId, 'kept', leaseMs),
    );
    const replayed = await shiftedClock(CLOCK_SHIFT_MS, () =>
      bench.b.tryAcquire(request(scope, live)),
    );
    if (replayed.kind !== 'duplicate') {
      problems.push(`a result within its TTL was ${replayed.kind} for a clock 1 h fast`);
    }
  }

  // And the other way: a lease taken by a fast clock still runs out on the server's
  // time for a contender whose clock is slow.
  const lapsing = randomUUID();
  await shiftedClock(CLOCK_SHIFT_MS, () => acquire(bench.a, scope, lapsing, { leaseMs: 300 }));
  await delay(450); // let the lease run out
  const taken = await shiftedClock(-CLOCK_SHIFT_MS, () =>
    bench.b.tryAcquire(request(scope, lapsing)),
  );
  if (taken.kind !== 'acquired') {
    problems.push(`an expired lease was ${taken.kind} for a contender whose clock is 1 h slow`);
  }

  const measured =
    `process clock moved ±1 h around each call; lease ended ${round(leaseLeft)} ms after the server's now ` +
    `for a ${leaseMs} ms lease; server − process clock ${skew >= 0 ? '+' : ''}${skew} ms`;
  return problems.length > 0 ? fail(`${problems.join('; ')} (${measured})`) : pass(measured);
}

async function reads(bench: Bench): Promise<Graded> {
  const scope = 'verify.reads';
  const key = randomUUID();
  await acquire(bench.a, scope, key, { leaseMs: 200 });
  await delay(350); // let the lease run out; nobody contends for the key
  const before = await snapshot(bench, scope);
  const found = await bench.a.find({ scope, key });
  await bench.a.list({ scope });
  await bench.a.list({});
  const opened = new TypeOrmIdempotencyStore(bench.admin, {
    schema: bench.table.schema,
    table: bench.table.table,
    logger: quietLogger,
  });
  try {
    await opened.init();
    await opened.find({ scope, key });
  } finally {
    await opened.close();
  }
  await bench.b.find({ scope, key });
  const after = await snapshot(bench, scope);
  if (found?.state !== 'IN_PROGRESS' || !found.leaseExpired) {
    return fail(`find showed ${found ? found.state : 'nothing'}, not IN_PROGRESS (lease expired)`);
  }
  if (before !== after) return fail('the row changed after find, list or opening a store');
  const xmin = (JSON.parse(before) as Array<{ xmin: string }>)[0]?.xmin;
  return pass(
    `IN_PROGRESS (lease expired) unchanged byte for byte, same row version (xmin ${xmin}), after find, list and opening a store`,
  );
}

// ---------------------------------------------------------------------------

/** Every column of a scope's rows plus their row version (`xmin`), which any write changes. */
async function snapshot(bench: Bench, scope: string): Promise<string> {
  const rows = await boundedQuery<{ xmin: string; row: string }>(
    bench.admin,
    bench.connection.timeoutMs,
    'the snapshot query',
    `SELECT xmin::text AS xmin, row_to_json(r)::text AS row FROM ${qualified(bench.table)} r WHERE scope = $1 ORDER BY id`,
    [scope],
  );
  return JSON.stringify(rows);
}

async function serverTime(bench: Bench): Promise<number> {
  const [row] = await boundedQuery<{ ms: number }>(
    bench.admin,
    bench.connection.timeoutMs,
    'the clock query',
    `SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms`,
  );
  return Number(row.ms);
}

/** Server clock minus process clock, taking the query's midpoint. */
async function measureSkew(bench: Bench): Promise<number> {
  const before = Date.now();
  const server = await serverTime(bench);
  const after = Date.now();
  return round(server - (before + after) / 2);
}

/**
 * Runs `call` with this process's clock (`Date.now()` and `new Date()`) moved by
 * `offsetMs`, as on a host whose clock is wrong. Nothing else runs meanwhile:
 * verify's checks run one at a time.
 */
async function shiftedClock<T>(offsetMs: number, call: () => Promise<T>): Promise<T> {
  const RealDate = globalThis.Date;
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + offsetMs);
      else super(...(args as [number]));
    }
    static override now(): number {
      return RealDate.now() + offsetMs;
    }
  }
  globalThis.Date = ShiftedDate as DateConstructor;
  try {
    return await call();
  } finally {
    globalThis.Date = RealDate;
  }
}

/**
 * Resolves `next()` when the next statement on the DataSource's pool has been
 * answered: the pool gets its connection back after every statement, whether
 * the store sent it by name or through `dataSource.query`.
 */
class AnsweredQueries {
  private waiting: Array<() => void> = [];

  constructor(dataSource: DataSource) {
    poolOf(dataSource)!.on('release', () => {
      for (const resolve of this.waiting.splice(0)) resolve();
    });
  }

  next(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Milliseconds to one decimal below 10, whole above. */
function round(ms: number): number {
  return Math.abs(ms) < 10 ? Math.round(ms * 10) / 10 : Math.round(ms);
}
