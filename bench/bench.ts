/**
 * `npm run bench`: every benchmark in one run, one table, bench/RESULTS.md.
 *
 *   1. floor   the store against the minimum SQL (INSERT … ON CONFLICT + fenced UPDATE; SELECT by key)
 *   2. cpu     the library's own CPU per request over HTTP (Fastify, Express) against the
 *              pass-through interceptor and node-idempotency, in the same rounds
 *      http    what @Idempotent costs over HTTP (Express, Fastify): PostgreSQL store with the
 *              replay cache off and on, and the in-memory store
 *   3. wake    how soon a waiting duplicate gets its answer
 *   4. scale   a million-record table; purging a million expired records under traffic
 *   5. memory  the application's memory after many requests
 *
 * Not run by default, on the machine's servers (skipped, saying how to start
 * them, when they do not answer): redis-store, redis-http, redis-wake,
 * redis-memory (the Redis store; `redis` selects all four) and mariadb-floor,
 * mariadb-http, mariadb-memory (the MySQL/MariaDB store; `mariadb` selects all
 * three); see sections/redis.ts and
 * sections/mariadb.ts. The embedded PostgreSQL is started only when a selected
 * section needs it. A run of those sections alone writes
 * RESULTS-redis-mariadb.md instead of RESULTS.md; BENCH_RESULTS_FILE names
 * the file in any case.
 *
 * Starts an embedded PostgreSQL unless IDEMPOTENCY_BENCH_PG_URL names a server
 * (it then works in scratch schemas it drops afterwards). The environment
 * tunables (durations, rounds, sizes) are in bench/sections/context.ts
 * (readConfig). Run a subset with BENCH_SECTIONS=floor,wake. BENCH_RESULTS_DIR puts
 * RESULTS.md elsewhere: set it for shortened runs, which must not replace bench/RESULTS.md.
 */
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import { installDriverCounter } from './lib/driver-count';
import {
  cpuSnapshot,
  describeLoad,
  describeMachine,
  machineRows,
  otherShare,
  sampleLoad,
} from './lib/machine';
import { openDataSource, serverVersion, startServer } from './lib/postgres';
import { consoleTable, mdTable, resultsPath, writeMarkdown } from './lib/report';
import {
  BenchContext,
  engineWarnings,
  readConfig,
  ResultRow,
  SectionContext,
  SectionResult,
} from './sections/context';
import {
  mariadbFloorSection,
  mariadbHttpSection,
  mariadbMemorySection,
  mariadbServerPids,
} from './sections/mariadb';
import {
  redisHttpSection,
  redisMemorySection,
  redisServerPids,
  redisStoreSection,
  redisWakeSection,
} from './sections/redis';
import { floorSection } from './sections/floor';
import { cpuSection } from './sections/cpu';
import { httpSection } from './sections/http';
import { memorySection } from './sections/memory';
import { scaleSection } from './sections/scale';
import { wakeSection } from './sections/wake';
import { analysisNotes } from './sections/notes';

installDriverCounter();

type Section =
  | { postgres: true; run: (ctx: BenchContext) => Promise<SectionResult> }
  | {
      postgres: false;
      run: (ctx: SectionContext) => Promise<SectionResult>;
      /** The server processes the section loads: their CPU is the section's, not other work. */
      servers: () => Promise<number[]>;
    };

const onPostgres = (run: (ctx: BenchContext) => Promise<SectionResult>): Section => ({
  postgres: true,
  run,
});

const SECTIONS: Record<string, Section> = {
  floor: onPostgres(floorSection),
  cpu: onPostgres(cpuSection),
  http: onPostgres(httpSection),
  wake: onPostgres(wakeSection),
  scale: onPostgres(scaleSection),
  memory: onPostgres(memorySection),
  'redis-store': { postgres: false, run: redisStoreSection, servers: redisServerPids },
  'redis-http': { postgres: false, run: redisHttpSection, servers: redisServerPids },
  'redis-wake': { postgres: false, run: redisWakeSection, servers: redisServerPids },
  'redis-memory': { postgres: false, run: redisMemorySection, servers: redisServerPids },
  'mariadb-floor': { postgres: false, run: mariadbFloorSection, servers: mariadbServerPids },
  'mariadb-http': { postgres: false, run: mariadbHttpSection, servers: mariadbServerPids },
  'mariadb-memory': { postgres: false, run: mariadbMemorySection, servers: mariadbServerPids },
};

