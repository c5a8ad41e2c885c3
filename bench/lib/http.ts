import autocannon from 'autocannon';
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import type { PeerStore } from '../peer/load';
import { cpuUsOf } from './cpu';
import { alternate } from './throughput';
import { median, pairedRatios } from './stats';

const ROOT = path.resolve(__dirname, '../..');
const APP = path.resolve(__dirname, '../http/app.ts');

export type Adapter = 'express' | 'fastify';
/** Which application process a workload runs on. */
export type AppKind = 'postgres' | 'cache' | 'memory';
export type HttpWorkload =
  | 'undecorated'
  | 'undecorated, fresh key each'
  | 'fresh keys'
  | 'replay'
  | 'undecorated, cache process'
  | 'replay, cache on'
  | 'undecorated, memory process'
  | 'undecorated, fresh key each, memory process'
  | 'pass-through interceptor, memory process'
  | 'fresh keys, memory store'
  | 'replay, memory store';
/** `mixed`: replays of one key, with every tenth request a fresh key (a first execution). */
export type LoadWorkload = HttpWorkload | 'mixed';

/**
 * What is sent: `plain` is the undecorated route with the same fixed
 * Idempotency-Key header a replay sends; `plain-fresh` the undecorated route
 * with a new key per request, built the way `fresh` builds its requests (the
 * load generator rebuilds every such request, which costs it about as much
 * as the server's work on Fastify, so a fresh-key workload is compared with
 * an undecorated one that makes the generator do the same); `passthrough` a
 * route whose only interceptor returns `next.handle()` (what Nest's
 * interceptor machinery alone costs, a diagnostic).
 */
type RequestKind = 'plain' | 'plain-fresh' | 'passthrough' | 'fresh' | 'replay';

interface WorkloadSpec {
  app: AppKind;
  request: RequestKind;
}

/**
 * Three application processes: the PostgreSQL store with the replay cache
 * off; the same store with the cache on; the in-memory store (cache off, so
 * its replays are uncached). Each process's own undecorated figures are the
 * baselines of its other workloads: the fresh-key one for fresh keys, the
 * fixed-key one for everything else.
 */
export const WORKLOADS: Record<HttpWorkload, WorkloadSpec> = {
  undecorated: { app: 'postgres', request: 'plain' },
  'undecorated, fresh key each': { app: 'postgres', request: 'plain-fresh' },
  'fresh keys': { app: 'postgres', request: 'fresh' },
  replay: { app: 'postgres', request: 'replay' },
  'undecorated, cache process': { app: 'cache', request: 'plain' },
  'replay, cache on': { app: 'cache', request: 'replay' },
  'undecorated, memory process': { app: 'memory', request: 'plain' },
  'undecorated, fresh key each, memory process': { app: 'memory', request: 'plain-fresh' },
  'pass-through interceptor, memory process': { app: 'memory', request: 'passthrough' },
  'fresh keys, memory store': { app: 'memory', request: 'fresh' },
  'replay, memory store': { app: 'memory', request: 'replay' },
};
export const HTTP_WORKLOADS = Object.keys(WORKLOADS) as HttpWorkload[];

/** True for the undecorated workloads (the baselines). */
export function isBaseline(workload: HttpWorkload): boolean {
  const request = WORKLOADS[workload].request;
  return request === 'plain' || request === 'plain-fresh';
}

/** The undecorated workload on the same process with the same kind of requests: the baseline of a ratio. */
export function baselineOf(workload: HttpWorkload): HttpWorkload {
  const { app, request } = WORKLOADS[workload];
  if (isBaseline(workload)) return workload;
  const wanted = request === 'fresh' ? 'plain-fresh' : 'plain';
  return HTTP_WORKLOADS.find((w) => WORKLOADS[w].app === app && WORKLOADS[w].request === wanted)!;
}

/** The process's undecorated workload with the fixed key (the baseline every ratio used before fresh-key baselines). */
export function plainBaselineOf(workload: HttpWorkload): HttpWorkload {
  const app = WORKLOADS[workload].app;
  return HTTP_WORKLOADS.find((w) => WORKLOADS[w].app === app && WORKLOADS[w].request === 'plain')!;
}

export interface AppProcess {
  url: string;
  /** The process id (its CPU time can be read from /proc: bench/lib/cpu.ts). */
  pid: number;
  /** CPU time (user + system, µs) the process has used so far. */
  cpuMicros(): Promise<number>;
  /** The store's round trips so far, counted in the process's driver (bench/lib/driver-count.ts). */
  roundTrips(): Promise<number>;
  /** Sends `{ type }` over IPC and resolves with the first answer carrying `field`. */
  ask<T>(type: string, field: string): Promise<T>;
  stop(): Promise<void>;
}

/** The store of an application process that has one (every process but the in-memory one). */
export type DatabaseStore = 'postgres' | 'redis' | 'mariadb';

