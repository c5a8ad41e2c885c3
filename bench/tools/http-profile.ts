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
 */
import { Adapter, completeReplayKey, HttpWorkload, runLoad, startApp } from '../lib/http';

async function main() {
  const [adapter = 'fastify', workload = 'fresh keys, memory store', count = '40000'] =
    process.argv.slice(2);
  const amount = Number(count);
  const app = await startApp({
    adapter: adapter as Adapter,
    store: 'memory',
    databaseUrl: '',
    schema: '',
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
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
