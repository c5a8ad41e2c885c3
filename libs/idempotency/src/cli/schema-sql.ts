import { Argument, Command } from 'commander';
import { mysqlSchemaSql } from '../stores/sql/mysql/schema';
import { schemaSql } from '../stores/sql/postgres/schema';
import { DEFAULT_TABLE } from '../stores/sql/table';
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
