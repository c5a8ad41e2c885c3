import {
  Backend,
  Connection,
  DEFAULT_KEY_PREFIX,
  GlobalOptions,
  RedisConnection,
  SqlConnection,
  SqlDialect,
  StoreHandle,
} from './backend';
import { CliError, ExitCode } from './exit-codes';

export * from './backend';

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
