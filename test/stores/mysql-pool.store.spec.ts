import {
  encodeValue,
  IdempotencyConfigError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import {
  migrateMysqlIdempotencyTable,
  MysqlIdempotencyStore,
  mysqlIdempotencyMigrationSql,
} from 'nest-idempotency/mysql';
import { mariadbAvailable, scratchTable } from '../support/mariadb';
import { endPool, MysqlApi, openMysqlPool, poolQuery } from './mysql-pool-harness';
import { acquireRequest, quiet } from '../support/store-assertions';

/**
 * What the mysql2 pool store adds to the contract (mysql-pool.contract.spec.ts),
 * on either mysql2 API: its migrations (plain SQL and a function), the
 * application's pool left open, an ended pool, and what it refuses.
 */

describe.runIf(mariadbAvailable())(
  'MysqlIdempotencyStore (a mysql2 pool of the application)',
  () => {
    const pools: ReturnType<typeof openMysqlPool>[] = [];
    const tables: string[] = [];
    const pool = (api: MysqlApi, limit = 10) => {
      const made = openMysqlPool(api, limit);
      pools.push(made);
      return made;
    };
    const table = (prefix: string) => {
      const made = scratchTable(prefix);
      tables.push(made);
      return made;
    };
    const acquire = (store: MysqlIdempotencyStore, scope: string, key: string) =>
      store.tryAcquire(acquireRequest(scope, key, { ttlMs: 60_000 }));

    afterAll(async () => {
      const admin = pool('promise');
      for (const name of tables) await poolQuery(admin, `DROP TABLE IF EXISTS \`${name}\``);
      await Promise.all(pools.map((p) => endPool(p).catch(() => undefined)));
    });

    it('refuses what is not a mysql2 pool, and unknown options, with IdempotencyConfigError', () => {
      expect(() => new MysqlIdempotencyStore({})).toThrow(IdempotencyConfigError);
      expect(() => new MysqlIdempotencyStore({})).toThrow(/needs a mysql2 pool/);
      expect(() => new MysqlIdempotencyStore(null as never)).toThrow(/got null/);
      expect(() => new MysqlIdempotencyStore(pool('callback'), { shards: 2 } as never)).toThrow(
        IdempotencyConfigError,
      );
    });

    for (const api of ['callback', 'promise'] as const) {
      describe(`on a ${api} pool`, () => {
        it('works on a table the plain SQL migration made', async () => {
          const name = table('mypool_sql');
          const db = pool(api);
          const sql = mysqlIdempotencyMigrationSql({ table: name });
          expect(sql).toContain(`\`${name}\``);
          for (const statement of sql.split(/;\s*$/m).filter((s) => s.trim()))
            await poolQuery(db, statement);
          const store = new MysqlIdempotencyStore(db, { table: name, logger: quiet });
          try {
            await store.init();
            const acquired = await acquire(store, 'Sql.migrated', 'k');
            if (acquired.kind !== 'acquired') throw new Error(acquired.kind);
            await store.complete(acquired.lease, encodeValue('done'));
            expect((await store.find({ scope: 'Sql.migrated', key: 'k' }))?.state).toBe('COMPLETE');
          } finally {
            await store.close();
          }
        });

        it('works on a table the migration function made, run twice and by two at once', async () => {
          const name = table('mypool_fn');
          const db = pool(api);
          await Promise.all([
            migrateMysqlIdempotencyTable(db, { table: name }),
            migrateMysqlIdempotencyTable(db, { table: name }),
          ]);
          await migrateMysqlIdempotencyTable(db, { table: name });
          const store = new MysqlIdempotencyStore(db, { table: name, logger: quiet });
          try {
            await store.init();
            expect((await acquire(store, 'Fn.migrated', 'k')).kind).toBe('acquired');
          } finally {
            await store.close();
          }
        });

        it('never ends the application pool: close() leaves it serving, and the store starts again', async () => {
          const name = table('mypool_owned');
          const db = pool(api, 2);
          const store = new MysqlIdempotencyStore(db, {
            table: name,
            ensureSchema: true,
            logger: quiet,
          });
          await store.init();
          expect((await acquire(store, 'Owned.pool', 'k1')).kind).toBe('acquired');
          await store.close();
          expect(await poolQuery(db, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);
          expect((await acquire(store, 'Owned.pool', 'k2')).kind).toBe('acquired');
          await store.close();
          expect(await poolQuery(db, 'SELECT 2 AS two')).toEqual([{ two: 2 }]);
        });

        it('answers IdempotencyStoreUnavailableError once the application ended its pool', async () => {
          const name = table('mypool_ended');
          const db = pool(api);
          const store = new MysqlIdempotencyStore(db, {
            table: name,
            ensureSchema: true,
            logger: quiet,
          });
          await store.init();
          await endPool(db);
          await expect(acquire(store, 'Ended.pool', 'k')).rejects.toThrow(
            IdempotencyStoreUnavailableError,
          );
          await store.close();
        });
      });
    }
  },
);
