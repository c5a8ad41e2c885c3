import { DataSource } from 'typeorm';
import { AcquireRequest, encodeValue, Lease } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { cli, createRecordsTable, delay, tableSnapshot } from './cli-harness';

const SHORT = 300;
const LONG = 3_600_000;

describe('nest-idempotency purge', () => {
  let admin: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('cli_purge');
  const table = `${schema}.idempotency_records`;
  const at = (...args: string[]) => cli(['--schema', schema, ...args]);
  const scope = 'Purge.rules';

  async function acquire(key: string, overrides: Partial<AcquireRequest> = {}): Promise<Lease> {
    const result = await store.tryAcquire({
      scope,
      key,
      leaseMs: LONG,
      ttlMs: LONG,
      waitTimeoutMs: 0,
      fingerprint: null,
      ...overrides,
    });
    if (result.kind !== 'acquired') throw new Error(`seed: ${result.kind}`);
    return result.lease;
  }

  async function keys(): Promise<string[]> {
    return (await store.list({ scope, limit: 1000 })).map((r) => r.key).sort();
  }

  beforeAll(async () => {
    admin = await openDataSource();
    await createRecordsTable(admin, schema);
    store = new TypeOrmIdempotencyStore(admin, { schema });
    // Due: three COMPLETE records past their TTL, one IN_PROGRESS past TTL and lease.
    for (const key of ['done-expired-1', 'done-expired-2', 'done-expired-3']) {
      await store.complete(await acquire(key, { ttlMs: SHORT }), encodeValue(key));
    }
    await acquire('abandoned', { leaseMs: SHORT, ttlMs: SHORT });
    // Not due: a live result, a long-running action (TTL out, lease renewed), a lapsed lease within its TTL.
    await store.complete(await acquire('done-live'), encodeValue(1));
    const running = await acquire('running', { leaseMs: SHORT, ttlMs: SHORT });
    expect(await store.extend({ ...running, leaseMs: LONG } as Lease)).toBe(true);
    await acquire('lapsed-within-ttl', { leaseMs: SHORT, ttlMs: LONG });
    await delay(SHORT + 150); // let the short TTLs and leases run out
  });
  afterAll(async () => {
    await store?.close();
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  it('counts with --dry-run what would be purged, and deletes or changes nothing', async () => {
    const before = await tableSnapshot(admin, schema);
    const { code, stdout, stderr } = await at('purge', '--dry-run');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout).toBe(
      `dry run: 4 records would be purged from ${table}; nothing was deleted\n` +
        'rule: COMPLETE records past their TTL; IN_PROGRESS records past both their TTL and their lease\n',
    );
    const limited = await at('purge', '--dry-run', '--limit', '2', '--json');
    expect(JSON.parse(limited.stdout)).toEqual({ table, dryRun: true, count: 2, limit: 2 });
    expect(await tableSnapshot(admin, schema)).toBe(before);
  });

  it('purges by the store rule, up to --limit, and reports the count', async () => {
    const first = await at('purge', '--limit', '3', '--json');
    expect(first.code).toBe(0);
    expect(JSON.parse(first.stdout)).toEqual({ table, dryRun: false, count: 3, limit: 3 });

    const second = await at('purge');
    expect(second.code).toBe(0);
    expect(second.stdout.split('\n')[0]).toBe(`purged 1 record from ${table}`);
    expect(await keys()).toEqual(['done-live', 'lapsed-within-ttl', 'running']);

    const third = await at('purge', '--json');
    expect(JSON.parse(third.stdout)).toMatchObject({ count: 0 });
    expect(JSON.parse((await at('purge', '--dry-run', '--json')).stdout)).toMatchObject({
      count: 0,
    });
  });

  it('refuses a --limit that is not a positive whole number, before connecting', async () => {
    for (const limit of ['0', '-1', '2.5', 'all']) {
      const { code, stdout, stderr } = await cli(['purge', '--limit', limit], { env: {} });
      expect(code).toBe(2);
      expect(stdout).toBe('');
      expect(stderr).toMatch(/^error: option '--limit <n>' argument '.*' is invalid\. .*\n$/);
    }
  });
});
