// The Kysely adapter docs/kysely.md gives applications (kept identical to it by
// test/nest/transaction-orms.e2e-spec.ts), as the ORM transaction tests use it.
import type { TransactionalAdapter } from '@nestjs-cls/transactional';
import type { IsolationLevel, Kysely, Transaction } from 'kysely';

export interface KyselyTransactionOptions {
  isolationLevel?: IsolationLevel;
}

/**
 * @nestjs-cls/transactional 3.x over a Kysely instance: `TransactionHost.tx`
 * is the open `Transaction` inside `withTransaction` and `@Transactional()`,
 * the Kysely instance outside. A nested call joins the transaction it is in.
 */
export class TransactionalAdapterKysely<DB> implements TransactionalAdapter<
  Kysely<DB>,
  Kysely<DB>,
  KyselyTransactionOptions
> {
  readonly connectionToken: unknown;
  readonly defaultTxOptions?: Partial<KyselyTransactionOptions>;

  constructor(options: {
    kyselyInstanceToken: unknown;
    defaultTxOptions?: Partial<KyselyTransactionOptions>;
  }) {
    this.connectionToken = options.kyselyInstanceToken;
    this.defaultTxOptions = options.defaultTxOptions;
  }

  optionsFactory = (db: Kysely<DB>) => ({
    wrapWithTransaction: async (
      options: KyselyTransactionOptions | undefined,
      fn: (...args: unknown[]) => Promise<unknown>,
      setClient: (client?: Kysely<DB>) => void,
    ) => {
      let begin = db.transaction();
      if (options?.isolationLevel) begin = begin.setIsolationLevel(options.isolationLevel);
      return begin.execute(async (trx: Transaction<DB>) => {
        setClient(trx);
        return fn();
      });
    },
    getFallbackInstance: () => db,
  });
}
