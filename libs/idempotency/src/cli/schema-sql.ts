import { Argument, Command } from 'commander';
import { mysqlSchemaSql } from '../stores/typeorm/mysql/schema';
import { schemaSql } from '../stores/typeorm/postgres/schema';
import { DEFAULT_TABLE } from '../stores/typeorm/table';
import { GlobalOptions, resolveConnection, SqlConnection, SqlDialect } from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';

const DIALECTS = ['postgres', 'mysql', 'mariadb'] as const;
type DialectArgument = (typeof DIALECTS)[number];

/**
 * `schema-sql [postgres|mysql|mariadb]`: prints the DDL of the records table
 * (`schemaSql`, `mysqlSchemaSql`), for `--schema` and `--table`, to pipe into
 * `psql` or `mysql`. It connects to nothing; without a dialect it takes the
 * one of `--database-url` (or DATABASE_URL). The PostgreSQL statements are
 * idempotent, so they also bring a table of an older release up to date; the
 * MySQL one creates the table if it is missing and changes nothing else.
 */
export function addSchemaSqlCommand(program: Command, context: CommandContext): void {
  program
    .command('schema-sql')
    .description(
      'print the SQL that creates the records table, for psql or mysql (connects to nothing)',
    )
    .addArgument(
      new Argument('[dialect]', 'the database (default: the --database-url scheme)').choices(
        DIALECTS,
      ),
    )
    .action((dialect: DialectArgument | undefined, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions>();
      const chosen = dialect ?? dialectOfUrl(options, context.io.env);
      const table = options.table || DEFAULT_TABLE.table;
      if (chosen === 'postgres') {
        const schema = options.schema ?? DEFAULT_TABLE.schema;
        context.print(statements(`${schema}.${table} (PostgreSQL)`, schemaSql({ schema, table })));
      } else {
        // Without --schema the table goes to the database the client is connected to.
        const where = options.schema ? `${options.schema}.${table}` : table;
        context.print(
          statements(
            `${where} (MySQL, MariaDB)`,
            mysqlSchemaSql({ schema: options.schema, table }),
          ),
        );
      }
    });
}

function statements(what: string, sql: string[]): string {
  return [`-- nest-idempotency: the records table ${what}`, ...sql.map((s) => `${s};`)].join('\n');
}

function dialectOfUrl(options: GlobalOptions, env: Record<string, string | undefined>): SqlDialect {
  if (!options.databaseUrl && !env.DATABASE_URL) {
    throw new CliError(
      'name the database: schema-sql postgres, schema-sql mysql or schema-sql mariadb (or pass --database-url)',
      ExitCode.USAGE,
    );
  }
  const connection = resolveConnection(
    { ...options, redisUrl: undefined, redisCluster: undefined },
    { DATABASE_URL: options.databaseUrl ?? env.DATABASE_URL },
  );
  return (connection as SqlConnection).dialect;
}

/**
 * What an operator can run when the table is missing, for the connection's
 * database: the application's migrations, the SQL of `schema-sql` through
 * the database's own client, or `ensureSchema` at startup (development).
 * One line, as every CLI error is; it never shows a URL or a password.
 */
export function missingTableMessage(connection: SqlConnection): string {
  const where = `${connection.schema}.${connection.table}`;
  const postgres = connection.dialect === 'postgres';
  const flags = [
    ...(postgres && connection.schema !== DEFAULT_TABLE.schema
      ? [`--schema ${shellWord(connection.schema)}`]
      : []),
    ...(connection.table !== DEFAULT_TABLE.table ? [`--table ${shellWord(connection.table)}`] : []),
  ];
  const print = [
    'nest-idempotency',
    'schema-sql',
    postgres ? 'postgres' : connection.dialect,
    ...flags,
  ].join(' ');
  const [hostPort, database] = splitTarget(connection.target);
  const client = postgres
    ? 'psql "$DATABASE_URL"'
    : `mysql -h ${hostPort.host} -P ${hostPort.port} -u <user> -p ${shellWord(connection.schema || database)}`;
  return `table ${where} does not exist, and the CLI never creates it. Create it with the application's migrations (createIdempotencyMigrations() in its DataSource; with the TypeORM CLI: npx typeorm migration:run -d <data-source file>), or with its SQL: ${print} | ${client}; or start the application once with { ensureSchema: true } (development only)`;
}

function splitTarget(target: string): [{ host: string; port: string }, string] {
  const slash = target.indexOf('/');
  const hostPort = slash < 0 ? target : target.slice(0, slash);
  const colon = hostPort.lastIndexOf(':');
  return [
    { host: hostPort.slice(0, colon), port: hostPort.slice(colon + 1) },
    slash < 0 ? '' : target.slice(slash + 1),
  ];
}

/** `text` as one word for a POSIX shell: as it is when it is plain, else in single quotes. */
function shellWord(text: string): string {
  return /^[\w.@%+=:,/-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}
