import { AddressInfo, createServer, Server, Socket } from 'node:net';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { cli, CliRun } from './cli-harness';

/** A port where nothing listens: connections are refused. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function urlAt(port: number, password = 'do-not-print-me'): string {
  const url = new URL(testDatabaseUrl());
  url.hostname = '127.0.0.1';
  url.port = String(port);
  url.password = password;
  return url.toString();
}

/** One line on stderr, nothing on stdout, no stack trace. */
function expectOneLine(run: CliRun): string {
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(/^error: [^\n]+\n$/);
  expect(run.stderr).not.toMatch(/\n\s+at /);
  return run.stderr;
}

describe('nest-idempotency errors and exit codes', () => {
  let admin: DataSource;
  const schema = scratchSchema('cli_errors');

  beforeAll(async () => {
    admin = await openDataSource();
    await admin.query(`CREATE SCHEMA "${schema}"`);
  });
  afterAll(async () => {
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  describe('database unreachable: exit 3', () => {
    it.each([['list'], ['inspect', 's', 'k'], ['purge'], ['verify']])(
      '%s: one line naming host, port and database, never the password',
      async (...args) => {
        const port = await closedPort();
        const run = await cli(args, { env: { DATABASE_URL: urlAt(port) } });
        const line = expectOneLine(run);
        expect(line).toMatch(
          new RegExp(
            `^error: cannot reach PostgreSQL at 127\\.0\\.0\\.1:${port}/\\w+: .*ECONNREFUSED`,
          ),
        );
        expect(line).not.toContain('do-not-print-me');
        expect(run.code).toBe(3);
      },
    );

    it('bounds the connection attempt by --timeout when the server accepts and never answers', async () => {
      const sockets = new Set<Socket>();
      const silent: Server = createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const { port } = silent.address() as AddressInfo;
      try {
        const started = Date.now();
        const run = await cli(['--timeout', '300', 'list'], {
          env: { DATABASE_URL: urlAt(port) },
        });
        const elapsed = Date.now() - started;
        expect(expectOneLine(run)).toMatch(/^error: cannot reach PostgreSQL at .*timeout/);
        expect(run.code).toBe(3);
        expect(elapsed).toBeGreaterThanOrEqual(280);
        expect(elapsed).toBeLessThan(3000);
      } finally {
        for (const socket of sockets) socket.destroy();
        await new Promise<void>((resolve) => silent.close(() => resolve()));
      }
    });

    it('reports a login that is refused as exit 3, without the password', async () => {
      const url = new URL(testDatabaseUrl());
      url.pathname = '/no_such_database_for_cli';
      const run = await cli(['list'], { env: { DATABASE_URL: url.toString() } });
      expect(expectOneLine(run)).toMatch(
        /^error: cannot connect to PostgreSQL at .*\/no_such_database_for_cli: database "no_such_database_for_cli" does not exist\n$/,
      );
      expect(run.code).toBe(3);
    });
  });

  describe('schema problems: exit 4', () => {
    it.each([['list'], ['inspect', 's', 'k'], ['purge'], ['purge', '--dry-run']])(
      '%s: a missing table is named with what creates it, and is not created',
      async (...args) => {
        const run = await cli(['--schema', schema, ...args]);
        expect(expectOneLine(run)).toBe(
          `error: table ${schema}.idempotency_records does not exist, and the CLI never creates it. Create it with the application's migrations (createIdempotencyMigrations() in its DataSource; with the TypeORM CLI: npx typeorm migration:run -d <data-source file>), or with its SQL: nest-idempotency schema-sql postgres --schema ${schema} | psql "$DATABASE_URL"; or start the application once with { ensureSchema: true } (development only)\n`,
        );
        expect(run.code).toBe(4);
        const present = await admin.query(`SELECT to_regclass($1) AS t`, [
          `"${schema}".idempotency_records`,
        ]);
        expect(present[0].t).toBeNull();
      },
    );

    it('schema-sql prints SQL that makes a table the CLI opens, and connects to nothing', async () => {
      const sqlSchema = `${schema}_sql`;
      // No server at all: the command only prints.
      const printed = await cli(['schema-sql', 'postgres', '--schema', sqlSchema], { env: {} });
      expect(printed.code).toBe(0);
      expect(printed.stdout.split('\n')[0]).toBe(
        `-- nest-idempotency: the records table ${sqlSchema}.idempotency_records (PostgreSQL)`,
      );
      try {
        // As psql would run it: one script, twice (every statement is idempotent).
        await admin.query(printed.stdout);
        await admin.query(printed.stdout);
        const listed = await cli(['--schema', sqlSchema, 'list', '--json']);
        expect(listed.code).toBe(0);
        expect(JSON.parse(listed.stdout).records).toEqual([]);
      } finally {
        await admin.query(`DROP SCHEMA IF EXISTS "${sqlSchema}" CASCADE`);
      }
      // The dialect comes from the URL when it is not given; without either, exit 2.
      const fromUrl = await cli(['schema-sql'], {
        env: { DATABASE_URL: 'mariadb://app@db:3306/shop' },
      });
      expect(fromUrl.stdout).toMatch(
        /^-- nest-idempotency: the records table idempotency_records \(MySQL, MariaDB\)\nCREATE TABLE IF NOT EXISTS `idempotency_records` \(/,
      );
      expect(await cli(['schema-sql'], { env: {} })).toEqual({
        code: 2,
        stdout: '',
        stderr:
          'error: name the database: schema-sql postgres, schema-sql mysql or schema-sql mariadb (or pass --database-url)\n',
      });
    });

    it('names what is wrong with a table of the wrong shape', async () => {
      await admin.query(`CREATE TABLE "${schema}".wrong (id bytea PRIMARY KEY, scope text)`);
      const run = await cli(['--schema', schema, '--table', 'wrong', 'list']);
      expect(expectOneLine(run)).toMatch(
        new RegExp(`^error: table ${schema}\\.wrong has the wrong shape: column "key" is missing`),
      );
      expect(run.code).toBe(4);
    });
  });

  describe('bad arguments: exit 2, one line, before connecting', () => {
    it.each([
      [['lsit'], /^error: unknown command 'lsit' \(Did you mean list\?\)\n$/],
      [['list', '--bogus'], /^error: unknown option '--bogus'\n$/],
      [['list', '--limit', '0'], /^error: option '--limit <n>' argument '0' is invalid\./],
      [['list', '--limit', 'ten'], /^error: option '--limit <n>' argument 'ten' is invalid\./],
      [
        ['list', '--state', 'done'],
        /^error: option '--state <state>' argument 'done' is invalid\. Allowed choices are in-progress, complete, ambiguous\.\n$/,
      ],
      [['list', '--scope'], /^error: option '--scope <scope>' argument missing\n$/],
      [['inspect', 'Orders.place'], /^error: name the record: <scope> <key>, <scope>\/#<digest> /],
      [['inspect'], /^error: missing required argument 'scope'\n$/],
      [['inspect', '', 'k'], /^error: <scope> must not be empty\n$/],
      [['inspect', 's', ''], /^error: <key> must not be empty\n$/],
      [['list', 'extra'], /^error: too many arguments for 'list'/],
      [['--timeout', '0', 'list'], /^error: option '--timeout <ms>' argument '0' is invalid\./],
      [
        ['verify', '--concurrency', '1'],
        /^error: option '--concurrency <n>' argument '1' is invalid\./,
      ],
      [['--schema', '', 'list'], /^error: --schema must not be empty\n$/],
    ])('%j', async (args, message) => {
      // An unreachable URL: had any of these connected, the exit code would be 3.
      const run = await cli(args, { env: { DATABASE_URL: urlAt(await closedPort()) } });
      expect(expectOneLine(run)).toMatch(message);
      expect(run.code).toBe(2);
    });

    it('needs a database URL from --database-url or DATABASE_URL, and never echoes it', async () => {
      expect(await cli(['list'], { env: {} })).toEqual({
        code: 2,
        stdout: '',
        stderr:
          'error: no database: pass --database-url or set DATABASE_URL (for Redis: --redis-url or REDIS_URL)\n',
      });
      const notPostgres = await cli(['list', '--database-url', 'http://root:hunter2@db/x'], {
        env: {},
      });
      expect(expectOneLine(notPostgres)).toBe(
        'error: the database URL must start with postgres://, postgresql://, mysql:// or mariadb://, not http://\n',
      );
      expect(notPostgres.code).toBe(2);
      const garbage = await cli(['list'], { env: { DATABASE_URL: 'hunter2 is not a url' } });
      expect(expectOneLine(garbage)).not.toContain('hunter2');
      expect(garbage.code).toBe(2);
    });

    it('prefers --database-url to DATABASE_URL, before or after the command', async () => {
      const bad = { DATABASE_URL: urlAt(await closedPort()) };
      const before = await cli(['--database-url', testDatabaseUrl(), '--schema', schema, 'list'], {
        env: bad,
      });
      const after = await cli(['list', '--schema', schema, '--database-url', testDatabaseUrl()], {
        env: bad,
      });
      // Both reached the server: the table is missing there (4), not unreachable (3).
      expect([before.code, after.code]).toEqual([4, 4]);
    });
  });

  describe('help', () => {
    it('lists the commands and the exit codes on stdout, exit 0', async () => {
      const { code, stdout, stderr } = await cli(['--help'], { env: {} });
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      for (const command of [
        'list [options]',
        'inspect [options] <scope> [key]',
        'purge',
        'resolve [options] <scope> [key]',
        'verify',
        'schema-sql [dialect]',
      ]) {
        expect(stdout).toContain(command);
      }
      expect(stdout).toContain('Exit codes:');
      expect(stdout).toMatch(/^\s+3\s+unreachable: the database or Redis/m);
      expect(stdout).toMatch(/^\s+7\s+inspect, resolve: the digest matches more than one record/m);
      const inspect = await cli(['inspect', '--help'], { env: {} });
      expect(inspect.stdout).toContain(
        'ChargesController.charge/#f55ff16f66f4      as one argument, copied from a log line',
      );
      const list = await cli(['list', '--help'], { env: {} });
      expect(list.code).toBe(0);
      expect(list.stdout).toContain('--state <state>');
      expect(list.stdout).toContain('--database-url <url>');
    });

    it('prints the help on stderr and exits 2 when no command is given', async () => {
      const { code, stdout, stderr } = await cli([], { env: {} });
      expect(code).toBe(2);
      expect(stdout).toBe('');
      expect(stderr).toContain('Usage: nest-idempotency [options] [command]');
    });
  });
});
