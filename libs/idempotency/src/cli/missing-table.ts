import { DEFAULT_TABLE } from '../stores/sql/table';
import type { SqlConnection } from './backend';

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
