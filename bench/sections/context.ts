import { IdempotencyEngine } from 'nest-idempotency';
import { compilePolicy } from '../../libs/idempotency/src/core/policy';
import { DataSource } from 'typeorm';
import { envNumber } from '../lib/stats';
import { LEASE_MS, TTL_MS, WAKE_REQUEST as REQUEST } from '../lib/wake';

/** Every tunable of `npm run bench`, from the environment; defaults take ~20 min on 2 cores. */
export function readConfig() {
  return {
    /** Closed-loop throughput runs (store, floor, scale). */
    seconds: envNumber('BENCH_SECONDS', 5),
    rounds: envNumber('BENCH_ROUNDS', 5),
    warmupSeconds: envNumber('BENCH_WARMUP_SECONDS', 2),
    concurrency: envNumber('BENCH_CONCURRENCY', 32),
    pool: envNumber('BENCH_POOL', 32),
    /** HTTP comparison (autocannon, 32 connections). */
    httpSeconds: envNumber('BENCH_HTTP_SECONDS', 3),
    httpRounds: envNumber('BENCH_HTTP_ROUNDS', 5),
    cacheEntries: envNumber('BENCH_CACHE_ENTRIES', 10_000),
    /** Wake latency: trials per placement (at least 50) and the holder's action. */
    wakeTrials: Math.max(50, envNumber('BENCH_WAKE_TRIALS', 60)),
    wakeActionMs: envNumber('BENCH_WAKE_ACTION_MS', 300),
    /** Scale: rows pre-filled (and later expired), purge windows, paced traffic. */
    fillRows: envNumber('BENCH_FILL_ROWS', 1_000_000),
    purgeSegments: Math.max(1, envNumber('BENCH_PURGE_SEGMENTS', 4)),
    purgeQuietSeconds: envNumber('BENCH_PURGE_QUIET_SECONDS', 5),
    purgeTrafficRate: envNumber('BENCH_PURGE_RATE', 200),
    staleCapSeconds: envNumber('BENCH_STALE_CAP_SECONDS', 10),
    /** Memory: requests in all, the workload and the adapter. */
    memoryRequests: envNumber('BENCH_MEMORY_REQUESTS', 200_000),
    memoryWorkload: (process.env.BENCH_MEMORY_WORKLOAD ?? 'mixed') as
      'mixed' | 'replay' | 'fresh keys',
    memoryAdapter: (process.env.BENCH_MEMORY_ADAPTER ?? 'express') as 'express' | 'fastify',
    /** Store sections (redis-*, mariadb-*): also run the in-memory process in their HTTP comparison. */
    storeHttpMemory: envNumber('BENCH_STORE_HTTP_MEMORY', 1) !== 0,
    sections: expandSections(process.env.BENCH_SECTIONS ?? 'floor,cpu,http,wake,scale,memory'),
  };
}

/** What `redis` and `mariadb` stand for in BENCH_SECTIONS: every section of that store. */
export const SECTION_GROUPS: Record<string, string[]> = {
  redis: ['redis-store', 'redis-http', 'redis-wake', 'redis-memory'],
  mariadb: ['mariadb-floor', 'mariadb-http', 'mariadb-memory'],
};

function expandSections(list: string): string[] {
  const names = list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .flatMap((s) => SECTION_GROUPS[s] ?? [s]);
  return [...new Set(names)];
}

export type BenchConfig = ReturnType<typeof readConfig>;

/** What every section gets; the PostgreSQL sections get a BenchContext. */
export interface SectionContext {
  config: BenchConfig;
  log(line: string): void;
}

export interface BenchContext extends SectionContext {
  url: string;
  /** The server is not the embedded one this process started (IDEMPOTENCY_BENCH_PG_URL). */
  external: boolean;
  /** Connections for setup and clean-up (not measured). */
  admin: DataSource;
  /** A fresh schema name, dropped at the end of the run. */
  schema(prefix: string): string;
}

export type Verdict = 'met' | 'missed' | '';

export interface ResultRow {
  section: string;
  measurement: string;
  result: string;
  target: string;
  verdict: Verdict;
  how: string;
}

export interface SectionResult {
  rows: ResultRow[];
  /** Bullet points for the Method part of RESULTS.md. */
  method: string[];
  /** Observations worth a reader's attention (findings, caveats). */
  notes: string[];
  /** Rows for the Machine table: the servers the section ran against (Redis, MariaDB). */
  machine?: string[][];
  /** The section did not run (its server did not answer). */
  skipped?: boolean;
}

/**
 * A section whose server does not answer: one row that says so and how to
 * start it; the run goes on.
 */
export function skipped(
  section: string,
  what: string,
  reason: string,
  howToStart: string,
): SectionResult {
  return {
    skipped: true,
    rows: [
      {
        section,
        measurement: `${what}: skipped`,
        result: `skipped: unreachable (${reason})`,
        target: '',
        verdict: '' as const,
        how: howToStart,
      },
    ],
    method: [],
    notes: [`${section} was skipped: ${what} did not answer (${reason}); ${howToStart}.`],
  };
}

export const verdict = (met: boolean): Verdict => (met ? 'met' : 'missed');

/** Engine warnings are counted, not printed, so the console keeps to the table. */
export const quietLogger = { warn: () => undefined, error: () => undefined };
export const engineWarnings = { count: 0 };
export const countingLogger = {
  warn: () => void engineWarnings.count++,
  error: () => void engineWarnings.count++,
};

export const SCOPE = 'bench.orders.create';
export { LEASE_MS, REQUEST, TTL_MS };

/**
 * The benchmark's policy (lease 30 s, waitTimeout 10 s, ttl 24 h), compiled
 * once as `engine.policy()` does, and reused by every call through `engine.run`:
 * the path the Nest adapter takes (a handler's policy is compiled at bootstrap).
 */
export const POLICY = compilePolicy({ scope: SCOPE, ...REQUEST });

/** The action's result, as bench:store uses: a small JSON object. */
export const resultFor = (key: string) => ({
  status: 201,
  body: { id: key, amount: 1250, currency: 'EUR' },
});

/** A first execution of a fresh `key` through `engine`; throws unless the action ran. */
export async function executeFresh(engine: IdempotencyEngine, key: string): Promise<void> {
  const outcome = await engine.run(POLICY, { key }, async () => resultFor(key));
  if (outcome.kind !== 'executed') throw new Error(`fresh key ${outcome.kind}`);
}

/** A replay of a completed `key` through `engine`; throws unless it was replayed. */
export async function replayCompleted(engine: IdempotencyEngine, key: string): Promise<void> {
  const outcome = await engine.run(POLICY, { key }, async () => {
    throw new Error('a replay must not execute');
  });
  if (outcome.kind !== 'replayed') throw new Error(`completed key ${outcome.kind}`);
}
