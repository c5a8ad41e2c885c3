import { DataSource } from 'typeorm';
import { AcquireRequest } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  cli,
  createRecordsTable,
  expectedGrades,
  schemaExists,
  summaryJson,
  summaryLine,
  tableSnapshot,
} from './cli-harness';

/** What a progress line starts with: carriage return, erase to the end of the line. */
const ERASE_LINE = '\r\u001b[K';

interface VerifyJson {
  scratchSchema: string;
  scratchSchemaDropped: boolean;
  results: Array<{ id: string; guarantee: string; grade: string; measured: string }>;
  summary: { pass: number; fail: number; notApplicable: number };
}

describe('nest-idempotency verify', () => {
  let admin: DataSource;
  const schema = scratchSchema('cli_verify');
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    admin = await openDataSource();
    // The configured table, with a record in it: verify must never touch it.
    await createRecordsTable(admin, schema);
    const store = new TypeOrmIdempotencyStore(admin, { schema });
    await store.tryAcquire({
      scope: 'Real.table',
      key: 'k',
      leaseMs: 100,
      ttlMs: 100,
      waitTimeoutMs: 0,
      fingerprint: null,
    });
    await store.close();
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const cleanup of cleanups.splice(0)) await cleanup().catch(() => undefined);
  });
  afterAll(async () => {
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  /** The scratch schema named in the summary line; dropped afterwards even if verify did not. */
  function scratchOf(stdout: string): string {
    const name = /scratch schema (nest_idempotency_verify_[0-9a-f]{12})/.exec(stdout)?.[1];
    if (!name) throw new Error(`no scratch schema in:\n${stdout}`);
    cleanups.push(() => dropSchema(admin, name));
    return name;
  }

  function jsonOf(stdout: string): VerifyJson {
    const output = JSON.parse(stdout) as VerifyJson;
    cleanups.push(() => dropSchema(admin, output.scratchSchema));
    return output;
  }

  /** Every scenario PASS, but any that says it does not apply to a PostgreSQL store. */
  const grades = () =>
    expectedGrades({ store: new TypeOrmIdempotencyStore(admin, { schema }), clock: 'store' });

  it('grades every scenario of the contract PASS on the real server, in a scratch schema it drops, leaving the real table alone', async () => {
    const before = await tableSnapshot(admin, schema);
    const { code, stdout, stderr } = await cli(
      ['--schema', schema, 'verify', '--race-iterations', '200'],
      { terminal: { columns: () => 100 } },
    );
    // On a terminal, stderr shows which check runs, redrawn in place (carriage return, erase the
    // line), and is erased before the table is printed.
    const drawn = stderr.split(ERASE_LINE);
    expect(drawn[0]).toBe('');
    expect(drawn.at(-1)).toBe('');
    expect(drawn.length).toBeGreaterThan(2);
    for (const line of drawn.slice(1, -1)) {
      expect(line).toMatch(
        /^verify: (connecting to \S+|\d+ of \d+ checks done; (now: [\w.-]+|removing the scratch namespace)) \(\d[^)]*\)$/,
      );
    }
    expect(drawn.some((line) => line.includes('checks done; now: '))).toBe(true);
    expect(stdout).not.toContain(ERASE_LINE);
    const scratch = scratchOf(stdout);
    expect(stdout).toMatch(/│ Guarantee\s+│ Grade │ Measured\s+│/);
    for (const title of [
      'gives exactly one of 50 concurrent',
      'replays a completed key',
      'lets the next caller steal an expired',
      'refuses a stale owner after a steal',
      'wakes a waiting duplicate',
      'loses no wake-up when a waiter arrives',
      'purges COMPLETE past its TTL and',
      "the store's clock, not the process's",
      'never changes a record',
    ]) {
      const row = stdout.split('\n').find((line) => line.includes(title));
      expect(row, title).toMatch(/│ PASS {2}│/);
    }
    expect(stdout).toContain(summaryLine(grades()));
    expect(stdout).toContain(`scratch schema ${scratch} dropped.`);
    expect(code).toBe(0);
    expect(await schemaExists(admin, scratch)).toBe(false);
    expect(await tableSnapshot(admin, schema)).toBe(before);
  });

  it('prints the grades and the measured figures as JSON, scenario by scenario of the catalogue', async () => {
    const { code, stdout, stderr } = await cli(
      ['verify', '--json', '--concurrency', '12', '--race-iterations', '100'],
      { terminal: { columns: () => 100 } },
    );
    // --json draws no progress, even on a terminal.
    expect(stderr).toBe('');
    const output = jsonOf(stdout);
    expect(output.results.map((r) => [r.id, r.grade])).toEqual(grades());
    expect(output.summary).toEqual(summaryJson(grades()));
    expect(output.scratchSchemaDropped).toBe(true);
    const measured = Object.fromEntries(output.results.map((r) => [r.id, r.measured]));
    expect(measured['wait.one-winner']).toMatch(
      /^1 winner, 11 replays of 12 acquirers on 2 instances/,
    );
    const wake = /^woken ([\d.]+) ms after complete\(\)/.exec(measured['wait.woken-by-completion']);
    expect(Number(wake?.[1])).toBeLessThan(50);
    expect(measured['wait.no-lost-wakeup']).toMatch(/^100 races, every waiter replayed/);
    expect(measured['clock.store-decides']).toMatch(/process clock an hour off/);
    expect(code).toBe(0);
    expect(await schemaExists(admin, output.scratchSchema)).toBe(false);
  });

  it('grades FAIL and exits 1 when a stale owner can still extend its lease, and still drops the scratch schema', async () => {
    const extend = TypeOrmIdempotencyStore.prototype.extend;
    vi.spyOn(TypeOrmIdempotencyStore.prototype, 'extend').mockImplementation(async function (
      this: TypeOrmIdempotencyStore,
      ...args
    ) {
      await extend.apply(this, args);
      return true; // a store that does not fence its heartbeat
    });
    const { code, stdout } = await cli([
      'verify',
      '--json',
      '--concurrency',
      '4',
      '--race-iterations',
      '50',
    ]);
    const output = jsonOf(stdout);
    const grades = Object.fromEntries(output.results.map((r) => [r.id, r]));
    expect(grades['fencing.stale-owner']).toMatchObject({
      grade: 'FAIL',
      measured: expect.stringContaining('a stale owner could extend'),
    });
    expect(grades['fencing.settled-record'].grade).toBe('FAIL');
    expect(output.summary.fail).toBeGreaterThanOrEqual(2);
    expect(code).toBe(1);
    expect(await schemaExists(admin, output.scratchSchema)).toBe(false);
  });

  it('grades N/A, which is not a pass, when a scenario cannot be set up, and exits 1', async () => {
    const tryAcquire = TypeOrmIdempotencyStore.prototype.tryAcquire;
    let stealCalls = 0;
    vi.spyOn(TypeOrmIdempotencyStore.prototype, 'tryAcquire').mockImplementation(async function (
      this: TypeOrmIdempotencyStore,
      request: AcquireRequest,
    ) {
      // The fencing scenario cannot take over the expired lease: no stale owner to fence.
      if (
        typeof request.scope === 'string' &&
        request.scope.startsWith('contract-fencing.stale-owner-') &&
        ++stealCalls === 2
      ) {
        return { kind: 'in-flight', retryAfterMs: 0 };
      }
      return tryAcquire.call(this, request);
    });
    const { code, stdout } = await cli(['verify', '--concurrency', '4', '--race-iterations', '50']);
    scratchOf(stdout);
    expect(stdout.split('\n').find((line) => line.includes('refuses a stale owner'))).toMatch(
      /│ N\/A {3}│ could not set up: acquiring k returned/,
    );
    expect(stdout).toContain(summaryLine(grades(), 1));
    expect(code).toBe(1);
  });

  it('stops when interrupted, drops the scratch schema and exits 130', async () => {
    const controller = new AbortController();
    controller.abort();
    const interrupt = { signal: controller.signal, handled: false };
    const { code, stdout, stderr } = await cli(['verify'], { interrupt });
    const scratch = scratchOf(stdout);
    expect(interrupt.handled).toBe(true);
    expect(stdout).toContain('0 PASS, 0 FAIL, 0 N/A');
    expect(stderr).toBe('error: interrupted\n');
    expect(code).toBe(130);
    expect(await schemaExists(admin, scratch)).toBe(false);
  });

  it('exits 4 with one line when the login may not create the scratch schema', async () => {
    const role = `cli_nocreate_${Date.now().toString(36)}`;
    await admin.query(`CREATE ROLE "${role}" LOGIN PASSWORD 'verify-pw'`);
    cleanups.push(() => admin.query(`DROP ROLE IF EXISTS "${role}"`));
    const url = new URL(testDatabaseUrl());
    url.username = role;
    url.password = 'verify-pw';
    const { code, stdout, stderr } = await cli(['verify'], {
      env: { DATABASE_URL: url.toString() },
    });
    expect(stdout).toBe('');
    expect(stderr).toMatch(
      /^error: verify needs to create a scratch schema, and this login may not: permission denied for database \w+\n$/,
    );
    expect(stderr).not.toContain('verify-pw');
    expect(code).toBe(4);
  });
});
