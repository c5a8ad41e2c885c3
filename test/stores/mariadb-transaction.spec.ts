import { randomUUID } from 'node:crypto';
import { IdempotencyEngine, IdempotencyNotExecutedError } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { dropTable, mariadbAvailable, openMysqlDataSource, scratchTable } from '../support/mariadb';

/**
 * completion in a transaction on MySQL/MariaDB: the action's writes and the
 * record's completion commit together (both DataSource types; the machine's
 * MariaDB runs both statement sets).
 */
describe.runIf(mariadbAvailable()).each(['mariadb', 'mysql'] as const)(
  'engine.runInTransaction on a %s DataSource',
  (type) => {
    let dataSource: DataSource;
    let store: TypeOrmIdempotencyStore;
    const table = scratchTable('tx');
    const entries = `${table}_entries`;

    beforeAll(async () => {
      dataSource = await openMysqlDataSource({ type });
      store = new TypeOrmIdempotencyStore(dataSource, { table, ensureSchema: true });
      await dataSource.query(
        `CREATE TABLE \`${entries}\` (id INT AUTO_INCREMENT PRIMARY KEY, account VARCHAR(64) NOT NULL) ENGINE=InnoDB`,
      );
    });
    afterAll(async () => {
      await store.close();
      await dropTable(dataSource, table);
      await dropTable(dataSource, entries);
      await dataSource.destroy();
    });

    const rows = async (account: string) =>
      Number(
        (
          (await dataSource.query(`SELECT count(*) AS n FROM \`${entries}\` WHERE account = ?`, [
            account,
          ])) as { n: number | string }[]
        )[0].n,
      );

    it('commits the insert with the completion, replays without running, and a throw leaves nothing', async () => {
      const engine = new IdempotencyEngine(store);
      const policy = engine.policy({ scope: 'ledger.post' });
      const account = randomUUID();
      let runs = 0;
      const action = async (manager: EntityManager) => {
        runs++;
        await manager.query(`INSERT INTO \`${entries}\` (account) VALUES (?)`, [account]);
        return { account };
      };
      const key = randomUUID();
      expect(await engine.runInTransaction(policy, { key }, action)).toEqual({
        kind: 'executed',
        value: { account },
      });
      expect(await engine.runInTransaction(policy, { key }, action)).toMatchObject({
        kind: 'replayed',
      });
      expect(runs).toBe(1);
      expect(await rows(account)).toBe(1);
      expect((await store.find({ scope: 'ledger.post', key }))?.state).toBe('COMPLETE');

      const failing = randomUUID();
      await expect(
        engine.runInTransaction(policy, { key: failing }, async (manager: EntityManager) => {
          await action(manager);
          throw new Error('after the insert');
        }),
      ).rejects.toThrow('after the insert');
      expect(await rows(account)).toBe(1);
      expect(await store.find({ scope: 'ledger.post', key: failing })).toBeNull();
    });

    it('in strict mode, a throw after the action began rolls its insert back but leaves the record AMBIGUOUS; a not-executed error releases it', async () => {
      const engine = new IdempotencyEngine(store, {
        logger: { warn: () => undefined, error: () => undefined },
      });
      const policy = engine.policy({ scope: 'ledger.strict', onExpiredLease: 'refuse' });
      const account = randomUUID();
      const key = randomUUID();
      let runs = 0;
      const failing = async (manager: EntityManager) => {
        runs++;
        await manager.query(`INSERT INTO \`${entries}\` (account) VALUES (?)`, [account]);
        throw new Error('the provider hung up');
      };
      await expect(engine.runInTransaction(policy, { key }, failing)).rejects.toThrow(
        'the provider hung up',
      );
      expect(await rows(account)).toBe(0);
      expect(await store.find({ scope: 'ledger.strict', key })).toMatchObject({
        state: 'AMBIGUOUS',
        ambiguousReason: 'action-failed',
      });
      await expect(engine.runInTransaction(policy, { key }, failing)).rejects.toMatchObject({
        name: 'IdempotencyOutcomeUnknownError',
      });
      expect(runs).toBe(1);

      const declined = randomUUID();
      await expect(
        engine.runInTransaction(policy, { key: declined }, async () => {
          throw new IdempotencyNotExecutedError('declined before any effect');
        }),
      ).rejects.toThrow('declined before any effect');
      expect(await store.find({ scope: 'ledger.strict', key: declined })).toBeNull();

      // A transaction that never began (the runner fails before the action): nothing ran.
      const unbegun = randomUUID();
      await expect(
        engine.runInTransaction(policy, { key: unbegun }, failing, {
          transaction: async () => {
            throw new Error('no connection for BEGIN');
          },
        }),
      ).rejects.toThrow('no connection for BEGIN');
      expect(await store.find({ scope: 'ledger.strict', key: unbegun })).toBeNull();
      expect(runs).toBe(1);
    });

    it('wakes a waiter in this process once the transaction commits', async () => {
      const engine = new IdempotencyEngine(store);
      const policy = engine.policy({ scope: 'ledger.wait', waitTimeout: '5s' });
      const key = randomUUID();
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let entered!: () => void;
      const inAction = new Promise<void>((resolve) => (entered = resolve));
      const first = engine.runInTransaction(policy, { key }, async () => {
        entered();
        await held;
        return 'first';
      });
      await inAction;
      const parked = new Promise<void>((resolve) => {
        const stop = store.onWait(() => {
          stop();
          resolve();
        });
      });
      const second = engine.run(policy, { key }, async () => 'second');
      await parked;
      release();
      expect(await first).toEqual({ kind: 'executed', value: 'first' });
      expect(await second).toMatchObject({ kind: 'replayed', value: 'first' });
    });
  },
);
