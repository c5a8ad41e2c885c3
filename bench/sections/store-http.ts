/**
 * The HTTP comparison (bench/lib/http.ts compareHttp) on the Redis or the
 * MySQL/MariaDB store: fresh keys and replays against the undecorated handler
 * on the same process, Express and Fastify, with the store's round trips per
 * request counted in the application's driver; optionally the in-memory
 * store's process beside it (the same library work without a network).
 */
import { compareHttp, DatabaseStore, HttpRow, HttpWorkload } from '../lib/http';
import { fmtRange } from '../lib/stats';
import { ResultRow, SectionContext, SectionResult, verdict } from './context';

const CONNECTIONS = 32;

const NAMES: Record<'redis' | 'mariadb', string> = { redis: 'Redis', mariadb: 'MariaDB' };

export async function storeHttp(
  ctx: SectionContext,
  options: {
    section: string;
    store: Extract<DatabaseStore, 'redis' | 'mariadb'>;
    url: string;
    /** Key prefix (Redis) or table (MariaDB). */
    schema: string;
    targets: Partial<Record<HttpWorkload, number>>;
    /** The server's processes, whose CPU per request is reported. */
    serverPids?: number[];
  },
): Promise<SectionResult & { http: HttpRow[] }> {
  const { config } = ctx;
  const name = NAMES[options.store];
  const workloads: HttpWorkload[] = [
    'fresh keys',
    'replay',
    ...(config.storeHttpMemory
      ? (['fresh keys, memory store', 'replay, memory store'] as const)
      : []),
  ];
  const http: HttpRow[] = [];
  for (const adapter of ['express', 'fastify'] as const) {
    http.push(
      ...(await compareHttp({
        adapter,
        store: options.store,
        databaseUrl: options.url,
        schema: options.schema,
        rounds: config.httpRounds,
        seconds: config.httpSeconds,
        connections: CONNECTIONS,
        cacheMaxEntries: 0,
        workloads,
        serverPids: options.serverPids,
        log: (line) => ctx.log(`${options.section}: ${line}`),
      })),
    );
  }
  const label = (w: HttpWorkload) =>
    w === 'fresh keys' || w === 'replay' ? `${w}, ${name} store` : w;
  const rows: ResultRow[] = http.map((r) => {
    const target = options.targets[r.workload];
    const baseline = r.workload.startsWith('undecorated');
    const trips = r.workload.endsWith('memory process') || r.workload.endsWith('memory store');
    return {
      section: options.section,
      measurement: `${r.adapter}: ${label(r.workload)}`,
      result: baseline
        ? `${r.rps.toFixed(0)} req/s`
        : `${r.rps.toFixed(0)} req/s, ratio ${r.ratio.toFixed(2)}`,
      target: target === undefined ? '' : `≥ ${target.toFixed(2)}`,
      verdict: target === undefined ? '' : verdict(r.ratio >= target),
      how: `${baseline ? '' : `rounds' ratios ${r.ratios.map((x) => x.toFixed(2)).join(' / ')}; CPU ratio ${r.cpuRatio.toFixed(2)}; `}app CPU ${r.cpuMicros.toFixed(1)} µs/request;${trips ? '' : ` ${name} round trips per request ${fmtRange(r.roundTrips)};`} p50 ${r.p50} ms, p99 ${r.p99} ms;${trips || r.serverMicros === undefined ? '' : ` ${name} CPU ${r.serverMicros.toFixed(0)} µs/request;`} runs ${r.runs.map((x) => x.toFixed(0)).join(' / ')}${r.failures ? `; ${r.failures} errors or non-2xx` : ''}`,
    };
  });
  const of = (adapter: string, w: HttpWorkload) =>
    http.find((r) => r.adapter === adapter && r.workload === w);
  const notes = (['express', 'fastify'] as const).map((adapter) => {
    const f = (w: HttpWorkload) => of(adapter, w)?.ratio.toFixed(2) ?? 'n/a';
    const c = (w: HttpWorkload) => of(adapter, w)?.cpuMicros.toFixed(0) ?? '?';
    const srv = (w: HttpWorkload) => of(adapter, w)?.serverMicros?.toFixed(0) ?? '?';
    /** App CPU per request over its baseline's (µs), on the store's process and the in-memory one. */
    const extra = (w: HttpWorkload, base: HttpWorkload) => {
      const a = of(adapter, w)?.cpuMicros;
      const b = of(adapter, base)?.cpuMicros;
      return a === undefined || b === undefined ? undefined : a - b;
    };
    const compare = (
      kind: string,
      w: HttpWorkload,
      mem: HttpWorkload,
      base: HttpWorkload,
      memBase: HttpWorkload,
    ) => {
      const store = extra(w, base);
      const memory = extra(mem, memBase);
      if (store === undefined || memory === undefined) return '';
      return `${kind}: @Idempotent adds ${store.toFixed(0)} µs of application CPU per request on the ${name} store and ${memory.toFixed(0)} µs on the in-memory store (ratios ${f(w)} and ${f(mem)}), so the ${name} driver and its round trips cost the application ${(store - memory).toFixed(0)} µs, and ${name} ${srv(w)} µs of its own`;
    };
    const parts = config.storeHttpMemory
      ? [
          compare(
            'fresh keys',
            'fresh keys',
            'fresh keys, memory store',
            'undecorated, fresh key each',
            'undecorated, fresh key each, memory process',
          ),
          compare(
            'replays',
            'replay',
            'replay, memory store',
            'undecorated',
            'undecorated, memory process',
          ),
        ].filter(Boolean)
      : [];
    return `${name}, ${adapter}: fresh keys ${f('fresh keys')} of the undecorated handler (app CPU ${c('fresh keys')} µs/request against ${c('undecorated, fresh key each')}, and ${srv('fresh keys')} µs of ${name}'s), replays ${f('replay')} (${c('replay')} against ${c('undecorated')} µs, and ${srv('replay')} µs of ${name}'s)${parts.length ? `. ${parts.join('; ')}` : ''}.`;
  });
  return {
    rows,
    http,
    method: [
      `${options.section}: bench/http/app.ts on the ${name} store (${options.store === 'redis' ? 'one node-redis client, as an application shares its own' : 'a `mariadb` DataSource, pool 32'})${config.storeHttpMemory ? ' and, beside it, on the in-memory store' : ''}, per adapter; autocannon in the benchmark process, ${CONNECTIONS} connections; a 2 s warm-up of each workload, then ${config.httpRounds} alternating rounds of ${config.httpSeconds} s; ratio = req/s ÷ the undecorated handler's on the same process in the same round (fresh keys against the undecorated route sent a fresh key each), median of the rounds. Round trips per request: the ${name} commands the application's driver sent during the run ÷ the requests answered (bench/lib/driver-count.ts in the application process).`,
    ],
    notes,
  };
}
