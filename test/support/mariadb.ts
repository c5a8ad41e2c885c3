import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { DataSource, DataSourceOptions } from 'typeorm';

/**
 * The MariaDB (or MySQL) server the MariaDB suites use:
 * IDEMPOTENCY_TEST_MYSQL_URL, by default the machine's MariaDB 10.11 at
 * 127.0.0.1:3306 (user root, no password, database `test`).
 */
export function mysqlTestUrl(): string {
  return process.env.IDEMPOTENCY_TEST_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
}

/** The server's host and port, for proxies in front of it. */
export function mysqlTarget(): { host: string; port: number } {
  const url = new URL(mysqlTestUrl());
  return { host: url.hostname || '127.0.0.1', port: Number(url.port || 3306) };
}

/** The test URL with its host and port replaced (to go through a proxy). */
export function mysqlUrlThroughPort(port: number): string {
  const url = new URL(mysqlTestUrl());
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return url.toString();
}

const HOW_TO_START =
  'start one with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` ' +
  '(a database `test` that root reaches without a password), or set IDEMPOTENCY_TEST_MYSQL_URL';

let probed: boolean | undefined;

// Run in a child process, so that the answer is there when the suites are declared.
const PROBE = `
const connection = require('mysql2').createConnection({ uri: process.argv[1], connectTimeout: 2000 });
connection.on('error', () => undefined);
connection.query('SELECT 1', (error) => {
  connection.destroy();
  if (error) process.stderr.write(error.message || error.code || 'error');
  process.exit(error ? 1 : 0);
});`;

/**
 * Whether the server answers a query. When it does not, the MariaDB suites are
 * skipped with a message saying how to start one, unless
 * IDEMPOTENCY_TEST_REQUIRE_MARIADB=1: then this throws, and the suite fails.
 */
export function mariadbAvailable(): boolean {
  if (probed !== undefined) return probed;
  const probe = spawnSync(process.execPath, ['-e', PROBE, mysqlTestUrl()], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  probed = probe.status === 0;
  if (probed) return true;
  const stderr = probe.stderr.trim();
  const failure = /Cannot find module 'mysql2'/.test(stderr)
    ? 'the mysql2 driver is not installed (npm install mysql2)'
    : stderr.split('\n')[0] || probe.error?.message || `exit ${probe.status}`;
  const where = mysqlTestUrl().replace(/\/\/[^@/]*@/, '//');
  if (process.env.IDEMPOTENCY_TEST_REQUIRE_MARIADB === '1') {
    throw new Error(
      `MariaDB is required (IDEMPOTENCY_TEST_REQUIRE_MARIADB=1) but ${where} is unreachable (${failure}); ${HOW_TO_START}`,
    );
  }
  console.warn(
    `\n[tests] MariaDB suites are skipped: ${where} is unreachable (${failure}); ${HOW_TO_START}.`,
  );
  return false;
}

/** A fresh table name per test file, so suites never see each other's rows. */
export function scratchTable(prefix = 't'): string {
  return `idem_${prefix}_${randomBytes(6).toString('hex')}`;
}

/** A DataSource on the test server; `type` `mariadb` unless told (`mysql` runs the MySQL statements). */
export async function openMysqlDataSource(
  extra: Partial<DataSourceOptions> & { type?: 'mysql' | 'mariadb' } = {},
): Promise<DataSource> {
  const dataSource = new DataSource({
    type: 'mariadb',
    url: mysqlTestUrl(),
    poolSize: 20,
    ...extra,
  } as DataSourceOptions);
  return dataSource.initialize();
}

export async function dropTable(dataSource: DataSource, table: string): Promise<void> {
  await dataSource.query(`DROP TABLE IF EXISTS \`${table.replace(/`/g, '``')}\``);
}
