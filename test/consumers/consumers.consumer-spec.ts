import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { testDatabaseUrl } from '../support/postgres';

/**
 * Consumer fixtures: small applications that install the library from the
 * tarball `npm pack` makes, with a plain `npm install` from the registry (no
 * --legacy-peer-deps, no --force), and run their own tests with their own
 * runner: Vitest in the Nest 12 ESM application, Jest in the Nest 11 CommonJS one.
 */
const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '../..');
const FIXTURES = __dirname;
let work: string;

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-consumers-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], {
    cwd: path.join(ROOT, 'libs/idempotency'),
  });
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as Array<{
    filename: string;
    files: Array<{ path: string }>;
  }>;
  fs.renameSync(path.join(work, packed.filename), path.join(work, 'nest-idempotency.tgz'));
  const shipped = packed.files.map((f) => f.path);
  for (const file of [
    'README.md',
    'LICENSE',
    'CHANGELOG.md',
    'dist/index.js',
    'dist/core.js',
    'dist/typeorm.js',
    'dist/testing.js',
    'bin/nest-idempotency.js',
  ]) {
    expect(shipped).toContain(file);
  }
  expect(shipped.some((f) => f.endsWith('.spec.js'))).toBe(false);
}, 120_000);

afterAll(() => {
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

async function installAndTest(name: string): Promise<string> {
  const dir = path.join(work, name);
  fs.cpSync(path.join(FIXTURES, name), dir, {
    recursive: true,
    filter: (source) => !source.includes('node_modules') && !source.endsWith('dist'),
  });
  await run('npm', ['install', '--no-audit', '--no-fund'], {
    cwd: dir,
    maxBuffer: 64 * 1024 * 1024,
  });
  const { stdout, stderr } = await run('npm', ['test'], {
    cwd: dir,
    maxBuffer: 64 * 1024 * 1024,
    env: {
      ...process.env,
      DATABASE_URL: testDatabaseUrl(),
      AMQP_URL: process.env.IDEMPOTENCY_TEST_AMQP_URL,
      NODE_OPTIONS: '',
      NO_COLOR: '1',
      FORCE_COLOR: '0',
    },
  });
  return `${stdout}\n${stderr}`;
}

describe('consumer applications install the packed library with a plain npm install', () => {
  it('engine only: nest-idempotency/core in plain Node, with no Nest installed', async () => {
    expect(await installAndTest('engine-only')).toContain('consumer-engine-only: ok');
  }, 300_000);

  it('Nest 12 ESM, HTTP only, in-memory store: no @nestjs/microservices, typeorm or pg installed', async () => {
    expect(await installAndTest('nest12-memory')).toContain('consumer-nest12-memory: ok');
  }, 300_000);

  it('Nest 12 ESM with @nestjs/typeorm 12 and TypeORM 1 (Vitest, the kit without globals)', async () => {
    const output = await installAndTest('nest12-esm');
    expect(output).toMatch(/Test Files\s+2 passed/);
  }, 600_000);

  it.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available')(
    'Nest 11 CommonJS with a RabbitMQ handler and TypeORM 0.3 (Jest, the kit with globals)',
    async () => {
      const output = await installAndTest('nest11-cjs');
      expect(output).toMatch(/Test Suites: 2 passed, 2 total/);
    },
    600_000,
  );
});
