/**
 * 2. What @Idempotent costs over HTTP: bench:http's comparison (compareHttp),
 * replays through the module's local replay cache included.
 */
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { compareHttp, HttpRow } from '../lib/http';
import { BenchContext, ResultRow, SectionResult, verdict } from './context';

const CONNECTIONS = 32;

function httpNotes(http: HttpRow[]): string[] {
  const of = (adapter: string, workload: string) =>
    http.find((r) => r.adapter === adapter && r.workload === workload);
  const notes: string[] = [];
  const parts = (['express', 'fastify'] as const).map((adapter) => {
    const cached = of(adapter, 'replay, cache on');
    const fresh = of(adapter, 'fresh keys');
    const replay = of(adapter, 'replay');
    return `${adapter}: fresh keys ${fresh?.ratio.toFixed(2)}, replays ${replay?.ratio.toFixed(2)}, cached replays ${cached?.ratio.toFixed(2)}`;
  });
  notes.push(
    `Ratios to the undecorated handler (${parts.join('; ')}). A fresh key costs two PostgreSQL round trips and a replay one, which the undecorated handler does not make; PostgreSQL runs on the same cores, so those two ratios mostly measure PostgreSQL's and the driver's CPU per request. The cached replay does everything else the interceptor does (key, fingerprint of the body, stored response restored) without the round trip, so its ratio is the interceptor's own cost.`,
  );
  for (const r of http.filter((x) => x.workload === 'replay, cache on' && x.ratio < 0.9))
    notes.push(
      `${r.adapter}: cached replays reached ${r.ratio.toFixed(2)} of the undecorated handler on the same process, under the 0.90 target (runs ${r.runs.map((x) => x.toFixed(0)).join(' / ')}).`,
    );
  return notes;
}

export async function httpSection(ctx: BenchContext): Promise<SectionResult & { http: HttpRow[] }> {
  const { config } = ctx;
  const schema = ctx.schema('bench_http');
  await new TypeOrmIdempotencyStore(ctx.admin, { schema, ensureSchema: true }).init();
  const http: HttpRow[] = [];
  for (const adapter of ['express', 'fastify'] as const) {
    http.push(
      ...(await compareHttp({
        adapter,
        databaseUrl: ctx.url,
        schema,
        rounds: config.httpRounds,
        seconds: config.httpSeconds,
        connections: CONNECTIONS,
        cacheMaxEntries: config.cacheEntries,
        log: (line) => ctx.log(`http: ${line}`),
      })),
    );
  }
  const rows: ResultRow[] = http.map((r) => {
    const cached = r.workload === 'replay, cache on';
    return {
      section: '2. HTTP',
      measurement: `${r.adapter}: ${r.workload}`,
      result: `${r.rps.toFixed(0)} req/s, ratio ${r.ratio.toFixed(2)}`,
      target: cached ? '≥ 0.90' : '',
      verdict: cached ? verdict(r.ratio >= 0.9) : '',
      how: `rounds' ratios ${r.ratios.map((x) => x.toFixed(2)).join(' / ')}${cached ? `; median req/s ÷ the first process's undecorated median ${r.ratioToFirst.toFixed(2)}` : ''}; p50 ${r.p50} ms, p99 ${r.p99} ms; runs ${r.runs.map((x) => x.toFixed(0)).join(' / ')}${r.failures ? `; ${r.failures} errors or non-2xx` : ''}`,
    };
  });
  return {
    rows,
    http,
    method: [
      `HTTP: bench/http/app.ts in its own process (a second one with \`cache: { maxEntries: ${config.cacheEntries} }\` for the last two workloads), autocannon in the benchmark process, ${CONNECTIONS} connections, POST with a small JSON body to a trivial handler. Per adapter, a 2 s warm-up of each workload, then ${config.httpRounds} rounds in which the five workloads alternate, ${config.httpSeconds} s each; medians; ratio = the workload's req/s ÷ the undecorated handler's req/s on the same process in the same round, median over the rounds. "fresh keys": a new Idempotency-Key per request (acquire + complete); "replay": one completed key repeated (one acquire); "undecorated, cache process" and "replay, cache on": the undecorated handler and the replay on the cache-enabled process.`,
    ],
    notes: httpNotes(http),
  };
}