export interface AppOptions {
  adapter: Adapter;
  /**
   * Default `postgres`: TypeOrmIdempotencyStore on `databaseUrl` (schema
   * `schema`); `mariadb`: the same store on a `mariadb` DataSource at
   * `databaseUrl` (table `schema`); `redis`: RedisIdempotencyStore on the
   * server at `databaseUrl` (key prefix `schema`); `memory`: InMemoryIdempotencyStore.
   */
  store?: DatabaseStore | 'memory' | PeerStore;
  databaseUrl: string;
  schema: string;
  poolSize?: number;
  /** Turns on the module's local replay cache with this many entries. */
  cacheMaxEntries?: number;
  /** The Redis store's client (bench/http/app.ts BENCH_REDIS_CLIENT); default node-redis, whatever the environment says. */
  redisClient?: 'node-redis' | 'ioredis' | 'ioredis-pipelined';
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
      BENCH_REDIS_CLIENT: options.redisClient ?? 'node-redis',
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
  const ask = <T>(type: string, field: string) =>
    new Promise<T>((resolve) => {
      const onMessage = (answer: Record<string, unknown>) => {
        if (answer && field in answer) {
          child.off('message', onMessage);
          resolve(answer as T);
        }
      };
      child.on('message', onMessage);
      child.send({ type });
    });
  return {
    url: `http://127.0.0.1:${message.port}`,
    pid: child.pid!,
    ask,
    cpuMicros: async () => (await ask<{ cpuMicros: number }>('cpu', 'cpuMicros')).cpuMicros,
    roundTrips: async () => (await ask<{ roundTrips: number }>('trips', 'roundTrips')).roundTrips,
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
  /** Requests answered in all. */
  requests: number;
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
  const fixedKey = { ...post.headers, 'idempotency-key': replayKey };
  switch (WORKLOADS[workload].request) {
    case 'plain':
      return { ...post, path: '/plain', headers: fixedKey };
    case 'plain-fresh':
      return { ...withKeys(() => randomUUID()), path: '/plain' };
    case 'passthrough':
      return { ...post, path: '/passthrough', headers: fixedKey };
    case 'replay':
      return { ...post, headers: fixedKey };
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
          requests: result.requests.total,
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
  /** The same against the fixed-key undecorated workload (differs from `ratio` for fresh keys only). */
  plainRatio: number;
  /** The application process's CPU time per request (user + system, µs): median over the rounds. */
  cpuMicros: number;
  /**
   * The baseline's CPU per request divided by this workload's, round by
   * round; the median. What the ratio would be if the process had the CPU to
   * itself (the load generator and other work on the machine aside).
   */
  cpuRatio: number;
  /** Median req/s divided by the first process's undecorated median instead. */
  ratioToFirst: number;
  /** The store's round trips per request (counted in the application's driver): the rounds' range. */
  roundTrips: number[];
  /** The store's server CPU per request (µs; `serverPids` of the comparison), median over the rounds. */
  serverMicros?: number;
  failures: number;
  runs: number[];
}

export interface HttpComparisonOptions {
  adapter: Adapter;
  /** The store of the processes that are not the in-memory one (default `postgres`); see AppOptions. */
  store?: DatabaseStore;
  databaseUrl: string;
  schema: string;
  rounds: number;
  seconds: number;
  connections: number;
  cacheMaxEntries: number;
  /** The store server's processes (Redis, MariaDB on this machine): their CPU per request is reported. */
  serverPids?: number[];
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
  for (const w of [...wanted]) {
    wanted.add(baselineOf(w));
    wanted.add(plainBaselineOf(w));
  }
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
        store: kind === 'memory' ? 'memory' : (options.store ?? 'postgres'),
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
        workloads.map((w) => [
          w,
          async () => {
            const app = appOf(w);
            const [before, tripsBefore] = [await app.cpuMicros(), await app.roundTrips()];
            const server0 = cpuUsOf(options.serverPids ?? []);
            const sample = await runLoad(app.url, w, loadOf(w, options.seconds));
            const server1 = cpuUsOf(options.serverPids ?? []);
            const cpu = (await app.cpuMicros()) - before;
            const trips = (await app.roundTrips()) - tripsBefore;
            const requests = Math.max(1, sample.requests);
            return {
              ...sample,
              cpuPerRequest: cpu / requests,
              tripsPerRequest: trips / requests,
              serverPerRequest:
                server0 === undefined || server1 === undefined
                  ? undefined
                  : (server1 - server0) / requests,
            };
          },
        ]),
      ),
      (round, name) =>
        name === workloads[0] &&
        options.log?.(`${options.adapter}: round ${round + 1}/${options.rounds}`),
    );
    const base = median(samples[workloads[0]].map((s) => s.rps));
    return workloads.map((workload) => {
      const s = samples[workload];
      const rps = median(s.map((x) => x.rps));
      const baseline = samples[baselineOf(workload)];
      const paired = pairedRatios(
        s.map((x) => x.rps),
        baseline.map((x) => x.rps),
      );
      const plain = pairedRatios(
        s.map((x) => x.rps),
        samples[plainBaselineOf(workload)].map((x) => x.rps),
      );
      // CPU: the baseline's per request over this one's, so that higher is better as for req/s.
      const cpu = pairedRatios(
        baseline.map((x) => x.cpuPerRequest),
        s.map((x) => x.cpuPerRequest),
      );
      return {
        adapter: options.adapter,
        workload,
        rps,
        p50: median(s.map((x) => x.p50)),
        p99: median(s.map((x) => x.p99)),
        ratio: paired.median,
        ratios: paired.each,
        plainRatio: plain.median,
        cpuMicros: median(s.map((x) => x.cpuPerRequest)),
        cpuRatio: cpu.median,
        ratioToFirst: rps / base,
        roundTrips: s.map((x) => x.tripsPerRequest),
        serverMicros: s.every((x) => x.serverPerRequest !== undefined)
          ? median(s.map((x) => x.serverPerRequest!))
          : undefined,
        failures: s.reduce((n, x) => n + x.errors + x.non2xx, 0),
        runs: s.map((x) => x.rps),
      };
    });
  } finally {
    await Promise.all(Object.values(apps).map((app) => app.stop()));
  }
}
