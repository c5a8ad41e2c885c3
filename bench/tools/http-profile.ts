/**
 * One HTTP workload against the in-memory application, for profiling:
 *
 *   BENCH_APP_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof' \
 *     node -r @swc-node/register bench/tools/http-profile.ts fastify 'fresh keys, memory store' 40000
 *
 * Warms up with a quarter of the requests, then sends the given number and
 * prints the requests answered in all (to divide a profile by) and the
 * application's CPU per request. Summarize the profile with
 * bench/tools/cpuprofile-summary.ts.
 *
 * BENCH_PROFILE_STORE=redis runs the application on the Redis store instead
 * (the machine's Redis, IDEMPOTENCY_BENCH_REDIS_URL; a scratch key prefix,
 * deleted afterwards), BENCH_PROFILE_STORE=mariadb on the MySQL/MariaDB store
 * (the machine's MariaDB, IDEMPOTENCY_BENCH_MYSQL_URL; a scratch table,
 * dropped afterwards), with the workloads 'fresh keys' and 'replay'.
 * BENCH_PROFILE_STORE=peer-redis or peer-memory runs node-idempotency
 * (bench/peer) instead, on Redis or in memory, with the same two workloads.
 * BENCH_REDIS_CLIENT=ioredis or ioredis-pipelined runs the Redis store on an
 * ioredis client (with enableAutoPipelining for the second) instead of node-redis.
 */
import fs from 'node:fs';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import type { PeerStore } from '../peer/load';
import {
  Adapter,
  AppOptions,
  completeReplayKey,
  HttpWorkload,
  runLoad,
  startApp,
} from '../lib/http';
import {
  connectRedis,
  deleteRedisPrefix,
  MYSQL_URL,
  openMysqlDataSource,
  REDIS_URL,
  scratchPrefix,
} from '../lib/servers';

async function main() {
  const [adapter = 'fastify', workload = 'fresh keys, memory store', count = '40000'] =
    process.argv.slice(2);
  const amount = Number(count);
  const redis = process.env.BENCH_PROFILE_STORE === 'redis';
  const mariadb = process.env.BENCH_PROFILE_STORE === 'mariadb';
  const peer = process.env.BENCH_PROFILE_STORE?.startsWith('peer-')
    ? (process.env.BENCH_PROFILE_STORE as PeerStore)
    : undefined;
  const prefix = scratchPrefix('profile');
  const table = `idem_bench_profile_${process.pid}`;
  const admin = mariadb ? await openMysqlDataSource('idem-bench-profile', 2) : undefined;
  if (admin) {
    const setup = new TypeOrmIdempotencyStore(admin, { table, ensureSchema: true });
    await setup.init();
    await setup.close();
  }
  const app = await startApp({
    adapter: adapter as Adapter,
    store: peer ?? (redis ? 'redis' : mariadb ? 'mariadb' : 'memory'),
    databaseUrl: redis || peer === 'peer-redis' ? REDIS_URL : mariadb ? MYSQL_URL : '',
    schema: redis || peer ? prefix : mariadb ? table : '',
    redisClient: process.env.BENCH_REDIS_CLIENT as AppOptions['redisClient'],
  });
  try {
    const replayKey = await completeReplayKey(app.url);
    const load = { connections: 32, replayKey };
    const warm = await runLoad(app.url, workload as HttpWorkload, {
      ...load,
      amount: Math.ceil(amount / 4),
    });
    type Cpu = { cpuMicros: number; systemMicros: number };
    const io = () => {
      const text = fs.readFileSync(`/proc/${app.pid}/io`, 'utf8');
      const field = (name: string) => Number(text.match(new RegExp(`^${name}: (\\d+)`, 'm'))?.[1]);
      return { reads: field('syscr'), writes: field('syscw') };
    };
    const ioBefore = io();
    const before = await app.ask<Cpu>('cpu', 'cpuMicros');
    const sample = await runLoad(app.url, workload as HttpWorkload, { ...load, amount });
    const after = await app.ask<Cpu>('cpu', 'cpuMicros');
    const ioAfter = io();
    const per = (x: number) => (x / sample.requests).toFixed(1);
    console.log(
      `${adapter}, ${workload}: ${sample.rps.toFixed(0)} req/s, app CPU ${per(after.cpuMicros - before.cpuMicros)} µs/request (system ${per(after.systemMicros - before.systemMicros)}); read/write system calls per request ${per(ioAfter.reads - ioBefore.reads)} / ${per(ioAfter.writes - ioBefore.writes)}; ${warm.requests + sample.requests + 1} requests in all`,
    );
  } finally {
    await app.stop();
    if (redis || peer === 'peer-redis') {
      const client = await connectRedis();
      await deleteRedisPrefix(client, prefix);
      client.destroy();
    }
    if (admin) {
      await admin.query(`DROP TABLE IF EXISTS \`${table}\``);
      await admin.destroy();
    }
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
