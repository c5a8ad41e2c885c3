import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import { IdempotencyError } from '../../core/errors';

const current = new AsyncLocalStorage<unknown>();

/** Runs `fn` with `tx` as the current call's transaction (what `IdempotencyTransaction` hands out). */
export function withCurrentTransaction<T>(tx: unknown, fn: () => T): T {
  return current.run(tx, fn);
}

/**
 * The transaction of the current `@Idempotent({ completion: 'transaction' })`
 * call: inject it and write through `manager`, so the handler's writes commit
 * with the record's completion, or not at all.
 *
 *   constructor(private readonly tx: IdempotencyTransaction<EntityManager>) {}
 *   …
 *   await this.tx.manager.insert(Payment, payment);
 *
 * With `@nestjs-cls/transactional` you may use its `TransactionHost.tx`
 * instead: the library runs the handler in `withTransaction`, so both name
 * the same transaction.
 */
@Injectable()
export class IdempotencyTransaction<Tx = unknown> {
  /** True inside a call that runs in a transaction. */
  get active(): boolean {
    return current.getStore() !== undefined;
  }

  /**
   * The transaction's handle: the store's own (a TypeORM `EntityManager`, a
   * `pg` client), or with `@nestjs-cls/transactional` its `TransactionHost.tx`
   * (a Prisma, Drizzle or Kysely transaction with their adapters). Throws
   * outside such a call.
   */
  get manager(): Tx {
    const tx = current.getStore();
    if (tx === undefined) {
      throw new IdempotencyError(
        "IdempotencyTransaction.manager: no transaction here; it exists only while an @Idempotent({ completion: 'transaction' }) handler runs",
      );
    }
    return tx as Tx;
  }
}