async function main(): Promise<void> {
  const config = readConfig();
  for (const name of config.sections)
    if (!SECTIONS[name]) throw new Error(`BENCH_SECTIONS: unknown section "${name}"`);
  const started = performance.now();
  const log = (line: string) =>
    process.stderr.write(
      `[${((performance.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}\n`,
    );

  log('sampling the machine load before starting');
  const loadBefore = await sampleLoad();
  log(describeLoad(loadBefore));
  const postgres = config.sections.some((name) => SECTIONS[name].postgres);
  const server = postgres ? await startServer() : undefined;
  const admin = server ? await openDataSource(server.url, 'idem-bench-admin', 2) : undefined;
  const schemas: string[] = [];
  const results: {
    name: string;
    result: SectionResult;
    seconds: number;
    /** Share of all cores used outside the benchmark's process tree meanwhile. */
    other?: number;
  }[] = [];
  // The Redis and MariaDB servers the selected sections load are the machine's own, outside this
  // process tree: their CPU is counted as the benchmark's, not as other work.
  const serverPids = [
    ...new Set(
      (
        await Promise.all(
          config.sections.map((name) => {
            const section = SECTIONS[name];
            return section.postgres ? [] : section.servers();
          }),
        )
      ).flat(),
    ),
  ];
  const runStart = cpuSnapshot(serverPids);
  let machine;
  try {
    machine = describeMachine(
      server && admin ? await serverVersion(admin) : 'not used in this run',
      server?.describe ?? '',
    );
    const ctx: BenchContext | undefined =
      server && admin
        ? {
            url: server.url,
            external: server.external,
            config,
            admin,
            schema: (prefix) => {
              const name = `${prefix}_${randomBytes(4).toString('hex')}`;
              schemas.push(name);
              return name;
            },
            log,
          }
        : undefined;
    for (const name of config.sections) {
      const section = SECTIONS[name];
      const t0 = performance.now();
      const cpu0 = cpuSnapshot(serverPids);
      log(`section ${name}`);
      const result = section.postgres
        ? await section.run(ctx!)
        : await section.run({ config, log });
      const other = otherShare(cpu0, cpuSnapshot(serverPids));
      results.push({ name, result, seconds: (performance.now() - t0) / 1000, other });
      if (other !== undefined)
        log(`section ${name} done; other work used ${(other * 100).toFixed(0)}% of the CPU`);
    }
  } finally {
    for (const schema of schemas)
      await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await admin?.destroy().catch(() => undefined);
    await server?.stop();
  }
  const runOther = otherShare(runStart, cpuSnapshot(serverPids));
  const loadAfter = await sampleLoad();
  const pct = (x?: number) => (x === undefined ? 'n/a' : `${(x * 100).toFixed(0)}%`);
  const totalSeconds = (performance.now() - started) / 1000;
  const otherBySection = results.map((r) => `${r.name} ${pct(r.other)}`).join(', ');

  const rows: (ResultRow & { other?: number })[] = results.flatMap((r) =>
    r.result.rows.map((row) => ({ ...row, other: r.result.skipped ? undefined : r.other })),
  );
  const skippedSections = results.filter((r) => r.result.skipped).map((r) => r.name);
  const header = ['Section', 'Measurement', 'Result', 'Target', 'Met', 'Other load', 'How'];
  const cells = rows.map((r) => [
    r.section,
    r.measurement,
    r.result,
    r.target,
    r.verdict,
    pct(r.other),
    r.how,
  ]);
  const machineTable = [
    ...machineRows(machine).filter((row) => postgres || row[0] !== 'PostgreSQL'),
    ...[...new Map(results.flatMap((r) => r.result.machine ?? []).map((m) => [m[0], m])).values()],
  ];
  console.log(consoleTable(['Machine', ''], machineTable));
  console.log(
    consoleTable(
      header.slice(0, 6),
      cells.map((c) => c.slice(0, 6)),
      [11, 44, 38, 16, 8, 7],
    ),
  );
  const missed = rows.filter((r) => r.verdict === 'missed');
  console.log(
    missed.length
      ? `targets missed: ${missed.map((r) => `${r.section} ${r.measurement}`).join('; ')}`
      : `every target met${skippedSections.length ? ' among the sections that ran' : ''}`,
  );
  if (skippedSections.length)
    console.log(`sections skipped (server unreachable): ${skippedSections.join(', ')}`);
  console.log(
    `CPU used outside the benchmark during the run: ${pct(runOther)} (${otherBySection})`,
  );
  console.log(`load before: ${describeLoad(loadBefore)}; after: ${describeLoad(loadAfter)}`);
  console.log(`total run time ${(totalSeconds / 60).toFixed(1)} min`);

  const markdown = [
    postgres
      ? '# Benchmark results (`npm run bench`)'
      : `# Benchmark results (\`BENCH_SECTIONS=${config.sections.join(',')} npm run bench\`)`,
    '',
    `Generated on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; the run took ${(totalSeconds / 60).toFixed(1)} min (${results.map((r) => `${r.name} ${r.seconds.toFixed(0)} s`).join(', ')}).`,
    '',
    '## Machine',
    '',
    ...mdTable(
      ['', ''],
      [
        ...machineTable,
        ['Load before the run', describeLoad(loadBefore)],
        ['Load after the run', describeLoad(loadAfter)],
        [
          'CPU used outside the benchmark during the run',
          `${pct(runOther)} of all cores (by section: ${otherBySection})`,
        ],
      ],
    ),
    '',
    `${[...(postgres ? ['PostgreSQL'] : []), ...machineTable.filter((m) => m[0] === 'Redis' || m[0] === 'MariaDB').map((m) => m[0])].join(', ')}, the application processes and the load generator (this process, and autocannon in it) share these ${machine.cores} cores: every figure is CPU-bound and includes the others' work. Compare figures within one run; absolute numbers move by ±10% between runs. "CPU used outside the benchmark" (the "Other load" column, per section) is the machine's busy time (/proc/stat, steal included) minus the CPU time of the benchmark's own process tree (PostgreSQL${server?.external ? ' is external here, so it counts as outside' : ''}, the application processes, this process)${serverPids.length ? ` and of the Redis and MariaDB server processes the run used (${serverPids.length}; the machine's own servers, so another user's commands on them count as the benchmark's)` : ''}, as a share of all cores: other people's test suites, for one.`,
    '',
    '## Results',
    '',
    ...mdTable(header, cells),
    '',
    '## Method',
    '',
    ...results.flatMap((r) => r.result.method.map((m) => `- ${m}`)),
    '- Round trips are counted in the driver: every `pg` `Client.query` call, attributed to a pool by its connection `application_name`; every command a `mysql2` connection starts (a packet with sequence id 0), by its `connectAttributes.program_name`; every `sendCommand` of a node-redis client, by the client (bench/lib/driver-count.ts).',
    `- Every comparison alternates its variants (A/B/A/B…) so a drifting machine does not land on one side; medians are of the per-run figures.${engineWarnings.count ? ` The engine logged ${engineWarnings.count} warnings during the run.` : ''}`,
    '',
    '## Notes',
    '',
    ...analysisNotes(
      results.map((r) => r.result),
      results.map((r) => ({ name: r.name, other: r.other })),
    ).map((n) => `- ${n}`),
    '',
  ].join('\n');
  // A partial run on Redis and MariaDB alone must not replace RESULTS.md.
  const out = resultsPath(
    process.env.BENCH_RESULTS_FILE || (postgres ? 'RESULTS.md' : 'RESULTS-redis-mariadb.md'),
  );
  await writeMarkdown(out, markdown);
  console.log(`written to ${out}`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
