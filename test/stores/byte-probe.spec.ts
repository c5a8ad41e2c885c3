import type { DataSource, Logger } from 'typeorm';
import { InMemoryIdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { PROBE_BYTES } from '../../libs/idempotency/src/core/byte-probe';
import { dropTable, mariadbAvailable, openMysqlDataSource, scratchTable } from '../support/mariadb';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Issue 20, item 10: every built-in store proves at init() that a payload
 * with 0x00, 0xff and invalid UTF-8 comes back byte for byte, with a record of
 * its own (lease and TTL on the database's clock) that it deletes afterwards.
 * The Redis side is in ./redis-client-version.spec.ts.
 */
class StatementLog implements Logger {
  readonly statements: string[] = [];
  logQuery(query: string): void {
    this.statements.push(query);
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}

const quiet = { warn: () => undefined, error: () => undefined };

it('the probe holds bytes a text decoding would change: 0x00, 0xff, invalid UTF-8', () => {
  expect(PROBE_BYTES.includes(0x00)).toBe(true);
  expect(PROBE_BYTES.includes(0xff)).toBe(true);
  expect(Buffer.from(PROBE_BYTES.toString('utf8'), 'utf8').equals(PROBE_BYTES)).toBe(false);
});

it('the in-memory store proves the round trip at init and keeps no probe record', async () => {
  const store = new InMemoryIdempotencyStore();
  await store.init();
  expect(await store.list()).toEqual([]);
});

describe('TypeOrmIdempotencyStore on PostgreSQL', () => {
  const schema = scratchSchema('probe');
  const log = new StatementLog();
  let dataSource: DataSource;

  beforeAll(async () => {
    dataSource = await openDataSource({ logger: log, logging: true });
  });

  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  it('writes, replays, reads and deletes a probe record at init, leaving the table empty', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      logger: quiet,
    });
    await store.init();
    const probe = log.statements.filter((s) => /nest_idem|DELETE|UPDATE|INSERT/i.test(s));
    expect(probe.some((s) => /^\s*UPDATE/i.test(s) && /payload/.test(s))).toBe(true);
    expect(probe.some((s) => /^\s*DELETE FROM .* WHERE id = \$1\s*$/i.test(s))).toBe(true);
    const [{ count }] = await dataSource.query(
      `SELECT count(*)::int AS count FROM "${schema}".idempotency_records`,
    );
    expect(count).toBe(0);
    await store.close();
  });
});

describe.runIf(mariadbAvailable())('TypeOrmIdempotencyStore on MariaDB', () => {
  const table = scratchTable('probe');
  const log = new StatementLog();
  let dataSource: DataSource;

  beforeAll(async () => {
    dataSource = await openMysqlDataSource({ logger: log, logging: true });
  });

  afterAll(async () => {
    await dropTable(dataSource, table);
    await dataSource.destroy();
  });

  it('writes, replays, reads and deletes a probe record at init, leaving the table empty', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, {
      table,
      ensureSchema: true,
      logger: quiet,
    });
    await store.init();
    expect(log.statements.some((s) => /^\s*DELETE FROM .* WHERE id = \?\s*$/i.test(s))).toBe(true);
    const [{ count }] = await dataSource.query(`SELECT COUNT(*) AS count FROM \`${table}\``);
    expect(Number(count)).toBe(0);
    await store.close();
  });
});
