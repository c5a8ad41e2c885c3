/**
 * `npm run bench:http`: what @Idempotent costs over HTTP. The application runs
 * in its own process; autocannon generates the load from this one. Per adapter,
 * the workloads alternate (A/B/C/D/E, A/B/C/D/E, …) so ratios hold on a noisy
 * machine; each figure is the median over the rounds.
 *
 * Tunables (environment): BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CACHE_ENTRIES (10000).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { compareHttp, HttpRow } from './lib/http';
import { openDataSource, serverVersion, startServer } from './lib/postgres';
import { envNumber } from './lib/stats';

const ROUNDS = envNumber('BENCH_ROUNDS', 3);
const SECONDS = envNumber('BENCH_SECONDS', 5);
const CACHE_ENTRIES = envNumber('BENCH_CACHE_ENTRIES', 10_000);
const CONNECTIONS = 32;

async function main() {
  const server = await startServer();
  const schema = `bench_http_${randomBytes(4).toString('hex')}`;
  const setup = await openDataSource(server.url, 'idem-bench-setup', 2);
  await new TypeOrmIdempotencyStore(setup, { schema, ensureSchema: true }).init();
  const version = await serverVersion(setup);

  const results: HttpRow[] = [];
  try {
    for (const adapter of ['express', 'fastify'] as const) {
      results.push(
        ...(await compareHttp({
          adapter,
          databaseUrl: server.url,
          schema,
          rounds: ROUNDS,
          seconds: SECONDS,
          connections: CONNECTIONS,
          cacheMaxEntries: CACHE_ENTRIES,
          log: (line) => process.stderr.write(`${line}\n`),
        })),
      );
    }
  } finally {
    await setup.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await setup.destroy();
    await server.stop();
  }

  const rows = results.map((r) => [
    r.adapter,
    r.workload,
    r.rps.toFixed(0),
    `${r.p50} ms`,
    `${r.p99} ms`,
    r.ratio.toFixed(2),
    String(r.failures),
  ]);
  const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}, Node ${process.version}, PostgreSQL ${version}${server.external ? '' : ' (embedded, default settings)'}`;
  const header = [
    'adapter',
    'workload',
    'req/s (median)',
    'p50',
    'p99',
    'ratio to undecorated (same process)',
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
    `${CONNECTIONS} connections, POST with a JSON body, a trivial handler (no database work of its own); ${ROUNDS} rounds of ${SECONDS} s per workload, the workloads alternating within each round; req/s, p50 and p99 are medians over the rounds, and a ratio is the median of the rounds' ratios (the workload's req/s ÷ the undecorated handler's on the same process in the same round). "fresh keys" is a first execution per request (acquire + complete: two PostgreSQL round trips); "replay" repeats one completed key (one round trip); "undecorated, cache process" and "replay, cache on" run against a second application process started with the module option \`cache: { maxEntries: ${CACHE_ENTRIES} }\` (a cached replay makes no round trip); their ratio is to that process's own undecorated figure. The applications run in their own processes, autocannon in another.`,
    '',
    line(header),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...rows.map(line),
    '',
  ].join('\n');
  console.log(markdown);
  fs.writeFileSync(path.join(__dirname, 'RESULTS-http.md'), markdown);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
