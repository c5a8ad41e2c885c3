/**
 * The library's own CPU per request over HTTP, against Nest's pass-through
 * interceptor and the nearest peer (node-idempotency): each target's
 * application process's CPU time (from /proc) divided by the requests it
 * answered, fresh keys and replays, in alternating rounds.
 */
import autocannon from 'autocannon';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { PeerStore } from '../peer/load';
import { cpuUsOf } from './cpu';
import { Adapter, AppProcess, DatabaseStore, startApp } from './http';
import { mdTable } from './report';
import { fmtRange, median } from './stats';
import { alternate } from './throughput';

/** The application processes: this library on each store, the peer on each of its adapters. */
export type AppName = 'memory' | DatabaseStore | PeerStore;

export const CPU_TARGETS = {
  undecorated: { app: 'memory', path: '/plain' },
  'one pass-through interceptor': { app: 'memory', path: '/passthrough' },
  'node-idempotency, in memory': { app: 'peer-memory', path: '/idempotent' },
  'node-idempotency, Redis': { app: 'peer-redis', path: '/idempotent' },
  'this library, in memory': { app: 'memory', path: '/idempotent' },
  'this library, Redis': { app: 'redis', path: '/idempotent' },
  'this library, PostgreSQL': { app: 'postgres', path: '/idempotent' },
} as const satisfies Record<string, { app: AppName; path: string }>;
export type CpuTarget = keyof typeof CPU_TARGETS;
export const ALL_CPU_TARGETS = Object.keys(CPU_TARGETS) as CpuTarget[];
/** The ceiling every other target is measured over. */
export const PASS_THROUGH: CpuTarget = 'one pass-through interceptor';

/** `fresh`: a new Idempotency-Key per request (a first execution); `replay`: one completed key repeated. */
export type Keys = 'fresh' | 'replay';

export interface CpuSample {
  /** The application process's CPU µs (user + system, /proc) per answered request. */
  cpuUs: number;
  rps: number;
  failures: number;
  /** The 1-minute load average when the run ended. */
  load: number;
}

export interface CpuRow {
  adapter: Adapter;
  target: CpuTarget;
  keys: Keys;
  /** One sample per round, in order. */
  samples: CpuSample[];
  /** This target's CPU per request minus the pass-through's in the same round, per round. */
  overPassThrough: number[];
}

export interface CpuComparisonOptions {
  adapter: Adapter;
  targets: CpuTarget[];
  rounds: number;
  seconds: number;
  warmSeconds: number;
  connections: number;
  /** Where each store lives: its server's URL and this run's schema, table or key prefix. */
  stores: Partial<Record<AppName, { url: string; scope: string }>>;
  log?: (line: string) => void;
}

/** POSTs one key twice and checks the second answer is the first one's replay (same run counter). */
async function seedReplayKey(url: string): Promise<string> {
  const key = randomUUID();
  const send = async () => {
    const response = await fetch(`${url}/idempotent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ n: 1 }),
    });
    if (response.status !== 200) throw new Error(`seeding the replay key: HTTP ${response.status}`);
    return (await response.json()) as { run: number };
  };
  const first = await send();
  const again = await send();
  if (again.run !== first.run)
    throw new Error(`${url}: the second request with one key ran the handler again`);
  return key;
}

function load(
  url: string,
  path: string,
  keys: Keys,
  replayKey: string,
  options: { connections: number; seconds: number },
): Promise<autocannon.Result> {
  const headers = { 'content-type': 'application/json', 'idempotency-key': replayKey };
  const request: autocannon.Request = {
    method: 'POST',
    path,
    headers,
    body: JSON.stringify({ n: 1 }),
    ...(keys === 'fresh'
      ? {
          setupRequest: (req: autocannon.Request) => ({
            ...req,
            headers: { ...req.headers, 'idempotency-key': randomUUID() },
          }),
        }
      : {}),
  };
  return new Promise((resolve, reject) =>
    autocannon(
      {
        url,
        connections: options.connections,
        duration: options.seconds,
        requests: [request],
      },
      (error, result) => (error ? reject(error) : resolve(result)),
    ),
  );
}

/** Starts the targets' processes, warms each run, then `rounds` rounds of every target × keys in turn. */
export async function compareCpu(options: CpuComparisonOptions): Promise<CpuRow[]> {
  const targets = options.targets.includes(PASS_THROUGH)
    ? options.targets
    : [PASS_THROUGH, ...options.targets];
  const appNames = [...new Set(targets.map((t) => CPU_TARGETS[t].app))];
  const apps: Partial<Record<AppName, AppProcess>> = {};
  try {
    for (const name of appNames) {
      const store = options.stores[name];
      apps[name] = await startApp({
        adapter: options.adapter,
        store: name,
        databaseUrl: store?.url ?? '',
        schema: store?.scope ?? '',
      });
    }
    const replayKeys: Partial<Record<AppName, string>> = {};
    for (const name of appNames) replayKeys[name] = await seedReplayKey(apps[name]!.url);
    const run = async (target: CpuTarget, keys: Keys, seconds: number): Promise<CpuSample> => {
      const { app: name, path } = CPU_TARGETS[target];
      const app = apps[name]!;
      const before = cpuUsOf([app.pid]);
      const result = await load(app.url, path, keys, replayKeys[name]!, {
        connections: options.connections,
        seconds,
      });
      const after = cpuUsOf([app.pid]);
      if (before === undefined || after === undefined)
        throw new Error(`no /proc/${app.pid}/stat: the CPU per request needs Linux's /proc`);
      const requests = Math.max(1, result.requests.total);
      return {
        cpuUs: (after - before) / requests,
        rps: result.requests.average,
        failures: result.errors + result.timeouts + result.non2xx,
        load: os.loadavg()[0],
      };
    };
    const variants = targets.flatMap((t) =>
      (['fresh', 'replay'] as const).map((k) => [t, k] as const),
    );
    const name = ([t, k]: readonly [CpuTarget, Keys]) => `${t}|${k}`;
    for (const v of variants) await run(v[0], v[1], options.warmSeconds);
    const samples = await alternate(
      options.rounds,
      Object.fromEntries(variants.map((v) => [name(v), () => run(v[0], v[1], options.seconds)])),
      (round, n) =>
        n === name(variants[0]) &&
        options.log?.(`${options.adapter}: round ${round + 1}/${options.rounds}`),
    );
    return variants.map(([target, keys]) => {
      const own = samples[name([target, keys])];
      const pass = samples[name([PASS_THROUGH, keys])];
      return {
        adapter: options.adapter,
        target,
        keys,
        samples: own,
        overPassThrough: own.map((s, i) => s.cpuUs - pass[i].cpuUs),
      };
    });
  } finally {
    await Promise.all(Object.values(apps).map((app) => app.stop()));
  }
}

