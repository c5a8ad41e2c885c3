/**
 * A few targets of the cpu section, alone: for A/B work on one store.
 *
 *   node -r @swc-node/register bench/tools/cpu-compare.ts fastify 5 'this library, Redis' 'node-idempotency, Redis'
 *
 * Prints each target's median CPU µs per request over the pass-through
 * interceptor, and the rounds, for fresh keys and replays.
 */
import { ALL_CPU_TARGETS, compareCpu, CpuTarget } from '../lib/cpu-per-request';
import { Adapter } from '../lib/http';
import { connectRedis, deleteRedisPrefix, REDIS_URL, scratchPrefix } from '../lib/servers';
import { median } from '../lib/stats';

async function main() {
  const [adapter = 'fastify', rounds = '5', ...names] = process.argv.slice(2);
  const targets = names as CpuTarget[];
  for (const t of targets)
    if (!ALL_CPU_TARGETS.includes(t))
      throw new Error(`unknown target ${t}: ${ALL_CPU_TARGETS.join(', ')}`);
  const prefixes = { redis: scratchPrefix('cpu-ab'), peer: scratchPrefix('cpu-ab-peer') };
  try {
    const rows = await compareCpu({
      adapter: adapter as Adapter,
      targets,
      rounds: Number(rounds),
      seconds: Number(process.env.BENCH_SECONDS ?? 3),
      warmSeconds: 2,
      connections: 32,
      stores: {
        redis: { url: REDIS_URL, scope: prefixes.redis },
        'peer-redis': { url: REDIS_URL, scope: prefixes.peer },
      },
    });
    for (const row of rows)
      console.log(
        `${adapter} ${row.target} ${row.keys}: ${median(row.samples.map((s) => s.cpuUs)).toFixed(0)} µs, over +${median(row.overPassThrough).toFixed(0)} [${row.overPassThrough.map((x) => x.toFixed(0)).join(' ')}] ${median(row.samples.map((s) => s.rps)).toFixed(0)} req/s`,
      );
  } finally {
    const client = await connectRedis();
    for (const prefix of Object.values(prefixes)) await deleteRedisPrefix(client, prefix);
    client.destroy();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
