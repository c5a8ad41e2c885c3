/**
 * 2. What @Idempotent costs over HTTP: bench:http's comparison (compareHttp),
 * replays through the module's local replay cache included.
 */
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  baselineOf,
  compareHttp,
  HttpRow,
  HttpWorkload,
  isBaseline,
  plainBaselineOf,
} from '../lib/http';
import { BenchContext, ResultRow, SectionResult, verdict } from './context';

const CONNECTIONS = 32;

/**
 * The ratios to the undecorated handler are reported, not judged: they
 * measure Nest's price for any interceptor as much as this library's (the
 * cpu section judges that). The one target here: with the replay cache on,
 * a replay costs no more application CPU than the pass-through interceptor.
 */
const CACHED_REPLAY: HttpWorkload = 'replay, cache on';
const PASS_THROUGH: HttpWorkload = 'pass-through interceptor, memory process';

function httpNotes(http: HttpRow[]): string[] {
  const of = (adapter: string, workload: HttpWorkload) =>
    http.find((r) => r.adapter === adapter && r.workload === workload);
  const f = (r?: HttpRow) => r?.ratio.toFixed(2) ?? 'n/a';
  const notes: string[] = [];
  const parts = (['express', 'fastify'] as const).map(
    (adapter) =>
      `${adapter}: PostgreSQL store fresh keys ${f(of(adapter, 'fresh keys'))}, replays ${f(of(adapter, 'replay'))}, cached replays ${f(of(adapter, 'replay, cache on'))}; in-memory store fresh keys ${f(of(adapter, 'fresh keys, memory store'))}, replays ${f(of(adapter, 'replay, memory store'))}`,
  );
  notes.push(
    `Ratios to the undecorated handler on the same process (${parts.join('; ')}). On the PostgreSQL store a fresh key costs two round trips and a replay one, which the undecorated handler does not make; PostgreSQL runs on the same cores, so those two ratios mostly measure PostgreSQL's and the driver's CPU per request. The in-memory store makes no round trip, so its ratios are the library's own cost per request: for a fresh key the key header, the body fingerprint, the acquire, the held response, the encoded record and its completion; for a replay the key, the fingerprint, the lookup and the stored bytes written back (the handler and its pipes are skipped). The cached replay on the PostgreSQL store is the same path as the in-memory replay, through the cache.`,
  );
  for (const adapter of ['express', 'fastify'] as const) {
    const pass = of(adapter, 'pass-through interceptor, memory process');
    if (pass)
      notes.push(
        `${adapter}: a route whose only interceptor returns next.handle() runs at ${pass.ratio.toFixed(2)} of the undecorated handler (CPU ratio ${pass.cpuRatio.toFixed(2)}; ${pass.cpuMicros.toFixed(1)} µs of application CPU per request): what Nest's interceptor machinery costs any interceptor, @Idempotent's included, before this library does anything.`,
      );
  }
  return notes;
}

export async function httpSection(ctx: BenchContext): Promise<SectionResult & { http: HttpRow[] }> {
  const { config } = ctx;
  const schema = ctx.schema('bench_http');
  const setup = new TypeOrmIdempotencyStore(ctx.admin, { schema, ensureSchema: true });
  await setup.init();
  await setup.close();
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
    const pass =
      r.workload === CACHED_REPLAY
        ? http.find((x) => x.adapter === r.adapter && x.workload === PASS_THROUGH)
        : undefined;
    const baseline = isBaseline(r.workload);
    const againstPlain =
      baselineOf(r.workload) === plainBaselineOf(r.workload)
        ? ''
        : `${r.plainRatio.toFixed(2)} against ${plainBaselineOf(r.workload)}; `;
    return {
      section: '2. HTTP',
      measurement: `${r.adapter}: ${r.workload}`,
      result: baseline
        ? `${r.rps.toFixed(0)} req/s`
        : `${r.rps.toFixed(0)} req/s, ratio ${r.ratio.toFixed(2)}`,
      target: pass ? `app CPU ≤ the pass-through's ${pass.cpuMicros.toFixed(1)} µs/request` : '',
      verdict: pass ? verdict(r.cpuMicros <= pass.cpuMicros) : '',
      how: `${baseline ? '' : `rounds' ratios to ${baselineOf(r.workload)} ${r.ratios.map((x) => x.toFixed(2)).join(' / ')}; ${againstPlain}CPU ratio ${r.cpuRatio.toFixed(2)}; `}app CPU ${r.cpuMicros.toFixed(1)} µs/request; median req/s ÷ the first process's undecorated median ${r.ratioToFirst.toFixed(2)}; p50 ${r.p50} ms, p99 ${r.p99} ms; runs ${r.runs.map((x) => x.toFixed(0)).join(' / ')}${r.failures ? `; ${r.failures} errors or non-2xx` : ''}`,
    };
  });
  return {
    rows,
    http,
    method: [
      `HTTP: bench/http/app.ts in three processes per adapter: the PostgreSQL store with the replay cache off; the same store with \`cache: { maxEntries: ${config.cacheEntries} }\`; the in-memory store (\`InMemoryIdempotencyStore\`, cache off). autocannon runs in the benchmark process, ${CONNECTIONS} connections, POST with a small JSON body to a trivial handler. Per adapter, a 2 s warm-up of each workload, then ${config.httpRounds} rounds in which the workloads alternate, ${config.httpSeconds} s each; medians; ratio = the workload's req/s ÷ the undecorated handler's req/s on the same process in the same round, median over the rounds. "fresh keys": a new Idempotency-Key per request (acquire + complete), compared with the undecorated route sent the same kind of requests ("undecorated, fresh key each": autocannon rebuilds every request that carries a new key, which on its own costs it about as much as the server's work on Fastify); "replay": one completed key repeated, compared with the undecorated route sent the same fixed key header (one acquire on the PostgreSQL store; a map lookup on the in-memory store, uncached either way); "replay, cache on": the same through the module's replay cache; "pass-through interceptor": a route whose only interceptor returns next.handle() (Nest's own interceptor cost, a diagnostic). App CPU: the application process's process.cpuUsage() (user + system) before and after each run, per request; the CPU ratio is the baseline's CPU per request ÷ the workload's, median over the rounds.`,
    ],
    notes: httpNotes(http),
  };
}
