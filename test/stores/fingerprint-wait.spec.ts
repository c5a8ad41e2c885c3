import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { AcquireRequest, IdempotencyStore, InMemoryIdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * A duplicate that would wait (waitTimeoutMs > 0) but carries another
 * fingerprint than the live IN_PROGRESS record is refused at once: there is
 * nothing to wait for, since the holder's result would be refused too. The
 * contract checks the mismatch only without waiting (waitTimeoutMs 0).
 */
describe.each(['memory', 'postgres'] as const)(
  'a waiting duplicate with another fingerprint (%s store)',
  (kind) => {
    let store: IdempotencyStore;
    let dataSource: DataSource | undefined;
    let looks = 0;
    const schema = scratchSchema('fpwait');

    beforeAll(async () => {
      if (kind === 'memory') {
        store = new InMemoryIdempotencyStore();
      } else {
        dataSource = await openDataSource();
        const logQuery = dataSource.logger.logQuery.bind(dataSource.logger);
        // Counts the store's looks (it reports each statement to the DataSource's logger).
        dataSource.logger.logQuery = (query, parameters, runner) => {
          if (query.includes('WITH stolen AS')) looks++;
          return logQuery(query, parameters, runner);
        };
        store = new TypeOrmIdempotencyStore(dataSource, {
          schema,
          ensureSchema: true,
          logger: { warn: () => undefined, error: () => undefined },
        });
      }
      await store.init?.();
    });
    afterAll(async () => {
      await store.close?.();
      if (dataSource?.isInitialized) {
        await dropSchema(dataSource, schema);
        await dataSource.destroy(); // also ends a look loop that never stopped
      }
    });

    it('is told fingerprint-mismatch at once, after a look or two', async () => {
      const request: AcquireRequest = {
        scope: `fp-${randomUUID()}`,
        key: 'k',
        leaseMs: 60_000,
        ttlMs: 60_000,
        waitTimeoutMs: 0,
        fingerprint: 'f1',
      };
      const holder = await store.tryAcquire(request);
      expect(holder.kind).toBe('acquired');
      looks = 0;

      const started = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const answer = await Promise.race([
        store.tryAcquire({ ...request, fingerprint: 'f2', waitTimeoutMs: 500 }),
        new Promise<{ kind: string }>((resolve) => {
          timer = setTimeout(() => resolve({ kind: 'no answer within 2 s' }), 2000);
        }),
      ]);
      clearTimeout(timer);
      const elapsed = performance.now() - started;

      expect({ kind: answer.kind, looks: looks <= 2 ? 'at most 2' : `${looks}` }).toEqual({
        kind: 'fingerprint-mismatch',
        looks: 'at most 2',
      });
      expect(elapsed).toBeLessThan(500);
    });
  },
);
