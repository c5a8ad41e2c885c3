/**
 * 2. The library's own CPU per request over HTTP (issue 23): bench:http's
 * comparison (compareCpu) on Fastify and Express, with the pass-through
 * interceptor as the ceiling every target is measured over and
 * node-idempotency (in memory, Redis) as the peer in the same rounds.
 */
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  ALL_CPU_TARGETS,
  compareCpu,
  cpuMethod,
  cpuTables,
  CpuRow,
  CpuTarget,
  Keys,
} from '../lib/cpu-per-request';
import { Adapter } from '../lib/http';
import { resultsPath, writeMarkdown } from '../lib/report';
import { connectRedis, deleteRedisPrefix, REDIS_URL, scratchPrefix } from '../lib/servers';
import { median } from '../lib/stats';
import { ensurePeerInstalled } from '../peer/load';
import { BenchContext, ResultRow, SectionResult, verdict } from './context';

const CONNECTIONS = 32;
const ADAPTERS: Adapter[] = ['fastify', 'express'];
const SECTION = '2. CPU per request';
const KEYS: Record<Keys, string> = { fresh: 'fresh keys', replay: 'replays' };

export async function cpuSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  ensurePeerInstalled((line) => ctx.log(`cpu: ${line}`));
  const schema = ctx.schema('bench_cpu');
  const setup = new TypeOrmIdempotencyStore(ctx.admin, { schema, ensureSchema: true });
  await setup.init();
  await setup.close();
  const redis = await connectRedis().catch(() => undefined);
  const targets = redis
    ? ALL_CPU_TARGETS
    : ALL_CPU_TARGETS.filter((t) => t !== 'this library, Redis' && t !== 'node-idempotency, Redis');
  const prefixes = { redis: scratchPrefix('cpu'), peer: scratchPrefix('cpu-peer') };
  const rows: CpuRow[] = [];
  try {
    for (const adapter of ADAPTERS)
      rows.push(
        ...(await compareCpu({
          adapter,
          targets,
          rounds: config.httpRounds,
          seconds: config.httpSeconds,
          warmSeconds: 2,
          connections: CONNECTIONS,
          stores: {
            postgres: { url: ctx.url, scope: schema },
            redis: { url: REDIS_URL, scope: prefixes.redis },
            'peer-redis': { url: REDIS_URL, scope: prefixes.peer },
          },
          log: (line) => ctx.log(`cpu: ${line}`),
        })),
      );
  } finally {
    if (redis) {
      for (const prefix of Object.values(prefixes)) await deleteRedisPrefix(redis, prefix);
      redis.destroy();
    }
  }
  const method = cpuMethod({
    rounds: config.httpRounds,
    seconds: config.httpSeconds,
    warmSeconds: 2,
    connections: CONNECTIONS,
  });
  const tables = cpuTables(rows, ADAPTERS, targets);
  await writeMarkdown(
    resultsPath('RESULTS-http.md'),
    ['# CPU per request over HTTP (`npm run bench`, section cpu)', '', method, '', ...tables].join(
      '\n',
    ),
  );
  return {
    rows: ADAPTERS.flatMap((adapter) => verdicts(rows, adapter, targets)),
    method: [`CPU per request (section cpu; the whole table is in RESULTS-http.md): ${method}`],
    notes: [
      ...(redis
        ? []
        : [
            `The Redis targets did not run: no Redis answered at ${REDIS_URL} (start it as ../.library/env/machines/node-svc.md says).`,
          ]),
      ...tables.filter((line) => line.startsWith('|') || line.startsWith('## ')),
    ],
  };
}

/** The targets, per adapter and kind of key, from one run's rounds. */
function verdicts(rows: CpuRow[], adapter: Adapter, targets: CpuTarget[]): ResultRow[] {
  const of = (target: CpuTarget, keys: Keys) =>
    rows.find((r) => r.adapter === adapter && r.target === target && r.keys === keys);
  const out: ResultRow[] = [];
  for (const keys of ['fresh', 'replay'] as const) {
    const own = of('this library, in memory', keys);
    const peer = of('node-idempotency, in memory', keys);
    if (own && peer) {
      const [x, y] = [median(own.overPassThrough), median(peer.overPassThrough)];
      out.push({
        section: SECTION,
        measurement: `${adapter}, in memory, ${KEYS[keys]}: CPU over the pass-through`,
        result: `${signed(x)} µs`,
        target: `≤ node-idempotency's ${signed(y)} µs`,
        verdict: verdict(x <= y),
        how: `rounds: ${own.overPassThrough.map(signed).join(' / ')} µs; node-idempotency ${peer.overPassThrough.map(signed).join(' / ')} µs`,
      });
    }
  }
  if (targets.includes('this library, Redis'))
    for (const keys of ['fresh', 'replay'] as const) {
      const own = of('this library, Redis', keys)!;
      const peer = of('node-idempotency, Redis', keys)!;
      const cpu = (r: CpuRow) => median(r.samples.map((s) => s.cpuUs));
      const rps = (r: CpuRow) => median(r.samples.map((s) => s.rps));
      out.push({
        section: SECTION,
        measurement: `${adapter}, Redis, ${KEYS[keys]}: CPU per request and req/s`,
        result: `${cpu(own).toFixed(0)} µs, ${rps(own).toFixed(0)} req/s`,
        target: `≤ ${cpu(peer).toFixed(0)} µs and ≥ ${rps(peer).toFixed(0)} req/s (node-idempotency)`,
        verdict: verdict(cpu(own) <= cpu(peer) && rps(own) >= rps(peer)),
        how: `rounds: ${own.samples.map((s) => s.cpuUs.toFixed(0)).join(' / ')} µs; node-idempotency ${peer.samples.map((s) => s.cpuUs.toFixed(0)).join(' / ')} µs`,
      });
    }
  const pg = (keys: Keys) => of('this library, PostgreSQL', keys)!;
  out.push({
    section: SECTION,
    measurement: `${adapter}, PostgreSQL: CPU over the pass-through, fresh keys / replays`,
    result: `${signed(median(pg('fresh').overPassThrough))} / ${signed(median(pg('replay').overPassThrough))} µs`,
    target: '',
    verdict: '',
    how: 'the application process only; PostgreSQL runs on the same cores (section 1 measures the store against the minimum SQL)',
  });
  return out;
}

const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(0)}`;
