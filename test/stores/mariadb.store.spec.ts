import { randomUUID } from 'node:crypto';
import { DataSource, DataSourceOptions, Logger } from 'typeorm';
import {
  encodeValue,
  IdempotencyEngine,
  IdempotencyPayloadError,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
  keyDigest,
} from 'nest-idempotency';
import {
  createIdempotencyMigrations,
  TypeOrmIdempotencyStore,
  TypeOrmIdempotencyStoreOptions,
} from 'nest-idempotency/typeorm';
import { recordLocator } from '../../libs/idempotency/src/core/key';
import { dropTable, mariadbAvailable, openMysqlDataSource, scratchTable } from '../support/mariadb';
import {
  acquireRequest,
  cleanupsAfterEach,
  expectReplayOf,
  leaseOf,
  quiet,
  rejection,
  settlesWithin,
} from '../support/store-assertions';

type MysqlType = 'mysql' | 'mariadb';

/** Every statement the DataSource's logger is shown, with its parameters. */
class RecordingLogger implements Logger {
  readonly entries: Array<{ method: string; query: string; parameters: unknown[] }> = [];
  logQuery(query: string, parameters?: unknown[]): void {
    this.entries.push({ method: 'logQuery', query, parameters: parameters ?? [] });
  }
  logQueryError(error: string | Error, query: string, parameters?: unknown[]): void {
    this.entries.push({
      method: 'logQueryError',
      query: `${String(error)}\n${query}`,
      parameters: parameters ?? [],
    });
  }
  logQuerySlow(_time: number, query: string, parameters?: unknown[]): void {
    this.entries.push({ method: 'logQuerySlow', query, parameters: parameters ?? [] });
  }
  logSchemaBuild(message: string): void {
    this.entries.push({ method: 'logSchemaBuild', query: message, parameters: [] });
  }
  logMigration(message: string): void {
    this.entries.push({ method: 'logMigration', query: message, parameters: [] });
  }
  log(level: string, message: unknown): void {
    this.entries.push({ method: `log(${level})`, query: String(message), parameters: [] });
  }
}

/** One command mysql2 sent to the server: each is one round trip. */
interface SentCommand {
  command: string;
  sql: string;
}

/**
 * Records every command any mysql2 connection of this process sends, from the
 * driver itself: a packet written with sequence id 0 starts a command (a
 * query, a prepare, an execute), and the server answers each before the next.
 */
async function countCommands(dataSource: DataSource): Promise<{
  sent: SentCommand[];
  stop: () => void;
}> {
  const pool = (dataSource.driver as unknown as { pool: MysqlPool }).pool;
  const connection = await new Promise<MysqlConnection>((resolve, reject) =>
    pool.getConnection((error, c) => (error ? reject(error) : resolve(c!))),
  );
  connection.release();
  let proto: Record<string, unknown> | null = Object.getPrototypeOf(connection);
  while (proto && !Object.prototype.hasOwnProperty.call(proto, 'writePacket')) {
    proto = Object.getPrototypeOf(proto);
  }
  if (!proto) throw new Error('mysql2 connections have no writePacket');
  const original = proto.writePacket as (this: MysqlConnection, packet: unknown) => unknown;
  const sent: SentCommand[] = [];
  const spy = vi.spyOn(proto as { writePacket: typeof original }, 'writePacket');
  spy.mockImplementation(function (this: MysqlConnection, packet: unknown) {
    if (this.sequenceId === 0) {
      const command = this._command;
      sent.push({
        command: command?.constructor?.name ?? 'unknown',
        sql: command?.sql ?? command?.query ?? command?.statement?.query ?? '',
      });
    }
    return original.call(this, packet);
  });
  return { sent, stop: () => spy.mockRestore() };
}

interface MysqlConnection {
  sequenceId: number;
  _command?: {
    constructor?: { name: string };
    sql?: string;
    query?: string;
    statement?: { query?: string };
  };
  release(): void;
}
interface MysqlPool {
  getConnection(callback: (error: Error | null, connection?: MysqlConnection) => void): void;
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
};
const ms = (value: number) => Math.round(value * 10) / 10;

