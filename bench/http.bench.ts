/**
 * `npm run bench:http`: what @Idempotent costs over HTTP. The application runs
 * in its own process; autocannon generates the load from this one. Per adapter,
 * the three workloads alternate (A/B/C, A/B/C, …) so ratios hold on a noisy
 * machine; each figure is the median over the rounds.
 */
import autocannon from 'autocannon';
import { ChildProcess, fork } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from 'nest-idempotency';
import { startEmbeddedPostgres } from '../tools/embedded-postgres';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = 32;
const ROOT = path.resolve(__dirname, '..');

type Workload = 'undecorated' | 'fresh keys' | 'replay';
interface Sample {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

async function startApp(
  adapter: string,
  env: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(path.join(__dirname, 'http/app.ts'), [], {
    cwd: ROOT,
    env: { ...process.env, ...env, ADAPTER: adapter },
    execArgv: ['-r', 'ts-node/register/transpile-only', '-r', 'tsconfig-paths/register'],
  });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { child, url: `http://127.0.0.1:${message.port}` };
}

function run(url: string, workload: Workload, replayKey: string): Promise<Sample> {
  const body = JSON.stringify({ n: 1 });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const request =
    workload === 'undecorated'
      ? { method: 'POST' as const, path: '/plain', headers, body }
      : workload === 'replay'
        ? {
            method: 'POST' as const,
            path: '/idempotent',
            headers: { ...headers, 'idempotency-key': replayKey },
            body,
          }
        : {
            method: 'POST' as const,
            path: '/idempotent',
            headers,
            body,
            setupRequest: (req: autocannon.Request) => ({
              ...req,
              headers: { ...req.headers, 'idempotency-key': randomUUID() },
            }),
          };
  return new Promise((resolve, reject) => {
    autocannon(
      { url, connections: CONNECTIONS, duration: SECONDS, requests: [request] },
      (error, result) => {
        if (error) return reject(error);
        resolve({
          rps: result.requests.average,
          p50: result.latency.p50,
          p99: result.latency.p99,
          errors: result.errors,
          non2xx: result.non2xx,
        });
      },
    );
  });
}

async function main() {
  const external = process.env.IDEMPOTENCY_BENCH_PG_URL;
  const server = external
    ? undefined
    : await startEmbeddedPostgres({ database: 'bench', maxConnections: 200 });
  const url = external ?? server!.url;
  const schema = `bench_http_${randomBytes(4).toString('hex')}`;
  const setup = await new DataSource({ type: 'postgres', url }).initialize();
  await new TypeOrmIdempotencyStore(setup, { schema, ensureSchema: true }).init();
  const version = (await setup.query('SHOW server_version'))[0].server_version as string;

  const rows: string[][] = [];
  try {
    for (const adapter of ['express', 'fastify']) {
      const { child, url: appUrl } = await startApp(adapter, {
        DATABASE_URL: url,
        BENCH_SCHEMA: schema,
        POOL_SIZE: '32',
      });
      const replayKey = randomUUID();
      await fetch(`${appUrl}/idempotent`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': replayKey },
        body: JSON.stringify({ n: 1 }),
      });
      const workloads: Workload[] = ['undecorated', 'fresh keys', 'replay'];
      const samples = new Map<Workload, Sample[]>(workloads.map((w) => [w, []]));
      await run(appUrl, 'undecorated', replayKey); // warm-up
      for (let round = 0; round < ROUNDS; round++) {
        for (const workload of workloads)
          samples.get(workload)!.push(await run(appUrl, workload, replayKey));
        process.stderr.write(`${adapter}: round ${round + 1}/${ROUNDS} done\n`);
      }
      const base = median(samples.get('undecorated')!.map((s) => s.rps));
      for (const workload of workloads) {
        const s = samples.get(workload)!;
        const rps = median(s.map((x) => x.rps));
        const failures = s.reduce((n, x) => n + x.errors + x.non2xx, 0);
        rows.push([
          adapter,
          workload,
          rps.toFixed(0),
          `${median(s.map((x) => x.p50))} ms`,
          `${median(s.map((x) => x.p99))} ms`,
          (rps / base).toFixed(2),
          String(failures),
        ]);
      }
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
  } finally {
    await setup.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await setup.destroy();
    await server?.stop();
  }

  const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}, Node ${process.version}, PostgreSQL ${version}${external ? '' : ' (embedded, default settings)'}`;
  const header = [
    'adapter',
    'workload',
    'req/s (median)',
    'p50',
    'p99',
    'ratio to undecorated',
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
    `${CONNECTIONS} connections, POST with a JSON body, a trivial handler (no database work of its own); ${ROUNDS} rounds of ${SECONDS} s per workload, the workloads alternating within each round; medians over the rounds. "fresh keys" is a first execution per request (acquire + complete: two PostgreSQL round trips); "replay" repeats one completed key (one round trip). The application runs in its own process, autocannon in another.`,
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
