import { DataSource } from 'typeorm';
import { AcquireRequest } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { cli, createRecordsTable, schemaExists, tableSnapshot } from './cli-harness';

const GUARANTEES = [
  'one-winner',
  'replay',
  'steal',
  'fencing',
  'wake',
  'purge',
  'database-clock',
  'reads',
];

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

  it('grades every guarantee PASS on the real server, in a scratch schema it drops, leaving the real table alone', async () => {
    const before = await tableSnapshot(admin, schema);
    const { code, stdout, stderr } = await cli(['--schema', schema, 'verify']);
    expect(stderr).toBe('');
    const scratch = scratchOf(stdout);
    expect(stdout).toMatch(/│ Guarantee\s+│ Grade │ Measured\s+│/);
    for (const title of [
      'One winner among 50 concurrent',
      'Replay of a completed key',
      'Steal after lease expiry',
      'Fencing of a stale owner',
      'Waiter woken by completion',
      'Purge: COMPLETE past TTL;',
      'Database clock decides leases',
      'Reads move nothing (find, list,',
    ]) {
      const row = stdout.split('\n').find((line) => line.includes(title));
      expect(row).toMatch(/│ PASS {2}│/);
    }
    expect(stdout).toContain('8 PASS, 0 FAIL, 0 N/A: verified.');
    expect(stdout).toContain(`scratch schema ${scratch} dropped.`);
    expect(code).toBe(0);
    expect(await schemaExists(admin, scratch)).toBe(false);
    expect(await tableSnapshot(admin, schema)).toBe(before);
  });

  it('prints the grades and the measured figures as JSON', async () => {
    const { code, stdout } = await cli(['verify', '--json', '--concurrency', '12']);
    const output = jsonOf(stdout);
    expect(output.results.map((r) => [r.id, r.grade])).toEqual(
      GUARANTEES.map((id) => [id, 'PASS']),
    );
    expect(output.summary).toEqual({ pass: 8, fail: 0, notApplicable: 0 });
    expect(output.scratchSchemaDropped).toBe(true);
    const measured = Object.fromEntries(output.results.map((r) => [r.id, r.measured]));
    expect(measured['one-winner']).toMatch(
      /^1 winner \(1 execution\), 11 replays of its result, 0 other, of 12 acquirers/,
    );
    const wake = /^woken ([\d.]+) ms after complete\(\) was called/.exec(measured.wake);
    expect(Number(wake?.[1])).toBeLessThan(250);
    expect(measured['database-clock']).toMatch(/process clock moved ±1 h/);
    expect(measured.purge).toMatch(/^purged 2 of 5 \(dry-run count 2, 0 due after\)/);
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
    const { code, stdout } = await cli(['verify', '--json', '--concurrency', '4']);
    const output = jsonOf(stdout);
    const grades = Object.fromEntries(output.results.map((r) => [r.id, r]));
    expect(grades.fencing).toMatchObject({
      grade: 'FAIL',
      measured: expect.stringContaining('3/4 stale calls refused'),
    });
    expect(grades.fencing.measured).toContain('accepted: extend');
    expect(output.results.filter((r) => r.id !== 'fencing').map((r) => r.grade)).toEqual(
      Array(7).fill('PASS'),
    );
    expect(code).toBe(1);
    expect(await schemaExists(admin, output.scratchSchema)).toBe(false);
  });

  it('grades N/A, which is not a pass, when a guarantee cannot be set up, and exits 1', async () => {
    const tryAcquire = TypeOrmIdempotencyStore.prototype.tryAcquire;
    let fencingCalls = 0;
    vi.spyOn(TypeOrmIdempotencyStore.prototype, 'tryAcquire').mockImplementation(async function (
      this: TypeOrmIdempotencyStore,
      request: AcquireRequest,
    ) {
      // The fencing check cannot take over the expired lease: no stale owner to fence.
      if (request.scope === 'verify.fencing' && ++fencingCalls === 2) {
        return { kind: 'in-flight', retryAfterMs: 0 };
      }
      return tryAcquire.call(this, request);
    });
    const { code, stdout } = await cli(['verify', '--concurrency', '4']);
    scratchOf(stdout);
    expect(stdout.split('\n').find((line) => line.includes('Fencing of a stale'))).toMatch(
      /│ N\/A {3}│ no stale owner to fence: taking over the expired lease returned/,
    );
    expect(stdout).toMatch(/returned\s+│\n│[^│\n]+│\s+│ in-flight/); // the cell wraps
    expect(stdout).toContain(
      '7 PASS, 0 FAIL, 1 N/A: NOT VERIFIED: a guarantee could not be checked (N/A is not a pass).',
    );
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
