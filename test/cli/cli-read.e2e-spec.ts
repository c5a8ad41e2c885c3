import { DataSource } from 'typeorm';
import { encodeValue, keyDigest } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { cli, createRecordsTable, delay, rowsMentioning, tableSnapshot } from './cli-harness';

// Raw keys that must never show up in a table or an error message.
const LIVE = 'raw-key-live-7f3a9c';
const LAPSED = 'raw-key-lapsed-91c2e4';
const DONE = 'raw-key-done-5b0e11';
const NOTHING = 'raw-key-nothing-0d4f2a';
const STALE = 'raw-key-stale-c81b77';
const RAW_KEYS = [LIVE, LAPSED, DONE, NOTHING, STALE];

const PAYMENTS = 'Payments.create';
const ORDERS = 'Orders.place';
const OLD = 'Old.results';
const RESULT = { kind: 'http', status: 201, headers: {}, body: { id: 7, note: 'ünïcødé ✓' } };

describe('nest-idempotency list and inspect', () => {
  let admin: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('cli_read');
  const table = `${schema}.idempotency_records`;
  const at = (...args: string[]) => cli(['--schema', schema, ...args]);

  beforeAll(async () => {
    admin = await openDataSource();
    await createRecordsTable(admin, schema);
    store = new TypeOrmIdempotencyStore(admin, { schema });
    const acquire = async (scope: string, key: string, leaseMs: number, ttlMs: number) => {
      const result = await store.tryAcquire({
        scope,
        key,
        leaseMs,
        ttlMs,
        waitTimeoutMs: 0,
        fingerprint: key === LIVE ? 'fp-live' : null,
      });
      if (result.kind !== 'acquired') throw new Error(`seed: ${result.kind}`);
      return result.lease;
    };
    await acquire(PAYMENTS, LIVE, 600_000, 3_600_000);
    await acquire(PAYMENTS, LAPSED, 100, 3_600_000);
    await store.complete(await acquire(ORDERS, DONE, 600_000, 3_600_000), encodeValue(RESULT));
    await store.complete(
      await acquire(ORDERS, NOTHING, 600_000, 3_600_000),
      encodeValue(undefined),
    );
    await store.complete(await acquire(OLD, STALE, 600_000, 100), encodeValue('old'));
    await delay(250); // LAPSED's lease and STALE's TTL run out; nobody contends for them
  });
  afterAll(async () => {
    await store?.close();
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  function expectNoRawKeys(text: string): void {
    for (const key of RAW_KEYS) expect(text).not.toContain(key);
  }

  describe('list', () => {
    it('prints columns of digests, states, leases or TTLs and ages, and never a raw key', async () => {
      const { code, stdout, stderr } = await at('list');
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expectNoRawKeys(stdout);
      const lines = stdout.split('\n');
      expect(lines[0]).toMatch(/^SCOPE\s+DIGEST\s+STATE\s+LEASE\/TTL\s+AGE$/);
      const row = (scope: string, key: string) => {
        // The digest stands alone: its scope is in the first column.
        const rows = rowsMentioning(stdout, `#${keyDigest(scope, key).slice(-12)}`);
        expect(rows).toHaveLength(1);
        expect(rows[0]).not.toContain(keyDigest(scope, key));
        return rows[0];
      };
      const digest = (scope: string, key: string) => `#${keyDigest(scope, key).slice(-12)}`;
      expect(row(PAYMENTS, LIVE)).toMatch(
        new RegExp(
          `^Payments\\.create\\s+${digest(PAYMENTS, LIVE)}  IN_PROGRESS  (9|10)m left\\s+\\ds$`,
        ),
      );
      expect(row(PAYMENTS, LAPSED)).toMatch(/ IN_PROGRESS {2}expired \ds ago\s+\ds$/);
      expect(row(ORDERS, DONE)).toMatch(
        /^Orders\.place\s+#[0-9a-f]{12} {2}COMPLETE\s+59m left\s+\ds$/,
      );
      expect(row(ORDERS, NOTHING)).toMatch(/ COMPLETE\s+59m left\s+\ds$/);
      expect(row(OLD, STALE)).toMatch(/ COMPLETE\s+expired \ds ago\s+\ds$/);
      expect(stdout).toMatch(
        new RegExp(`\\n5 records in ${table}, newest first\\nserver time \\S+Z\\n$`),
      );
    });

    it('fits an 80-column terminal, naming a tenant’s record by its scope as logs do', async () => {
      // A 29-character scope with the widest LEASE/TTL and AGE a record here can show.
      const wide = 'SubscriptionsController.renew';
      const tenantScope = `${wide}#tenant:a-tenant-with-a-long-name-0123456789`;
      const lapsed = await store.tryAcquire({
        scope: tenantScope,
        key: 'raw-key-wide-1',
        leaseMs: 1,
        ttlMs: 3_600_000,
        waitTimeoutMs: 0,
        fingerprint: null,
      });
      expect(lapsed.kind).toBe('acquired');
      await delay(20);
      onTestFinished(() =>
        admin.query(`DELETE FROM "${schema}".idempotency_records WHERE scope = $1`, [tenantScope]),
      );
      const { stdout } = await at('list', '--scope', tenantScope);
      const lines = stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(4);
      for (const line of lines) expect(line.length).toBeLessThanOrEqual(80);
      // The handler's scope and the digest, as a log line names the record: no tenant.
      const digest = keyDigest(wide, 'raw-key-wide-1', 'a-tenant-with-a-long-name-0123456789');
      expect(lines[1]).toMatch(
        new RegExp(`^${wide}  #${digest.slice(-12)}  IN_PROGRESS  expired \\ds ago\\s+\\ds$`),
      );
      expect(stdout).not.toContain('a-tenant-with');
    });

    it('filters by scope and state, and prints raw keys only with --json', async () => {
      const { code, stdout, stderr } = await at(
        'list',
        '--scope',
        ORDERS,
        '--state',
        'complete',
        '--json',
      );
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      const output = JSON.parse(stdout);
      expect(output).toEqual({
        table,
        serverTime: expect.stringMatching(/Z$/),
        records: expect.any(Array),
      });
      expect(output.records.map((r: { key: string }) => r.key).sort()).toEqual(
        [DONE, NOTHING].sort(),
      );
      for (const record of output.records) {
        expect(record).toEqual({
          scope: ORDERS,
          key: record.key,
          keyDigest: keyDigest(ORDERS, record.key),
          state: 'COMPLETE',
          leaseExpired: false,
          leaseExpiresAt: null,
          leaseRemainingMs: null,
          expiresAt: expect.any(String),
          expiresInMs: expect.any(Number),
          createdAt: expect.any(String),
          ageMs: expect.any(Number),
          completedAt: expect.any(String),
          fingerprint: null,
        });
        expect(record.expiresInMs).toBeGreaterThan(3_500_000);
      }
    });

    it('shows an expired lease nobody took over as it is, with the time left as the server counts it', async () => {
      const { code, stdout } = await at('list', '--state', 'in-progress', '--json');
      expect(code).toBe(0);
      const records = JSON.parse(stdout).records as Array<Record<string, unknown>>;
      const byKey = Object.fromEntries(records.map((r) => [r.key, r]));
      expect(Object.keys(byKey).sort()).toEqual([LAPSED, LIVE].sort());
      expect(byKey[LAPSED]).toMatchObject({ state: 'IN_PROGRESS', leaseExpired: true });
      expect(byKey[LAPSED].leaseRemainingMs).toBeLessThan(0);
      expect(byKey[LIVE]).toMatchObject({
        state: 'IN_PROGRESS',
        leaseExpired: false,
        fingerprint: 'fp-live',
      });
      expect(byKey[LIVE].leaseRemainingMs).toBeGreaterThan(500_000);
    });

    it('stops at --limit and says there may be more', async () => {
      const { code, stdout } = await at('list', '--limit', '2');
      expect(code).toBe(0);
      expect(stdout.split('\n').filter((line) => / #[0-9a-f]{12} /.test(line))).toHaveLength(2);
      expect(stdout).toContain('2 records in');
      expect(stdout).toContain('there may be more: raise --limit');
    });

    it('prints an empty table for a scope with no records', async () => {
      const { code, stdout } = await at('list', '--scope', 'Nobody.here');
      expect(code).toBe(0);
      expect(stdout).toContain(`0 records in ${table}`);
    });
  });

  describe('inspect', () => {
    it('prints the whole record and its payload as stored, by digest only', async () => {
      const { code, stdout, stderr } = await at('inspect', ORDERS, DONE);
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expectNoRawKeys(stdout);
      expect(rowsMentioning(stdout, 'key digest')[0]).toContain(keyDigest(ORDERS, DONE));
      expect(rowsMentioning(stdout, '│ state')[0]).toMatch(/│ COMPLETE\s+│/);
      expect(rowsMentioning(stdout, '│ completed')[0]).toMatch(/Z \(\d+(ms|s) ago\)/);
      const payload = stdout.slice(stdout.indexOf('payload (as stored, after sanitize):\n') + 37);
      expect(JSON.parse(payload)).toEqual(RESULT);
    });

    it('prints the raw key and the payload with --json', async () => {
      const { code, stdout } = await at('inspect', ORDERS, DONE, '--json');
      expect(code).toBe(0);
      expect(JSON.parse(stdout).record).toMatchObject({
        scope: ORDERS,
        key: DONE,
        keyDigest: keyDigest(ORDERS, DONE),
        state: 'COMPLETE',
        payload: RESULT,
      });
    });

    it('tells an undefined result from no result yet', async () => {
      const nothing = await at('inspect', ORDERS, NOTHING);
      expect(nothing.stdout).toContain('payload: undefined (the action returned nothing)');
      expect(
        JSON.parse((await at('inspect', ORDERS, NOTHING, '--json')).stdout).record,
      ).not.toHaveProperty('payload');
      const lapsed = await at('inspect', PAYMENTS, LAPSED);
      expect(lapsed.code).toBe(0);
      expect(rowsMentioning(lapsed.stdout, '│ state')[0]).toContain('IN_PROGRESS (lease expired)');
      expect(rowsMentioning(lapsed.stdout, '│ lease')[0]).toMatch(/\(expired \d+(ms|s) ago\)/);
      expect(lapsed.stdout).toContain('payload: none yet (the action has not completed)');
    });

    it('exits 5 with one line naming the digest, never the key, when there is no such record', async () => {
      const missing = 'raw-key-never-stored-e9d0';
      const { code, stdout, stderr } = await at('inspect', ORDERS, missing);
      expect(code).toBe(5);
      expect(stdout).toBe('');
      expect(stderr).toBe(`error: no record for ${keyDigest(ORDERS, missing)} in ${table}\n`);
      expect(stderr).not.toContain(missing);
    });
  });

  describe('reading is never a transition', () => {
    it('leaves every row, including an expired lease, byte for byte as it was after list and inspect', async () => {
      const before = await tableSnapshot(admin, schema);
      const lapsedBefore = await store.find({ scope: PAYMENTS, key: LAPSED });
      expect(lapsedBefore).toMatchObject({ state: 'IN_PROGRESS', leaseExpired: true });

      for (const args of [
        ['list'],
        ['list', '--json'],
        ['list', '--state', 'in-progress'],
        ['list', '--scope', PAYMENTS, '--json'],
        ['inspect', PAYMENTS, LAPSED],
        ['inspect', PAYMENTS, LAPSED, '--json'],
        ['inspect', OLD, STALE],
        ['inspect', ORDERS, 'absent-key'],
      ]) {
        expect((await at(...args)).code).toBe(args[2] === 'absent-key' ? 5 : 0);
      }

      expect(await tableSnapshot(admin, schema)).toBe(before);
      // and a contender still finds the lease expired and takes it over: nothing was repaired
      const contender = await store.tryAcquire({
        scope: PAYMENTS,
        key: LAPSED,
        leaseMs: 600_000,
        ttlMs: 3_600_000,
        waitTimeoutMs: 0,
        fingerprint: null,
      });
      expect(contender.kind).toBe('acquired');
      expect(await tableSnapshot(admin, schema)).not.toBe(before);
    });
  });
});
