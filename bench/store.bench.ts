/**
 * Store benchmark: TypeOrmIdempotencyStore on a real PostgreSQL.
 *
 *   npm run bench:store
 *
 * Starts an embedded PostgreSQL unless IDEMPOTENCY_BENCH_PG_URL names a server
 * (it then works in a scratch schema it drops afterwards). Prints the results
 * and writes them to bench/RESULTS-store.md.
 *
 * Tunables (environment): BENCH_SECONDS (5), BENCH_RUNS (3), BENCH_WARMUP_SECONDS (2),
 * BENCH_CONCURRENCY (32), BENCH_POOL (32), BENCH_WAKE_TRIALS (100).
 */
import { startEmbeddedPostgres } from '../tools/embedded-postgres';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import Table from 'cli-table3';
import { Client, Pool } from 'pg';
import { format, resolveConfig } from 'prettier';
import { DataSource } from 'typeorm';
import { IdempotencyEngine, TypeOrmIdempotencyStore } from 'nest-idempotency';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 2);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const POOL = Number(process.env.BENCH_POOL ?? 32);
const WAKE_TRIALS = Math.max(50, Number(process.env.BENCH_WAKE_TRIALS ?? 100));

const APP_A = 'idem-bench-a';
const APP_B = 'idem-bench-b';
const SCOPE = 'bench.orders.create';
const REQUEST = { lease: '30s', waitTimeout: '10s', ttl: '24h' } as const;

// ---------------------------------------------------------------------------
// Round trips, counted in the driver: every pg Client.query call, attributed
// to the instance by its connection's application_name.
// ---------------------------------------------------------------------------
const driverQueries = new Map<string, number>();
type CountedClient = Client & { connectionParameters?: { application_name?: string } };
const clientPrototype = Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const originalQuery = clientPrototype.query;
clientPrototype.query = function (this: CountedClient, ...args: unknown[]) {
  const app = this.connectionParameters?.application_name ?? '?';
  driverQueries.set(app, (driverQueries.get(app) ?? 0) + 1);
  return originalQuery.apply(this, args);
};
const queriesOf = (app: string) => driverQueries.get(app) ?? 0;

const quiet = { warn: () => undefined, error: () => undefined };
let engineWarnings = 0;
const counting = { warn: () => void engineWarnings++, error: () => void engineWarnings++ };

// ---------------------------------------------------------------------------
// PostgreSQL: embedded (as the test setup does) or IDEMPOTENCY_BENCH_PG_URL.
// ---------------------------------------------------------------------------
interface Server {
  url: string;
  describe: string;
  stop: () => Promise<void>;
}

