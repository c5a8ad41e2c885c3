/**
 * Store benchmark: TypeOrmIdempotencyStore on a real PostgreSQL.
 *
 *   npm run bench:store
 *
 * Starts an embedded PostgreSQL unless IDEMPOTENCY_BENCH_PG_URL names a server
 * (it then works in a scratch schema it drops afterwards). Prints the results
 * and writes them to bench/RESULTS-store.md (to BENCH_RESULTS_DIR instead when
 * set: use it for shortened runs).
 *
 * Tunables (environment): BENCH_SECONDS (5), BENCH_RUNS (3), BENCH_WARMUP_SECONDS (2),
 * BENCH_CONCURRENCY (32), BENCH_POOL (32), BENCH_WAKE_TRIALS (100, at least 50).
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { DataSource } from 'typeorm';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { installDriverCounter } from './lib/driver-count';
import { describeMachine, machineRows } from './lib/machine';
import { openDataSource, poolOf, serverVersion, startServer } from './lib/postgres';
import { qualified, recordIdOf } from '../libs/idempotency/src/stores/sql/table';
import { consoleTable, mdTable, resultsPath, writeMarkdown } from './lib/report';
import { envNumber, fmtMs, fmtP50P99, fmtRange, median, percentile } from './lib/stats';
import { measure as measureWith, Throughput } from './lib/throughput';
import { WakeSetup, WakeTrial, wakeTrial } from './lib/wake';
import {
  countingLogger,
  engineWarnings,
  executeFresh,
  quietLogger,
  replayCompleted,
  SCOPE,
} from './sections/context';

const SECONDS = envNumber('BENCH_SECONDS', 5);
const RUNS = envNumber('BENCH_RUNS', 3);
const WARMUP_SECONDS = envNumber('BENCH_WARMUP_SECONDS', 2);
const CONCURRENCY = envNumber('BENCH_CONCURRENCY', 32);
const POOL = envNumber('BENCH_POOL', 32);
const WAKE_TRIALS = Math.max(50, envNumber('BENCH_WAKE_TRIALS', 100));

const APP_A = 'idem-bench-a';
const APP_B = 'idem-bench-b';

installDriverCounter();

const measure = (seconds: number, operation: (caller: number, i: number) => Promise<void>) =>
  measureWith({ seconds, concurrency: CONCURRENCY, app: APP_A }, operation);

async function main(): Promise<void> {
  const totalStarted = performance.now();
  const server = await startServer();
  const schema = `bench_${randomBytes(4).toString('hex')}`;
  const open = (applicationName: string, max: number) =>
    openDataSource(server.url, applicationName, max);
  let a: DataSource | undefined;
  let b: DataSource | undefined;
  /** Reads records for the self-checks; its queries count for neither instance. */
  let probe: DataSource | undefined;
  const stores: TypeOrmIdempotencyStore[] = [];
  try {
    [a, b, probe] = await Promise.all([
      open(APP_A, POOL),
      open(APP_B, 8),
      open('idem-bench-probe', 1),
    ]);
    const reader = probe;
    const storeA = new TypeOrmIdempotencyStore(a, {
      schema,
      ensureSchema: true,
      logger: quietLogger,
    });
    const storeB = new TypeOrmIdempotencyStore(b, { schema, logger: quietLogger });
    stores.push(storeA, storeB);
    await storeA.init();
    await storeB.init();
    const engineA = new IdempotencyEngine(storeA, { logger: countingLogger });
    const engineB = new IdempotencyEngine(storeB, { logger: countingLogger });
    const pgVersion = await serverVersion(a);
    const machine = describeMachine(pgVersion, server.describe);
    console.log(`\nStore benchmark: PostgreSQL ${pgVersion}, Node ${process.version}`);
    console.log(`${machine.cpu}, ${machine.memory}\n`);

    const run = randomBytes(3).toString('hex');

    // First executions: fresh keys, acquire + action + complete through the engine.
    const completedKeys: string[] = [];
    const firstExecution = (phase: string) => async (caller: number, i: number) => {
      const key = `${run}-${phase}-${caller}-${i}`;
      await executeFresh(engineA, key);
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
    const replay = (caller: number, i: number) =>
      replayCompleted(engineA, completedKeys[(caller * 7919 + i * 31) % completedKeys.length]);
    process.stdout.write('\nreplays: warm-up');
    await measure(Math.min(WARMUP_SECONDS, 1), replay);
    const replays: Throughput[] = [];
    for (let r = 0; r < RUNS; r++) {
      process.stdout.write(`, run ${r + 1}`);
      replays.push(await measure(SECONDS, replay));
    }

    // Wake latency of a waiting duplicate, woken on the same instance and on another.
    // The waiter's acquire must mark the record watched, or complete() sends no NOTIFY.
    const table = qualified(storeA.tableName);
    const watchedOf = async (scope: string, key: string) => {
      const rows: { watched: boolean }[] = await reader.query(
        `SELECT watched FROM ${table} WHERE id = $1`,
        [recordIdOf(scope, key)],
      );
      return rows[0]?.watched === true;
    };
    const common = { scope: SCOPE, holderStore: storeA, holderApp: APP_A, watchedOf };
    const sameInstance: WakeSetup = {
      ...common,
      waiterEngine: engineA,
      waiterApp: APP_A,
      waiterPool: poolOf(a),
    };
    const otherInstance: WakeSetup = {
      ...common,
      waiterEngine: engineB,
      waiterApp: APP_B,
      waiterPool: poolOf(b),
    };
    const wakes: Record<'same' | 'other', WakeTrial[]> = { same: [], other: [] };
    process.stdout.write(`\nwake latency: ${WAKE_TRIALS} trials × 2`);
    // B has not waited yet: one call through it opens its LISTEN connection now, since
    // that connection's one LISTEN counts as B's and would look like a waiter's first look.
    await executeFresh(engineB, `${run}-wake-listen-b`);
    for (let t = 0; t < 5; t++) {
      await wakeTrial(sameInstance, `${run}-wake-warm-a-${t}`);
      await wakeTrial(otherInstance, `${run}-wake-warm-b-${t}`);
    }
    for (let t = 0; t < WAKE_TRIALS; t++) {
      wakes.same.push(await wakeTrial(sameInstance, `${run}-wake-a-${t}`));
      wakes.other.push(await wakeTrial(otherInstance, `${run}-wake-b-${t}`));
    }
    process.stdout.write('\n\n');

    // Results
    const fmtRate = (xs: Throughput[]) => Math.round(median(xs.map((x) => x.perSecond)));
    const runsOf = (xs: Throughput[]) => xs.map((x) => Math.round(x.perSecond)).join(' / ');
    const wakeRow = (label: string, trials: WakeTrial[]) => [
      label,
      fmtP50P99(trials.map((x) => x.wakeMs)),
      `n = ${trials.length}; complete() itself: p50 ${fmtMs(
        percentile(
          trials.map((x) => x.completeMs),
          50,
        ),
      )}; marked watched by the waiter's acquire: ${trials.filter((x) => x.watched).length} of ${trials.length}`,
    ];
    const rows: string[][] = [
      [
        'First executions/s',
        String(fmtRate(firsts)),
        `median of ${RUNS} × ${SECONDS} s (runs: ${runsOf(firsts)}); ${CONCURRENCY} callers, pool ${POOL}, fresh keys, acquire + complete through IdempotencyEngine.run`,
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
        fmtRange(firsts.map((x) => x.roundTrips)),
        'pg Client.query calls on the pool / executions, every run',
      ],
      [
        'Round trips per replay',
        fmtRange(replays.map((x) => x.roundTrips)),
        'pg Client.query calls on the pool / replays, every run',
      ],
      [
        'Round trips per waiting duplicate',
        fmtRange(wakes.other.map((x) => x.waiterRoundTrips)),
        'on the waiter’s instance: look, then look again when NOTIFY wakes it; no connection held while waiting',
      ],
    ];
    console.log(consoleTable(['Machine', ''], machineRows(machine)));
    console.log(consoleTable(['Measurement', 'Result', 'How'], rows, [34, 30, 70]));
    const totalSeconds = (performance.now() - totalStarted) / 1000;
    if (engineWarnings.count > 0)
      console.log(`engine warnings during the run: ${engineWarnings.count}`);
    console.log(`total run time ${totalSeconds.toFixed(1)} s`);

    const markdown = [
      '# Store benchmark: TypeOrmIdempotencyStore on PostgreSQL',
      '',
      `Generated by \`npm run bench:store\` on ${new Date().toISOString().slice(0, 10)}; the whole run took ${totalSeconds.toFixed(0)} s.`,
      '',
      '## Machine',
      '',
      ...mdTable(['', ''], machineRows(machine)),
      '',
      '## Results',
      '',
      ...mdTable(['Measurement', 'Result', 'How'], rows, ['---', '---:', '---']),
      '',
      '## Method',
      '',
      `- Each throughput figure: ${WARMUP_SECONDS} s warm-up, then ${RUNS} runs of ${SECONDS} s each; the median run is reported. ${CONCURRENCY} concurrent callers each loop on \`IdempotencyEngine.run\` with a policy compiled once (lease 30 s, waitTimeout 10 s, ttl 24 h) and a small JSON result.`,
      `- Wake latency: the holder acquires a key on instance A; a duplicate calls \`execute\` with waitTimeout 10 s (through A, or through a second DataSource and store, B); its look marks the record \`watched\` (so the holder's \`complete()\` notifies); once it has looked and parked, the clock starts just before the holder's \`complete()\` and stops when the duplicate's \`execute()\` resolves with the replay. ${WAKE_TRIALS} trials each, one at a time; percentiles are nearest-rank.`,
      '- Round trips are counted in the driver: every `pg` `Client.query` call, attributed to an instance by its connection `application_name`. The LISTEN connection (outside the pool) issues its one LISTEN during warm-up, not during the measurements.',
      `- PostgreSQL and the benchmark share the machine${engineWarnings.count ? `; the engine logged ${engineWarnings.count} warnings` : ''}. Figures are for comparison between runs on one machine, not absolutes.`,
      '',
    ].join('\n');
    const out = resultsPath('RESULTS-store.md');
    await writeMarkdown(out, markdown);
    console.log(`written to ${out}`);
  } finally {
    for (const store of stores) await store.close().catch(() => undefined);
    if (a) await a.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await Promise.all([a?.destroy(), b?.destroy(), probe?.destroy()]).catch(() => undefined);
    await server.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
