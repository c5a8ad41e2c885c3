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
export type HttpWorkload =
  'undecorated' | 'fresh keys' | 'replay' | 'undecorated, cache process' | 'replay, cache on';
/** `mixed`: replays of one key, with every tenth request a fresh key (a first execution). */
export type LoadWorkload = HttpWorkload | 'mixed';
/**
 * The first three run on one application process (replay cache off); the last
 * two on a second process started with the cache on, whose own undecorated
 * figure is the baseline for its cached replays.
 */
export const HTTP_WORKLOADS: HttpWorkload[] = [
  'undecorated',
  'fresh keys',
  'replay',
  'undecorated, cache process',
  'replay, cache on',
];
const ON_CACHE_PROCESS = new Set<HttpWorkload>(['undecorated, cache process', 'replay, cache on']);

export interface AppProcess {
  url: string;
  /** Sends `{ type }` over IPC and resolves with the first answer carrying `field`. */
  ask<T>(type: string, field: string): Promise<T>;
  stop(): Promise<void>;
}

export interface AppOptions {
  adapter: Adapter;
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
      DATABASE_URL: options.databaseUrl,
      BENCH_SCHEMA: options.schema,
      POOL_SIZE: String(options.poolSize ?? 32),
      BENCH_CACHE_MAX_ENTRIES: String(options.cacheMaxEntries ?? 0),
    },
    execArgv: [...(options.exposeGc ? ['--expose-gc'] : []), '-r', '@swc-node/register'],
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
  switch (workload) {
    case 'undecorated':
    case 'undecorated, cache process':
      return { ...post, path: '/plain' };
    case 'replay':
    case 'replay, cache on':
      return { ...post, headers: { ...post.headers, 'idempotency-key': replayKey } };
    case 'fresh keys':
      return withKeys(() => randomUUID());
    case 'mixed': {
      let sent = 0;
      return withKeys(() => (sent++ % 10 === 0 ? randomUUID() : replayKey));
    }
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
   * Req/s divided by the undecorated handler's req/s on the same process (for
   * "replay, cache on": the cache process's own), round by round; the median.
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
  log?: (line: string) => void;
}

/**
 * Two application processes (replay cache off, and on with `cacheMaxEntries`);
 * the workloads alternate within each round; medians and ratios to the
 * undecorated handler on the same process.
 */
export async function compareHttp(options: HttpComparisonOptions): Promise<HttpRow[]> {
  const common = {
    adapter: options.adapter,
    databaseUrl: options.databaseUrl,
    schema: options.schema,
  };
  const plain = await startApp(common);
  const cached = await startApp({ ...common, cacheMaxEntries: options.cacheMaxEntries }).catch(
    async (error) => {
      await plain.stop();
      throw error;
    },
  );
  try {
    const replayKey = await completeReplayKey(plain.url);
    const load = { connections: options.connections, seconds: options.seconds, replayKey };
    const urlOf = (workload: HttpWorkload) =>
      ON_CACHE_PROCESS.has(workload) ? cached.url : plain.url;
    // Warm-up: JIT, pools and (for the cache process) the cache entry itself.
    const warm = { ...load, seconds: Math.min(2, options.seconds) };
    for (const workload of HTTP_WORKLOADS) await runLoad(urlOf(workload), workload, warm);
    const samples = await alternate(
      options.rounds,
      Object.fromEntries(
        HTTP_WORKLOADS.map((workload) => [
          workload,
          () => runLoad(urlOf(workload), workload, load),
        ]),
      ),
      (round, name) =>
        name === HTTP_WORKLOADS[0] &&
        options.log?.(`${options.adapter}: round ${round + 1}/${options.rounds}`),
    );
    const base = median(samples['undecorated'].map((s) => s.rps));
    return HTTP_WORKLOADS.map((workload) => {
      const s = samples[workload];
      const rps = median(s.map((x) => x.rps));
      const baseline = ON_CACHE_PROCESS.has(workload)
        ? 'undecorated, cache process'
        : 'undecorated';
      const paired = pairedRatios(
        s.map((x) => x.rps),
        samples[baseline].map((x) => x.rps),
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
    await Promise.all([plain.stop(), cached.stop()]);
  }
}
