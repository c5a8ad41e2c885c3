/**
 * 4. Scale: first executions on a table holding a million COMPLETE records
 * against an empty one; then a million expired records purged in batches while
 * acquisition traffic runs.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Client } from 'pg';
import type {
  AcquireRequest,
  AcquireResult,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  StoredPayload,
} from 'nest-idempotency';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { buildStatements } from '../../libs/idempotency/src/stores/sql/postgres/statements';
import { qualified } from '../../libs/idempotency/src/stores/sql/table';
import { runPaced } from '../lib/paced';
import { openDataSource } from '../lib/postgres';
import { fmtMs, fmtP50P99, median, pairedRatios, percentile, sleep } from '../lib/stats';
import { alternate, measure, Throughput } from '../lib/throughput';
import {
  BenchContext,
  countingLogger,
  executeFresh,
  quietLogger,
  ResultRow,
  SectionResult,
  verdict,
} from './context';

const APP = 'idem-bench-scale';
const n = (x: number) => (Number.isFinite(x) ? x.toLocaleString('en') : '?');
const BATCH = 1000; // the store's purge batch

/** Times every tryAcquire into `sink` (the window being measured). */
class TimedStore implements IdempotencyStore {
  sink: number[] = [];
  constructor(private readonly inner: IdempotencyStore) {}
  async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const t0 = performance.now();
    const sink = this.sink;
    const result = await this.inner.tryAcquire(request);
    sink.push(performance.now() - t0);
    return result;
  }
  complete(lease: Lease, payload: StoredPayload) {
    return this.inner.complete(lease, payload);
  }
  release(lease: Lease) {
    return this.inner.release(lease);
  }
  extend(lease: Lease) {
    return this.inner.extend(lease);
  }
  purgeExpired(options?: { limit?: number }) {
    return this.inner.purgeExpired(options);
  }
  find(id: RecordId): Promise<IdempotencyRecordView | null> {
    return this.inner.find(id);
  }
  list(filter?: ListFilter) {
    return this.inner.list(filter);
  }
}

interface PurgeProbe {
  ms: number;
  cancelled: boolean;
  purged: number;
  plan: string;
  estimatedExpired: number;
}

/** The delete half of the purge plan, in a few words, and the planner's estimate of expired rows. */
function summarizePlan(lines: string[]): { plan: string; estimatedExpired: number } {
  const gone = lines.slice(lines.findIndex((l) => l.includes('CTE gone')));
  const join = gone.find((l) => /Nested Loop|Hash Join|Merge Join/.test(l));
  const scan = gone.find((l) => /Scan .*on \S+ r\b/.test(l));
  const joinName = join?.match(/Nested Loop|Hash Join|Merge Join/)?.[0] ?? 'no join';
  const filter = gone.some((l) => l.includes('Join Filter')) ? ' with a join filter' : '';
  const scanName = scan
    ? scan.includes('_pkey')
      ? 'record looked up by primary key'
      : scan.includes('expires_at_idx')
        ? 'records read through the expires_at index'
        : 'records read by a sequential scan'
    : 'unknown access';
  const estimate = lines
    .find((l) => l.includes('Index Scan using') && l.includes('expires_at_idx'))
    ?.match(/rows=(\d+)/)?.[1];
  return {
    plan: `${joinName}${filter}, ${scanName}`,
    estimatedExpired: Number(estimate ?? NaN),
  };
}

