import { randomBytes } from 'node:crypto';
import { DataSource, DataSourceOptions } from 'typeorm';
import { IdempotencyStoreSchemaError, IdempotencyStoreUnavailableError } from '../core/errors';
import { boundedQuery } from '../stores/sql/bounded-query';
import { mysqlSchemaSql } from '../stores/sql/mysql/schema';
import { mysqlQualified } from '../stores/sql/mysql/sql';
import { isMysqlUnavailable } from '../stores/sql/mysql/unavailable';
import { schemaSql } from '../stores/sql/postgres/schema';
import { isUnavailable } from '../stores/sql/postgres/unavailable';
import { qualified, quoteIdent, TableName } from '../stores/sql/table';
import { TypeOrmIdempotencyStore } from '../stores/typeorm/typeorm.store';
import { scopeOfStored } from '../core/key';
import type { RecordId } from '../core/store';
import type { ContractHarness } from '../testing/harness';
import {
  Backend,
  commonCliError,
  describeError,
  describeWhere,
  quietLogger,
  SqlConnection,
  sqlState,
  StoreHandle,
  VerifyRun,
} from './backend';
import { CliError, ExitCode } from './exit-codes';
import { median, roundMs } from './format';
import { missingTableMessage } from './missing-table';
import { mysqlDigestSearch, postgresDigestSearch } from './sql-digest-search';

/**
 * The TypeORM store on PostgreSQL (`postgres://`, driver `pg`) or on MySQL
 * and MariaDB (`mysql://` gives a `mysql` DataSource, `mariadb://` a
 * `mariadb` one; driver `mysql2`). Loaded only for a `--database-url`.
 */
