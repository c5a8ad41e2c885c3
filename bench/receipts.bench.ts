/**
 * Receipts benchmark: first executions through the engine on PostgreSQL
 * (PgIdempotencyStore on a `pg` Pool), receipts off against on.
 *
 *   npm run bench:receipts
 *
 * Starts an embedded PostgreSQL unless IDEMPOTENCY_BENCH_PG_URL names a
 * server (it then works in a scratch schema it drops afterwards). Measures,
 * alternating the variants round by round: one caller's latency per first
 * execution (sequential), and the throughput of BENCH_CONCURRENCY callers.
 * Prints medians; docs/receipts.md quotes a run.
 *
 * Tunables (environment): BENCH_SECONDS (3), BENCH_RUNS (3),
 * BENCH_CONCURRENCY (32), BENCH_POOL (32), BENCH_LATENCY_CALLS (500).
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Pool } from 'pg';
import { IdempotencyEngine } from 'nest-idempotency';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { startServer } from './lib/postgres';
import { envNumber, median, percentile } from './lib/stats';
import { alternate } from './lib/throughput';

const SECONDS = envNumber('BENCH_SECONDS', 3);
const RUNS = envNumber('BENCH_RUNS', 3);
const CONCURRENCY = envNumber('BENCH_CONCURRENCY', 32);
const POOL = envNumber('BENCH_POOL', 32);
const LATENCY_CALLS = envNumber('BENCH_LATENCY_CALLS', 500);

const quiet = { warn: () => undefined, error: () => undefined };

interface Sample {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

async function main(): Promise<void> {
  const server = await startServer();
  const schema = `bench_receipts_${randomBytes(4).toString('hex')}`;
  const pool = new Pool({ connectionString: server.url, max: POOL });
  pool.on('error', () => undefined);
  const store = new PgIdempotencyStore(pool, { schema, ensureSchema: true, logger: quiet });
  try {
    await store.init();
    await store.receipts.check();
    const engines = {
      off: new IdempotencyEngine(store, { logger: quiet }),
      on: new IdempotencyEngine(store, { logger: quiet, receipts: true }),
    };
    const run = `${process.pid}-${Date.now()}`;
    let counter = 0;
    const first = (engine: IdempotencyEngine) =>
      engine.execute({ scope: 'bench.receipts', key: `${run}-${counter++}` }, async () => ({
        ok: true,
      }));
    const sample = (engine: IdempotencyEngine) => async (): Promise<Sample> => {
      const latencies: number[] = [];
      for (let i = 0; i < LATENCY_CALLS; i++) {
        const started = performance.now();
        await first(engine);
        latencies.push(performance.now() - started);
      }
      const end = performance.now() + SECONDS * 1000;
      let operations = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (performance.now() < end) {
            await first(engine);
            operations++;
          }
        }),
      );
      return {
        perSecond: operations / ((performance.now() - started) / 1000),
        p50Ms: median(latencies),
        p99Ms: percentile(latencies, 99),
      };
    };
    // Warm up both (prepared statements, the pool).
    for (let i = 0; i < 200; i++) await Promise.all([first(engines.off), first(engines.on)]);
    const samples = await alternate(
      RUNS,
      { off: sample(engines.off), on: sample(engines.on) },
      (round, name) => process.stderr.write(`round ${round + 1} of ${RUNS}: receipts ${name}\n`),
    );
    const row = (name: 'off' | 'on') => {
      const s = samples[name];
      return {
        receipts: name,
        'sequential p50': `${median(s.map((x) => x.p50Ms)).toFixed(2)} ms`,
        'sequential p99': `${median(s.map((x) => x.p99Ms)).toFixed(2)} ms`,
        [`${CONCURRENCY} callers`]: `${Math.round(median(s.map((x) => x.perSecond)))}/s`,
      };
    };
    console.log(`PostgreSQL: ${server.describe}; ${RUNS} rounds, medians`);
    console.table([row('off'), row('on')]);
  } finally {
    await store.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    await server.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
