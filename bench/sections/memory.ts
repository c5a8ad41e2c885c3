/**
 * 5. Memory: resident memory of the decorated-handler application after
 * many requests, with a full GC forced before each reading. The default run
 * measures the PostgreSQL store; sections/redis.ts and sections/mariadb.ts run
 * the same measurement on the Redis and MySQL/MariaDB stores (redis-memory,
 * mariadb-memory).
 */
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { AppOptions, completeReplayKey, runLoad, startApp } from '../lib/http';
import { BenchContext, ResultRow, SectionContext, SectionResult, verdict } from './context';

const CONNECTIONS = 32;
const MiB = 2 ** 20;

interface Reading {
  requests: number;
  rss: number;
  heapUsed: number;
  external: number;
}

export async function memorySection(ctx: BenchContext): Promise<SectionResult> {
  const schema = ctx.schema('bench_memory');
  await new TypeOrmIdempotencyStore(ctx.admin, { schema, ensureSchema: true }).init();
  return measureMemory(ctx, {
    section: '5. Memory',
    storeName: 'PostgreSQL store',
    store: 'postgres',
    databaseUrl: ctx.url,
    schema,
  });
}

/** The application on one store, where it keeps its records (a schema, table or key prefix) made ready by the caller. */
export interface MemoryTarget {
  section: string;
  storeName: string;
  store: AppOptions['store'];
  databaseUrl: string;
  schema: string;
}

export async function measureMemory(
  ctx: SectionContext,
  target: MemoryTarget,
): Promise<SectionResult> {
  const { config } = ctx;
  const app = await startApp({
    adapter: config.memoryAdapter,
    store: target.store,
    databaseUrl: target.databaseUrl,
    schema: target.schema,
    exposeGc: true,
  });
  try {
    const replayKey = await completeReplayKey(app.url);
    const read = async (requests: number): Promise<Reading> => {
      const answer = await app.ask<{ memory: NodeJS.MemoryUsage; gc: boolean }>('memory', 'memory');
      if (!answer.gc) throw new Error('the app was not started with --expose-gc');
      return {
        requests,
        rss: answer.memory.rss,
        heapUsed: answer.memory.heapUsed,
        external: answer.memory.external,
      };
    };
    const total = config.memoryRequests;
    // Readings at 10,000 requests (the reference), then every quarter of the total.
    const first = Math.min(10_000, total);
    const checkpoints = [
      first,
      ...[1, 2, 3, 4].map((q) => Math.round((total * q) / 4)).filter((n) => n > first),
    ];
    // Warm-up outside the count: JIT, pools, the LISTEN connection.
    await runLoad(app.url, config.memoryWorkload, {
      connections: CONNECTIONS,
      amount: 2000,
      replayKey,
    });
    const readings: Reading[] = [await read(0)];
    let done = 0;
    let failures = 0;
    let seconds = 0;
    for (const checkpoint of checkpoints) {
      ctx.log(`${target.section}: ${done} → ${checkpoint} requests (${config.memoryWorkload})`);
      const started = Date.now();
      const sample = await runLoad(app.url, config.memoryWorkload, {
        connections: CONNECTIONS,
        amount: checkpoint - done,
        replayKey,
      });
      seconds += (Date.now() - started) / 1000;
      failures += sample.errors + sample.non2xx;
      done = checkpoint;
      readings.push(await read(done));
    }
    const at = (n: number) => readings.find((r) => r.requests === n)!;
    const reference = at(first);
    const last = at(total);
    const mib = (x: number) => `${(x / MiB).toFixed(1)} MiB`;
    const rssGrowth = last.rss - reference.rss;
    const heapGrowth = last.heapUsed - reference.heapUsed;
    // Noise: what the heap after a full GC moves by between readings on a
    // healthy process is well under a MiB; RSS moves more with the allocator.
    const flat = heapGrowth < 2 * MiB && rssGrowth < 16 * MiB;
    const workload =
      config.memoryWorkload === 'mixed'
        ? 'replays of one key, one request in ten a fresh key'
        : config.memoryWorkload;
    const rows: ResultRow[] = [
      {
        section: target.section,
        measurement: `RSS after GC, ${reference.requests.toLocaleString('en')} → ${last.requests.toLocaleString('en')} requests`,
        result: `${mib(reference.rss)} → ${mib(last.rss)} (${rssGrowth >= 0 ? '+' : ''}${mib(rssGrowth)})`,
        target: 'no growth beyond noise',
        verdict: verdict(flat),
        how: `${config.memoryAdapter}, ${target.storeName}, ${workload}; heap used after GC ${mib(reference.heapUsed)} → ${mib(last.heapUsed)} (${heapGrowth >= 0 ? '+' : ''}${mib(heapGrowth)}); all readings (requests: RSS / heap) ${readings
          .map(
            (r) => `${r.requests}: ${(r.rss / MiB).toFixed(1)} / ${(r.heapUsed / MiB).toFixed(1)}`,
          )
          .join(
            ', ',
          )}; ${(total / seconds).toFixed(0)} req/s${failures ? `; ${failures} errors or non-2xx` : ''}`,
      },
    ];
    return {
      rows,
      method: [
        `${target.section}: bench/http/app.ts (${config.memoryAdapter}, ${target.storeName}, replay cache off) started with \`--expose-gc\`; autocannon sends ${total.toLocaleString('en')} requests (${workload}) with ${CONNECTIONS} connections after a 2,000-request warm-up. At each reading the app runs \`global.gc()\` twice on an IPC message, then reports \`process.memoryUsage()\`. Verdict: heap used after GC grows < 2 MiB and RSS < 16 MiB between the first and last reading.`,
      ],
      notes: [
        `${target.section} (${target.storeName}): heap used after a full GC moved by ${mib(heapGrowth)} between ${reference.requests.toLocaleString('en')} and ${last.requests.toLocaleString('en')} requests, and RSS by ${mib(rssGrowth)} (RSS readings spread over ${mib(Math.max(...readings.map((r) => r.rss)) - Math.min(...readings.map((r) => r.rss)))} in all: the allocator returns freed pages to the system in its own time). ${flat ? `Nothing accumulates per request: the waiter ticket and operation timer of every acquire${config.memoryWorkload === 'replay' ? '' : ' and the heartbeat timer of every first execution'} are released.` : 'That is more than noise: something is retained per request; take a heap snapshot of the app to find it.'}`,
      ],
    };
  } finally {
    await app.stop();
  }
}
