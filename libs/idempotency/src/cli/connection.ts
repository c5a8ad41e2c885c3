import { DataSource, DataSourceOptions } from 'typeorm';
import { IdempotencyStoreSchemaError } from '../core/errors';
import { IdempotencyLogger } from '../core/logger';
import { TypeOrmIdempotencyStore } from '../stores/typeorm/typeorm.store';
import { boundedQuery } from '../stores/typeorm/bounded-query';
import { isUnavailable } from '../stores/typeorm/postgres/unavailable';
import { CliError, ExitCode } from './exit-codes';

export { boundedQuery };

/** What every command needs to reach the records table. */
export interface Connection {
  url: string;
  schema: string;
  table: string;
  /** Bounds the connection attempt and each statement. */
  timeoutMs: number;
  /** `host:port/database`, never the user or password: safe to print. */
  target: string;
}

/** The program-wide options, as commander parses them. */
export interface GlobalOptions {
  databaseUrl?: string;
  schema: string;
  table: string;
  timeout: number;
}

export const quietLogger: IdempotencyLogger = { warn: () => undefined, error: () => undefined };

/** Resolves `--database-url` or `DATABASE_URL`. Never echoes the URL: it may hold a password. */
export function resolveConnection(
  options: GlobalOptions,
  env: Record<string, string | undefined>,
): Connection {
  const url = options.databaseUrl ?? env.DATABASE_URL;
  if (!url) {
    throw new CliError('no database: pass --database-url or set DATABASE_URL', ExitCode.USAGE);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(
      'the database URL is not a URL; expected postgres://user:password@host:5432/database',
      ExitCode.USAGE,
    );
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new CliError(
      `the database URL must start with postgres:// or postgresql://, not ${parsed.protocol}//`,
      ExitCode.USAGE,
    );
  }
  if (!options.schema) throw new CliError('--schema must not be empty', ExitCode.USAGE);
  if (!options.table) throw new CliError('--table must not be empty', ExitCode.USAGE);
  const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost';
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  return {
    url,
    schema: options.schema,
    table: options.table,
    timeoutMs: options.timeout,
    target: `${host}:${parsed.port || '5432'}/${database}`,
  };
}

/** Opens a TypeORM DataSource (postgres) whose connection attempt is bounded by the timeout. */
export async function openDataSource(connection: Connection, poolSize = 2): Promise<DataSource> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: connection.url,
    connectTimeoutMS: connection.timeoutMs,
    applicationName: 'nest-idempotency-cli',
    logging: false,
    extra: { max: poolSize },
  } as DataSourceOptions);
  try {
    return await dataSource.initialize();
  } catch (error) {
    if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
    throw toCliError(error, connection);
  }
}

/**
 * Opens the store on the configured table and hands it to `use`. `init()` only
 * reads the catalog to check the table's shape: never `ensureSchema`, so a
 * missing table is reported, not created.
 */
export async function withStore<T>(
  connection: Connection,
  use: (store: TypeOrmIdempotencyStore, dataSource: DataSource) => Promise<T>,
): Promise<T> {
  const dataSource = await openDataSource(connection);
  const store = new TypeOrmIdempotencyStore(dataSource, {
    schema: connection.schema,
    table: connection.table,
    operationTimeoutMs: connection.timeoutMs,
    logger: quietLogger,
  });
  try {
    await store.init();
    return await use(store, dataSource);
  } catch (error) {
    throw toCliError(error, connection);
  } finally {
    await store.close().catch(() => undefined);
    await dataSource.destroy().catch(() => undefined);
  }
}

/** The server's clock: what the store compares leases and TTLs against. */
export async function serverNow(dataSource: DataSource, timeoutMs: number): Promise<Date> {
  const [row] = await boundedQuery<{ now: Date }>(
    dataSource,
    timeoutMs,
    'the clock query',
    'SELECT clock_timestamp() AS now',
  );
  return row.now;
}

// SQLSTATEs that mean "you may not log in here": wrong password, no such role or database.
const LOGIN_REFUSED = new Set(['28000', '28P01', '3D000']);

/** Maps anything thrown while talking to PostgreSQL to one line and an exit code. */
export function toCliError(error: unknown, connection: Pick<Connection, 'target'>): CliError {
  if (error instanceof CliError) return error;
  const message = describeError(error);
  if (error instanceof IdempotencyStoreSchemaError) return new CliError(message, ExitCode.SCHEMA);
  if (isUnavailable(error)) {
    return new CliError(
      `cannot reach PostgreSQL at ${connection.target}: ${message}`,
      ExitCode.UNREACHABLE,
    );
  }
  if (LOGIN_REFUSED.has(sqlState(error) ?? '')) {
    return new CliError(
      `cannot connect to PostgreSQL at ${connection.target}: ${message}`,
      ExitCode.UNREACHABLE,
    );
  }
  return new CliError(message, ExitCode.ERROR);
}

export function sqlState(error: unknown): string | undefined {
  const candidate = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  const code = candidate?.code ?? candidate?.driverError?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A one-line description of an error: its message, or for an AggregateError its parts'. */
export function describeError(error: unknown): string {
  let text: string;
  if (error instanceof AggregateError && !error.message) {
    text = error.errors.map((part) => describeError(part)).join('; ');
  } else if (error instanceof Error) {
    text = error.message || (error as { code?: string }).code || error.name;
  } else {
    text = String(error);
  }
  return text.replace(/\s*\n\s*/g, ' ').trim();
}