export async function scaleSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  const emptySchema = ctx.schema('bench_empty');
  const filledSchema = ctx.schema('bench_filled');
  const dataSource = await openDataSource(ctx.url, APP, config.pool);
  const empty = new TypeOrmIdempotencyStore(dataSource, {
    schema: emptySchema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const filled = new TypeOrmIdempotencyStore(dataSource, {
    schema: filledSchema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const probe = new Client({ connectionString: ctx.url, application_name: 'idem-bench-probe' });
  try {
    await empty.init();
    await filled.init();
    await probe.connect();
    const table = qualified(filled.tableName);
    const N = config.fillRows;
    const run = randomBytes(3).toString('hex');

    // Pre-fill: N COMPLETE records, one statement, created over the last ~22 h, expiring in 26–48 h.
    const spreadMs = 80_000_000 / N;
    ctx.log(`scale: filling ${N} COMPLETE records`);
    let t0 = performance.now();
    await dataSource.query(
      `INSERT INTO ${table} (id, scope, "key", state, expires_at, payload, created_at, completed_at)
       SELECT sha256(convert_to('fill-' || g, 'UTF8')), 'bench.fill', 'fill-' || g, 'COMPLETE',
         now() - g * ($2::double precision * interval '1 millisecond') + interval '48 hours',
         convert_to('v' || jsonb_build_object('status', 201,
           'body', jsonb_build_object('id', 'fill-' || g, 'amount', 1250, 'currency', 'EUR'))::text, 'UTF8'),
         now() - g * ($2::double precision * interval '1 millisecond'),
         now() - g * ($2::double precision * interval '1 millisecond')
       FROM generate_series(1, $1::int) g`,
      [N, spreadMs],
    );
    const fillSeconds = (performance.now() - t0) / 1000;
    // Settle what the bulk insert left for later (visibility map, statistics, dirty
    // buffers), so autovacuum and a checkpoint do not land on one side of the comparison.
    ctx.log('scale: VACUUM (ANALYZE), CHECKPOINT');
    await dataSource.query(`VACUUM (ANALYZE) ${table}`);
    await dataSource.query(`ANALYZE ${qualified(empty.tableName)}`);
    await dataSource.query('CHECKPOINT').catch(() => undefined); // needs pg_checkpoint elsewhere
    const [{ size }] = await dataSource.query(
      `SELECT pg_size_pretty(pg_total_relation_size($1::regclass)) AS size`,
      [table],
    );

    const engines = {
      empty: new IdempotencyEngine(empty, { logger: countingLogger }),
      filled: new IdempotencyEngine(filled, { logger: countingLogger }),
    };
    let phase = 0;
    const first = (engine: IdempotencyEngine) => {
      const tag = phase++;
      return (caller: number, i: number) => executeFresh(engine, `${run}-${tag}-${caller}-${i}`);
    };
    const on = (seconds = config.seconds) => ({
      seconds,
      concurrency: config.concurrency,
      app: APP,
    });
    ctx.log('scale: empty vs filled, warm-up');
    await measure(on(config.warmupSeconds), first(engines.empty));
    await measure(on(config.warmupSeconds), first(engines.filled));
    // WAL written per first execution, from the server's insert position.
    const walPosition = async () =>
      (await dataSource.query('SELECT pg_current_wal_lsn()::text AS lsn'))[0].lsn as string;
    const wal = { empty: [] as number[], filled: [] as number[] };
    const withWal = async (side: 'empty' | 'filled') => {
      const before = await walPosition();
      const result = await measure(on(), first(engines[side]));
      const [{ bytes }] = await dataSource.query(
        `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8 AS bytes`,
        [before],
      );
      wal[side].push(bytes / result.operations);
      return result;
    };
    const compared = await alternate(
      config.rounds,
      {
        empty: () => withWal('empty'),
        filled: () => withWal('filled'),
      },
      (round, name) => ctx.log(`scale: round ${round + 1}, ${name} table`),
    );
    const rate = (xs: Throughput[]) => median(xs.map((x) => x.perSecond));
    const runs = (xs: Throughput[]) => xs.map((x) => x.perSecond.toFixed(0)).join(' / ');
    const fillPaired = pairedRatios(
      compared.filled.map((x) => x.perSecond),
      compared.empty.map((x) => x.perSecond),
    );
    const fillRatio = fillPaired.median;

    // N more records, already expired (expired 1–12 h ago), inserted with autovacuum
    // off on the table so the statistics stay those of the live table until we say.
    ctx.log(`scale: inserting ${N} expired records`);
    await dataSource.query(`ALTER TABLE ${table} SET (autovacuum_enabled = off)`);
    const expireSpreadMs = 39_600_000 / N;
    t0 = performance.now();
    await dataSource.query(
      `INSERT INTO ${table} (id, scope, "key", state, expires_at, payload, created_at, completed_at)
       SELECT sha256(convert_to('expired-' || g, 'UTF8')), 'bench.fill', 'expired-' || g, 'COMPLETE',
         now() - interval '1 hour' - g * ($2::double precision * interval '1 millisecond'),
         convert_to('v' || jsonb_build_object('status', 201,
           'body', jsonb_build_object('id', 'expired-' || g, 'amount', 1250, 'currency', 'EUR'))::text, 'UTF8'),
         now() - interval '25 hours' - g * ($2::double precision * interval '1 millisecond'),
         now() - interval '25 hours' - g * ($2::double precision * interval '1 millisecond')
       FROM generate_series(1, $1::int) g`,
      [N, expireSpreadMs],
    );
    const expireSeconds = (performance.now() - t0) / 1000;

    // One purge batch, as the store sends it, capped by statement_timeout.
    const purgeSql = buildStatements(filled.tableName).purgeBatch;
    const capMs = config.staleCapSeconds * 1000;
    const probeBatch = async (sql = purgeSql): Promise<PurgeProbe> => {
      const explained = await probe.query(`EXPLAIN ${sql}`, [BATCH]);
      const summary = summarizePlan(explained.rows.map((r) => r['QUERY PLAN'] as string));
      await probe.query('BEGIN');
      await probe.query(`SET LOCAL statement_timeout = ${Math.round(capMs)}`);
      const started = performance.now();
      try {
        const { rows } = await probe.query(sql, [BATCH]);
        const ms = performance.now() - started;
        await probe.query('COMMIT');
        return { ...summary, ms, cancelled: false, purged: rows[0].purged as number };
      } catch (error) {
        const ms = performance.now() - started;
        await probe.query('ROLLBACK');
        if ((error as { code?: string }).code !== '57014') throw error;
        return { ...summary, ms, cancelled: true, purged: 0 };
      }
    };
    ctx.log('scale: one purge batch on statistics from before the records expired');
    const stale = await probeBatch();
    ctx.log('scale: ANALYZE, one purge batch again');
    await dataSource.query(`ANALYZE ${table}`);
    const fresh = await probeBatch();
    await dataSource.query(`ALTER TABLE ${table} RESET (autovacuum_enabled)`);
    await dataSource.query('CHECKPOINT').catch(() => undefined);

    // Purge in segments while paced first executions run on the same table;
    // quiet windows (traffic, no purge) alternate with purge windows.
    const timed = new TimedStore(filled);
    const trafficEngine = new IdempotencyEngine(timed, { logger: countingLogger });
    const windows = { quiet: [] as number[], purge: [] as number[] };
    const executions = { quiet: [] as number[], purge: [] as number[] };
    const achieved = { quiet: [] as number[], purge: [] as number[] };
    let trafficErrors = 0;
    const segments: { purged: number; seconds: number }[] = [];
    const [{ expired }] = await dataSource.query(
      `SELECT count(*)::int AS expired FROM ${table} WHERE expires_at <= now()`,
    );
    const perSegment = Math.ceil(expired / config.purgeSegments);
    const traffic = async (kind: 'quiet' | 'purge', until: Promise<unknown>) => {
      timed.sink = windows[kind];
      const tag = phase++;
      const result = await runPaced(
        config.purgeTrafficRate,
        (i) => executeFresh(trafficEngine, `${run}-p${tag}-${i}`),
        until,
      );
      executions[kind].push(...result.latencies);
      achieved[kind].push(result.perSecond);
      trafficErrors += result.errors + result.skipped;
    };
    ctx.log('scale: traffic warm-up');
    await traffic('quiet', sleep(1000));
    windows.quiet.length = 0;
    executions.quiet.length = 0;
    achieved.quiet.length = 0;
    for (let s = 0; s < config.purgeSegments; s++) {
      ctx.log(`scale: quiet window ${s + 1}/${config.purgeSegments}`);
      await traffic('quiet', sleep(config.purgeQuietSeconds * 1000));
      ctx.log(`scale: purge window ${s + 1}/${config.purgeSegments}`);
      const started = performance.now();
      // purgeExpired deletes one batch; like the module's scheduler and the CLI, loop
      // until a batch comes back short (or this segment's share is done).
      const purging = (async () => {
        let purged = 0;
        while (purged < perSegment) {
          const batch = Math.min(BATCH, perSegment - purged);
          const got = await filled.purgeExpired({ limit: batch });
          purged += got;
          if (got < batch) break;
        }
        segments.push({ purged, seconds: (performance.now() - started) / 1000 });
      })();
      await traffic('purge', purging);
    }
    const [{ remaining }] = await dataSource.query(
      `SELECT count(*)::int AS remaining FROM ${table} WHERE expires_at <= now()`,
    );

    const totalPurged = segments.reduce((n, s) => n + s.purged, 0);
    const totalSeconds = segments.reduce((n, s) => n + s.seconds, 0);
    const segmentRates = segments.map((s) => s.purged / s.seconds);
    const probeResult = (p: PurgeProbe) =>
      p.cancelled ? `> ${(p.ms / 1000).toFixed(1)} s (cancelled)` : fmtMs(p.ms, 1);
    const probeHow = (p: PurgeProbe) =>
      `planner expects ${n(p.estimatedExpired)} expired rows (there are ~${n(N)}); plan: ${p.plan}${p.cancelled ? `; cancelled by statement_timeout ${config.staleCapSeconds} s` : `; purged ${p.purged}`}`;
    const p99Quiet = percentile(windows.quiet, 99);
    const p99Purge = percentile(windows.purge, 99);

    const rows: ResultRow[] = [
      {
        section: '4. Scale',
        measurement: `First executions/s, ${(N / 1e6).toLocaleString('en')}M-record table ÷ empty table`,
        result: `${fillRatio.toFixed(2)} (${rate(compared.filled).toFixed(0)}/s vs ${rate(compared.empty).toFixed(0)}/s)`,
        target: '≥ 0.90',
        verdict: verdict(fillRatio >= 0.9),
        how: `ratio: median of the rounds' ratios ${fillPaired.each.map((x) => x.toFixed(2)).join(' / ')}; rates: medians; filled runs ${runs(compared.filled)}; empty runs ${runs(compared.empty)}; WAL per first execution: filled ${median(wal.filled).toFixed(0)} B, empty ${median(wal.empty).toFixed(0)} B; filled table ${size} after the fill (one INSERT … SELECT generate_series, ${fillSeconds.toFixed(1)} s)`,
      },
      {
        section: '4. Scale',
        measurement: 'Purge batch (1,000) on statistics from before the records expired',
        result: probeResult(stale),
        target: '',
        verdict: '',
        how: probeHow(stale),
      },
      {
        section: '4. Scale',
        measurement: 'Purge batch (1,000) after ANALYZE',
        result: probeResult(fresh),
        target: '',
        verdict: '',
        how: probeHow(fresh),
      },
      {
        section: '4. Scale',
        measurement: 'Rows purged per second, with traffic',
        result: `${median(segmentRates).toFixed(0)}/s`,
        target: '',
        verdict: '',
        how: `median of ${segments.length} segments (${segmentRates.map((x) => x.toFixed(0)).join(' / ')}/s); ${n(totalPurged)} rows in ${totalSeconds.toFixed(1)} s of purging, batches of ${BATCH}; ${n(remaining)} expired rows left; ${n(N)} expired rows inserted in ${expireSeconds.toFixed(1)} s`,
      },
      {
        section: '4. Scale',
        measurement: `Acquisition latency, ${config.purgeTrafficRate}/s paced, without purge`,
        result: fmtP50P99(windows.quiet),
        target: '',
        verdict: '',
        how: `n = ${windows.quiet.length}; whole first execution ${fmtP50P99(executions.quiet)}; achieved ${median(achieved.quiet).toFixed(0)}/s`,
      },
      {
        section: '4. Scale',
        measurement: `Acquisition latency, ${config.purgeTrafficRate}/s paced, during purge`,
        result: fmtP50P99(windows.purge),
        target: '',
        verdict: '',
        how: `n = ${windows.purge.length}; whole first execution ${fmtP50P99(executions.purge)}; achieved ${median(achieved.purge).toFixed(0)}/s; p99 ${(p99Purge / p99Quiet).toFixed(1)}× the quiet p99${trafficErrors ? `; ${trafficErrors} failed or skipped` : ''}`,
      },
    ];
    return {
      rows,
      method: [
        `Scale: two tables on one pool of ${config.pool}. The filled one gets ${n(N)} COMPLETE records in one \`INSERT … SELECT generate_series\` (id = PostgreSQL \`sha256()\` of a text, 32 bytes like the store's ids; created over the last ~22 h, expiring in 26–48 h; a JSON payload like the benchmark's), then \`VACUUM (ANALYZE)\` and \`CHECKPOINT\`. First executions through the engine (${config.concurrency} callers): ${config.warmupSeconds} s warm-up on each, then ${config.rounds} rounds of empty / filled, ${config.seconds} s each; medians.`,
        `Purge: ${n(N)} more records inserted already expired (1–12 h ago), with autovacuum off on the table so its statistics remain those of the live table. One purge batch (the store's \`purgeBatch\` statement, 1,000 rows) is timed on those statistics, capped at ${config.staleCapSeconds} s by \`statement_timeout\`, then again after \`ANALYZE\`; autovacuum is then turned back on. The expired records are purged in ${config.purgeSegments} segments of ${n(perSegment)} rows, each a loop of \`purgeExpired({ limit: ${BATCH} })\` (one batch per call) until a batch comes back short, as the module's scheduler and the CLI loop; around each segment, a ${config.purgeQuietSeconds} s window without purge. In every window, first executions arrive at ${config.purgeTrafficRate}/s (open loop, new key each) on the same table; acquisition latency is the store's \`tryAcquire\` call as the engine makes it.`,
      ],
      notes: scaleNotes({
        stale,
        fresh,
        fillRatio,
        p99Quiet,
        p99Purge,
        N,
        walFilled: median(wal.filled),
        walEmpty: median(wal.empty),
      }),
    };
  } finally {
    await probe.end().catch(() => undefined);
    await empty.close().catch(() => undefined);
    await filled.close().catch(() => undefined);
    await dataSource.destroy().catch(() => undefined);
  }
}

function scaleNotes(x: {
  stale: PurgeProbe;
  fresh: PurgeProbe;
  fillRatio: number;
  p99Quiet: number;
  p99Purge: number;
  N: number;
  walFilled: number;
  walEmpty: number;
}): string[] {
  const notes: string[] = [];
  const batch = (p: PurgeProbe) =>
    p.cancelled ? `over ${(p.ms / 1000).toFixed(1)} s (cancelled)` : `${p.ms.toFixed(0)} ms`;
  notes.push(
    x.stale.cancelled || x.stale.ms > 5 * x.fresh.ms
      ? `**Purge on stale statistics is slow.** One purge batch took ${batch(x.stale)} with the statistics of the live table (the planner expected ${n(x.stale.estimatedExpired)} expired rows of ~${n(x.N)}; plan: ${x.stale.plan}) against ${batch(x.fresh)} after \`ANALYZE\` (plan: ${x.fresh.plan}). A table sees such statistics when records expire with time but nothing re-analyzes it (autovacuum analyzes on row changes, not on the clock): after a purge was off or failing for a while, or on a first purge of an existing table. A plan that reads every expired row per batch makes purging n rows cost O(n²/1,000).`
      : `The purge batch does not depend on fresh statistics: ${batch(x.stale)} per 1,000 rows with the statistics of the live table (the planner expected ${n(x.stale.estimatedExpired)} expired rows of ~${n(x.N)}; plan: ${x.stale.plan}), ${batch(x.fresh)} after \`ANALYZE\`.`,
  );
  notes.push(
    `First executions on the ${(x.N / 1e6).toLocaleString('en')}M-record table ran at ${x.fillRatio.toFixed(2)} of the empty table's rate (${x.fillRatio >= 0.9 ? 'target met' : 'under the 0.90 target'}; the spread of the rounds' ratios is in the How column). WAL per first execution was ${x.walFilled.toFixed(0)} B on the filled table against ${x.walEmpty.toFixed(0)} B on the empty one: an insert into a large primary-key index of random 32-byte ids lands on a random leaf page, and the first change to a page after a checkpoint writes the whole page to the WAL, so each commit has more to flush.`,
  );
  if (x.p99Purge > 2 * x.p99Quiet)
    notes.push(
      `Acquisition p99 during the purge was ${(x.p99Purge / x.p99Quiet).toFixed(1)}× the p99 without it: the purge's batches compete for the same cores and for WAL flushes.`,
    );
  return notes;
}