export function sqlBackend(connection: SqlConnection): Backend {
  const postgres = connection.dialect === 'postgres';
  /** One statement, bounded by the timeout (the statement is not cancelled on the server). */
  const query = <T>(dataSource: DataSource, what: string, sql: string, params: unknown[] = []) =>
    postgres
      ? boundedQuery<T>(dataSource, connection.timeoutMs, what, sql, params)
      : bounded(
          dataSource.query(sql, params) as Promise<T[]>,
          connection.timeoutMs,
          `${connection.label} did not answer ${what} within ${connection.timeoutMs} ms`,
        );

  const storeOn = (dataSource: DataSource) =>
    new TypeOrmIdempotencyStore(dataSource, {
      schema: connection.schema,
      table: connection.table,
      operationTimeoutMs: connection.timeoutMs,
      // The CLI's reads write nothing, not even init()'s byte probe.
      byteProbe: false,
      logger: quietLogger,
    });

  const serverNow = async (dataSource: DataSource): Promise<Date> => {
    if (postgres) {
      const [row] = await query<{ now: Date }>(
        dataSource,
        'the clock query',
        'SELECT clock_timestamp() AS now',
      );
      return row.now;
    }
    // Microseconds since the epoch of the server's UTC clock: no time zone takes part.
    const [row] = await query<{ us: string | number }>(
      dataSource,
      'the clock query',
      `SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS us`,
    );
    return new Date(Math.floor(Number(row.us) / 1000));
  };

  /** Whether the records table exists (the store's check says only that its shape is wrong). */
  const tableExists = async (dataSource: DataSource): Promise<boolean> => {
    const rows = await query(
      dataSource,
      'the table query',
      postgres
        ? 'SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2'
        : 'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
      [connection.schema, connection.table],
    );
    return rows.length > 0;
  };

  const backend: Backend = {
    async withStore<T>(use: (handle: StoreHandle) => Promise<T>): Promise<T> {
      const dataSource = await openDataSource(connection, 2);
      // init() only reads the catalog to check the table: never ensureSchema, so a
      // missing table is reported, not created.
      const store = storeOn(dataSource);
      try {
        try {
          await store.init();
        } catch (error) {
          if (error instanceof IdempotencyStoreSchemaError && !(await tableExists(dataSource))) {
            throw new CliError(missingTableMessage(connection), ExitCode.SCHEMA);
          }
          throw error;
        }
        const table = { schema: connection.schema, table: connection.table };
        return await use({
          store,
          where: describeWhere(connection),
          serverNow: () => serverNow(dataSource),
          countExpired: (limit) => store.countExpired({ limit }),
          findByDigest: async (scope, hex) => {
            const { sql, params } = postgres
              ? postgresDigestSearch(qualified(table), scope, hex)
              : mysqlDigestSearch(mysqlQualified(table), scope, hex);
            try {
              return await query<RecordId>(dataSource, 'the search by digest', sql, params);
            } catch (error) {
              // `query` gives up with this error when --timeout passes, and with no other.
              if (!(error instanceof IdempotencyStoreUnavailableError)) throw error;
              throw new CliError(
                `the search for ${scopeOfStored(scope)}/#${hex} took longer than --timeout (${connection.timeoutMs} ms): it reads every record of the table once; raise --timeout, or name the record by its raw key`,
                ExitCode.UNREACHABLE,
              );
            }
          },
        });
      } finally {
        await store.close().catch(() => undefined);
        await dataSource.destroy().catch(() => undefined);
      }
    },

    async verify(use, onCreated) {
      const admin = await openDataSource(connection, 6);
      const opened: DataSource[] = [];
      const stores: TypeOrmIdempotencyStore[] = [];
      const name = `nest_idempotency_verify_${randomBytes(6).toString('hex')}`;
      // PostgreSQL: a scratch schema holding the table. MySQL/MariaDB: a scratch table in the
      // configured database (a schema there is a database, which few logins may create).
      const scratch: VerifyRun['scratch'] = postgres
        ? { kind: 'schema', name }
        : { kind: 'table', name: `${connection.schema}.${name}` };
      const table: TableName = postgres
        ? { schema: name, table: connection.table }
        : { schema: connection.schema, table: name };
      const sqlTable = postgres ? qualified(table) : mysqlQualified(table);
      const removal = postgres
        ? `DROP SCHEMA IF EXISTS ${quoteIdent(name)} CASCADE`
        : `DROP TABLE IF EXISTS ${sqlTable}`;
      let created = false;
      let removeError: string | undefined;
      let value: Awaited<ReturnType<typeof use>>;
      try {
        const [version] = await query<{ version: string }>(
          admin,
          'the version query',
          postgres ? 'SHOW server_version' : 'SELECT VERSION() AS version',
        );
        const serverVersion = String(
          (version as { server_version?: string }).server_version ?? version.version,
        );
        const roundTripMs = await measureRoundTrip(() => query(admin, 'SELECT 1', 'SELECT 1'));
        const ddl = postgres
          ? [`CREATE SCHEMA ${quoteIdent(name)}`, ...schemaSql(table)]
          : mysqlSchemaSql(table);
        try {
          await query(admin, postgres ? 'CREATE SCHEMA' : 'CREATE TABLE', ddl[0]);
          created = true;
          onCreated(scratch);
        } catch (error) {
          if (postgres && sqlState(error) === '42501') {
            throw new CliError(
              `verify needs to create a scratch schema, and this login may not: ${describeError(error)}`,
              ExitCode.SCHEMA,
            );
          }
          if (!postgres && MYSQL_DENIED.has(sqlState(error) ?? '')) {
            throw new CliError(
              `verify needs to create a scratch table, and this login may not: ${describeError(error)}`,
              ExitCode.SCHEMA,
            );
          }
          throw error;
        }
        for (const sql of ddl.slice(1)) await query(admin, 'CREATE TABLE', sql);
        const other = await openDataSource(connection, 6);
        opened.push(other);
        // Scratch stores get at least 5 s a call, whatever --timeout says.
        const instance = (dataSource: DataSource, pollIntervalMs?: number) => {
          const store = new TypeOrmIdempotencyStore(dataSource, {
            schema: table.schema,
            table: table.table,
            operationTimeoutMs: Math.max(connection.timeoutMs, 5000),
            pollIntervalMs,
            logger: quietLogger,
          });
          stores.push(store);
          return store;
        };
        const harness: ContractHarness = {
          store: instance(admin),
          other: instance(other, 60_000),
          clock: 'store',
          // Every column of a scope's rows; on PostgreSQL with the row version (xmin),
          // which any write changes. InnoDB shows none (see docs/mariadb.md).
          snapshot: async (scope) =>
            JSON.stringify(
              await query(
                admin,
                'the snapshot query',
                postgres
                  ? `SELECT xmin::text AS xmin, row_to_json(r)::text AS row FROM ${sqlTable} r WHERE scope = $1 ORDER BY id`
                  : `SELECT HEX(id) AS id, scope, \`key\`, state, lease_id, fingerprint, HEX(payload) AS payload,
                       CAST(lease_expires_at AS CHAR) AS lease_expires_at, CAST(expires_at AS CHAR) AS expires_at,
                       CAST(created_at AS CHAR) AS created_at, CAST(completed_at AS CHAR) AS completed_at
                     FROM ${sqlTable} WHERE scope = ? AND CAST(scope AS BINARY) = CAST(? AS BINARY) ORDER BY id`,
                postgres ? [scope] : [scope, scope],
              ),
            ),
        };
        value = await use({ harness, serverVersion, roundTripMs, scratch });
      } finally {
        for (const store of stores) await store.close().catch(() => undefined);
        for (const dataSource of opened) await dataSource.destroy().catch(() => undefined);
        if (created) {
          try {
            await bounded(
              admin.query(removal),
              Math.max(connection.timeoutMs, 5000),
              `${connection.label} did not answer ${postgres ? 'DROP SCHEMA' : 'DROP TABLE'} in time`,
            );
          } catch (error) {
            removeError = describeError(error);
          }
        }
        await admin.destroy().catch(() => undefined);
      }
      return {
        value,
        removeError,
        cleanupHint: postgres
          ? `DROP SCHEMA ${quoteIdent(name)} CASCADE`
          : `DROP TABLE ${sqlTable}`,
      };
    },

    toCliError(error) {
      return commonCliError(error, connection, (message) => {
        const where = `${connection.label} at ${connection.target}`;
        if (postgres) {
          if (isUnavailable(error)) {
            return new CliError(
              `cannot reach PostgreSQL at ${connection.target}: ${message}`,
              ExitCode.UNREACHABLE,
            );
          }
          if (PG_LOGIN_REFUSED.has(sqlState(error) ?? '')) {
            return new CliError(
              `cannot connect to PostgreSQL at ${connection.target}: ${message}`,
              ExitCode.UNREACHABLE,
            );
          }
          return undefined;
        }
        if (isMysqlUnavailable(error)) {
          return new CliError(`cannot reach ${where}: ${message}`, ExitCode.UNREACHABLE);
        }
        if (MYSQL_LOGIN_REFUSED.has(sqlState(error) ?? '')) {
          return new CliError(`cannot connect to ${where}: ${message}`, ExitCode.UNREACHABLE);
        }
        if (/Cannot find module '(pg|mysql2)'/.test(message)) {
          const driver = postgres ? 'pg' : 'mysql2';
          return new CliError(
            `${connection.label} needs the ${driver} driver (npm install ${driver}): ${message}`,
            ExitCode.ERROR,
          );
        }
        return undefined;
      });
    },
  };
  return backend;
}