describe.runIf(mariadbAvailable())(
  'TypeOrmIdempotencyStore on MariaDB: what only MariaDB has',
  () => {
    let admin: DataSource;
    const defer = cleanupsAfterEach();

    beforeAll(async () => {
      admin = await openMysqlDataSource();
    });
    afterAll(async () => {
      await admin?.destroy();
    });

    /** A table name of this test's own, dropped after it. */
    function newTable(prefix = 'store'): string {
      const table = scratchTable(prefix);
      defer(() => dropTable(admin, table));
      return table;
    }

    async function newDataSource(
      options: Partial<DataSourceOptions> & { type?: MysqlType } = {},
    ): Promise<DataSource> {
      const dataSource = await openMysqlDataSource(options);
      defer(() => (dataSource.isInitialized ? dataSource.destroy() : Promise.resolve()));
      return dataSource;
    }

    function newStore(
      dataSource: DataSource,
      options: TypeOrmIdempotencyStoreOptions,
    ): TypeOrmIdempotencyStore {
      const store = new TypeOrmIdempotencyStore(dataSource, { logger: quiet, ...options });
      defer(() => store.close());
      return store;
    }

    async function tableExists(table: string): Promise<boolean> {
      const rows = await admin.query(
        `SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
        [table],
      );
      return Number(rows[0].n) === 1;
    }

    async function roundTrip(store: TypeOrmIdempotencyStore): Promise<void> {
      const acquired = await store.tryAcquire(acquireRequest('s', 'k', { ttlMs: 60_000 }));
      expect(acquired.kind).toBe('acquired');
      await store.complete(leaseOf(acquired), encodeValue(1));
      expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 1);
    }

    describe('schema', () => {
      it('refuses, at startup, a payload limit larger than max_allowed_packet lets a statement carry', async () => {
        const table = newTable();
        const [{ packet }] = await admin.query('SELECT @@max_allowed_packet AS packet');
        const store = newStore(admin, {
          table,
          ensureSchema: true,
          maxPayloadBytes: Number(packet) + 1,
        });
        const error = await rejection(store.init());
        expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
        expect(error.message).toContain(`max_allowed_packet is ${packet}`);
      });

      it('stores a payload as large as the default limit allows (1 MiB), byte for byte', async () => {
        const table = newTable();
        const store = newStore(admin, { table, ensureSchema: true });
        const payload = Buffer.alloc(1024 * 1024, 0);
        for (let i = 0; i < payload.length; i++) payload[i] = (i * 7919) % 256;
        const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'big')));
        await expect(
          store.complete(lease, Buffer.concat([payload, Buffer.from('x')])),
        ).rejects.toThrow(IdempotencyPayloadError);
        await store.complete(lease, payload);
        const replay = await store.tryAcquire(acquireRequest('s', 'big'));
        expect(replay.kind === 'duplicate' && replay.payload.equals(payload)).toBe(true);
      });
    });

    describe('migrations, one list for every database', () => {
      it.each(['mariadb', 'mysql'] as const)(
        'writes the MySQL DDL on a %s DataSource; the upgrade step has nothing to do; strict mode cannot be undone',
        async (type) => {
          const table = newTable('migrated');
          const migrationsTableName = scratchTable('migrations');
          defer(() => dropTable(admin, migrationsTableName));
          const migrations = await newDataSource({
            type,
            migrationsTableName,
            migrations: createIdempotencyMigrations({ table }),
          });

          const ran = await migrations.runMigrations();

          expect(ran.map((m) => m.name)).toEqual([
            'CreateIdempotencyRecords1764460800000',
            'UpgradeIdempotencyRecords1764547200000',
            'AddIdempotencyAmbiguousState1764633600000',
            'AddIdempotencySteps1764806400000',
            'AddIdempotencyContinuations1764892800000',
            'AddIdempotencyReceipts1764979200000',
          ]);
          expect(await tableExists(table)).toBe(true);
          const store = newStore(admin, { table });
          await store.init();
          await roundTrip(store);
          const [ddl] = await admin.query(`SHOW CREATE TABLE \`${table}\``);
          expect(ddl['Create Table']).toContain('`id` binary(32) NOT NULL');
          expect(ddl['Create Table']).toContain('`payload` longblob');
          expect(ddl['Create Table']).toContain('ENGINE=InnoDB');
          expect(ddl['Create Table']).toMatch(
            /CHECK \(`state` in \('IN_PROGRESS','COMPLETE','AMBIGUOUS'\)\)/,
          );
          expect(ddl['Create Table']).toContain('`ambiguous_since` datetime(6)');
          expect(ddl['Create Table']).toContain('`suspended_state` longblob');
          await expect(migrations.showMigrations()).resolves.toBe(false);

          // Undoing continuations would lose suspended records' answers and states: refused.
          await expect(migrations.undoLastMigration()).rejects.toThrow(
            'AddIdempotencyReceipts1764979200000 cannot be reverted: the receipts would be lost',
          );
          // Undoing continuations would lose suspended records' answers and states: refused.
          await expect(
            new (createIdempotencyMigrations({ table })[4])().down(undefined as never),
          ).rejects.toThrow(
            'AddIdempotencyContinuations1764892800000 cannot be reverted: suspended records would lose their answer and state, and their resumptions could not be admitted; restore a backup instead',
          );
          // Undoing recorded steps would let a takeover run recorded steps again: refused.
          await expect(
            new (createIdempotencyMigrations({ table })[3])().down(undefined as never),
          ).rejects.toThrow(
            'AddIdempotencySteps1764806400000 cannot be reverted: recorded steps would be lost and a takeover could run them again; restore a backup instead',
          );
          // Undoing strict mode would lose AMBIGUOUS records (and let their keys run again): refused.
          await expect(
            new (createIdempotencyMigrations({ table })[2])().down(undefined as never),
          ).rejects.toThrow(
            'AddIdempotencyAmbiguousState1764633600000 cannot be reverted: AMBIGUOUS records would be lost and their keys could run again; restore a backup instead',
          );
          expect(await tableExists(table)).toBe(true);
          await expect(migrations.showMigrations()).resolves.toBe(false);
        },
      );

      it('creates the table in the database named as schema', async () => {
        const table = newTable('named');
        const migrationsTableName = scratchTable('migrations');
        defer(() => dropTable(admin, migrationsTableName));
        const migrations = await newDataSource({
          migrationsTableName,
          migrations: createIdempotencyMigrations({ schema: 'test', table }),
        });
        await migrations.runMigrations();
        expect(await tableExists(table)).toBe(true);
        const store = newStore(admin, { schema: 'test', table });
        await store.init();
        expect(store.tableName).toEqual({ schema: 'test', table });
      });
    });

    describe('round trips, counted in the driver', () => {
      /** A store on a one-connection pool, and `run(key)`: one engine call in scope 'orders'. */
      async function ordersOnOneConnection(type: 'mariadb' | 'mysql') {
        const dataSource = await newDataSource({ type, poolSize: 1 });
        const store = newStore(dataSource, { table: newTable(), ensureSchema: true });
        await store.init();
        const engine = new IdempotencyEngine(store, { logger: quiet });
        const run = (key: string) =>
          engine.execute(
            { scope: 'orders', key, lease: '30s', waitTimeout: '10s', ttl: '1h' },
            async () => ({ id: key }),
          );
        return { dataSource, run };
      }

      it.each(['mariadb', 'mysql'] as const)(
        'on a %s DataSource: 2 round trips for a first execution (insert, complete); 2 for a replay in a scope of fresh keys (insert, peek)',
        async (type) => {
          const { dataSource, run } = await ordersOnOneConnection(type);
          await run('warm-up'); // prepares the statements on the pool's one connection
          await run('warm-up');
          const { sent, stop } = await countCommands(dataSource);
          try {
            await expect(run('first')).resolves.toMatchObject({ kind: 'executed' });
            expect(sent.map((s) => s.command)).toEqual(['Execute', 'Execute']);
            // The minimum insert: its update clause only marks the insert id.
            expect(sent[0].sql).toMatch(
              /ON DUPLICATE KEY UPDATE lease_id = IF\(LAST_INSERT_ID\(1\), lease_id, lease_id\)$/,
            );
            expect(sent[1].sql).toContain(`SET state = 'COMPLETE'`);

            sent.length = 0;
            await expect(run('first')).resolves.toMatchObject({ kind: 'replayed' });
            expect(sent.map((s) => s.command)).toEqual(['Execute', 'Execute']);
            expect(sent[0].sql).toContain('LAST_INSERT_ID(1)'); // the insert finds the record
            expect(sent[1].sql).toMatch(/^SELECT .* WHERE id = \?$/s);
          } finally {
            stop();
          }
        },
      );

      it.each(['mariadb', 'mysql'] as const)(
        'on a %s DataSource: once most of a scope finds its record, a replay is one locking-free SELECT and a fresh key there costs one more',
        async (type) => {
          const { dataSource, run } = await ordersOnOneConnection(type);
          await run('first');
          // Replays teach the scope that its acquisitions find a record.
          for (let i = 0; i < 8; i++) await run('first');
          const { sent, stop } = await countCommands(dataSource);
          try {
            await expect(run('first')).resolves.toMatchObject({ kind: 'replayed' });
            expect(sent.map((s) => s.command)).toEqual(['Execute']);
            expect(sent[0].sql).toMatch(/^SELECT .* WHERE id = \?$/s);
            expect(sent[0].sql).not.toMatch(/FOR UPDATE|LOCK IN SHARE MODE/);

            // A fresh key there: the peek finds nothing, the acquire inserts, then complete
            // (its first use on this connection also prepares the acquire: not counted).
            sent.length = 0;
            await expect(run('second')).resolves.toMatchObject({ kind: 'executed' });
            const executed = sent.filter((s) => s.command === 'Execute');
            expect(executed.map((s) => s.sql.trim().split(/\s/)[0])).toEqual([
              'SELECT',
              'INSERT',
              'UPDATE',
            ]);
          } finally {
            stop();
          }
          // The record the peek read is the one a replay reads: same result either order.
          await expect(run('second')).resolves.toMatchObject({
            kind: 'replayed',
            value: { id: 'second' },
          });
        },
      );

      it('costs one round trip each for release, extend, find, list and purge, and two for a look that finds the key in flight in a scope of fresh keys (insert, peek)', async () => {
        const table = newTable();
        const dataSource = await newDataSource({ poolSize: 1 });
        const store = newStore(dataSource, { table, ensureSchema: true });
        await roundTrip(store);
        const warm = leaseOf(await store.tryAcquire(acquireRequest('s', 'warm')));
        await store.extend(warm);
        await store.release(warm);
        const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'held')));
        const { sent, stop } = await countCommands(dataSource);
        const trips = async (call: () => Promise<unknown>) => {
          sent.length = 0;
          await call();
          return sent.map((s) => s.command);
        };
        try {
          expect(await trips(() => store.extend(lease))).toEqual(['Execute']);
          expect(await trips(() => store.tryAcquire(acquireRequest('s', 'held')))).toEqual([
            'Execute',
            'Execute',
          ]);
          expect(await trips(() => store.find({ scope: 's', key: 'held' }))).toEqual(['Query']);
          expect(await trips(() => store.list({ scope: 's' }))).toEqual(['Query']);
          expect(await trips(() => store.purgeExpired())).toEqual(['Query']);
          expect(await trips(() => store.release(lease))).toEqual(['Execute']);
        } finally {
          stop();
        }
      });

      it('in a scope of replays, a look that finds an AMBIGUOUS record costs two round trips: the peek, then its since and why', async () => {
        const dataSource = await newDataSource({ poolSize: 1 });
        const store = newStore(dataSource, { table: newTable(), ensureSchema: true });
        await store.init();
        // Replays teach scope 'r' to peek first.
        const done = leaseOf(
          await store.tryAcquire(acquireRequest('r', 'done', { ttlMs: 60_000 })),
        );
        await store.complete(done, encodeValue('result'));
        for (let i = 0; i < 8; i++)
          expectReplayOf(await store.tryAcquire(acquireRequest('r', 'done')), 'result');
        const held = leaseOf(await store.tryAcquire(acquireRequest('r', 'unknown')));
        await store.strictMode.markAmbiguous(held, 'action-failed');
        const { sent, stop } = await countCommands(dataSource);
        try {
          const found = await store.tryAcquire(
            acquireRequest('r', 'unknown', { waitTimeoutMs: 0 }),
          );
          expect(found).toMatchObject({ kind: 'ambiguous', reason: 'action-failed' });
          expect((found as { since: Date }).since).toBeInstanceOf(Date);
          // (The read of since and why is prepared on its first use here: not counted.)
          const executed = sent.filter((s) => s.command === 'Execute');
          expect(executed.map((s) => s.sql.trim().split(/\s/)[0])).toEqual(['SELECT', 'SELECT']);
          expect(executed[0].sql).not.toContain('ambiguous_reason');
          expect(executed[1].sql).toContain('ambiguous_reason');
        } finally {
          stop();
        }
      });

      it.each(['mariadb', 'mysql'] as const)(
        'on a %s DataSource, in a scope of replays: a new key is acquired, not stolen; an expired lease is stolen',
        async (type) => {
          const dataSource = await newDataSource({ type, poolSize: 2 });
          const table = newTable();
          const store = newStore(dataSource, { table, ensureSchema: true });
          await store.init();
          const done = leaseOf(
            await store.tryAcquire(acquireRequest('p', 'done', { ttlMs: 60_000 })),
          );
          await store.complete(done, encodeValue('result'));
          for (let i = 0; i < 8; i++)
            expectReplayOf(await store.tryAcquire(acquireRequest('p', 'done')), 'result');
          // The peek finds nothing: the acquiring statement inserts.
          const fresh = await store.tryAcquire(acquireRequest('p', 'new'));
          expect(fresh).toMatchObject({ kind: 'acquired' });
          expect((fresh as { stolen?: boolean }).stolen).not.toBe(true);
          // Its lease ended on the database's clock: the peek finds it stealable, the acquire takes it.
          await admin.query(
            `UPDATE \`${table}\` SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE \`key\` = 'new'`,
          );
          const taken = await store.tryAcquire(acquireRequest('p', 'new'));
          expect(taken).toMatchObject({ kind: 'acquired', stolen: true });
          await expect(store.complete(leaseOf(fresh), encodeValue('stale'))).rejects.toThrow(
            /no longer held/,
          );
        },
      );

      it('with preparedStatements: false, sends each statement as one plain query', async () => {
        const table = newTable();
        const dataSource = await newDataSource({ poolSize: 1 });
        const store = newStore(dataSource, {
          table,
          ensureSchema: true,
          preparedStatements: false,
        });
        await store.init();
        const { sent, stop } = await countCommands(dataSource);
        try {
          await roundTrip(store);
          // insert, complete; then the replay: insert (finds the record), peek.
          expect(sent.map((s) => s.command)).toEqual(['Query', 'Query', 'Query', 'Query']);
        } finally {
          stop();
        }
      });
    });

    describe("time is the database's", () => {
      it.each([
        ['an hour ahead', 3_600_000],
        ['an hour behind', -3_600_000],
      ])(
        'with the application clock %s, a live lease is not stolen and a fresh result is replayed',
        async (_label, skewMs) => {
          const table = newTable();
          const store = newStore(admin, { table, ensureSchema: true });
          await store.init();
          leaseOf(await store.tryAcquire(acquireRequest('s', 'live', { leaseMs: 10_000 })));
          const done = await store.tryAcquire(acquireRequest('s', 'done', { ttlMs: 60_000 }));
          await store.complete(leaseOf(done), encodeValue('result'));
          leaseOf(await store.tryAcquire(acquireRequest('s', 'short', { leaseMs: 100 })));
          await new Promise((resolve) => setTimeout(resolve, 200)); // let the 100 ms lease run out

          const realNow = Date.now.bind(Date);
          vi.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);

          const again = await store.tryAcquire(acquireRequest('s', 'live'));
          expect(again.kind).toBe('in-flight');
          expect((again as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(5000);
          expect((again as { retryAfterMs: number }).retryAfterMs).toBeLessThanOrEqual(10_000);
          await expect(store.find({ scope: 's', key: 'live' })).resolves.toMatchObject({
            leaseExpired: false,
          });
          expectReplayOf(await store.tryAcquire(acquireRequest('s', 'done')), 'result');
          await expect(store.tryAcquire(acquireRequest('s', 'short'))).resolves.toMatchObject({
            kind: 'acquired',
          });
          expect(Date.now).toHaveBeenCalled();
        },
      );

      it("follows the server's clock: a connection whose clock runs 2 h ahead writes leases 2 h ahead", async () => {
        const table = newTable();
        await newStore(admin, { table, ensureSchema: true }).init();
        // A pool of one connection whose session clock (NOW(), UTC_TIMESTAMP()) is 2 h ahead.
        const ahead = await newDataSource({ poolSize: 1 });
        await ahead.query('SET timestamp = UNIX_TIMESTAMP(NOW(6)) + 7200');
        const early = newStore(ahead, { table });
        const onTime = newStore(admin, { table });

        const lease = leaseOf(await early.tryAcquire(acquireRequest('s', 'k', { leaseMs: 1000 })));
        await new Promise((resolve) => setTimeout(resolve, 1200));

        // By the real clock the 1 s lease ends in 2 h: nobody may take it over.
        const contended = await onTime.tryAcquire(acquireRequest('s', 'k'));
        expect(contended.kind).toBe('in-flight');
        const retryAfterMs = (contended as { retryAfterMs: number }).retryAfterMs;
        expect(retryAfterMs).toBeGreaterThan(7_100_000);
        expect(retryAfterMs).toBeLessThanOrEqual(7_201_000);
        const view = await onTime.find({ scope: 's', key: 'k' });
        expect(view?.leaseExpiresAt!.getTime()).toBeGreaterThan(Date.now() + 7_100_000);
        expect(await early.extend(lease)).toBe(true);
      });

      it('writes UTC whatever the session time zone, and holds a 100-year TTL', async () => {
        const table = newTable();
        await newStore(admin, { table, ensureSchema: true }).init();
        const elsewhere = await newDataSource({ poolSize: 1 });
        await elsewhere.query(`SET time_zone = '+05:30'`);
        const store = newStore(elsewhere, { table });
        const century = 100 * 365 * 86_400_000;

        const lease = leaseOf(await store.tryAcquire(acquireRequest('s', 'k', { ttlMs: century })));
        await store.complete(lease, encodeValue('kept'));

        const [row] = await admin.query(
          `SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), completed_at) AS completed_from_utc,
           TIMESTAMPDIFF(DAY, UTC_TIMESTAMP(6), expires_at) AS days_left
         FROM \`${table}\``,
        );
        expect(Math.abs(Number(row.completed_from_utc))).toBeLessThanOrEqual(2);
        expect(Number(row.days_left)).toBeGreaterThanOrEqual(36_499);
        const view = await store.find({ scope: 's', key: 'k' });
        expect(Math.abs(view!.completedAt!.getTime() - Date.now())).toBeLessThan(2000);
        expect(view!.expiresAt.getTime() - Date.now()).toBeGreaterThan(century - 5000);
        const replay = expectReplayOf(await store.tryAcquire(acquireRequest('s', 'k')), 'kept');
        expect(replay.expiresInMs).toBeGreaterThan(century - 5000);
      });
    });

    describe('when MariaDB cannot be reached', () => {
      it('throws IdempotencyStoreUnavailableError once the DataSource is destroyed', async () => {
        const table = newTable();
        const dataSource = await newDataSource();
        const store = newStore(dataSource, { table, ensureSchema: true });
        await store.init();
        await dataSource.destroy();
        const error = await rejection(store.tryAcquire(acquireRequest('s', 'k')));
        expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      });
    });

    describe('query logging', () => {
      it('never hands the logger a raw key or a stored payload; the key digest appears instead', async () => {
        const table = newTable();
        const logger = new RecordingLogger();
        const dataSource = await newDataSource({ logger, logging: true });
        const store = newStore(dataSource, { table, ensureSchema: true });
        await store.init();
        const other = newStore(await newDataSource({ logger, logging: true }), { table });
        const scope = 'PaymentsController.create';
        const key = `raw-key-${randomUUID()}`;
        const released = `raw-key-${randomUUID()}`;
        const secret = `card-token-${randomUUID()}`;
        const payload = encodeValue({ charge: secret });
        logger.entries.length = 0;

        // acquire, extend, a waiting look on the other instance (so its poll runs), complete,
        // a replay, find, list, release, purge
        const lease = leaseOf(await store.tryAcquire(acquireRequest(scope, key)));
        await expect(store.extend(lease)).resolves.toBe(true);
        await expect(
          other.tryAcquire(acquireRequest(scope, key, { waitTimeoutMs: 100 })),
        ).resolves.toMatchObject({ kind: 'in-flight' });
        await store.complete(lease, payload);
        const replay = await store.tryAcquire(acquireRequest(scope, key));
        expect(replay.kind === 'duplicate' && replay.payload.equals(payload)).toBe(true);
        expect((await store.find({ scope, key }))?.payload?.equals(payload)).toBe(true);
        expect((await store.list({ scope })).some((r) => r.payload?.equals(payload))).toBe(true);
        await store.release(leaseOf(await store.tryAcquire(acquireRequest(scope, released))));
        await store.purgeExpired();
        // A suspension and its resumption: the continuation id lets its holder resume.
        const suspendedKey = `raw-key-${randomUUID()}`;
        const continuation = `cont-${randomUUID()}`;
        const answer = encodeValue({ challenge: secret });
        await store.continuations.suspend(
          leaseOf(await store.tryAcquire(acquireRequest(scope, suspendedKey))),
          { continuation, answer, state: answer, holdMs: 10_000 },
        );
        const resumed = await store.continuations.resume({
          scope,
          locator: recordLocator(scope, suspendedKey),
          continuation,
          leaseMs: 10_000,
          ttlMs: 60_000,
        });
        expect(resumed.kind).toBe('admitted');

        const texts = logger.entries.filter((e) => e.method === 'logQuery').map((e) => e.query);
        expect(texts.filter((q) => q.includes('ON DUPLICATE KEY UPDATE')).length).toBeGreaterThan(
          3,
        );
        expect(texts.filter((q) => q.includes('WHERE id IN')).length).toBeGreaterThan(0);
        expect(texts.filter((q) => q.startsWith('DELETE') && q.includes('LIMIT'))).toHaveLength(1);
        const leaks: string[] = [];
        logger.entries.forEach((entry, i) => {
          const shown = [entry.query, ...entry.parameters.map(render)].join('\n');
          for (const [label, needle] of [
            ['the raw key', key],
            ['the released raw key', released],
            ['the payload', payload.toString('utf8')],
            ['the payload content', secret],
            ['the suspended raw key', suspendedKey],
            ['the continuation', continuation],
          ] as const) {
            if (shown.includes(needle)) leaks.push(`${entry.method} #${i} shows ${label}`);
          }
        });
        expect(leaks).toEqual([]);
        const parameters = logger.entries.flatMap((e) => e.parameters);
        expect(parameters).toContain(keyDigest(scope, key));
        expect(parameters).toContain(keyDigest(scope, released));
        expect(parameters).toContain(`<${payload.length} bytes>`);
        expect(parameters).toContain('<continuation>');
      });
    });

    describe('a DataSource logger that throws', () => {
      it('still lets a failed statement reject with its own error', async () => {
        class ThrowingLogger extends RecordingLogger {
          override logQueryError(): void {
            throw new Error('the logger broke');
          }
        }
        const table = newTable();
        const dataSource = await newDataSource({ logger: new ThrowingLogger(), logging: true });
        const store = newStore(dataSource, { table, ensureSchema: true });
        await store.init();
        await admin.query(`DROP TABLE \`${table}\``);
        await expect(store.tryAcquire(acquireRequest('s', 'k'))).rejects.toThrow(/doesn't exist/);
      });
    });

    describe('waiting without NOTIFY', () => {
      it('parks 20 duplicates on another instance without holding a pooled connection, polling for all of them in one statement', async () => {
        const table = newTable();
        const holderSource = await newDataSource();
        const holder = newStore(holderSource, { table, ensureSchema: true });
        await holder.init();
        const waiterSource = await newDataSource({ poolSize: 2 });
        // Fallback poll far beyond the test: only the poll for changes can wake them.
        const store = newStore(waiterSource, { table, pollIntervalMs: 60_000 });
        await store.init();
        const held = leaseOf(
          await holder.tryAcquire(acquireRequest('s', 'hot', { ttlMs: 60_000 })),
        );
        let waits = 0;
        let allWaiting!: () => void;
        const twentyWaiting = new Promise<void>((resolve) => (allWaiting = resolve));
        const stop = store.onWait((scope) => {
          if (scope === 's' && ++waits === 20) allWaiting();
        });
        defer(async () => stop());

        const waiters = Array.from({ length: 20 }, () =>
          store.tryAcquire(acquireRequest('s', 'hot', { waitTimeoutMs: 10_000 })),
        );
        await settlesWithin(twentyWaiting, 5000, 'all 20 duplicates starting to wait');
        const { sent, stop: stopCounting } = await countCommands(waiterSource);
        await new Promise((resolve) => setTimeout(resolve, 500));
        stopCounting();
        // Half a second of waiting: one statement per poll for all 20 (4, 8, 16, then every 32 ms).
        const polls = sent.filter((s) => s.sql.includes('WHERE id IN'));
        expect(polls.length).toBe(sent.length);
        expect(polls.length).toBeGreaterThan(5);
        expect(polls.length).toBeLessThan(30);
        // Nothing is checked out while they wait: both pooled connections are free.
        await Promise.all([waiterSource.query('SELECT 1'), waiterSource.query('SELECT 2')]);

        const completed = performance.now();
        await holder.complete(held, encodeValue({ answer: 42 }));
        const results = await settlesWithin(Promise.all(waiters), 2000, 'waking the 20 waiters');
        expect(performance.now() - completed).toBeLessThan(200);
        for (const result of results) expectReplayOf(result, { answer: 42 });
      });

      it('polls for 200 records waited on since staggered instants in shared statements, not one per record', async () => {
        const table = newTable();
        const holder = newStore(admin, { table, ensureSchema: true });
        await holder.init();
        const waiterSource = await newDataSource({ poolSize: 4 });
        const store = newStore(waiterSource, { table, pollIntervalMs: 60_000 });
        await store.init();
        const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
        const leases = await Promise.all(
          keys.map(async (key) => leaseOf(await holder.tryAcquire(acquireRequest('s', key)))),
        );
        // Waiters arrive over 100 ms, one record each.
        const waiters = keys.map(async (key, i) => {
          await new Promise((resolve) => setTimeout(resolve, i / 2));
          return store.tryAcquire(acquireRequest('s', key, { waitTimeoutMs: 10_000 }));
        });
        await new Promise((resolve) => setTimeout(resolve, 300));
        const { sent, stop } = await countCommands(waiterSource);
        await new Promise((resolve) => setTimeout(resolve, 1000));
        stop();
        const polls = sent.filter((s) => s.sql.includes('WHERE id IN')).length;
        console.log(`\n[poll cost, MariaDB] 200 waited records, 1 s: ${polls} poll statements`);
        // Every record is checked at least once per 32 ms; the statements are shared:
        // about one per 8 ms window (a record each would be 200 per 32 ms, over 6000).
        expect(polls).toBeGreaterThan(20);
        expect(polls).toBeLessThan(200);
        await Promise.all(leases.map((lease, i) => holder.complete(lease, encodeValue(i))));
        const results = await settlesWithin(Promise.all(waiters), 5000, 'waking the 200 waiters');
        results.forEach((result, i) => expectReplayOf(result, i));
      });

      it('measures the wake-up after a completion: same instance (in process) and another instance (poll)', async () => {
        const table = newTable();
        const a = await newDataSource();
        const b = await newDataSource();
        const holder = newStore(a, { table, ensureSchema: true });
        await holder.init();
        const sameInstance = holder;
        const otherInstance = newStore(b, { table });
        await otherInstance.init();

        /**
         * After holding `holdMs`: from the call to complete() (what the kit measures) and from
         * complete() returning (the commit acknowledged) to the waiter's tryAcquire settling.
         */
        async function sample(
          waiter: TypeOrmIdempotencyStore,
          holdMs: number,
        ): Promise<[number, number]> {
          const scope = `wake-${randomUUID()}`;
          const lease = leaseOf(await holder.tryAcquire(acquireRequest(scope, 'k')));
          const waiting = new Promise<void>((resolve) => {
            const stop = waiter.onWait(() => {
              stop();
              resolve();
            });
          });
          let settledAt = 0;
          const result = waiter
            .tryAcquire(acquireRequest(scope, 'k', { waitTimeoutMs: 10_000 }))
            .finally(() => (settledAt = performance.now()));
          await waiting;
          if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
          const completing = performance.now();
          await holder.complete(lease, encodeValue(scope));
          const committed = performance.now();
          expectReplayOf(await result, scope);
          return [settledAt - completing, settledAt - committed];
        }

        const figures: string[] = [];
        const results: Record<string, number[]> = {};
        for (const [label, waiter, hold] of [
          ['same instance, completed at once', sameInstance, () => 0],
          ['same instance, held 0-200 ms', sameInstance, () => Math.random() * 200],
          ['other instance, completed at once', otherInstance, () => 0],
          ['other instance, held 0-200 ms', otherInstance, () => Math.random() * 200],
        ] as const) {
          const pairs: Array<[number, number]> = [];
          for (let i = 0; i < 100; i++) pairs.push(await sample(waiter, hold()));
          const samples = pairs.map(([fromCall]) => fromCall);
          const afterCommit = pairs.map(([, fromCommit]) => fromCommit);
          results[label] = samples;
          figures.push(
            `${label}: from complete() called p50 ${ms(percentile(samples, 50))} ms, p99 ${ms(percentile(samples, 99))} ms, max ${ms(Math.max(...samples))} ms; ` +
              `from the commit p50 ${ms(percentile(afterCommit, 50))} ms, p99 ${ms(percentile(afterCommit, 99))} ms (n=${samples.length})`,
          );
        }
        console.log(`\n[wake latency, MariaDB] ${figures.join('\n[wake latency, MariaDB] ')}`);
        // Medians only: the tails follow the machine's load (the kit bounds single wake-ups at 50 ms).
        expect(percentile(results['same instance, held 0-200 ms'], 50)).toBeLessThan(10);
        expect(percentile(results['other instance, completed at once'], 50)).toBeLessThan(20);
        expect(percentile(results['other instance, held 0-200 ms'], 50)).toBeLessThanOrEqual(30);
      }, 120_000);
    });

    describe('several instances on one table', () => {
      it.each(['mariadb', 'mysql'] as const)(
        'on %s DataSources, gives exactly one of 50 acquirers over two instances the key, the others replaying it',
        async (type) => {
          const table = newTable();
          const [a, b] = await Promise.all([newDataSource({ type }), newDataSource({ type })]);
          const stores = [
            newStore(a, { table, ensureSchema: true, pollIntervalMs: 60_000 }),
            newStore(b, { table, ensureSchema: true, pollIntervalMs: 60_000 }),
          ];
          await Promise.all(stores.map((s) => s.init()));
          const results = await settlesWithin(
            Promise.all(
              Array.from({ length: 50 }, async (_, i) => {
                const store = stores[i % 2];
                const result = await store.tryAcquire(
                  acquireRequest('race', 'hot', { waitTimeoutMs: 15_000 }),
                );
                if (result.kind === 'acquired') {
                  await new Promise((resolve) => setImmediate(resolve));
                  await store.complete(result.lease, encodeValue({ winner: result.lease.leaseId }));
                }
                return result;
              }),
            ),
            10_000,
            'the race and the wake-up of every waiter',
          );
          const winners = results.filter((r) => r.kind === 'acquired');
          expect(winners).toHaveLength(1);
          for (const r of results.filter((x) => x.kind !== 'acquired')) {
            expectReplayOf(r, { winner: leaseOf(winners[0]).leaseId });
          }
        },
      );
    });
  },
);

/** Every way a logged parameter could show its content once printed. */
function render(value: unknown): string {
  if (Buffer.isBuffer(value)) {
    return [value.toString('utf8'), value.toString('hex'), value.toString('base64')].join('\n');
  }
  if (typeof value === 'object' && value !== null)
    return `${String(value)}\n${JSON.stringify(value)}`;
  return String(value);
}
