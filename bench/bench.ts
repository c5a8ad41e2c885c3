/**
 * `npm run bench`: every benchmark in one run, one table, bench/RESULTS.md.
 *
 *   1. floor   the store against the minimum SQL (INSERT … ON CONFLICT + fenced UPDATE; SELECT by key)
 *   2. http    what @Idempotent costs over HTTP (Express, Fastify): PostgreSQL store with the
 *              replay cache off and on, and the in-memory store
 *   3. wake    how soon a waiting duplicate gets its answer
 *   4. scale   a million-record table; purging a million expired records under traffic
 *   5. memory  the application's memory after many requests
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
  SectionResult,
} from './sections/context';
import { floorSection } from './sections/floor';
import { httpSection } from './sections/http';
import { memorySection } from './sections/memory';
import { scaleSection } from './sections/scale';
import { wakeSection } from './sections/wake';
import { analysisNotes } from './sections/notes';

installDriverCounter();

const SECTIONS: Record<string, (ctx: BenchContext) => Promise<SectionResult>> = {
  floor: floorSection,
  http: httpSection,
  wake: wakeSection,
  scale: scaleSection,
  memory: memorySection,
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
  const server = await startServer();
  const admin = await openDataSource(server.url, 'idem-bench-admin', 2);
  const schemas: string[] = [];
  const results: {
    name: string;
    result: SectionResult;
    seconds: number;
    /** Share of all cores used outside the benchmark's process tree meanwhile. */
    other?: number;
  }[] = [];
  const runStart = cpuSnapshot();
  let machine;
  try {
    machine = describeMachine(await serverVersion(admin), server.describe);
    const ctx: BenchContext = {
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
    };
    for (const name of config.sections) {
      const t0 = performance.now();
      const cpu0 = cpuSnapshot();
      log(`section ${name}`);
      const result = await SECTIONS[name](ctx);
      const other = otherShare(cpu0, cpuSnapshot());
      results.push({ name, result, seconds: (performance.now() - t0) / 1000, other });
      if (other !== undefined)
        log(`section ${name} done; other work used ${(other * 100).toFixed(0)}% of the CPU`);
    }
  } finally {
    for (const schema of schemas)
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await admin.destroy().catch(() => undefined);
    await server.stop();
  }
  const runOther = otherShare(runStart, cpuSnapshot());
  const loadAfter = await sampleLoad();
  const pct = (x?: number) => (x === undefined ? 'n/a' : `${(x * 100).toFixed(0)}%`);
  const totalSeconds = (performance.now() - started) / 1000;
  const otherBySection = results.map((r) => `${r.name} ${pct(r.other)}`).join(', ');

  const rows: ResultRow[] = results.flatMap((r) => r.result.rows);
  const header = ['Section', 'Measurement', 'Result', 'Target', 'Met', 'How'];
  const cells = rows.map((r) => [r.section, r.measurement, r.result, r.target, r.verdict, r.how]);
  console.log(consoleTable(['Machine', ''], machineRows(machine)));
  console.log(
    consoleTable(
      header.slice(0, 5),
      cells.map((c) => c.slice(0, 5)),
      [11, 44, 38, 24, 8],
    ),
  );
  const missed = rows.filter((r) => r.verdict === 'missed');
  console.log(
    missed.length
      ? `targets missed: ${missed.map((r) => `${r.section} ${r.measurement}`).join('; ')}`
      : 'every target met',
  );
  console.log(
    `CPU used outside the benchmark during the run: ${pct(runOther)} (${otherBySection})`,
  );
  console.log(`load before: ${describeLoad(loadBefore)}; after: ${describeLoad(loadAfter)}`);
  console.log(`total run time ${(totalSeconds / 60).toFixed(1)} min`);

  const markdown = [
    '# Benchmark results (`npm run bench`)',
    '',
    `Generated on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; the run took ${(totalSeconds / 60).toFixed(1)} min (${results.map((r) => `${r.name} ${r.seconds.toFixed(0)} s`).join(', ')}).`,
    '',
    '## Machine',
    '',
    ...mdTable(
      ['', ''],
      [
        ...machineRows(machine),
        ['Load before the run', describeLoad(loadBefore)],
        ['Load after the run', describeLoad(loadAfter)],
        [
          'CPU used outside the benchmark during the run',
          `${pct(runOther)} of all cores (by section: ${otherBySection})`,
        ],
      ],
    ),
    '',
    `PostgreSQL, the application processes and the load generator (this process, and autocannon in it) share these ${machine.cores} cores: every figure is CPU-bound and includes the others' work. Compare figures within one run; absolute numbers move by ±10% between runs. "CPU used outside the benchmark" is the machine's busy time (/proc/stat, steal included) minus the CPU time of the benchmark's own process tree (PostgreSQL${server.external ? ' is external here, so it counts as outside' : ''}, the application processes, this process), as a share of all cores: other people's test suites, for one.`,
    '',
    '## Results',
    '',
    ...mdTable(header, cells),
    '',
    '## Method',
    '',
    ...results.flatMap((r) => r.result.method.map((m) => `- ${m}`)),
    '- Round trips are counted in the driver: every `pg` `Client.query` call, attributed to a pool by its connection `application_name`.',
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
  const out = resultsPath('RESULTS.md');
  await writeMarkdown(out, markdown);
  console.log(`written to ${out}`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
