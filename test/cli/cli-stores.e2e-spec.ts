import { AddressInfo, createServer, Server, Socket } from 'node:net';
import { DataSource } from 'typeorm';
import { encodeValue, IdempotencyStore, keyDigest, Lease } from 'nest-idempotency';
import { mysqlSchemaSql, TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { mysqlSnapshot } from '../support/mariadb-harness';
import { expectDigestLookups } from './digest-scenario';
import { expectResolveOnSql } from './resolve-scenario';
import {
  dropTable,
  mariadbAvailable,
  mysqlTarget,
  mysqlTestUrl,
  openMysqlDataSource,
  scratchTable,
} from '../support/mariadb';
import {
  AnyRedisClient,
  connectCluster,
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scanAll,
  scratchPrefix,
  snapshotScope,
} from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import {
  cli,
  CliRun,
  delay,
  expectedGrades,
  rowsMentioning,
  summaryJson,
  summaryLine,
} from './cli-harness';

/**
 * list, inspect, purge and verify on MariaDB (a mysql:// or mariadb:// URL)
 * and on Redis (--redis-url, standalone, and a Cluster of three masters with
 * --redis-cluster). PostgreSQL has its own files (cli-read, cli-purge,
 * cli-verify, cli-errors); these check what differs and that nothing of it
 * leaks a raw key or a password.
 */

const LIVE = 'raw-key-live-4b1d';
const LAPSED = 'raw-key-lapsed-77c0';
const DONE = 'raw-key-done-a3e9';
const STALE = 'raw-key-stale-0f52';
const RAW_KEYS = [LIVE, LAPSED, DONE, STALE];
const SCOPE = 'Payments.create';
const RESULT = { kind: 'http', status: 201, headers: {}, body: { id: 9 } };
const PASSWORD = 'cli-pa55-never-printed';

/** LIVE in flight; LAPSED's lease run out within its TTL; DONE complete; STALE complete past its TTL. */
async function seed(store: IdempotencyStore): Promise<void> {
  const acquire = async (key: string, leaseMs: number, ttlMs: number): Promise<Lease> => {
    const result = await store.tryAcquire({
      scope: SCOPE,
      key,
      leaseMs,
      ttlMs,
      waitTimeoutMs: 0,
      fingerprint: null,
    });
    if (result.kind !== 'acquired') throw new Error(`seed: ${result.kind}`);
    return result.lease;
  };
  await acquire(LIVE, 600_000, 3_600_000);
  await acquire(LAPSED, 100, 3_600_000);
  await store.complete(await acquire(DONE, 600_000, 3_600_000), encodeValue(RESULT));
  await store.complete(await acquire(STALE, 600_000, 100), encodeValue('old'));
  await delay(250); // LAPSED's lease and STALE's TTL run out; nobody contends for them
}

/** A record as `list` shows it in its DIGEST column: `#` and 12 hex digits, between spaces. */
function digestColumn(key: string): string {
  return `  #${keyDigest(SCOPE, key).slice(-12)}  `;
}

function expectNoRawKeys(text: string): void {
  for (const key of RAW_KEYS) expect(text).not.toContain(key);
}

/** One line on stderr, nothing on stdout, no stack trace. */
function expectOneLine(run: CliRun): string {
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(/^error: [^\n]+\n$/);
  expect(run.stderr).not.toMatch(/\n\s+at /);
  return run.stderr;
}

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A server that accepts connections and never answers. */
async function silentServer(): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface VerifyJson {
  store: string;
  results: Array<{ id: string; grade: string; measured: string }>;
  summary: { pass: number; fail: number; notApplicable: number; doesNotApply: number };
  [scratch: string]: unknown;
}

describe.runIf(mariadbAvailable())('nest-idempotency on MariaDB (mysql:// and mariadb://)', () => {
  let admin: DataSource;
  const table = scratchTable('cli');
  const where = `test.${table}`;
  const url = (scheme: 'mysql' | 'mariadb') => mysqlTestUrl().replace(/^mysql:/, `${scheme}:`);
  const at = (scheme: 'mysql' | 'mariadb', ...args: string[]) =>
    cli(['--table', table, ...args], { env: { DATABASE_URL: url(scheme) } });

  beforeAll(async () => {
    admin = await openMysqlDataSource();
    for (const sql of mysqlSchemaSql({ table })) await admin.query(sql);
    await seed(new TypeOrmIdempotencyStore(admin, { table }));
  });
  afterAll(async () => {
    if (admin) await dropTable(admin, table);
    await admin?.destroy();
  });

  it.each(['mysql', 'mariadb'] as const)(
    'list (%s://): digests and states by the server clock, never a raw key, in the URL database',
    async (scheme) => {
      const { code, stdout, stderr } = await at(scheme, 'list');
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expectNoRawKeys(stdout);
      const row = (key: string) => {
        const rows = rowsMentioning(stdout, digestColumn(key));
        expect(rows).toHaveLength(1);
        return rows[0];
      };
      expect(row(LIVE)).toMatch(/^Payments\.create\s+#\S+ {2}IN_PROGRESS {2}(9|10)m left\s+\ds$/);
      expect(row(LAPSED)).toMatch(/ IN_PROGRESS {2}expired \ds ago\s+\ds$/);
      expect(row(DONE)).toMatch(/ COMPLETE\s+59m left\s+\ds$/);
      expect(row(STALE)).toMatch(/ COMPLETE\s+expired \ds ago\s+\ds$/);
      expect(stdout).toMatch(
        new RegExp(`\\n4 records in ${where}, newest first\\nserver time \\S+Z\\n$`),
      );
    },
  );

  it('list --json and inspect read the records and change nothing', async () => {
    const before = await mysqlSnapshot(admin, table, SCOPE);
    const listed = await at('mariadb', 'list', '--state', 'in-progress', '--json');
    expect(listed.code).toBe(0);
    const output = JSON.parse(listed.stdout);
    expect(output.table).toBe(where);
    expect(output.records.map((r: { key: string }) => r.key).sort()).toEqual([LAPSED, LIVE].sort());
    const inspected = await at('mariadb', 'inspect', SCOPE, DONE, '--json');
    expect(inspected.code).toBe(0);
    expect(JSON.parse(inspected.stdout).record).toMatchObject({
      key: DONE,
      state: 'COMPLETE',
      payloadKind: 'value',
      payload: RESULT,
    });
    const missing = await at('mariadb', 'inspect', SCOPE, 'raw-key-absent');
    expect(expectOneLine(missing)).toBe(
      `error: no record for ${keyDigest(SCOPE, 'raw-key-absent')} in ${where}\n`,
    );
    expect(missing.code).toBe(5);
    expect(await mysqlSnapshot(admin, table, SCOPE)).toBe(before);
  });

  it('purge: --dry-run counts, then deletes by the store rule', async () => {
    const dry = await at('mysql', 'purge', '--dry-run', '--json');
    expect(JSON.parse(dry.stdout)).toEqual({ table: where, dryRun: true, count: 1, limit: null });
    const purged = await at('mariadb', 'purge');
    expect(purged.code).toBe(0);
    expect(purged.stdout.split('\n')[0]).toBe(`purged 1 record from ${where}`);
    const left = await admin.query(`SELECT \`key\` FROM \`${table}\` ORDER BY \`key\``);
    expect(left.map((r: { key: string }) => r.key)).toEqual([DONE, LAPSED, LIVE].sort());
  });

  it('--schema names the database; a missing table is exit 4 and is not created', async () => {
    const run = await cli(['--schema', 'test', '--table', `${table}_absent`, 'list'], {
      env: { DATABASE_URL: url('mariadb') },
    });
    expect(expectOneLine(run)).toBe(
      `error: table test.${table}_absent does not exist, and the CLI never creates it. Create it with the application's migrations (createIdempotencyMigrations() in its DataSource; with the TypeORM CLI: npx typeorm migration:run -d <data-source file>), or with its SQL: nest-idempotency schema-sql mariadb --table ${table}_absent | mysql -h ${mysqlTarget().host} -P ${mysqlTarget().port} -u <user> -p test; or start the application once with { ensureSchema: true } (development only)\n`,
    );
    expect(run.code).toBe(4);
    // What the message says to run makes a table the CLI opens.
    const printed = await cli(['schema-sql', 'mariadb', '--table', `${table}_absent`], { env: {} });
    try {
      // Several statements (the records table, the receipts tables), as the mysql client runs them.
      const script = printed.stdout.split('\n').slice(1).join('\n');
      for (const statement of script
        .split(/;\n/)
        .map((sql) => sql.trim())
        .filter(Boolean)) {
        await admin.query(statement);
      }
      const listed = await cli(['--table', `${table}_absent`, 'list', '--json'], {
        env: { DATABASE_URL: url('mariadb') },
      });
      expect(listed.code).toBe(0);
    } finally {
      for (const suffix of ['', '_receipts', '_receipt_heads']) {
        await dropTable(admin, `${table}_absent${suffix}`);
      }
    }
  });

  it.each(['mariadb', 'mysql'] as const)(
    'verify (%s://) grades every scenario PASS in a scratch table it drops',
    async (scheme) => {
      const { code, stdout, stderr } = await at(
        scheme,
        'verify',
        '--json',
        '--concurrency',
        '12',
        '--race-iterations',
        '100',
      );
      expect(stderr).toBe('');
      const output = JSON.parse(stdout) as VerifyJson;
      expect(output.store).toBe(scheme);
      // Every scenario PASS (purge.batch-limit included), but any that says it does not apply.
      const grades = expectedGrades({
        store: new TypeOrmIdempotencyStore(admin, { table }),
        clock: 'store',
      });
      expect(grades).toContainEqual(['purge.batch-limit', 'PASS']);
      expect(output.results.map((r) => [r.id, r.grade])).toEqual(grades);
      expect(output.summary).toEqual(summaryJson(grades));
      const scratch = String(output.scratchTable);
      expect(scratch).toMatch(/^test\.nest_idempotency_verify_[0-9a-f]{12}$/);
      expect(output.scratchTableDropped).toBe(true);
      const [{ n }] = await admin.query(
        `SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME = ?`,
        [scratch.slice('test.'.length)],
      );
      expect(Number(n)).toBe(0);
      expect(code).toBe(0);
    },
    60_000,
  );

  it('resolve: an AMBIGUOUS record becomes COMPLETE (replayed) or is deleted (the next attempt runs), recorded as cli:local', async () => {
    // A table of its own, so the counts above stay the seeded records'.
    const strictTable = `${table}_strict`;
    for (const sql of mysqlSchemaSql({ table: strictTable })) await admin.query(sql);
    const strict = new TypeOrmIdempotencyStore(admin, { table: strictTable });
    try {
      await expectResolveOnSql(
        strict,
        (...args) =>
          cli(['--table', strictTable, ...args], { env: { DATABASE_URL: url('mariadb') } }),
        `test.${strictTable}`,
        async (scope, key) => {
          await admin.query(
            `UPDATE \`${strictTable}\` SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE scope = ? AND \`key\` = ?`,
            [scope, key],
          );
        },
      );
    } finally {
      await strict.close();
      await dropTable(admin, strictTable);
    }
  });

  it('verify exits 4 with one line when the login may not create the scratch table', async () => {
    const user = `cli_nocreate_${Date.now().toString(36)}`;
    const host = new URL(mysqlTestUrl()).hostname || '127.0.0.1';
    await admin.query(`CREATE USER '${user}'@'${host}' IDENTIFIED BY '${PASSWORD}'`);
    try {
      await admin.query(`GRANT SELECT ON test.* TO '${user}'@'${host}'`);
      const login = new URL(url('mariadb'));
      login.username = user;
      login.password = PASSWORD;
      const run = await cli(['verify'], { env: { DATABASE_URL: login.toString() } });
      expect(expectOneLine(run)).toMatch(
        new RegExp(
          `^error: verify needs to create a scratch table, and this login may not: CREATE command denied to user '${user}'`,
        ),
      );
      expect(run.stderr).not.toContain(PASSWORD);
      expect(run.code).toBe(4);
    } finally {
      await admin.query(`DROP USER IF EXISTS '${user}'@'${host}'`);
    }
  });

  it('unreachable or refused: exit 3, one line naming the server, never the password', async () => {
    const port = await closedPort();
    const refused = await cli(['list'], {
      env: { DATABASE_URL: `mysql://root:${PASSWORD}@127.0.0.1:${port}/test` },
    });
    expect(expectOneLine(refused)).toMatch(
      new RegExp(`^error: cannot reach MySQL at 127\\.0\\.0\\.1:${port}/test: .*ECONNREFUSED`),
    );
    expect(refused.stderr).not.toContain(PASSWORD);
    expect(refused.code).toBe(3);

    const login = new URL(url('mariadb'));
    login.username = 'nobody_cli';
    login.password = PASSWORD;
    const denied = await cli(['list'], { env: { DATABASE_URL: login.toString() } });
    expect(expectOneLine(denied)).toMatch(
      /^error: cannot connect to MariaDB at [^:]+:\d+\/test: Access denied for user 'nobody_cli'/,
    );
    expect(denied.stderr).not.toContain(PASSWORD);
    expect(denied.code).toBe(3);

    const silent = await silentServer();
    try {
      const started = Date.now();
      const run = await cli(['--timeout', '300', 'list'], {
        env: { DATABASE_URL: `mariadb://root:${PASSWORD}@127.0.0.1:${silent.port}/test` },
      });
      expect(expectOneLine(run)).toMatch(/^error: cannot reach MariaDB at .*/);
      expect(run.stderr).not.toContain(PASSWORD);
      expect(run.code).toBe(3);
      expect(Date.now() - started).toBeLessThan(3000);
    } finally {
      await silent.close();
    }
  });

  it('refuses a URL without a database (unless --schema names one) and --key-prefix, exit 2', async () => {
    const noDatabase = await cli(['list'], {
      env: { DATABASE_URL: `mysql://root:${PASSWORD}@127.0.0.1:3306` },
    });
    expect(expectOneLine(noDatabase)).toBe(
      'error: the MySQL URL names no database: add one (mysql://host:3306/database) or pass --schema\n',
    );
    expect(noDatabase.code).toBe(2);
    const prefix = await cli(['--key-prefix', 'x:', 'list', '--database-url', url('mariadb')], {
      env: {},
    });
    expect(expectOneLine(prefix)).toBe(
      'error: --key-prefix is for Redis; a database has --schema and --table\n',
    );
    expect(prefix.code).toBe(2);
  });

  // Last: it adds records to the table the tests above count.
  it('inspect and resolve by digest: the server hashes UTF-8 keys and tenants as the logs do', async () => {
    await expectDigestLookups(
      new TypeOrmIdempotencyStore(admin, { table }),
      (...args) => at('mariadb', ...args),
      where,
    );
  });
});

const redisProbe = probeRedisSync();

describeIfRedis(redisProbe, `Redis at ${redisUrl()}`)('nest-idempotency on Redis', () => {
  let admin: AnyRedisClient;
  let store: RedisIdempotencyStore;
  const prefix = scratchPrefix('cli');
  const target = (() => {
    const u = new URL(redisUrl());
    return `${u.hostname}:${u.port || '6379'}`;
  })();
  const where = `${prefix}* on Redis ${target}`;
  const at = (...args: string[]) =>
    cli(['--key-prefix', prefix, ...args], { env: { REDIS_URL: redisUrl() } });

  beforeAll(async () => {
    admin = await connectStandalone(redisUrl());
    store = new RedisIdempotencyStore(admin, { keyPrefix: prefix });
    await seed(store);
  });
  afterAll(async () => {
    if (admin) {
      await deletePrefix(admin, prefix);
      admin.destroy();
    }
  });

  it('list: the records Redis still has (a result past its TTL is gone), by the server clock, never a raw key', async () => {
    const before = await snapshotScope(admin, store, SCOPE);
    const { code, stdout, stderr } = await at('list');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expectNoRawKeys(stdout);
    const row = (key: string) => rowsMentioning(stdout, digestColumn(key));
    expect(row(LIVE)[0]).toMatch(/ IN_PROGRESS {2}(9|10)m left\s+\ds$/);
    expect(row(LAPSED)[0]).toMatch(/ IN_PROGRESS {2}expired \ds ago\s+\ds$/);
    expect(row(DONE)[0]).toMatch(/ COMPLETE\s+59m left\s+\ds$/);
    expect(row(STALE)).toEqual([]);
    expect(stdout).toMatch(
      new RegExp(
        `\\n3 records in ${where.replace(/[.*]/g, '\\$&')}, newest first\\nserver time \\S+Z\\n$`,
      ),
    );
    // --redis-url works as REDIS_URL does, and --json carries the raw keys.
    const json = await cli(['--redis-url', redisUrl(), '--key-prefix', prefix, 'list', '--json'], {
      env: {},
    });
    expect(
      JSON.parse(json.stdout)
        .records.map((r: { key: string }) => r.key)
        .sort(),
    ).toEqual([DONE, LAPSED, LIVE].sort());
    expect(await snapshotScope(admin, store, SCOPE)).toBe(before);
  });

  it('inspect: a record and its payload; a record Redis expired is exit 5', async () => {
    const before = await snapshotScope(admin, store, SCOPE);
    const inspected = await at('inspect', SCOPE, DONE);
    expect(inspected.code).toBe(0);
    expect(inspected.stdout).toContain(
      `payload (as stored, after sanitize):\n${JSON.stringify(RESULT, null, 2)}\n`,
    );
    expectNoRawKeys(inspected.stdout);
    const gone = await at('inspect', SCOPE, STALE);
    expect(expectOneLine(gone)).toBe(
      `error: no record for ${keyDigest(SCOPE, STALE)} in ${where}\n`,
    );
    expect(gone.code).toBe(5);
    expect(await snapshotScope(admin, store, SCOPE)).toBe(before);
  });

  it('purge: nothing is ever left to purge, and it says why', async () => {
    const before = await snapshotScope(admin, store, SCOPE);
    const run = await at('purge');
    expect(run).toEqual({
      code: 0,
      stderr: '',
      stdout:
        `purged 0 records from ${where}\n` +
        'rule: COMPLETE records past their TTL; IN_PROGRESS records past both their TTL and their lease\n' +
        'Redis expires each record itself once this rule applies (at the later of its TTL and its lease), so there is never anything left to purge\n',
    });
    const dry = await at('purge', '--dry-run', '--json');
    expect(JSON.parse(dry.stdout)).toEqual({
      table: where,
      dryRun: true,
      count: 0,
      limit: null,
      expiredByBackend: true,
    });
    expect(await snapshotScope(admin, store, SCOPE)).toBe(before);
  });

  it('verify: every scenario PASS but the one that does not apply (Redis expires records itself); exit 0; scratch keys deleted', async () => {
    const { code, stdout, stderr } = await cli(
      ['verify', '--concurrency', '12', '--race-iterations', '100'],
      { env: { REDIS_URL: redisUrl() } },
    );
    expect(stderr).toBe('');
    const scratch = /scratch keys (nest-idempotency-verify:[0-9a-f]{12}:)\* deleted\./.exec(
      stdout,
    )?.[1];
    expect(scratch, stdout).toBeDefined();
    expect(stdout.split('\n').find((line) => line.includes('at most `limit` records'))).toMatch(
      /│ N\/A {3}│ the backend expires records itself/,
    );
    const grades = expectedGrades({ store, clock: 'store', expiry: 'backend' });
    expect(grades).toContainEqual(['purge.batch-limit', 'N/A']);
    expect(stdout).toContain(`${summaryLine(grades)} Redis `);
    expect(code).toBe(0);
    expect(await scanAll(admin, `${scratch}*`)).toEqual([]);
  }, 60_000);

  it('resolve: an AMBIGUOUS record becomes COMPLETE (replayed) or is deleted (the next attempt runs), recorded as cli:local', async () => {
    const strictPrefix = scratchPrefix('cli-resolve');
    const strict = new RedisIdempotencyStore(admin, { keyPrefix: strictPrefix });
    const scope = 'Payments.refund';
    const [ran, notRun, open] = ['raw-key-ran-5e1a', 'raw-key-not-run-91c4', 'raw-key-open-2b7d'];
    const on = (...args: string[]) =>
      cli(['--key-prefix', strictPrefix, ...args], { env: { REDIS_URL: redisUrl() } });
    const acquire = async (key: string): Promise<Lease> => {
      const result = await strict.tryAcquire({
        scope,
        key,
        leaseMs: 600_000,
        ttlMs: 3_600_000,
        waitTimeoutMs: 0,
        fingerprint: null,
        onExpiredLease: 'refuse',
      });
      if (result.kind !== 'acquired') throw new Error(`resolve seed: ${result.kind}`);
      return result.lease;
    };
    try {
      await strict.strictMode.markAmbiguous(await acquire(ran), 'action-failed');
      await strict.strictMode.markAmbiguous(await acquire(notRun), 'lease-expired');
      await acquire(open);
      const strictWhere = `${strictPrefix}* on Redis ${target}`;

      const listed = await on('list');
      expect(rowsMentioning(listed.stdout, `#${keyDigest(scope, ran).slice(-12)}`)[0]).toMatch(
        / AMBIGUOUS {4}until resolved /,
      );
      expect(listed.stdout).not.toContain(ran);
      const onlyAmbiguous = await on('list', '--state', 'ambiguous', '--json');
      expect(
        JSON.parse(onlyAmbiguous.stdout)
          .records.map((r: { key: string; ambiguousReason: string }) => [r.key, r.ambiguousReason])
          .sort(),
      ).toEqual([
        [notRun, 'lease-expired'],
        [ran, 'action-failed'],
      ]);
      const before = await on('inspect', scope, ran);
      expect(before.stdout).toMatch(
        /│ ambiguous\s+│ \S+Z \(.*\), action-failed; resolve it: nest-idempotency resolve \S+\/#[0-9a-f]{12} --completed or --not-executed/,
      );
      expect(before.stdout).toContain('payload: none (the outcome of the action is unknown)');

      const completed = await on('resolve', scope, ran, '--completed', '--payload', '{"id":7}');
      expect(completed.stderr).toBe('');
      expect(completed.stdout).toMatch(
        new RegExp(
          `^resolved ${keyDigest(scope, ran).replace(/[.*/#]/g, '\\$&')} in \\S+ on Redis \\S+ as completed by cli:local at \\S+Z: it is COMPLETE and replayed until \\S+Z\\n$`,
        ),
      );
      expect(completed.stdout).not.toContain(ran);
      expect(completed.code).toBe(0);
      const view = await strict.find({ scope, key: ran });
      expect(view).toMatchObject({ state: 'COMPLETE', resolvedBy: 'cli:local' });
      const after = await on('inspect', scope, ran);
      expect(after.stdout).toMatch(/│ resolved\s+│ by cli:local at \S+Z\s+│/);
      expect(after.stdout).toContain(
        `payload (as stored, after sanitize):\n${JSON.stringify({ id: 7 }, null, 2)}`,
      );
      const replay = await strict.tryAcquire({
        scope,
        key: ran,
        leaseMs: 1000,
        ttlMs: 1000,
        waitTimeoutMs: 0,
        fingerprint: null,
        onExpiredLease: 'refuse',
      });
      expect(replay.kind).toBe('duplicate');

      const deleted = await on('resolve', scope, notRun, '--not-executed', '--json');
      expect(deleted.code).toBe(0);
      expect(JSON.parse(deleted.stdout)).toMatchObject({
        table: strictWhere,
        key: notRun,
        outcome: 'not-executed',
        resolvedBy: 'cli:local',
        expiresAt: null,
        event: { type: 'resolved', resolver: 'cli:local', outcome: 'not-executed' },
      });
      expect(await strict.find({ scope, key: notRun })).toBeNull();

      // Only an AMBIGUOUS record is resolved: the one in flight is left as it is.
      const held = await on('resolve', scope, open, '--not-executed');
      expect(expectOneLine(held)).toBe(
        `error: ${keyDigest(scope, open)} in ${strictWhere} is IN_PROGRESS, not AMBIGUOUS: nothing was changed (only an AMBIGUOUS record is resolved)\n`,
      );
      expect(held.code).toBe(6);
      expect((await strict.find({ scope, key: open }))?.state).toBe('IN_PROGRESS');
      const missing = await on('resolve', scope, notRun, '--not-executed');
      expect(missing.code).toBe(5);
      const both = await on('resolve', scope, open, '--completed', '--not-executed');
      expect(expectOneLine(both)).toBe(
        'error: pass exactly one of --completed and --not-executed\n',
      );
      expect(both.code).toBe(2);
      const badJson = await on('resolve', scope, open, '--completed', '--payload', '{id');
      expect(badJson.stderr).toMatch(/^error: --payload is not JSON: /);
      expect(badJson.code).toBe(2);
      expect((await strict.find({ scope, key: open }))?.state).toBe('IN_PROGRESS');
    } finally {
      await deletePrefix(admin, strictPrefix);
    }
  });

  it('inspect and resolve by digest: every record under the prefix is read, tenants included', async () => {
    const digestPrefix = scratchPrefix('cli-digest');
    try {
      await expectDigestLookups(
        new RedisIdempotencyStore(admin, { keyPrefix: digestPrefix }),
        (...args) =>
          cli(['--key-prefix', digestPrefix, ...args], { env: { REDIS_URL: redisUrl() } }),
        `${digestPrefix}* on Redis ${target}`,
      );
    } finally {
      await deletePrefix(admin, digestPrefix);
    }
  });

  it('unreachable or silent: exit 3, one line naming host and port, never the password', async () => {
    const port = await closedPort();
    const refused = await cli(['list'], {
      env: { REDIS_URL: `redis://app:${PASSWORD}@127.0.0.1:${port}` },
    });
    expect(expectOneLine(refused)).toMatch(
      new RegExp(`^error: cannot connect to Redis at 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`),
    );
    expect(refused.stderr).not.toContain(PASSWORD);
    expect(refused.code).toBe(3);

    const silent = await silentServer();
    try {
      const started = Date.now();
      const run = await cli(['--timeout', '300', 'list'], {
        env: { REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${silent.port}` },
      });
      const elapsed = Date.now() - started;
      expect(expectOneLine(run)).toMatch(
        new RegExp(
          `^error: cannot connect to Redis at 127\\.0\\.0\\.1:${silent.port} within 300 ms`,
        ),
      );
      expect(run.stderr).not.toContain(PASSWORD);
      expect(run.code).toBe(3);
      expect(elapsed).toBeGreaterThanOrEqual(280);
      expect(elapsed).toBeLessThan(3000);
    } finally {
      await silent.close();
    }
  });

  it.each([
    [
      ['list', '--redis-url', 'redis://h', '--database-url', 'postgres://h/db'],
      {},
      'pass --database-url or --redis-url, not both',
    ],
    [
      ['list'],
      { DATABASE_URL: 'postgres://h/db', REDIS_URL: 'redis://h' },
      'both DATABASE_URL and REDIS_URL are set: choose the store with --database-url or --redis-url',
    ],
    [
      ['--schema', 'public', 'list', '--redis-url', 'redis://h'],
      {},
      '--schema is for a database; Redis records are found by --key-prefix',
    ],
    [
      ['list', '--redis-url', `redis://:${PASSWORD}@a:7000,redis://b:7000`],
      {},
      '--redis-url holds 2 URLs: several are the seed nodes of a Cluster; add --redis-cluster',
    ],
    [
      ['list', '--redis-url', `postgres://u:${PASSWORD}@h/db`],
      {},
      'the Redis URL must start with redis:// or rediss://, not postgres://',
    ],
    [
      ['list', '--database-url', `redis://u:${PASSWORD}@h`],
      {},
      'the database URL must start with postgres://, postgresql://, mysql:// or mariadb://, not redis://; a Redis URL goes in --redis-url',
    ],
    [['list', '--redis-cluster'], {}, 'no Redis: pass --redis-url or set REDIS_URL'],
  ])('%j with %j: exit 2, before connecting', async (args, env, message) => {
    const run = await cli(args, { env });
    expect(expectOneLine(run)).toBe(`error: ${message}\n`);
    expect(run.stderr).not.toContain(PASSWORD);
    expect(run.code).toBe(2);
  });

  describe.runIf(hasRedisBinaries().available)('on a Redis Cluster (--redis-cluster)', () => {
    let cluster: RedisServers;
    let clusterAdmin: AnyRedisClient;
    const clusterPrefix = scratchPrefix('cli-cluster');
    let seeds: string;

    beforeAll(async () => {
      cluster = await startCluster();
      clusterAdmin = await connectCluster(cluster.ports);
      await seed(new RedisIdempotencyStore(clusterAdmin, { keyPrefix: clusterPrefix }));
      seeds = cluster.ports
        .slice(0, 2)
        .map((port) => `redis://127.0.0.1:${port}`)
        .join(',');
    }, 60_000);
    afterAll(async () => {
      clusterAdmin?.destroy();
      await cluster?.stop();
    });

    it('list finds the records on every master, from two seed nodes', async () => {
      const run = await cli(
        ['--redis-cluster', '--redis-url', seeds, '--key-prefix', clusterPrefix, 'list', '--json'],
        { env: {} },
      );
      expect(run.stderr).toBe('');
      const output = JSON.parse(run.stdout);
      expect(output.table).toBe(
        `${clusterPrefix}* on Redis Cluster ${cluster.ports
          .slice(0, 2)
          .map((port) => `127.0.0.1:${port}`)
          .join(', ')}`,
      );
      expect(output.records.map((r: { key: string }) => r.key).sort()).toEqual(
        [DONE, LAPSED, LIVE].sort(),
      );
    });

    it('inspect and resolve by digest, reading every master', async () => {
      const digestPrefix = scratchPrefix('cli-cluster-digest');
      try {
        await expectDigestLookups(
          new RedisIdempotencyStore(clusterAdmin, { keyPrefix: digestPrefix }),
          (...args) =>
            cli(['--redis-cluster', '--redis-url', seeds, '--key-prefix', digestPrefix, ...args], {
              env: {},
            }),
          `${digestPrefix}* on Redis Cluster ${cluster.ports
            .slice(0, 2)
            .map((port) => `127.0.0.1:${port}`)
            .join(', ')}`,
        );
      } finally {
        await deletePrefix(clusterAdmin, digestPrefix);
      }
    });

    it('verify: every scenario PASS but the one that does not apply, on the Cluster', async () => {
      const run = await cli(
        ['--redis-cluster', 'verify', '--json', '--concurrency', '12', '--race-iterations', '100'],
        { env: { REDIS_URL: seeds } },
      );
      expect(run.stderr).toBe('');
      const output = JSON.parse(run.stdout) as VerifyJson;
      expect(output.store).toBe('redis-cluster');
      const grades = expectedGrades({
        store: new RedisIdempotencyStore(clusterAdmin, { keyPrefix: clusterPrefix }),
        clock: 'store',
        expiry: 'backend',
      });
      expect(grades).toContainEqual(['purge.batch-limit', 'N/A']);
      expect(output.results.map((r) => [r.id, r.grade])).toEqual(grades);
      expect(output.summary).toEqual(summaryJson(grades));
      expect(output.scratchPrefixDeleted).toBe(true);
      expect(await scanAll(clusterAdmin, `${String(output.scratchPrefix)}*`)).toEqual([]);
      expect(run.code).toBe(0);
    }, 60_000);
  });
});
