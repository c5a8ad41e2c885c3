import type { Pool, PoolClient } from 'pg';
import { describeInput } from '../../core/store-input';
import { IdempotencyConfigError } from '../../core/errors';
import { optionKeys, refuseUnknownOptions } from '../../core/option-keys';
import type { TransactionalCompletion } from '../../core/store';
import { PostgresDialect } from '../sql/postgres/dialect';
import { warningsOnly } from '../sql/query-log';
import { transactionQueryOf } from '../sql/transaction-handles/handle';
import { SqlIdempotencyStore, SqlStoreOptions } from '../sql/sql.store';

export type PgIdempotencyStoreOptions = SqlStoreOptions;

/** Every key of `PgIdempotencyStoreOptions` (`tsc` fails when the two disagree); any other is refused. */
export const PG_STORE_OPTION_KEYS = optionKeys<PgIdempotencyStoreOptions>()([
  'schema',
  'table',
  'ensureSchema',
  'maxPayloadBytes',
  'maxWaiters',
  'operationTimeoutMs',
  'pollIntervalMs',
  'preparedStatements',
  'byteProbe',
  'logger',
]);

/**
 * The PostgreSQL store on the application's own `pg` `Pool`, without an ORM:
 * the same statements, table, migrations and LISTEN/NOTIFY wake-ups as
 * `TypeOrmIdempotencyStore` on a postgres DataSource (the two share their
 * records). Every statement takes a connection from the pool and hands it
 * back; LISTEN runs on one client of its own, opened with the pool's settings
 * outside the pool. The pool stays the application's: `close()` never ends it.
 */
export class PgIdempotencyStore extends SqlIdempotencyStore {
  constructor(
    private readonly pool: Pool,
    options: PgIdempotencyStoreOptions = {},
  ) {
    super(
      'PgIdempotencyStore',
      'migratePgIdempotencyTable() or pgIdempotencyMigrationSql()',
      checked(pool, options),
      (context) => {
        const { logger } = context;
        return new PostgresDialect(context, {
          pool: () => (ended(pool) ? undefined : pool),
          log: warningsOnly((message) => logger.warn(message)),
          unready: 'the pg Pool was ended (pool.end() while the application runs?)',
        });
      },
    );
  }

  /**
   * `completion: 'transaction'`: the handler's writes and the completion in one
   * transaction on the same database. `transaction` opens one on a client of
   * this store's pool (`tx` is that client, inside `BEGIN` … `COMMIT`);
   * `completeIn` also takes the transaction of the application's own client
   * or ORM: a pg client after BEGIN, a TypeORM EntityManager, a Prisma
   * interactive transaction, a Drizzle or a Kysely transaction
   * (`TransactionHost.tx` of @nestjs-cls/transactional).
   */
  readonly transactional: TransactionalCompletion<PoolClient> = {
    transaction: (work) => this.inTransaction(work),
    completeIn: (tx, lease, payload) =>
      this.completeInTransaction(transactionQueryOf(tx, 'PgIdempotencyStore'), lease, payload),
    afterCommit: (lease) => this.afterCommitted(lease),
  };

  protected assertUsable(): void {
    // An ended pool fails each statement as unavailable: nothing to check up front.
  }

  /** `work` between BEGIN and COMMIT on one client of the pool; ROLLBACK when it throws. */
  private async inTransaction<T>(work: (tx: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      // A client whose ROLLBACK fails is in a state nobody knows: dropped, not pooled.
      await client.query('ROLLBACK').catch((failure: Error) => (broken = failure));
      throw error;
    } finally {
      client.release(broken ?? false);
    }
  }
}

/** The options, once the pool is known to be a `pg` Pool. */
function checked(pool: Pool, options: PgIdempotencyStoreOptions): PgIdempotencyStoreOptions {
  const given = pool as unknown as { connect?: unknown; Client?: unknown; options?: unknown };
  if (
    !given ||
    typeof given !== 'object' ||
    typeof given.connect !== 'function' ||
    typeof given.Client !== 'function' ||
    typeof given.options !== 'object'
  ) {
    throw new IdempotencyConfigError(
      `PgIdempotencyStore: needs a pg Pool (new Pool({ connectionString }) from 'pg'), got ${describeInput(pool)}; a single pg Client cannot serve concurrent calls nor a LISTEN connection`,
    );
  }
  refuseUnknownOptions(options, PG_STORE_OPTION_KEYS, 'PgIdempotencyStore');
  return options;
}

/** `pool.end()` was called: pg refuses every `connect` from then on. */
function ended(pool: Pool): boolean {
  return (pool as unknown as { ending?: boolean }).ending === true;
}
