/**
 * `npm run bench:http`: the library's own CPU per request over HTTP (issue 23),
 * against the pass-through interceptor (Nest's price for any interceptor) and
 * the nearest peer, node-idempotency (bench/peer, installed there on first
 * use). Per adapter (Fastify, Express), each target's application runs in its
 * own process; autocannon loads it from this one, fresh keys and replays; the
 * targets alternate round by round. CPU per request is the application
 * process's user + system time (/proc/<pid>/stat) over the requests it
 * answered; "over the pass-through" is the difference to the pass-through
 * interceptor's in the same round, median over the rounds.
 *
 * Tunables (environment): BENCH_ROUNDS (5), BENCH_SECONDS (3), BENCH_QUICK=1 (5 rounds of 1 s: for
 * development), BENCH_HTTP_ADAPTERS (fastify,express), BENCH_CPU_TARGETS (all; names separated by ';',
 * as the table spells them), IDEMPOTENCY_BENCH_PG_URL (else embedded PostgreSQL),
 * IDEMPOTENCY_BENCH_REDIS_URL (127.0.0.1:6379), BENCH_RESULTS_DIR (where RESULTS-http.md goes; default
 * bench/: set it for shortened runs).
 */
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  ALL_CPU_TARGETS,
  compareCpu,
  cpuMethod,
  cpuTables,
  CPU_TARGETS,
  CpuRow,
  CpuTarget,
} from './lib/cpu-per-request';
import { Adapter } from './lib/http';
import { openDataSource, serverVersion, startServer } from './lib/postgres';
import { resultsPath, writeMarkdown } from './lib/report';
import {
  connectRedis,
  deleteRedisPrefix,
  REDIS_URL,
  redisServerInfo,
  scratchPrefix,
} from './lib/servers';
import { envNumber } from './lib/stats';
import { ensurePeerInstalled } from './peer/load';

const QUICK = process.env.BENCH_QUICK === '1';
const ROUNDS = envNumber('BENCH_ROUNDS', 5);
const SECONDS = envNumber('BENCH_SECONDS', QUICK ? 1 : 3);
const WARM_SECONDS = QUICK ? 1 : 2;
const CONNECTIONS = 32;
const ADAPTERS = (process.env.BENCH_HTTP_ADAPTERS ?? 'fastify,express')
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean) as Adapter[];
const TARGETS = process.env.BENCH_CPU_TARGETS
  ? (process.env.BENCH_CPU_TARGETS.split(';').map((s) => s.trim()) as CpuTarget[])
  : ALL_CPU_TARGETS;
for (const a of ADAPTERS)
  if (a !== 'express' && a !== 'fastify') throw new Error(`BENCH_HTTP_ADAPTERS: unknown "${a}"`);
for (const t of TARGETS)
  if (!(t in CPU_TARGETS)) throw new Error(`BENCH_CPU_TARGETS: unknown "${t}"`);

const log = (line: string) => process.stderr.write(`${line}\n`);
const uses = (app: string) => TARGETS.some((t) => CPU_TARGETS[t].app === app);

async function main() {
  if (uses('peer-memory') || uses('peer-redis')) ensurePeerInstalled(log);
  const usesRedis = uses('redis') || uses('peer-redis');
  const redis = usesRedis ? await connectRedis() : undefined;
  const redisVersion = redis ? (await redisServerInfo(redis)).version : undefined;
  const prefixes = { redis: scratchPrefix('cpu'), peer: scratchPrefix('cpu-peer') };
  const pg = uses('postgres') ? await startServer() : undefined;
  const schema = `bench_cpu_${randomBytes(4).toString('hex')}`;
  const setup = pg ? await openDataSource(pg.url, 'idem-bench-setup', 2) : undefined;
  if (setup) {
    const store = new TypeOrmIdempotencyStore(setup, { schema, ensureSchema: true });
    await store.init();
    await store.close();
  }
  const pgVersion = setup ? await serverVersion(setup) : undefined;
  const rows: CpuRow[] = [];
  try {
    for (const adapter of ADAPTERS)
      rows.push(
        ...(await compareCpu({
          adapter,
          targets: TARGETS,
          rounds: ROUNDS,
          seconds: SECONDS,
          warmSeconds: WARM_SECONDS,
          connections: CONNECTIONS,
          stores: {
            postgres: pg && { url: pg.url, scope: schema },
            redis: { url: REDIS_URL, scope: prefixes.redis },
            'peer-redis': { url: REDIS_URL, scope: prefixes.peer },
          },
          log,
        })),
      );
  } finally {
    if (redis) {
      for (const prefix of Object.values(prefixes)) await deleteRedisPrefix(redis, prefix);
      redis.destroy();
    }
    if (setup) {
      await setup.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await setup.destroy();
    }
    await pg?.stop();
  }
  await report(rows, { pgVersion, redisVersion, external: pg?.external });
}

async function report(
  rows: CpuRow[],
  servers: { pgVersion?: string; redisVersion?: string; external?: boolean },
) {
  const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, Node ${process.version}${servers.pgVersion ? `, PostgreSQL ${servers.pgVersion}${servers.external ? '' : ' (embedded)'}` : ''}${servers.redisVersion ? `, Redis ${servers.redisVersion}` : ''}`;
  const markdown = [
    '# CPU per request over HTTP (`npm run bench:http`)',
    '',
    `Machine: ${machine}; load average (1 min) ${os.loadavg()[0].toFixed(2)} at the end.`,
    '',
    cpuMethod({
      rounds: ROUNDS,
      seconds: SECONDS,
      warmSeconds: WARM_SECONDS,
      connections: CONNECTIONS,
    }),
    '',
    ...cpuTables(rows, ADAPTERS, TARGETS),
  ].join('\n');
  const out = resultsPath('RESULTS-http.md');
  await writeMarkdown(out, markdown);
  console.log(markdown);
  console.log(`written to ${out}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
