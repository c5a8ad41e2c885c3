import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DataSource } from 'typeorm';
import { STORE_CONTRACT } from 'nest-idempotency/testing';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { createRecordsTable, schemaExists } from './cli-harness';
import { describeIfRedis, probeRedisSync, redisUrl } from '../support/redis';

const ROOT = join(__dirname, '..', '..');
/** What a progress line starts with: carriage return, erase to the end of the line. */
const ERASE_LINE = '\r\u001b[K';
const BIN = join(ROOT, 'node_modules', '.bin', 'nest-idempotency');

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs the installed bin as a child process. `whileRunning` may act on it before it exits. */
function run(
  args: string[],
  env: Record<string, string> = { DATABASE_URL: testDatabaseUrl() },
  whileRunning?: (child: ReturnType<typeof spawn>) => Promise<void>,
): Promise<Exit> {
  const child = spawn(BIN, args, {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk) => (stdout += chunk));
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<Exit>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return whileRunning ? Promise.all([exited, whileRunning(child)]).then(([exit]) => exit) : exited;
}

describe('the nest-idempotency bin (a child process)', () => {
  let admin: DataSource;
  const schema = scratchSchema('cli_bin');

  /**
   * Runs the bin on a pseudo-terminal of 80 columns (util-linux `script`),
   * stdout and stderr both on it. `seen` resolves once the output holds `text`.
   */
  function onTerminal(args: string[]) {
    const command = `stty cols 80; ${[BIN, ...args].map(shellWord).join(' ')}`;
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: testDatabaseUrl(), TERM: 'xterm' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const waiting: Array<{ text: string; resolve: () => void }> = [];
    child.stdout!.on('data', (chunk) => {
      output += chunk;
      for (const wait of waiting.filter((w) => output.includes(w.text))) wait.resolve();
    });
    const exit = new Promise<{ code: number | null; output: string }>((resolve, reject) => {
      child.on('error', reject);
      // The terminal turns each \n into \r\n.
      child.on('close', (code) => resolve({ code, output: output.replace(/\r\n/g, '\n') }));
    });
    const seen = (text: string) =>
      new Promise<void>((resolve, reject) => {
        if (output.includes(text)) return resolve();
        waiting.push({ text, resolve });
        void exit.then(() => reject(new Error(`exited without printing ${text}:\n${output}`)));
      });
    return { exit, seen };
  }

  /** Resolves once `count` statements of the CLI wait on a lock. */
  async function waitingOnLock(count: number): Promise<void> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const [{ n }] = await admin.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE application_name = 'nest-idempotency-cli' AND wait_event_type = 'Lock'`,
      );
      if (n >= count) return;
      if (Date.now() > deadline) throw new Error('the CLI never waited on the lock');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  beforeAll(async () => {
    // The bin runs the built library: build it from the sources under test.
    await promisify(execFile)(
      process.execPath,
      [require.resolve('typescript/bin/tsc'), '-p', 'libs/idempotency/tsconfig.lib.json'],
      { cwd: ROOT },
    );
    if (!existsSync(BIN)) {
      throw new Error(`${BIN} is missing: run npm ci (the root devDependency links the bin)`);
    }
    admin = await openDataSource();
    await createRecordsTable(admin, schema);
    const store = new TypeOrmIdempotencyStore(admin, { schema });
    await store.tryAcquire({
      scope: 'Bin.s',
      key: 'bin-raw-key',
      leaseMs: 60_000,
      ttlMs: 60_000,
      waitTimeoutMs: 0,
      fingerprint: null,
    });
    await store.close();
  }, 120_000);
  afterAll(async () => {
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  it('prints its help and exits 0', async () => {
    const exit = await run(['--help'], {});
    expect(exit).toMatchObject({ code: 0, stderr: '' });
    expect(exit.stdout).toMatch(/^Usage: nest-idempotency \[options\] \[command\]/);
  });

  it('stops quietly when its output pipe is closed (| head), without a stack trace', async () => {
    const child = spawn(BIN, ['--help'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.destroy(); // the reader is gone before the bin writes anything
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });

  it('lists records from DATABASE_URL and exits 0', async () => {
    const exit = await run(['--schema', schema, 'list', '--json']);
    expect(exit).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(exit.stdout).records).toEqual([
      expect.objectContaining({ scope: 'Bin.s', key: 'bin-raw-key', state: 'IN_PROGRESS' }),
    ]);
  });

  it('exits 3 with one line and no stack trace when PostgreSQL is unreachable', async () => {
    const exit = await run(['list'], { DATABASE_URL: 'postgres://u:pw@127.0.0.1:1/db' });
    expect(exit.code).toBe(3);
    expect(exit.stdout).toBe('');
    expect(exit.stderr).toMatch(/^error: cannot reach PostgreSQL at 127\.0\.0\.1:1\/db: [^\n]+\n$/);
  });

  // The built CLI loads the Redis backend (and `redis`) only for --redis-url.
  describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)('on Redis', () => {
    it('lists the records under a key prefix from REDIS_URL and exits 0', async () => {
      const exit = await run(['--key-prefix', 'cli-bin-empty:', 'list', '--json'], {
        REDIS_URL: redisUrl(),
      });
      expect(exit).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(exit.stdout).records).toEqual([]);
    });
  });

  it('exits 4 when the table is missing', async () => {
    const exit = await run(['--schema', `${schema}_absent`, 'list']);
    expect(exit.code).toBe(4);
    expect(exit.stderr).toMatch(
      /^error: table \S+ does not exist, and the CLI never creates it\. [^\n]+\n$/,
    );
  });

  it('on a terminal, draws progress on long work and erases it; --json stays clean', async () => {
    // The table is locked, so each purge --dry-run waits on its count: long work, by construction.
    const runner = admin.createQueryRunner();
    await runner.startTransaction();
    try {
      await runner.query(`LOCK TABLE "${schema}".idempotency_records IN ACCESS EXCLUSIVE MODE`);
      const args = ['--schema', schema, '--timeout', '60000', 'purge', '--dry-run'];
      const json = onTerminal([...args, '--json']);
      await waitingOnLock(1);
      const text = onTerminal(args);
      // Drawn once the work has taken a second; by then the --json run has waited longer.
      await text.seen('counting expired records in');
      await runner.rollbackTransaction();
      const [jsonExit, textExit] = await Promise.all([json.exit, text.exit]);
      expect(textExit.code).toBe(0);
      const drawn = textExit.output.split(ERASE_LINE);
      expect(drawn.slice(1, -1).length).toBeGreaterThan(0);
      for (const line of drawn.slice(1, -1)) {
        expect(line).toMatch(
          new RegExp(`^counting expired records in ${schema}\\.idempotency_records \\(\\d+s\\)$`),
        );
      }
      // Erased before the result is printed.
      expect(drawn.at(-1)).toMatch(
        new RegExp(`^dry run: 0 records would be purged from ${schema}`),
      );
      expect(jsonExit.code).toBe(0);
      expect(jsonExit.output).not.toContain('\u001b');
      expect(JSON.parse(jsonExit.output)).toMatchObject({ dryRun: true, count: 0 });
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  });

  it('on Ctrl-C during verify, finishes the current check, drops its scratch schema and exits 130', async () => {
    let scratch = '';
    const exit = await run(['verify'], { DATABASE_URL: testDatabaseUrl() }, async (child) => {
      // Wait for the scratch schema to appear (nothing announces it), then interrupt.
      const deadline = Date.now() + 20_000;
      while (!scratch) {
        if (Date.now() > deadline) throw new Error('verify created no scratch schema');
        const rows = await admin.query(
          `SELECT nspname FROM pg_namespace n JOIN pg_stat_activity a ON a.application_name = 'nest-idempotency-cli'
           WHERE nspname LIKE 'nest_idempotency_verify_%' LIMIT 1`,
        );
        if (rows.length > 0) scratch = rows[0].nspname;
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
      child.kill('SIGINT');
    });
    expect(exit.code).toBe(130);
    expect(exit.stderr).toBe('error: interrupted\n');
    const total = STORE_CONTRACT.length;
    const interrupted = /NOT VERIFIED: interrupted after (\d+) of (\d+) checks/.exec(exit.stdout);
    expect(Number(interrupted?.[2])).toBe(total);
    expect(Number(interrupted?.[1])).toBeLessThan(total);
    expect(exit.stdout).toContain(`scratch schema ${scratch} dropped.`);
    expect(await schemaExists(admin, scratch)).toBe(false);
  });
});

function shellWord(text: string): string {
  return /^[\w./:=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}
