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

/**
 * Loads the backend the connection needs: `typeorm` for SQL, `redis` for Redis, never both.
 * `import()` with the built file's name: Node resolves it in dist/, Vite (the tests) maps it to
 * the source.
 */
export async function openBackend(connection: Connection): Promise<Backend> {
  if (connection.kind === 'redis') {
    const { redisBackend } = await import('./redis-backend.js');
    return redisBackend(connection);
  }
  const { sqlBackend } = await import('./sql-backend.js');
  return sqlBackend(connection);
}

/** Opens the store named by `connection` and hands it to `use`; any error becomes a CliError. */
export async function withStore<T>(
  connection: Connection,
  use: (handle: StoreHandle) => Promise<T>,
): Promise<T> {
  const backend = await openBackend(connection);
  try {
    return await backend.withStore(use);
  } catch (error) {
    throw backend.toCliError(error);
  }
}

/**
 * Resolves `--database-url` / `--redis-url` (or DATABASE_URL / REDIS_URL).
 * Never echoes a URL: it may hold a password.
 */
export function resolveConnection(
  options: GlobalOptions,
  env: Record<string, string | undefined>,
): Connection {
  if (options.databaseUrl !== undefined && options.redisUrl !== undefined) {
    throw new CliError('pass --database-url or --redis-url, not both', ExitCode.USAGE);
  }
  const redisAsked =
    options.redisUrl !== undefined ||
    options.redisCluster === true ||
    options.keyPrefix !== undefined;
  if (options.databaseUrl === undefined && redisAsked) {
    return resolveRedis(options, options.redisUrl ?? env.REDIS_URL);
  }
  if (options.databaseUrl === undefined && !env.DATABASE_URL && env.REDIS_URL) {
    return resolveRedis(options, env.REDIS_URL);
  }
  if (options.databaseUrl === undefined && env.DATABASE_URL && env.REDIS_URL) {
    throw new CliError(
      'both DATABASE_URL and REDIS_URL are set: choose the store with --database-url or --redis-url',
      ExitCode.USAGE,
    );
  }
  return resolveSql(options, options.databaseUrl ?? env.DATABASE_URL);
}

const SQL_SCHEMES: Record<string, { dialect: SqlDialect; label: string; port: string }> = {
  'postgres:': { dialect: 'postgres', label: 'PostgreSQL', port: '5432' },
  'postgresql:': { dialect: 'postgres', label: 'PostgreSQL', port: '5432' },
  'mysql:': { dialect: 'mysql', label: 'MySQL', port: '3306' },
  'mariadb:': { dialect: 'mariadb', label: 'MariaDB', port: '3306' },
};

function resolveSql(options: GlobalOptions, url: string | undefined): SqlConnection {
  if (!url) {
    throw new CliError(
      'no database: pass --database-url or set DATABASE_URL (for Redis: --redis-url or REDIS_URL)',
      ExitCode.USAGE,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(
      'the database URL is not a URL; expected postgres://user:password@host:5432/database (or mysql://, mariadb://)',
      ExitCode.USAGE,
    );
  }
  const scheme = SQL_SCHEMES[parsed.protocol];
  if (!scheme) {
    const redis = parsed.protocol === 'redis:' || parsed.protocol === 'rediss:';
    throw new CliError(
      `the database URL must start with postgres://, postgresql://, mysql:// or mariadb://, not ${parsed.protocol}//${redis ? '; a Redis URL goes in --redis-url' : ''}`,
      ExitCode.USAGE,
    );
  }
  if (options.keyPrefix !== undefined) {
    throw new CliError(
      '--key-prefix is for Redis; a database has --schema and --table',
      ExitCode.USAGE,
    );
  }
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  const schema = options.schema ?? (scheme.dialect === 'postgres' ? 'public' : database);
  if (!schema) {
    throw new CliError(
      options.schema === undefined
        ? `the ${scheme.label} URL names no database: add one (${parsed.protocol}//host:${scheme.port}/database) or pass --schema`
        : '--schema must not be empty',
      ExitCode.USAGE,
    );
  }
  if (!options.table) throw new CliError('--table must not be empty', ExitCode.USAGE);
  const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost';
  return {
    kind: 'sql',
    dialect: scheme.dialect,
    label: scheme.label,
    url,
    schema,
    table: options.table,
    timeoutMs: options.timeout,
    target: `${host}:${parsed.port || scheme.port}/${database}`,
    secrets: secretsOf(parsed),
  };
}

function resolveRedis(options: GlobalOptions, value: string | undefined): RedisConnection {
  if (!value) {
    throw new CliError('no Redis: pass --redis-url or set REDIS_URL', ExitCode.USAGE);
  }
  if (options.schema !== undefined) {
    throw new CliError(
      '--schema is for a database; Redis records are found by --key-prefix',
      ExitCode.USAGE,
    );
  }
  const cluster = options.redisCluster === true;
  const urls = value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  if (urls.length > 1 && !cluster) {
    throw new CliError(
      `--redis-url holds ${urls.length} URLs: several are the seed nodes of a Cluster; add --redis-cluster`,
      ExitCode.USAGE,
    );
  }
  const parsed = urls.map((url, i) => {
    const which = urls.length > 1 ? `Redis URL #${i + 1}` : 'the Redis URL';
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new CliError(
        `${which} is not a URL; expected redis://[user:password@]host:6379[/db] or rediss://…`,
        ExitCode.USAGE,
      );
    }
    if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
      throw new CliError(
        `${which} must start with redis:// or rediss://, not ${u.protocol}//`,
        ExitCode.USAGE,
      );
    }
    return u;
  });
  if (parsed.length === 0) {
    throw new CliError('no Redis: pass --redis-url or set REDIS_URL', ExitCode.USAGE);
  }
  const keyPrefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
  if (!keyPrefix) throw new CliError('--key-prefix must not be empty', ExitCode.USAGE);
  const hosts = parsed.map((u) => `${u.hostname || '127.0.0.1'}:${u.port || '6379'}`);
  return {
    kind: 'redis',
    label: cluster ? 'Redis Cluster' : 'Redis',
    urls,
    cluster,
    keyPrefix,
    timeoutMs: options.timeout,
    target: cluster ? hosts.join(', ') : `${hosts[0]}${parsed[0].pathname.replace(/^\/$/, '')}`,
    secrets: parsed.flatMap(secretsOf),
  };
}

function secretsOf(url: URL): string[] {
  if (!url.password) return [];
  let decoded = url.password;
  try {
    decoded = decodeURIComponent(url.password);
  } catch {
    // keep the encoded form only
  }
  return [...new Set([url.password, decoded])];
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
