/**
 * What every CLI backend shares: the connection a command names, the store
 * handle a backend opens, and the error mapping. A leaf: the backends import
 * it, and connection.ts loads the backends.
 */
import { errorText } from '../core/error-text';
import { IdempotencyConfigError, IdempotencyStoreSchemaError } from '../core/errors';
import { IdempotencyLogger } from '../core/logger';
import type { IdempotencyStore, RecordId } from '../core/store';
import type { ContractHarness } from '../testing/harness';
import { CliError, ExitCode } from './exit-codes';

/**
 * Where the records are, as the program-wide options say: a SQL database
 * (`--database-url`: PostgreSQL, MySQL or MariaDB, the DataSource type taken
 * from the URL's scheme) or Redis (`--redis-url`, standalone or, with
 * `--redis-cluster`, a Cluster's seed nodes). Nothing here prints a URL: it
 * may hold a password; `target` is `host:port[/database]`.
 */
export type Connection = SqlConnection | RedisConnection;

export type SqlDialect = 'postgres' | 'mysql' | 'mariadb';

export interface SqlConnection {
  kind: 'sql';
  dialect: SqlDialect;
  /** `PostgreSQL`, `MySQL` or `MariaDB`: what messages call the server. */
  label: string;
  url: string;
  /** PostgreSQL: the schema (default `public`). MySQL/MariaDB: the database (default the URL's). */
  schema: string;
  table: string;
  /** Bounds the connection attempt and each statement. */
  timeoutMs: number;
  /** `host:port/database`, never the user or password: safe to print. */
  target: string;
  /** Secrets to blank out of any message (the URL's password). */
  secrets: string[];
}

export interface RedisConnection {
  kind: 'redis';
  label: 'Redis' | 'Redis Cluster';
  /** One URL, or a Cluster's seed nodes. */
  urls: string[];
  cluster: boolean;
  keyPrefix: string;
  timeoutMs: number;
  /** `host:port` (a Cluster: its seed nodes, comma-separated), never a password. */
  target: string;
  secrets: string[];
}

/** The program-wide options, as commander parses them. */
export interface GlobalOptions {
  databaseUrl?: string;
  redisUrl?: string;
  redisCluster?: boolean;
  keyPrefix?: string;
  schema?: string;
  table: string;
  timeout: number;
}

export const DEFAULT_KEY_PREFIX = 'idempotency:';

export const quietLogger: IdempotencyLogger = { warn: () => undefined, error: () => undefined };

/** What a command works with once the store is open. */
export interface StoreHandle {
  store: IdempotencyStore;
  /** Names the records in output: `schema.table`, or the Redis key prefix and server. */
  where: string;
  /** The server's clock, which decides leases and TTLs. */
  serverNow(): Promise<Date>;
  /** How many records a purge would delete now; absent where the backend expires records itself. */
  countExpired?(limit?: number): Promise<number>;
  /**
   * The records of `scope` whose key digest may be `#<hex>`: of that stored
   * scope and, for a scope without a tenant, of each of its tenants. No index
   * holds digests, so this reads every record of the scope (SQL: in one
   * statement that hashes on the server; Redis: every record under the
   * prefix). `onRead` hears how many records were read so far, where the
   * backend counts them. The caller checks each candidate's digest itself.
   */
  findByDigest(scope: string, hex: string, onRead?: (count: number) => void): Promise<RecordId[]>;
}

/** What `verify` ran, and what it left behind (nothing, unless `scratch.error` is set). */
export interface VerifyRun {
  harness: ContractHarness;
  serverVersion: string;
  roundTripMs: number;
  scratch: {
    /** `schema` (PostgreSQL), `table` (MySQL/MariaDB) or `prefix` (Redis). */
    kind: 'schema' | 'table' | 'prefix';
    name: string;
  };
}

/** One backend's way to open the store and run verify; loaded only when used. */
export interface Backend {
  withStore<T>(use: (handle: StoreHandle) => Promise<T>): Promise<T>;
  /**
   * Creates the scratch namespace and hands `use` the harness on it; always
   * removes it afterwards. `onCreated` reports its name as soon as it exists.
   */
  verify<T>(
    use: (run: VerifyRun) => Promise<T>,
    onCreated: (scratch: VerifyRun['scratch']) => void,
  ): Promise<{ value: T; removeError?: string; cleanupHint: string }>;
  /** Maps anything thrown while talking to the backend to one line and an exit code. */
  toCliError(error: unknown): CliError;
}

/** `text` with every secret of the connection blanked out. */
export function redact(text: string, secrets: readonly string[]): string {
  return secrets.reduce((out, secret) => (secret ? out.split(secret).join('***') : out), text);
}

/**
 * The error mapping every backend shares: a CliError as it is, a table or
 * server the store refuses (exit 4), a missing driver (exit 6); `reach`
 * decides what is "cannot reach" (exit 3) for that backend.
 */
export function commonCliError(
  error: unknown,
  connection: Pick<Connection, 'secrets'>,
  reach: (message: string) => CliError | undefined,
): CliError {
  if (error instanceof CliError) {
    return new CliError(redact(error.message, connection.secrets), error.exitCode);
  }
  const message = redact(describeError(error), connection.secrets);
  if (error instanceof IdempotencyStoreSchemaError) return new CliError(message, ExitCode.SCHEMA);
  if (error instanceof IdempotencyConfigError) return new CliError(message, ExitCode.ERROR);
  return reach(message) ?? new CliError(message, ExitCode.ERROR);
}

export function sqlState(error: unknown): string | undefined {
  const candidate = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  const code = candidate?.code ?? candidate?.driverError?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A one-line description of an error: its message, or for an AggregateError its parts'. */
export function describeError(error: unknown): string {
  return errorText(error)
    .replace(/\s*\n\s*/g, ' ')
    .trim();
}

/** `schema.table`, or the Redis prefix and where it lives: what output names the records by. */
export function describeWhere(connection: Connection): string {
  return connection.kind === 'sql'
    ? `${connection.schema}.${connection.table}`
    : `${connection.keyPrefix}* on ${connection.label} ${connection.target}`;
}