/** "101 (97–108)": the median and the rounds' range, rounded to the microsecond. */
export function spread(xs: number[], signed = false): string {
  const f = (x: number) => `${signed && x >= 0 ? '+' : ''}${x.toFixed(0)}`;
  return `${f(median(xs))} (${f(Math.min(...xs))} to ${f(Math.max(...xs))})`;
}

/** How the comparison was run, as a paragraph of a results file. */
export function cpuMethod(o: {
  rounds: number;
  seconds: number;
  warmSeconds: number;
  connections: number;
}): string {
  return `${o.connections} connections, POST with a small JSON body to a trivial handler; ${o.rounds} rounds of ${o.seconds} s per target and kind of key, every target alternating within each round (a ${o.warmSeconds} s warm-up of each first). CPU µs/request: the application process's user + system time from /proc over the requests it answered, the median of the rounds (lowest to highest in brackets). "over the pass-through": the target's CPU per request minus that of the route whose only interceptor returns next.handle(), in the same round; the median of the rounds' differences (their range in brackets). Fresh keys: a new Idempotency-Key per request (a first execution); replays: one key completed before the rounds, repeated. node-idempotency is \`@node-idempotency/nestjs\` 1.0.4 with its in-memory and Redis (node-redis 4) adapters, run on this repository's Nest (bench/peer). "load": the 1-minute load average after each run, lowest to highest: the machine is shared, so read the figures beside it.`;
}

/** One table per adapter: each target's CPU per request, over the pass-through, req/s and load. */
export function cpuTables(rows: CpuRow[], adapters: Adapter[], targets: CpuTarget[]): string[] {
  const of = (adapter: Adapter, target: CpuTarget, keys: Keys) =>
    rows.find((r) => r.adapter === adapter && r.target === target && r.keys === keys)!;
  const cpu = (r: CpuRow) => spread(r.samples.map((s) => s.cpuUs));
  const over = (r: CpuRow) => (r.target === PASS_THROUGH ? '0' : spread(r.overPassThrough, true));
  const rps = (r: CpuRow) => median(r.samples.map((s) => s.rps)).toFixed(0);
  const loads = (r: CpuRow[]) =>
    fmtRange(
      r.flatMap((x) => x.samples.map((s) => s.load)),
      1,
    );
  const header = [
    'target',
    'fresh keys: CPU µs/request',
    'over the pass-through',
    'replays: CPU µs/request',
    'over the pass-through',
    'req/s fresh / replays',
    'errors + non-2xx',
    'load (1 min)',
  ];
  const out: string[] = [];
  for (const adapter of adapters) {
    const table = targets
      .filter((t) => rows.some((r) => r.adapter === adapter && r.target === t))
      .concat(targets.includes(PASS_THROUGH) ? [] : [PASS_THROUGH])
      .map((target) => {
        const [fresh, replay] = [of(adapter, target, 'fresh'), of(adapter, target, 'replay')];
        const failures = [fresh, replay]
          .flatMap((r) => r.samples)
          .reduce((n, s) => n + s.failures, 0);
        return [
          target,
          cpu(fresh),
          target === 'undecorated' ? '' : over(fresh),
          cpu(replay),
          target === 'undecorated' ? '' : over(replay),
          `${rps(fresh)} / ${rps(replay)}`,
          String(failures),
          loads([fresh, replay]),
        ];
      });
    out.push(
      `## ${adapter === 'fastify' ? 'Fastify' : 'Express'}`,
      '',
      ...mdTable(header, table),
      '',
    );
  }
  return out;
}
