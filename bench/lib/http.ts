import autocannon from 'autocannon';
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import { alternate } from './throughput';
import { median, pairedRatios } from './stats';

const ROOT = path.resolve(__dirname, '../..');
const APP = path.resolve(__dirname, '../http/app.ts');

export type Adapter = 'express' | 'fastify';
/** Which application process a workload runs on. */
export type AppKind = 'postgres' | 'cache' | 'memory';
export type HttpWorkload =
  | 'undecorated'
  | 'fresh keys'
  | 'replay'
  | 'undecorated, cache process'
  | 'replay, cache on'
  | 'undecorated, memory process'
  | 'fresh keys, memory store'
  | 'replay, memory store';
/** `mixed`: replays of one key, with every tenth request a fresh key (a first execution). */
export type LoadWorkload = HttpWorkload | 'mixed';

interface WorkloadSpec {
  app: AppKind;
  request: 'plain' | 'fresh' | 'replay';
}

/**
 * Three application processes: the PostgreSQL store with the replay cache
 * off; the same store with the cache on; the in-memory store (cache off, so
 * its replays are uncached). Each process's own undecorated figure is the
 * baseline of its other workloads.
 */
export const WORKLOADS: Record<HttpWorkload, WorkloadSpec> = {
  undecorated: { app: 'postgres', request: 'plain' },
  'fresh keys': { app: 'postgres', request: 'fresh' },
  replay: { app: 'postgres', request: 'replay' },
  'undecorated, cache process': { app: 'cache', request: 'plain' },
  'replay, cache on': { app: 'cache', request: 'replay' },
  'undecorated, memory process': { app: 'memory', request: 'plain' },
  'fresh keys, memory store': { app: 'memory', request: 'fresh' },
  'replay, memory store': { app: 'memory', request: 'replay' },
};
export const HTTP_WORKLOADS = Object.keys(WORKLOADS) as HttpWorkload[];

/** The undecorated workload on the same process: the baseline of a ratio. */
export function baselineOf(workload: HttpWorkload): HttpWorkload {
  const app = WORKLOADS[workload].app;
  return HTTP_WORKLOADS.find((w) => WORKLOADS[w].app === app && WORKLOADS[w].request === 'plain')!;
}

export interface AppProcess {
  url: string;
  /** Sends `{ type }` over IPC and resolves with the first answer carrying `field`. */
  ask<T>(type: string, field: string): Promise<T>;
  stop(): Promise<void>;
}

export interface AppOptions {
  adapter: Adapter;
  /** Default `postgres`: TypeOrmIdempotencyStore on `databaseUrl`; `memory`: InMemoryIdempotencyStore. */
  store?: 'postgres' | 'memory';
  databaseUrl: string;
  schema: string;
  poolSize?: number;
  /** Turns on the module's local replay cache with this many entries. */
  cacheMaxEntries?: number;
  /** Start node with --expose-gc, so `ask('memory')` can force a collection first. */
  exposeGc?: boolean;
}

/** bench/http/app.ts in its own process; resolves once it listens. */
export async function startApp(options: AppOptions): Promise<AppProcess> {
  const child = fork(APP, [], {
    cwd: ROOT,
    env: {
      ...process.env,
      ADAPTER: options.adapter,
      BENCH_STORE: options.store ?? 'postgres',
      DATABASE_URL: options.databaseUrl,
      BENCH_SCHEMA: options.schema,
      POOL_SIZE: String(options.poolSize ?? 32),
      BENCH_CACHE_MAX_ENTRIES: String(options.cacheMaxEntries ?? 0),
    },
    // BENCH_APP_NODE_ARGS: extra node flags for the application processes (e.g. --cpu-prof).
    execArgv: [
      ...(options.exposeGc ? ['--expose-gc'] : []),
      ...(process.env.BENCH_APP_NODE_ARGS ?? '').split(' ').filter(Boolean),
      '-r',
      '@swc-node/register',
    ],
  });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`the benchmark app exited with code ${code} before listening`);
  });
  const [message] = (await Promise.race([once(child, 'message'), exited])) as [{ port: number }];
  exited.catch(() => undefined);
  return {
    url: `http://127.0.0.1:${message.port}`,
    ask: <T>(type: string, field: string) =>
      new Promise<T>((resolve) => {
        const onMessage = (answer: Record<string, unknown>) => {
          if (answer && field in answer) {
            child.off('message', onMessage);
            resolve(answer as T);
          }
        };
        child.on('message', onMessage);
        child.send({ type });
      }),
    stop: async () => {
      if (child.exitCode !== null) return;
      const exit = once(child, 'exit');
      child.kill('SIGTERM');
      await exit;
    },
  };
}

export interface LoadSample {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

/** The one key every replay repeats: completed once before the load starts. */
export async function completeReplayKey(url: string): Promise<string> {
  const key = randomUUID();
  const response = await fetch(`${url}/idempotent`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ n: 1 }),
  });
  if (response.status !== 200) throw new Error(`seeding the replay key: HTTP ${response.status}`);
  return key;
}

export interface LoadOptions {
  connections: number;
  /** Seconds; or `amount` requests in all. */
  seconds?: number;
  amount?: number;
  replayKey: string;
}

