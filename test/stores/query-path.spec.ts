import type { Pool } from 'pg';
import type { DataSource } from 'typeorm';
import { Deadlines } from '../../libs/idempotency/src/stores/sql/bounded-query';
import { connectorOf, mysqlStoreQuery } from '../../libs/idempotency/src/stores/sql/mysql/query';
import { poolOf } from '../../libs/idempotency/src/stores/sql/postgres/pool';
import { storeQuery } from '../../libs/idempotency/src/stores/sql/postgres/query';
import { typeormQueryLog } from '../../libs/idempotency/src/stores/typeorm/typeorm.query-log';
import { mariadbAvailable, openMysqlDataSource } from '../support/mariadb';
import { openDataSource } from '../support/postgres';

/**
 * The store's own query paths (issue 20, item 8): a statement that fails in
 * the driver before it reaches the server (here a value the driver cannot
 * serialize) must answer its caller once, hand its pooled connection back at
 * most once, and drop that connection rather than return it in a state nobody
 * knows; the pool then keeps serving. (The stores refuse such a value before it
 * gets here; this is the query path on its own.)
 */
function circular(): Record<string, unknown> {
  const value: Record<string, unknown> = { text: 'not a parameter' };
  value.self = value;
  return value;
}

describe('the PostgreSQL query path', () => {
  let dataSource: DataSource;
  let pool: Pool;
  const deadlines = new Deadlines(5000);
  const run = <T>(text: string, values: unknown[], name?: string) =>
    storeQuery<T>(
      { pool: () => poolOf(dataSource), log: typeormQueryLog(dataSource), unready: 'unready' },
      deadlines,
      {
        operation: 'test',
        text,
        values,
        name,
        logged: () => [],
      },
    );
  const backendPid = async () =>
    (await run<{ pid: number }>('SELECT pg_backend_pid() AS pid', [])).rows[0].pid;

  beforeAll(async () => {
    // One connection: a client released twice, or returned broken, shows at once.
    dataSource = await openDataSource({ extra: { max: 1 } });
    pool = poolOf(dataSource)!;
  });

  afterAll(async () => {
    await dataSource?.destroy();
  });

  it.each([
    ['unnamed', undefined],
    ['prepared', 'nest_idem_test_circular'],
  ])(
    'a value pg cannot serialize (%s statement) fails once and the connection is dropped, not released twice',
    async (_label, name) => {
      const before = await backendPid();
      const released: unknown[] = [];
      const onRelease = (error: unknown) => released.push(error);
      pool.on('release', onRelease);
      try {
        await expect(run('SELECT $1::text AS v', [circular()], name)).rejects.toThrow(/circular/i);
        // The next statement runs after the failed one's Sync was answered (one
        // connection): a second completion of the failed query would come first.
        const after = await backendPid();
        expect(after).not.toBe(before);
        expect(released).toHaveLength(2);
        expect(released[0]).toBeInstanceOf(Error);
        expect(released[1]).toBeFalsy();
        for (let i = 0; i < 5; i++) expect(await backendPid()).toBe(after);
        expect(pool.totalCount).toBe(1);
        expect(pool.idleCount).toBe(1);
        expect(pool.waitingCount).toBe(0);
      } finally {
        pool.off('release', onRelease);
      }
    },
  );

  it('a statement the server refuses keeps its connection (a known state)', async () => {
    const before = await backendPid();
    await expect(run('SELECT 1/0 AS v', [])).rejects.toThrow(/division by zero/);
    expect(await backendPid()).toBe(before);
  });
});

describe.skipIf(!mariadbAvailable())('the MySQL/MariaDB query path', () => {
  let dataSource: DataSource;
  const deadlines = new Deadlines(5000);
  const run = <T>(text: string, values: unknown[], prepared: boolean) =>
    mysqlStoreQuery<T>(
      {
        connector: () => connectorOf(dataSource),
        log: typeormQueryLog(dataSource),
        unready: 'unready',
      },
      deadlines,
      'MariaDB',
      {
        operation: 'test',
        text,
        values,
        prepared,
        logged: () => [],
      },
    );
  const connectionId = async () =>
    Number((await run<Array<{ id: number }>>('SELECT CONNECTION_ID() AS id', [], false))[0].id);

  beforeAll(async () => {
    dataSource = await openMysqlDataSource({ poolSize: 1 });
  });

  afterAll(async () => {
    await dataSource?.destroy();
  });

  it.each([
    ['execute', true],
    ['query', false],
  ])(
    'a value mysql2 cannot serialize (%s) fails once and its connection is dropped, not returned to the pool',
    async (_label, prepared) => {
      const before = await connectionId();
      const failure = run('SELECT ? AS v', [circular()], prepared);
      if (prepared) await expect(failure).rejects.toThrow(/circular/i);
      else await failure.catch(() => undefined);
      const after = await connectionId();
      if (prepared) expect(after).not.toBe(before);
      for (let i = 0; i < 5; i++) expect(await connectionId()).toBe(after);
    },
  );

  it('a statement the server refuses keeps its connection (a known state)', async () => {
    const before = await connectionId();
    await expect(run('SELECT * FROM no_such_table_here', [], false)).rejects.toThrow(
      /no_such_table_here/,
    );
    expect(await connectionId()).toBe(before);
  });
});