async function startServer(): Promise<Server> {
  const external = process.env.IDEMPOTENCY_BENCH_PG_URL;
  if (external) {
    const shown = new URL(external);
    shown.password = shown.password ? '***' : '';
    return { url: external, describe: `${shown} (IDEMPOTENCY_BENCH_PG_URL)`, stop: async () => {} };
  }
  const server = await startEmbeddedPostgres({ database: 'bench', maxConnections: 200 });
  return {
    url: server.url,
    describe: 'embedded-postgres, default settings (fsync and synchronous_commit on)',
    stop: () => server.stop(),
  };
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
function percentile(xs: number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

interface Throughput {
  perSecond: number;
  operations: number;
  roundTrips: number;
}

/** `concurrency` callers loop on `operation` for `seconds`; round trips from the driver. */
async function measure(
  seconds: number,
  operation: (caller: number, i: number) => Promise<void>,
): Promise<Throughput> {
  const queriesBefore = queriesOf(APP_A);
  const started = performance.now();
  const end = started + seconds * 1000;
  let operations = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, caller) => {
      for (let i = 0; performance.now() < end; i++) {
        await operation(caller, i);
        operations++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return {
    perSecond: operations / elapsed,
    operations,
    roundTrips: (queriesOf(APP_A) - queriesBefore) / operations,
  };
}

async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('a waiter never parked');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

interface WakeTrial {
  wakeMs: number;
  completeMs: number;
  waiterRoundTrips: number;
}

/**
 * The holder (instance A) holds a key; a duplicate waits through `waiterEngine`;
 * the clock starts just before the holder's complete() and stops when the
 * waiter's execute() resolves with the replay.
 */
async function wakeTrial(
  holder: TypeOrmIdempotencyStore,
  waiterEngine: IdempotencyEngine,
  waiterApp: string,
  waiterPool: Pool,
  key: string,
): Promise<WakeTrial> {
  const id = { scope: SCOPE, key };
  const held = await holder.tryAcquire({
    ...id,
    leaseMs: 30_000,
    waitTimeoutMs: 0,
    ttlMs: 86_400_000,
  });
  if (held.kind !== 'acquired') throw new Error(`holder got ${held.kind}`);
  const queriesBefore = queriesOf(waiterApp);
  let resolvedAt = 0;
  const waiter = waiterEngine
    .execute({ ...id, ...REQUEST }, async () => {
      throw new Error('the waiting duplicate must not execute');
    })
    .then((outcome) => {
      resolvedAt = performance.now();
      return outcome;
    });
  // Parked: it has looked once and handed its connection back.
  await until(
    () => queriesOf(waiterApp) > queriesBefore && waiterPool.idleCount === waiterPool.totalCount,
  );
  await new Promise((resolve) => setTimeout(resolve, 2));
  const queriesParked = queriesOf(waiterApp);
  const t0 = performance.now();
  await holder.complete(id, held.leaseId, { status: 201, body: { id: key } }, 86_400_000);
  const completedAt = performance.now();
  const outcome = await waiter;
  if (outcome.kind !== 'replayed') throw new Error(`waiter got ${outcome.kind}`);
  const waiterQueries = queriesOf(waiterApp) - queriesBefore;
  const completeQueries = waiterApp === APP_A ? 1 : 0; // the holder's complete, same counter
  if (queriesOf(waiterApp) - queriesParked - completeQueries < 1)
    throw new Error('the waiter resolved without looking again');
  return {
    wakeMs: resolvedAt - t0,
    completeMs: completedAt - t0,
    waiterRoundTrips: waiterQueries - completeQueries,
  };
}

async function main(): Promise<void> {
  const totalStarted = performance.now();
  const server = await startServer();
  const schema = `bench_${randomBytes(4).toString('hex')}`;
  const open = (applicationName: string, max: number) =>
    new DataSource({
      type: 'postgres',
      url: server.url,
      applicationName,
      extra: { max },
    }).initialize();
  let a: DataSource | undefined;
  let b: DataSource | undefined;
  const stores: TypeOrmIdempotencyStore[] = [];
  try {
    [a, b] = await Promise.all([open(APP_A, POOL), open(APP_B, 8)]);
    const storeA = new TypeOrmIdempotencyStore(a, { schema, ensureSchema: true, logger: quiet });
    const storeB = new TypeOrmIdempotencyStore(b, { schema, logger: quiet });
    stores.push(storeA, storeB);
    await storeA.init();
    await storeB.init();
    const engineA = new IdempotencyEngine(storeA, { logger: counting });
    const engineB = new IdempotencyEngine(storeB, { logger: counting });
    const [{ server_version: pgVersion }] = await a.query('SHOW server_version');

    const machine = {
      cpu: `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'unknown'}`,
      memory: `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
      os: `${os.type()} ${os.release()} (${process.arch})`,
      node: process.version,
      postgres: `${pgVersion} — ${server.describe}`,
    };
    console.log(`\nStore benchmark: PostgreSQL ${pgVersion}, Node ${process.version}`);
    console.log(`${machine.cpu}, ${machine.memory}\n`);

    const payload = (key: string) => ({
      status: 201,
      body: { id: key, amount: 1250, currency: 'EUR' },
    });
    const run = randomBytes(3).toString('hex');

    // First executions: fresh keys, acquire + action + complete through the engine.
    const completedKeys: string[] = [];
    const firstExecution = (phase: string) => async (caller: number, i: number) => {
      const key = `${run}-${phase}-${caller}-${i}`;
      const outcome = await engineA.execute({ scope: SCOPE, key, ...REQUEST }, async () =>
        payload(key),
      );
      if (outcome.kind !== 'executed') throw new Error(`fresh key ${outcome.kind}`);
      if (completedKeys.length < 50_000) completedKeys.push(key);
    };
    process.stdout.write('first executions: warm-up');
    await measure(WARMUP_SECONDS, firstExecution('warm'));
    const firsts: Throughput[] = [];
    for (let r = 0; r < RUNS; r++) {
      process.stdout.write(`, run ${r + 1}`);
      firsts.push(await measure(SECONDS, firstExecution(`run${r}`)));
    }

    // Replays of keys completed above.
    const replay = async (caller: number, i: number) => {
      const key = completedKeys[(caller * 7919 + i * 31) % completedKeys.length];
      const outcome = await engineA.execute({ scope: SCOPE, key, ...REQUEST }, async () => {
        throw new Error('a replay must not execute');
      });
      if (outcome.kind !== 'replayed') throw new Error(`completed key ${outcome.kind}`);
    };
    process.stdout.write('\nreplays: warm-up');
    await measure(Math.min(WARMUP_SECONDS, 1), replay);
    const replays: Throughput[] = [];
    for (let r = 0; r < RUNS; r++) {
      process.stdout.write(`, run ${r + 1}`);
      replays.push(await measure(SECONDS, replay));
    }

    // Wake latency of a waiting duplicate, woken on the same instance and on another.
    const poolA = (a.driver as unknown as { master: Pool }).master;
    const poolB = (b.driver as unknown as { master: Pool }).master;
    const wakes: Record<'same' | 'other', WakeTrial[]> = { same: [], other: [] };
    process.stdout.write(`\nwake latency: ${WAKE_TRIALS} trials × 2`);
    for (let t = 0; t < 5; t++) {
      await wakeTrial(storeA, engineA, APP_A, poolA, `${run}-wake-warm-a-${t}`);
      await wakeTrial(storeA, engineB, APP_B, poolB, `${run}-wake-warm-b-${t}`);
    }
    for (let t = 0; t < WAKE_TRIALS; t++) {
      wakes.same.push(await wakeTrial(storeA, engineA, APP_A, poolA, `${run}-wake-a-${t}`));
      wakes.other.push(await wakeTrial(storeA, engineB, APP_B, poolB, `${run}-wake-b-${t}`));
    }
    process.stdout.write('\n\n');

    // Results
    const fmtRate = (xs: Throughput[]) => Math.round(median(xs.map((x) => x.perSecond)));
    const runsOf = (xs: Throughput[]) => xs.map((x) => Math.round(x.perSecond)).join(' / ');
    const fmtMs = (x: number) => `${x.toFixed(2)} ms`;
    const trips = (xs: number[]) => {
      const lo = Math.min(...xs);
      const hi = Math.max(...xs);
      return lo === hi ? lo.toFixed(2) : `${lo.toFixed(2)}–${hi.toFixed(2)}`;
    };
    const wakeRow = (label: string, trials: WakeTrial[]) => [
      label,
      `p50 ${fmtMs(
        percentile(
          trials.map((x) => x.wakeMs),
          50,
        ),
      )}, p99 ${fmtMs(
        percentile(
          trials.map((x) => x.wakeMs),
          99,
        ),
      )}`,
      `n = ${trials.length}; complete() itself: p50 ${fmtMs(
        percentile(
          trials.map((x) => x.completeMs),
          50,
        ),
      )}`,
    ];
    const rows: string[][] = [
      [
        'First executions/s',
        String(fmtRate(firsts)),
        `median of ${RUNS} × ${SECONDS} s (runs: ${runsOf(firsts)}); ${CONCURRENCY} callers, pool ${POOL}, fresh keys, acquire + complete through IdempotencyEngine`,
      ],
      [
        'Replays/s',
        String(fmtRate(replays)),
        `median of ${RUNS} × ${SECONDS} s (runs: ${runsOf(replays)}); ${CONCURRENCY} callers, keys completed above`,
      ],
      wakeRow('Wake latency, waiter on the holder’s instance', wakes.same),
      wakeRow('Wake latency, waiter on another instance', wakes.other),
      [
        'Round trips per first execution',
        trips(firsts.map((x) => x.roundTrips)),
        'pg Client.query calls on the pool / executions, every run',
      ],
      [
        'Round trips per replay',
        trips(replays.map((x) => x.roundTrips)),
        'pg Client.query calls on the pool / replays, every run',
      ],
      [
        'Round trips per waiting duplicate',
        trips(wakes.other.map((x) => x.waiterRoundTrips)),
        'on the waiter’s instance: look, then look again when NOTIFY wakes it; no connection held while waiting',
      ],
    ];
    const machineRows: string[][] = [
      ['CPU', machine.cpu],
      ['Memory', machine.memory],
      ['OS', machine.os],
      ['Node.js', machine.node],
      ['PostgreSQL', machine.postgres],
    ];

    const plain = { head: [], border: [] };
    const machineTable = new Table({ head: ['Machine', ''], style: plain });
    machineTable.push(...machineRows);
    const resultTable = new Table({
      head: ['Measurement', 'Result', 'How'],
      colWidths: [34, 30, 70],
      wordWrap: true,
      style: plain,
    });
    resultTable.push(...rows);
    console.log(machineTable.toString());
    console.log(resultTable.toString());
    const totalSeconds = (performance.now() - totalStarted) / 1000;
    if (engineWarnings > 0) console.log(`engine warnings during the run: ${engineWarnings}`);
    console.log(`total run time ${totalSeconds.toFixed(1)} s`);

    const md = (cells: string[]) => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
    const markdown = [
      '# Store benchmark: TypeOrmIdempotencyStore on PostgreSQL',
      '',
      `Generated by \`npm run bench:store\` on ${new Date().toISOString().slice(0, 10)}; the whole run took ${totalSeconds.toFixed(0)} s.`,
      '',
      '## Machine',
      '',
      md(['', '']),
      md(['---', '---']),
      ...machineRows.map(md),
      '',
      '## Results',
      '',
      md(['Measurement', 'Result', 'How']),
      md(['---', '---:', '---']),
      ...rows.map(md),
      '',
      '## Method',
      '',
      `- Each throughput figure: ${WARMUP_SECONDS} s warm-up, then ${RUNS} runs of ${SECONDS} s each; the median run is reported. ${CONCURRENCY} concurrent callers each loop on \`IdempotencyEngine.execute\` (lease 30 s, waitTimeout 10 s, ttl 24 h) with a small JSON result.`,
      `- Wake latency: the holder acquires a key on instance A; a duplicate calls \`execute\` with waitTimeout 10 s (through A, or through a second DataSource and store, B); once it has looked and parked, the clock starts just before the holder's \`complete()\` and stops when the duplicate's \`execute()\` resolves with the replay. ${WAKE_TRIALS} trials each, one at a time; percentiles are nearest-rank.`,
      '- Round trips are counted in the driver: every `pg` `Client.query` call, attributed to an instance by its connection `application_name`. The LISTEN connection (outside the pool) issues its one LISTEN during warm-up, not during the measurements.',
      `- PostgreSQL and the benchmark share the machine${engineWarnings ? `; the engine logged ${engineWarnings} warnings` : ''}. Figures are for comparison between runs on one machine, not absolutes.`,
      '',
    ].join('\n');
    const out = path.join(__dirname, 'RESULTS-store.md');
    // Formatted as the repository formats Markdown, so `npm run lint` stays clean.
    const style = (await resolveConfig(out)) ?? {};
    fs.writeFileSync(out, await format(markdown, { ...style, parser: 'markdown' }));
    console.log(`written to ${path.relative(process.cwd(), out)}`);
  } finally {
    for (const store of stores) await store.close().catch(() => undefined);
    if (a) await a.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await Promise.all([a?.destroy(), b?.destroy()]).catch(() => undefined);
    await server.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
