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
 * deleted afterwards), with the workloads 'fresh keys' and 'replay'.
 */
import { Adapter, completeReplayKey, HttpWorkload, runLoad, startApp } from '../lib/http';
import { connectRedis, deleteRedisPrefix, REDIS_URL, scratchPrefix } from '../lib/servers';

async function main() {
  const [adapter = 'fastify', workload = 'fresh keys, memory store', count = '40000'] =
    process.argv.slice(2);
  const amount = Number(count);
  const redis = process.env.BENCH_PROFILE_STORE === 'redis';
  const prefix = scratchPrefix('profile');
  const app = await startApp({
    adapter: adapter as Adapter,
    store: redis ? 'redis' : 'memory',
    databaseUrl: redis ? REDIS_URL : '',
    schema: redis ? prefix : '',
  });
  try {
    const replayKey = await completeReplayKey(app.url);
    const load = { connections: 32, replayKey };
    const warm = await runLoad(app.url, workload as HttpWorkload, {
      ...load,
      amount: Math.ceil(amount / 4),
    });
    const before = await app.cpuMicros();
    const sample = await runLoad(app.url, workload as HttpWorkload, { ...load, amount });
    const cpu = (await app.cpuMicros()) - before;
    console.log(
      `${adapter}, ${workload}: ${sample.rps.toFixed(0)} req/s, app CPU ${(cpu / sample.requests).toFixed(1)} µs/request; ${warm.requests + sample.requests + 1} requests in all`,
    );
  } finally {
    await app.stop();
    if (redis) {
      const admin = await connectRedis();
      await deleteRedisPrefix(admin, prefix);
      admin.destroy();
    }
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
