import { IdempotencyConfigError } from '../../core/errors';
import { optionKeys, refuseUnknownOptions } from '../../core/option-keys';
import { describeInput } from '../../core/store-input';
import { DEFAULT_CROSS_INSTANCE_POLL_MS, MysqlDialect } from '../sql/mysql/dialect';
import { connectorOfPool, MysqlConnector } from '../sql/mysql/query';
import { warningsOnly } from '../sql/query-log';
import { CrossInstancePollOption, SqlIdempotencyStore, SqlStoreOptions } from '../sql/sql.store';

export interface MysqlIdempotencyStoreOptions extends SqlStoreOptions, CrossInstancePollOption {}

/** Every key of `MysqlIdempotencyStoreOptions` (`tsc` fails when the two disagree); any other is refused. */
export const MYSQL_STORE_OPTION_KEYS = optionKeys<MysqlIdempotencyStoreOptions>()([
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

/**
 * A mysql2 pool, as the application made it: `createPool` from `mysql2`
 * (callbacks) or from `mysql2/promise`. Typed loosely so that the library
 * needs no mysql2 types.
 */
export type MysqlPoolLike = object;

/**
 * The MySQL and MariaDB store on the application's own mysql2 pool, without
 * an ORM: the same statements, table, migrations and cross-instance wake-ups
 * (a shared poll; MySQL has no LISTEN/NOTIFY) as `TypeOrmIdempotencyStore` on
 * a `mysql` or `mariadb` DataSource, with which it shares its records. Takes
 * the pool of `mysql2` (`createPool`) or of `mysql2/promise` (whose callback
 * pool it uses underneath). On MariaDB 10.5 or later acquisitions read the
 * row back with RETURNING. The pool stays the application's: `close()` never
 * ends it.
 */
export class MysqlIdempotencyStore extends SqlIdempotencyStore {
  constructor(pool: MysqlPoolLike, options: MysqlIdempotencyStoreOptions = {}) {
    const connector = connectorOfPool(pool);
    super(
      'MysqlIdempotencyStore',
      'migrateMysqlIdempotencyTable() or mysqlIdempotencyMigrationSql()',
      checked(pool, connector, options),
      (context) => {
        const { logger } = context;
        return new MysqlDialect(
          context,
          {
            connector: () => (ended(pool) ? undefined : connector),
            log: warningsOnly((message) => logger.warn(message)),
            unready: 'the mysql2 pool was ended (pool.end() while the application runs?)',
          },
          'mariadb',
          databaseOf(pool),
          options.crossInstancePollMs ?? DEFAULT_CROSS_INSTANCE_POLL_MS,
        );
      },
    );
  }

  protected assertUsable(): void {
    // An ended pool fails each statement as unavailable: nothing to check up front.
  }
}

function checked(
  pool: MysqlPoolLike,
  connector: MysqlConnector | undefined,
  options: MysqlIdempotencyStoreOptions,
): MysqlIdempotencyStoreOptions {
  if (!connector) {
    throw new IdempotencyConfigError(
      `MysqlIdempotencyStore: needs a mysql2 pool (createPool from 'mysql2' or 'mysql2/promise'), got ${describeInput(pool)}; a single connection cannot serve concurrent calls`,
    );
  }
  refuseUnknownOptions(options, MYSQL_STORE_OPTION_KEYS, 'MysqlIdempotencyStore');
  return options;
}

/** The callback pool: the one given, or the one a `mysql2/promise` pool wraps. */
function corePool(pool: MysqlPoolLike): {
  _closed?: boolean;
  config?: { connectionConfig?: { database?: string } };
} {
  const given = pool as { pool?: object; promise?: unknown };
  return (typeof given.promise === 'function' ? given : given.pool) ?? {};
}

/** `pool.end()` was called: mysql2 refuses every `getConnection` from then on. */
function ended(pool: MysqlPoolLike): boolean {
  return corePool(pool)._closed === true;
}

/** The database the pool's settings name, if any (the server says for certain at `init()`). */
function databaseOf(pool: MysqlPoolLike): string | undefined {
  return corePool(pool).config?.connectionConfig?.database || undefined;
}
