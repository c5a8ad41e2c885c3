/**
 * Small helpers for writing the MySQL/MariaDB statements: identifier quoting,
 * and named parameters compiled to the driver's positional `?`.
 */

/** Where the records live: `schema` is the MySQL database; without one, the connection's own. */
export interface MysqlTableName {
  schema?: string;
  table: string;
}

export function quoteMysqlIdent(name: string): string {
  return `\`${name.replace(/`/g, '``')}\``;
}

export function mysqlQualified(name: MysqlTableName): string {
  const table = quoteMysqlIdent(name.table);
  return name.schema ? `${quoteMysqlIdent(name.schema)}.${table}` : table;
}

/**
 * A statement whose parameters are named `{name}` in its source, sent with
 * positional `?` placeholders; `names` gives the value for each, in order (a
 * name may appear several times: its value is sent once per appearance).
 */
export interface Statement {
  readonly text: string;
  readonly names: readonly string[];
  /** Sent as a prepared statement (binary protocol) when the store's `preparedStatements` is on. */
  readonly hot: boolean;
}

export function statement(source: string, hot = false): Statement {
  const names: string[] = [];
  const text = source.replace(/\{([a-zA-Z]+)\}/g, (_, name: string) => {
    names.push(name);
    return '?';
  });
  return { text, names, hot };
}

/** The positional values of `statement` from `values`, by name. */
export function bind(statement: Statement, values: Record<string, unknown>): unknown[] {
  return statement.names.map((name) => {
    if (!(name in values)) throw new Error(`no value for {${name}}`);
    return values[name];
  });
}

/** The database's clock, in UTC: every expiry is decided against it. */
export const NOW = 'UTC_TIMESTAMP(6)';

/** `NOW` plus a number of milliseconds given as the parameter `{name}`. */
export const nowPlusMs = (name: string) => `(${NOW} + INTERVAL ({${name}} * 1000) MICROSECOND)`;

/**
 * A DATETIME(6) in UTC as microseconds since the epoch (no time zone applies
 * to the arithmetic). As a DOUBLE (`+ 0e0`), exact below 2^53 µs (the year
 * 2255), which the binary protocol sends as 8 bytes: a BIGINT would reach
 * Node as a decimal string (TypeORM asks mysql2 for big numbers as strings).
 */
export const epochMicros = (column: string) =>
  `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${column}) + 0e0)`;

/** Microseconds from now until a DATETIME(6) (negative once it passed), as a DOUBLE. */
export const microsLeft = (column: string) =>
  `(TIMESTAMPDIFF(MICROSECOND, ${NOW}, ${column}) + 0e0)`;
