import type { DataSource, EntityManager } from 'typeorm';
import { IdempotencyConfigError, IdempotencyStoreSchemaError } from '../../core/errors';
import { optionKeys, refuseUnknownOptions } from '../../core/option-keys';
import type { TransactionalCompletion } from '../../core/store';
import type { DialectContext, SqlTransaction } from '../sql/dialect';
import { DEFAULT_CROSS_INSTANCE_POLL_MS, MysqlDialect } from '../sql/mysql/dialect';
import { connectorOf } from '../sql/mysql/query';
import { PostgresDialect } from '../sql/postgres/dialect';
import { poolOf } from '../sql/postgres/pool';
import { CrossInstancePollOption, SqlIdempotencyStore, SqlStoreOptions } from '../sql/sql.store';
import { transactionQueryOf } from '../sql/transaction-handles/handle';
import { runnerOf, typeormStatement } from '../sql/transaction-handles/typeorm';
import { typeormQueryLog } from './typeorm.query-log';

export interface TypeOrmIdempotencyStoreOptions extends SqlStoreOptions, CrossInstancePollOption {}

/** Every key of `TypeOrmIdempotencyStoreOptions` (`tsc` fails when the two disagree); any other is refused. */
export const TYPEORM_STORE_OPTION_KEYS = optionKeys<TypeOrmIdempotencyStoreOptions>()([
  'schema',
  'table',
  'ensureSchema',
  'maxPayloadBytes',
  'maxWaiters',
  'operationTimeoutMs',
  'pollIntervalMs',
  'crossInstancePollMs',
  'preparedStatements',
  'byteProbe',
  'logger',
]);

const UNREADY = 'the DataSource is not initialized (destroyed while the application runs?)';

/**
 * The store through a TypeORM `DataSource`: PostgreSQL (`postgres`, driver
 * `pg`), MySQL and MariaDB (`mysql` or `mariadb`, driver `mysql2`). A front
 * of the same stores as `nest-idempotency/pg` and `nest-idempotency/mysql`:
 * their statements run on the driver's pool under the DataSource (never
 * through `dataSource.query`), reported to the DataSource's logger with keys
 * and payloads replaced. See docs/storage.md and docs/mariadb.md for the
 * tables, the migrations and the round trips each call costs. Supports strict
 * mode on every database (the AMBIGUOUS state needs the third migration,
 * which the schema check asks for), and `completion: 'transaction'` in a
 * transaction of the same DataSource.
 */
export class TypeOrmIdempotencyStore extends SqlIdempotencyStore {
  constructor(
    private readonly dataSource: DataSource,
    options: TypeOrmIdempotencyStoreOptions = {},
  ) {
    super(
      'TypeOrmIdempotencyStore',
      'createIdempotencyMigrations()',
      checked(dataSource, options),
      (context) => dialectOf(dataSource, context, options),
    );
  }

  /**
   * `completion: 'transaction'`: the handler's writes and the completion in one
   * transaction. `tx` is a transaction's EntityManager of this store's
   * DataSource (`dataSource.transaction(manager => …)`, or `TransactionHost.tx`
   * with @nestjs-cls/transactional). On PostgreSQL, `completeIn` also takes
   * the transaction of another client or ORM on the same database: a pg
   * client after BEGIN, a Prisma interactive transaction, a Drizzle or a
   * Kysely transaction (`TransactionHost.tx` with their adapters).
   */
  readonly transactional: TransactionalCompletion<EntityManager> = {
    transaction: (work) => this.dataSource.transaction((manager) => work(manager)),
    completeIn: (tx, lease, payload) =>
      this.completeInTransaction(this.statementsOf(tx), lease, payload),
    afterCommit: (lease) => this.afterCommitted(lease),
  };

  /** The statements of the open transaction `tx`: the DataSource's own, or (PostgreSQL) another client's. */
  private statementsOf(tx: unknown): SqlTransaction {
    const runner = runnerOf(tx);
    if (runner) {
      if (!runner.isTransactionActive) {
        throw new IdempotencyConfigError(
          'completion in a transaction needs the EntityManager of an open transaction (dataSource.transaction(manager => …) or TransactionHost.tx)',
        );
      }
      if (runner.connection !== this.dataSource) {
        throw new IdempotencyConfigError(
          "completion in a transaction needs a transaction of the store's own DataSource; this EntityManager belongs to another",
        );
      }
      return typeormStatement(runner);
    }
    if (this.dataSource.options.type !== 'postgres') {
      throw new IdempotencyConfigError(
        `TypeOrmIdempotencyStore on ${this.dataSource.options.type}: completion in a transaction needs the EntityManager of a transaction of its DataSource; other clients' transactions are taken on PostgreSQL only`,
      );
    }
    return transactionQueryOf(tx, 'TypeOrmIdempotencyStore');
  }

  protected assertUsable(): void {
    if (!this.dataSource.isInitialized) {
      throw new IdempotencyStoreSchemaError(
        'TypeOrmIdempotencyStore: the DataSource is not initialized; call dataSource.initialize() before the store is used (before the application starts)',
      );
    }
  }
}

/** The options, once the DataSource is known to be one. */
function checked(
  dataSource: DataSource,
  options: TypeOrmIdempotencyStoreOptions,
): TypeOrmIdempotencyStoreOptions {
  if (!dataSource || typeof dataSource !== 'object' || !dataSource.options) {
    throw new IdempotencyConfigError(
      `TypeOrmIdempotencyStore: no DataSource was given (got ${dataSource === null ? 'null' : typeof dataSource}, not a TypeORM DataSource); in IdempotencyModule.forRootAsync, add inject: [DataSource] so that useFactory receives it: forRootAsync({ inject: [DataSource], useFactory: (dataSource: DataSource) => ({ store: new TypeOrmIdempotencyStore(dataSource) }) })`,
    );
  }
  refuseUnknownOptions(options, TYPEORM_STORE_OPTION_KEYS, 'TypeOrmIdempotencyStore');
  return options;
}

/** The dialect of the DataSource's database, on the driver's pool under it. */
function dialectOf(
  dataSource: DataSource,
  context: DialectContext,
  options: TypeOrmIdempotencyStoreOptions,
) {
  const type = dataSource.options.type;
  const log = typeormQueryLog(dataSource);
  if (type === 'postgres') {
    return new PostgresDialect(context, {
      pool: () => poolOf(dataSource),
      log,
      unready: UNREADY,
    });
  }
  if (type === 'mysql' || type === 'mariadb') {
    return new MysqlDialect(
      context,
      { connector: () => connectorOf(dataSource), log, unready: UNREADY },
      type,
      (dataSource.driver as { database?: string }).database,
      options.crossInstancePollMs ?? DEFAULT_CROSS_INSTANCE_POLL_MS,
    );
  }
  throw new IdempotencyStoreSchemaError(
    `TypeOrmIdempotencyStore supports PostgreSQL; the DataSource is of type "${type}" (supported: "postgres" with pg, "mysql" and "mariadb" with mysql2)`,
  );
}
