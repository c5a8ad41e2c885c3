import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * completion: 'transaction' on PostgreSQL with a commit that is slow to come
 * (a synchronous replica, a held lock): once the completion has written the
 * record inside the transaction, the record is locked until the commit, so the
 * heartbeat stops. Were it to go on, each beat would wait behind that lock on a
 * pooled connection of its own until the pool ran dry.
 */
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('a transactional completion whose commit is slow', () => {
  const schema = scratchSchema('slow_commit');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    dataSource = await openDataSource({ extra: { max: 3 } });
    store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      operationTimeoutMs: 2000,
      logger: { warn: () => undefined, error: () => undefined },
    });
    await store.init();
  });
  afterAll(async () => {
    await store.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  it('sends no heartbeat after the completion is written, so the pool stays free until the commit', async () => {
    const engine = new IdempotencyEngine(store);
    const policy = engine.policy({ scope: 'ledger.slow', lease: 200 });
    const key = randomUUID();
    const written = deferred();
    const commit = deferred();
    const extend = vi.spyOn(store, 'extend');

    const outcome = engine.runInTransaction(
      policy,
      { key },
      async (manager: EntityManager) => (await manager.query('SELECT 1 AS one'))[0].one as number,
      {
        // The engine's work (action, then the completion's write) runs; the commit waits.
        transaction: (work) =>
          dataSource.transaction(async (manager) => {
            const value = await work(manager);
            written.resolve();
            await commit.promise;
            return value;
          }),
      },
    );
    await written.promise;
    const beatsBefore = extend.mock.calls.length;
    // Five heartbeat periods (lease / 2) pass with the commit held.
    await delay(500);
    expect(extend.mock.calls.length).toBe(beatsBefore);
    // The pool (3 connections, one in the transaction) still serves other calls.
    expect(await store.find({ scope: 'other', key: randomUUID() })).toBeNull();
    expect(await store.find({ scope: 'other', key: randomUUID() })).toBeNull();

    commit.resolve();
    expect(await outcome).toEqual({ kind: 'executed', value: 1 });
    expect((await store.find({ scope: 'ledger.slow', key }))?.state).toBe('COMPLETE');
  });
});