// SQLSTATEs that mean "you may not log in here": wrong password, no such role or database.
const PG_LOGIN_REFUSED = new Set(['28000', '28P01', '3D000']);
// The same on MySQL and MariaDB: access denied (1045; 1698 for a user MariaDB does not know), to
// the database (1044); no such database (1049).
const MYSQL_LOGIN_REFUSED = new Set([
  'ER_ACCESS_DENIED_ERROR',
  'ER_ACCESS_DENIED_NO_PASSWORD_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  'ER_BAD_DB_ERROR',
]);
// CREATE TABLE refused: no privilege on the database or the table.
const MYSQL_DENIED = new Set([
  'ER_TABLEACCESS_DENIED_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  'ER_SPECIFIC_ACCESS_DENIED_ERROR',
]);

/** `work`, unless `timeoutMs` passes first: then IdempotencyStoreUnavailableError with `message`. */
export async function bounded<T>(work: Promise<T>, timeoutMs: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new IdempotencyStoreUnavailableError(message)), timeoutMs);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Opens a TypeORM DataSource of the URL's type whose connection attempt is bounded by the timeout. */
export async function openDataSource(
  connection: SqlConnection,
  poolSize: number,
): Promise<DataSource> {
  const options =
    connection.dialect === 'postgres'
      ? {
          type: 'postgres',
          url: connection.url,
          connectTimeoutMS: connection.timeoutMs,
          applicationName: 'nest-idempotency-cli',
          logging: false,
          extra: { max: poolSize },
        }
      : {
          type: connection.dialect,
          url: connection.url,
          connectTimeout: connection.timeoutMs,
          logging: false,
          poolSize,
        };
  const dataSource = new DataSource(options as DataSourceOptions);
  try {
    return await dataSource.initialize();
  } catch (error) {
    if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
    throw error;
  }
}

async function measureRoundTrip(ping: () => Promise<unknown>): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    await ping();
    samples.push(performance.now() - started);
  }
  return roundMs(median(samples));
}
