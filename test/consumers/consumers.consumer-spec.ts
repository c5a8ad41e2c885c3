import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { brokenLinks, missingExportTargets, unresolvedSourceMaps } from '../support/package-checks';
import { testDatabaseUrl } from '../support/postgres';

/**
 * Consumer fixtures: small applications that install the library from the
 * tarball `npm pack` makes, with a plain `npm install` from the registry (no
 * --legacy-peer-deps, no --force), and run their own tests with their own
 * runners: in the Nest 12 ES-module application Vitest, then Jest in
 * ES-module mode with ts-jest and with @swc/jest; in the Nest 11 CommonJS one
 * Jest with ts-jest and with @swc/jest. One tarball for all; installs share
 * npm's cache (--prefer-offline skips re-checking what it holds).
 */
const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '../..');
const FIXTURES = __dirname;
let work: string;
let unpacked: string;
let shipped: string[];

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-consumers-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], {
    cwd: path.join(ROOT, 'libs/idempotency'),
    maxBuffer: 64 * 1024 * 1024,
  });
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as Array<{
    filename: string;
    files: Array<{ path: string }>;
  }>;
  fs.renameSync(path.join(work, packed.filename), path.join(work, 'nest-idempotency.tgz'));
  shipped = packed.files.map((f) => f.path);
  unpacked = path.join(work, 'unpacked');
  fs.mkdirSync(unpacked);
  await run('tar', ['-xzf', path.join(work, 'nest-idempotency.tgz'), '-C', unpacked]);
  unpacked = path.join(unpacked, 'package');
}, 300_000);

afterAll(async () => {
  // Four node_modules: removing them takes a while on a busy machine.
  if (work) await fs.promises.rm(work, { recursive: true, force: true });
}, 300_000);

async function installAndTest(name: string): Promise<string> {
  const dir = path.join(work, name);
  fs.cpSync(path.join(FIXTURES, name), dir, {
    recursive: true,
    filter: (source) => !source.includes('node_modules') && !source.endsWith('dist'),
  });
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], {
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

describe('the packed tarball', () => {
  it('holds both builds, their entry points, the documents and the CLI, and no tests', () => {
    for (const entry of [
      'index',
      'core',
      'store-kit',
      'typeorm',
      'pg',
      'mysql',
      'testing',
      'opentelemetry',
      'redis',
    ]) {
      for (const file of [`dist/${entry}.js`, `dist/esm/${entry}.js`, `require/${entry}.js`]) {
        expect(shipped).toContain(file);
      }
    }
    for (const file of [
      'README.md',
      'LICENSE',
      'CHANGELOG.md',
      'docs/http.md',
      'bin/nest-idempotency.js',
    ]) {
      expect(shipped).toContain(file);
    }
    expect(shipped.some((f) => f.endsWith('.spec.js'))).toBe(false);
  });

  it('every target of package.json exists in it', () => {
    expect(missingExportTargets(unpacked)).toEqual([]);
  });

  it('its links lead to files in it, or into the repository', () => {
    expect(brokenLinks(unpacked)).toEqual([]);
  });

  it('its source maps resolve: their sources are inlined', () => {
    expect(unresolvedSourceMaps(unpacked)).toEqual([]);
  });
});

describe('consumer applications install the packed library with a plain npm install', () => {
  it('engine only: nest-idempotency/core in plain Node, with no Nest installed', async () => {
    expect(await installAndTest('engine-only')).toContain('consumer-engine-only: ok');
  }, 300_000);

  it('Nest 12 ESM, HTTP only, in-memory store: no @nestjs/microservices, typeorm or pg installed', async () => {
    expect(await installAndTest('nest12-memory')).toContain('consumer-nest12-memory: ok');
  }, 300_000);

  it('Nest 12 ESM with @nestjs/typeorm 12, TypeORM 1 and a TCP handler: Vitest (the kit without globals), then Jest in ES-module mode with ts-jest and with @swc/jest (the kit with globals)', async () => {
    const output = await installAndTest('nest12-esm');
    expect(output).toMatch(/Test Files\s+2 passed/);
    expect(output.match(/Test Suites: 2 passed, 2 total/g)).toHaveLength(2);
  }, 900_000);

  it.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available')(
    'Nest 11 CommonJS with a RabbitMQ handler and TypeORM 0.3: Jest with ts-jest and with @swc/jest (the kit with globals)',
    async () => {
      const output = await installAndTest('nest11-cjs');
      expect(output.match(/Test Suites: 2 passed, 2 total/g)).toHaveLength(2);
    },
    900_000,
  );
});
