/**
 * `npm run bench:http`: what @Idempotent costs over HTTP. The application runs
 * in its own processes (PostgreSQL store, the same with the replay cache on,
 * the in-memory store); autocannon generates the load from this one. Per
 * adapter, the workloads alternate (A/B/C/…, A/B/C/…) so ratios hold on a noisy
 * machine; each figure is the median over the rounds, each ratio the median of
 * the rounds' ratios to the undecorated handler on the same process.
 *
 * Tunables (environment): BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CACHE_ENTRIES (10000),
 * BENCH_HTTP_ADAPTERS (express,fastify), BENCH_HTTP_WORKLOADS (all; names separated by ';', as the table
 * spells them, e.g. 'fresh keys, memory store;replay, memory store'),
 * BENCH_RESULTS_DIR (where RESULTS-http.md goes; default bench/: set it for shortened runs).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  Adapter,
  baselineOf,
  compareHttp,
  HTTP_WORKLOADS,
  HttpRow,
  HttpWorkload,
  isBaseline,
  plainBaselineOf,
} from './lib/http';
import { openDataSource, serverVersion, startServer } from './lib/postgres';
import { resultsPath } from './lib/report';
import { envNumber } from './lib/stats';
import { HTTP_TARGETS } from './sections/http';

const ROUNDS = envNumber('BENCH_ROUNDS', 3);
const SECONDS = envNumber('BENCH_SECONDS', 5);
const CACHE_ENTRIES = envNumber('BENCH_CACHE_ENTRIES', 10_000);
const CONNECTIONS = 32;
const ADAPTERS = (process.env.BENCH_HTTP_ADAPTERS ?? 'express,fastify')
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean) as Adapter[];
const WORKLOADS = process.env.BENCH_HTTP_WORKLOADS
  ? (process.env.BENCH_HTTP_WORKLOADS.split(';').map((s) => s.trim()) as HttpWorkload[])
  : HTTP_WORKLOADS;
for (const a of ADAPTERS)
  if (a !== 'express' && a !== 'fastify') throw new Error(`BENCH_HTTP_ADAPTERS: unknown "${a}"`);
for (const w of WORKLOADS)
  if (!HTTP_WORKLOADS.includes(w)) throw new Error(`BENCH_HTTP_WORKLOADS: unknown "${w}"`);

async function main() {
  const server = await startServer();
  const schema = `bench_http_${randomBytes(4).toString('hex')}`;
  const setup = await openDataSource(server.url, 'idem-bench-setup', 2);
  const schemaStore = new TypeOrmIdempotencyStore(setup, { schema, ensureSchema: true });
  await schemaStore.init();
  await schemaStore.close();
  const version = await serverVersion(setup);

  const results: HttpRow[] = [];
  try {
    for (const adapter of ADAPTERS) {
      results.push(
        ...(await compareHttp({
          adapter,
          databaseUrl: server.url,
          schema,
          rounds: ROUNDS,
          seconds: SECONDS,
          connections: CONNECTIONS,
          cacheMaxEntries: CACHE_ENTRIES,
          workloads: WORKLOADS,
          log: (line) => process.stderr.write(`${line}\n`),
        })),
      );
    }
  } finally {
    await setup.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await setup.destroy();
    await server.stop();
  }

  const rows = results.map((r) => {
    const target = HTTP_TARGETS[r.workload];
    const baseline = isBaseline(r.workload);
    const againstPlain =
      baselineOf(r.workload) === plainBaselineOf(r.workload)
        ? ''
        : `; ${r.plainRatio.toFixed(2)} against the fixed-key one`;
    return [
      r.adapter,
      r.workload,
      r.rps.toFixed(0),
      `${r.p50} ms`,
      `${r.p99} ms`,
      r.cpuMicros.toFixed(1),
      baseline
        ? '1'
        : `${r.ratio.toFixed(2)} (${r.ratios.map((x) => x.toFixed(2)).join(' / ')}${againstPlain})`,
      baseline ? '1' : r.cpuRatio.toFixed(2),
      target === undefined ? '' : `≥ ${target.toFixed(2)}: ${r.ratio >= target ? 'met' : 'missed'}`,
      String(r.failures),
    ];
  });
  const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}, Node ${process.version}, PostgreSQL ${version}${server.external ? '' : ' (embedded, default settings)'}`;
  const header = [
    'adapter',
    'workload',
    'req/s (median)',
    'p50',
    'p99',
    'app CPU µs/request (median)',
    'ratio to undecorated, same process (rounds)',
    'CPU ratio',
    'target',
    'errors + non-2xx',
  ];
  const table = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...table.map((r) => r[i].length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  const markdown = [
    '# HTTP benchmark (`npm run bench:http`)',
    '',
    `Machine: ${machine}.`,
    '',
    `${CONNECTIONS} connections, POST with a JSON body, a trivial handler (no database work of its own); ${ROUNDS} rounds of ${SECONDS} s per workload, the workloads alternating within each round; req/s, p50 and p99 are medians over the rounds, and a ratio is the median of the rounds' ratios (the workload's req/s ÷ the undecorated handler's on the same process in the same round). "fresh keys" is a first execution per request (acquire + complete: two PostgreSQL round trips), compared with "undecorated, fresh key each" (the undecorated route sent the same requests: a new Idempotency-Key each, which autocannon rebuilds per request at about the cost of the server's work on Fastify; the figure against the fixed-key undecorated workload follows in the same cell); "replay" repeats one completed key (one round trip), compared with "undecorated" (the same fixed key header, ignored); "app CPU" is the application process's user + system time per request (process.cpuUsage() around each run), and "CPU ratio" the baseline's CPU per request ÷ the workload's (median of the rounds), what the ratio would be if the application had its core to itself; "undecorated, cache process" and "replay, cache on" run against a second application process started with the module option \`cache: { maxEntries: ${CACHE_ENTRIES} }\` (a cached replay makes no round trip); their ratio is to that process's own undecorated figure. "undecorated, memory process", "pass-through interceptor, memory process" (a route whose only interceptor returns next.handle(): what Nest's interceptor machinery costs any interceptor, a diagnostic), "fresh keys, memory store" and "replay, memory store" run against a third process on \`InMemoryIdempotencyStore\` with the cache off (no database at all: the library's own cost per request; its replays are uncached). The applications run in their own processes, autocannon in this one.`,
    '',
    line(header),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...rows.map(line),
    '',
  ].join('\n');
  console.log(markdown);
  const out = resultsPath('RESULTS-http.md');
  fs.writeFileSync(out, markdown);
  console.log(`written to ${out}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