/** One workload's request: POST, small JSON body; the Idempotency-Key, if any, per workload. */
function requestFor(workload: LoadWorkload, replayKey: string): autocannon.Request {
  const post = {
    method: 'POST' as const,
    path: '/idempotent',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ n: 1 }),
  };
  const withKeys = (nextKey: () => string) => ({
    ...post,
    setupRequest: (req: autocannon.Request) => ({
      ...req,
      headers: { ...req.headers, 'idempotency-key': nextKey() },
    }),
  });
  if (workload === 'mixed') {
    let sent = 0;
    return withKeys(() => (sent++ % 10 === 0 ? randomUUID() : replayKey));
  }
  switch (WORKLOADS[workload].request) {
    case 'plain':
      return { ...post, path: '/plain' };
    case 'replay':
      return { ...post, headers: { ...post.headers, 'idempotency-key': replayKey } };
    case 'fresh':
      return withKeys(() => randomUUID());
  }
}

/** autocannon against `url` with one workload's requests. */
export function runLoad(
  url: string,
  workload: LoadWorkload,
  options: LoadOptions,
): Promise<LoadSample> {
  const request = requestFor(workload, options.replayKey);
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url,
        connections: options.connections,
        ...(options.amount ? { amount: options.amount } : { duration: options.seconds ?? 5 }),
        requests: [request],
      },
      (error, result) => {
        if (error) return reject(error);
        resolve({
          rps: result.requests.average,
          p50: result.latency.p50,
          p99: result.latency.p99,
          errors: result.errors + result.timeouts,
          non2xx: result.non2xx,
        });
      },
    );
  });
}

export interface HttpRow {
  adapter: Adapter;
  workload: HttpWorkload;
  /** Medians over the rounds. */
  rps: number;
  p50: number;
  p99: number;
  /**
   * Req/s divided by the undecorated handler's req/s on the same process
   * (`baselineOf`), round by round; the median.
   */
  ratio: number;
  /** The rounds' ratios. */
  ratios: number[];
  /** Median req/s divided by the first process's undecorated median instead. */
  ratioToFirst: number;
  failures: number;
  runs: number[];
}

export interface HttpComparisonOptions {
  adapter: Adapter;
  databaseUrl: string;
  schema: string;
  rounds: number;
  seconds: number;
  connections: number;
  cacheMaxEntries: number;
  /** Workloads to run (default all); each needs its process's undecorated baseline, added if missing. */
  workloads?: HttpWorkload[];
  log?: (line: string) => void;
}

/**
 * Up to three application processes (PostgreSQL store with the replay cache
 * off, and on with `cacheMaxEntries`; the in-memory store); the workloads
 * alternate within each round; medians and ratios to the undecorated handler
 * on the same process in the same round.
 */
export async function compareHttp(options: HttpComparisonOptions): Promise<HttpRow[]> {
  const wanted = new Set(options.workloads ?? HTTP_WORKLOADS);
  for (const w of [...wanted]) wanted.add(baselineOf(w));
  const workloads = HTTP_WORKLOADS.filter((w) => wanted.has(w));
  const kinds = [...new Set(workloads.map((w) => WORKLOADS[w].app))];
  const common = {
    adapter: options.adapter,
    databaseUrl: options.databaseUrl,
    schema: options.schema,
  };
  const apps: Partial<Record<AppKind, AppProcess>> = {};
  try {
    for (const kind of kinds) {
      apps[kind] = await startApp({
        ...common,
        store: kind === 'memory' ? 'memory' : 'postgres',
        cacheMaxEntries: kind === 'cache' ? options.cacheMaxEntries : 0,
      });
    }
    // One completed key per process: the in-memory store's records live in its process.
    const replayKeys: Partial<Record<AppKind, string>> = {};
    for (const kind of kinds) replayKeys[kind] = await completeReplayKey(apps[kind]!.url);
    const appOf = (w: HttpWorkload) => apps[WORKLOADS[w].app]!;
    const loadOf = (w: HttpWorkload, seconds: number) => ({
      connections: options.connections,
      seconds,
      replayKey: replayKeys[WORKLOADS[w].app]!,
    });
    // Warm-up: JIT, pools and (for the cache process) the cache entry itself.
    const warm = Math.min(2, options.seconds);
    for (const w of workloads) await runLoad(appOf(w).url, w, loadOf(w, warm));
    const samples = await alternate(
      options.rounds,
      Object.fromEntries(
        workloads.map((w) => [w, () => runLoad(appOf(w).url, w, loadOf(w, options.seconds))]),
      ),
      (round, name) =>
        name === workloads[0] &&
        options.log?.(`${options.adapter}: round ${round + 1}/${options.rounds}`),
    );
    const base = median(samples[workloads[0]].map((s) => s.rps));
    return workloads.map((workload) => {
      const s = samples[workload];
      const rps = median(s.map((x) => x.rps));
      const paired = pairedRatios(
        s.map((x) => x.rps),
        samples[baselineOf(workload)].map((x) => x.rps),
      );
      return {
        adapter: options.adapter,
        workload,
        rps,
        p50: median(s.map((x) => x.p50)),
        p99: median(s.map((x) => x.p99)),
        ratio: paired.median,
        ratios: paired.each,
        ratioToFirst: rps / base,
        failures: s.reduce((n, x) => n + x.errors + x.non2xx, 0),
        runs: s.map((x) => x.rps),
      };
    });
  } finally {
    await Promise.all(Object.values(apps).map((app) => app.stop()));
  }
}
