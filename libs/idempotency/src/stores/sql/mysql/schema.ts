import { IdempotencyStoreSchemaError } from '../../../core/errors';
import {
  DEFAULT_TABLE,
  PREDATES_CONTINUATIONS,
  PREDATES_STEPS,
  PREDATES_STRICT_MODE,
} from '../table';
import { MysqlTableName, mysqlQualified, quoteMysqlIdent } from './sql';
import { mysqlReceiptsTableSql } from './receipts';

/**
 * The records table on MySQL and MariaDB: the same logical table as on
 * PostgreSQL (./../postgres/schema.ts), in the types these servers have.
 *
 * - `id` BINARY(32): SHA-256 of (scope, key), so keys and scopes of any length
 *   (kept verbatim in MEDIUMTEXT) never widen the primary key.
 * - Times are DATETIME(6) holding UTC, written and compared against
 *   UTC_TIMESTAMP(6), the server's clock: TIMESTAMP would end in 2038, and a TTL
 *   may be 100 years. No session time zone takes part.
 * - Text compares byte for byte (utf8mb4_bin, ascii_bin): a scope filter never
 *   folds case or trailing spaces.
 * - The payload is LONGBLOB: the encoded bytes, handed back unchanged.
 * - No `watched` column: PostgreSQL needs it to notify only when someone
 *   waits; MySQL has no notifications (see ./wake-poller.ts).
 *
 * InnoDB is required: acquisition relies on its row locks.
 */
export function mysqlCreateTableSql(name: MysqlTableName): string[] {
  return [createTable(name, false)];
}

/** The STATE column's CHECK, as the first migration wrote it and as strict mode widens it. */
const STATES_BEFORE_STRICT = `'IN_PROGRESS', 'COMPLETE'`;
const STATES = `'IN_PROGRESS', 'COMPLETE', 'AMBIGUOUS'`;
const STATE_COLUMN = 'state VARCHAR(11) CHARACTER SET ascii COLLATE ascii_bin NOT NULL';

/** The columns strict mode adds (all NULL but on an AMBIGUOUS record, or one a resolution completed). */
const STRICT_MODE_COLUMNS: Array<[string, string]> = [
  ['ambiguous_since', 'DATETIME(6) NULL'],
  ['ambiguous_reason', 'VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL'],
  ['resolved_by', 'TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL'],
  ['resolved_at', 'DATETIME(6) NULL'],
];

/** `strict`: the current shape (AMBIGUOUS and its columns); otherwise the first migration's. */
/**
 * Recorded steps: a JSON object per record (name → the value in base64, or
 * null while begun), kept as text so MySQL and MariaDB agree on its type.
 */
const STEPS_COLUMNS: Array<[string, string]> = [
  ['steps', 'LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL'],
];

/**
 * Continuations: the continuation id (kept after its resumption, so a second
 * one is told `consumed`), and while suspended the answer duplicates get and
 * the state the resumption gets, as bytes (like the payload).
 */
const CONTINUATION_COLUMNS: Array<[string, string]> = [
  ['continuation', 'VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL'],
  ['suspended_answer', 'LONGBLOB NULL'],
  ['suspended_state', 'LONGBLOB NULL'],
];

function createTable(name: MysqlTableName, strict: boolean): string {
  const strictColumns = strict
    ? [...STRICT_MODE_COLUMNS, ...STEPS_COLUMNS, ...CONTINUATION_COLUMNS]
        .map(([column, type]) => `\n      ${column} ${type},`)
        .join('')
    : '';
  return `CREATE TABLE IF NOT EXISTS ${mysqlQualified(name)} (
      id BINARY(32) NOT NULL,
      scope MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      \`key\` MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      ${STATE_COLUMN} CHECK (state IN (${strict ? STATES : STATES_BEFORE_STRICT})),
      lease_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
      lease_expires_at DATETIME(6) NULL,
      expires_at DATETIME(6) NOT NULL,
      fingerprint TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
      payload LONGBLOB NULL,
      created_at DATETIME(6) NOT NULL,
      completed_at DATETIME(6) NULL,${strictColumns}
      PRIMARY KEY (id),
      KEY expires_at_idx (expires_at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`;
}

/** The table in its current shape, strict mode included (a fresh `ensureSchema`, `mysqlSchemaSql`). */
export function mysqlCurrentTableSql(name: MysqlTableName): string[] {
  return [createTable(name, true), ...mysqlReceiptsTableSql(name)];
}

/** Runs one statement with `?` parameters and returns its rows (or OK packet). */
export type MysqlRun = (sql: string, params: unknown[]) => Promise<unknown>;

/** Adds recorded steps' column to a table an older release made (idempotent: reads the catalog first). */
export function mysqlStepsUpgrade(run: MysqlRun, name: MysqlTableName): Promise<void> {
  return addMissingColumns(run, name, STEPS_COLUMNS);
}

/** Adds continuations' columns to a table an older release made (idempotent: reads the catalog first). */
export function mysqlContinuationsUpgrade(run: MysqlRun, name: MysqlTableName): Promise<void> {
  return addMissingColumns(run, name, CONTINUATION_COLUMNS);
}

/** Adds those of `columns` the table lacks, in one ALTER (nullable columns: in place, no copy). */
async function addMissingColumns(
  run: MysqlRun,
  name: MysqlTableName,
  columns: Array<[string, string]>,
): Promise<void> {
  const rows = (await run(
    `SELECT COLUMN_NAME AS column_name FROM information_schema.COLUMNS
     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`,
    [name.schema ?? null, name.table],
  )) as Array<{ column_name: string }>;
  const present = new Set(rows.map((row) => row.column_name.toLowerCase()));
  if (present.size === 0) throw new Error(`table ${mysqlQualified(name)} does not exist`);
  const missing = columns.filter(([column]) => !present.has(column));
  if (missing.length === 0) return;
  await run(
    `ALTER TABLE ${mysqlQualified(name)} ${missing.map(([column, type]) => `ADD COLUMN ${column} ${type}`).join(', ')}`,
    [],
  );
}

/**
 * Strict mode on a table the first migration made: adds the four nullable
 * columns (in place: MySQL 8 and MariaDB 10.3+ add them without copying the
 * table) and widens the state CHECK to allow AMBIGUOUS. Reads the catalog
 * first, so it does only what is missing and a second run does nothing.
 *
 * Widening the CHECK rebuilds the table (the server checks every row against
 * the new constraint), holding writes back while it copies. Where the CHECK
 * lives differs: MariaDB keeps a column's CHECK with the column (replaced by
 * MODIFY COLUMN), MySQL 8.0.16+ as a table constraint `<table>_chk_<n>`
 * (dropped by name, then added again). Older MySQL parses CHECK and ignores it.
 */
export async function mysqlStrictModeUpgrade(run: MysqlRun, name: MysqlTableName): Promise<void> {
  const table = mysqlQualified(name);
  const rows = async <T>(sql: string, params: unknown[]) => (await run(sql, params)) as T[];
  const [where] = await rows<{ db: string | null; version: string }>(
    'SELECT COALESCE(?, DATABASE()) AS db, VERSION() AS version',
    [name.schema ?? null],
  );
  const database = where.db;
  if (!database) throw new Error(`${table}: the connection has no database`);
  const present = new Set(
    (
      await rows<{ column_name: string }>(
        `SELECT COLUMN_NAME AS column_name FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
        [database, name.table],
      )
    ).map((row) => row.column_name.toLowerCase()),
  );
  if (present.size === 0) throw new Error(`table ${database}.${name.table} does not exist`);
  const missing = STRICT_MODE_COLUMNS.filter(([column]) => !present.has(column));
  if (missing.length > 0) {
    await run(
      `ALTER TABLE ${table} ${missing.map(([column, type]) => `ADD COLUMN ${column} ${type}`).join(', ')}`,
      [],
    );
  }
  const mariadb = /mariadb/i.test(where.version);
  const checks = mariadb
    ? await rows<{ name: string; clause: string; level: string | null }>(
        `SELECT CONSTRAINT_NAME AS name, CHECK_CLAUSE AS clause, LEVEL AS level
         FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`,
        [database, name.table],
      )
    : await rows<{ name: string; clause: string; level: string | null }>(
        `SELECT tc.CONSTRAINT_NAME AS name, cc.CHECK_CLAUSE AS clause, 'Table' AS level
         FROM information_schema.TABLE_CONSTRAINTS tc
         JOIN information_schema.CHECK_CONSTRAINTS cc
           ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
         WHERE tc.TABLE_SCHEMA = ? AND tc.TABLE_NAME = ? AND tc.CONSTRAINT_TYPE = 'CHECK'`,
        [database, name.table],
      ).catch((error: unknown) => {
        // Before 8.0.16 there is no CHECK_CONSTRAINTS (1109, unknown table), and no CHECK enforced.
        if (errnoOf(error) === 1109) return [];
        throw error;
      });
  const narrow = checks.filter(
    (check) =>
      /\bstate\b/i.test(check.clause) &&
      /IN_PROGRESS/.test(check.clause) &&
      !/AMBIGUOUS/.test(check.clause),
  );
  if (narrow.length === 0) return;
  const changes = narrow.map((check) =>
    check.level === 'Column'
      ? null
      : `DROP ${mariadb ? 'CONSTRAINT' : 'CHECK'} ${quoteMysqlIdent(check.name)}`,
  );
  const alter = changes.filter((change): change is string => change !== null);
  alter.push(
    changes.includes(null)
      ? `MODIFY COLUMN ${STATE_COLUMN} CHECK (state IN (${STATES}))`
      : `ADD CONSTRAINT ${quoteMysqlIdent(`${name.table}_state`.slice(0, 64))} CHECK (state IN (${STATES}))`,
  );
  await run(`ALTER TABLE ${table} ${alter.join(', ')}`, []);
}

/** The server's error number, on mysql2's error or TypeORM's QueryFailedError around it. */
function errnoOf(error: unknown): number | undefined {
  const { errno, driverError } = (error ?? {}) as {
    errno?: number;
    driverError?: { errno?: number };
  };
  return errno ?? driverError?.errno;
}

export function mysqlDropTableSql(name: MysqlTableName): string[] {
  return [`DROP TABLE IF EXISTS ${mysqlQualified(name)}`];
}

/**
 * The DDL of the MySQL/MariaDB records table, for those who manage their
 * schema with another tool. `schema` is the database; without it the table is
 * created in the connection's current database.
 */
export function mysqlSchemaSql(name: Partial<MysqlTableName> = {}): string[] {
  return mysqlCurrentTableSql({ schema: name.schema, table: name.table ?? DEFAULT_TABLE.table });
}

/** `CREATE DATABASE IF NOT EXISTS`, for `ensureSchema` with an explicit `schema`. */
export function mysqlCreateDatabaseSql(schema: string): string {
  return `CREATE DATABASE IF NOT EXISTS ${quoteMysqlIdent(schema)}`;
}

interface ExpectedColumn {
  /** `information_schema.COLUMNS.COLUMN_TYPE`. */
  type: string;
  /** The collation the column must compare with (text columns only). */
  collation?: RegExp;
  collationName?: string;
}

const BYTEWISE_UTF8 = { collation: /^utf8mb4_bin$/, collationName: 'utf8mb4_bin' };
const BYTEWISE = { collation: /_bin$/, collationName: 'a binary collation (ascii_bin)' };

export const MYSQL_EXPECTED_COLUMNS: Record<string, ExpectedColumn> = {
  id: { type: 'binary(32)' },
  scope: { type: 'mediumtext', ...BYTEWISE_UTF8 },
  key: { type: 'mediumtext', ...BYTEWISE_UTF8 },
  state: { type: 'varchar(11)', ...BYTEWISE },
  lease_id: { type: 'char(36)', ...BYTEWISE },
  lease_expires_at: { type: 'datetime(6)' },
  expires_at: { type: 'datetime(6)' },
  fingerprint: { type: 'text', ...BYTEWISE_UTF8 },
  payload: { type: 'longblob' },
  created_at: { type: 'datetime(6)' },
  completed_at: { type: 'datetime(6)' },
  ambiguous_since: { type: 'datetime(6)' },
  ambiguous_reason: { type: 'varchar(16)', ...BYTEWISE },
  resolved_by: { type: 'text', ...BYTEWISE_UTF8 },
  resolved_at: { type: 'datetime(6)' },
  steps: { type: 'longtext', ...BYTEWISE_UTF8 },
  continuation: { type: 'varchar(64)', ...BYTEWISE },
  suspended_answer: { type: 'longblob' },
  suspended_state: { type: 'longblob' },
};

export interface MysqlColumnRow {
  column_name: string;
  column_type: string;
  collation_name: string | null;
}

// Aliased: MySQL 8 names information_schema's columns in upper case.
export const MYSQL_COLUMNS_QUERY = `SELECT COLUMN_NAME AS column_name, COLUMN_TYPE AS column_type, COLLATION_NAME AS collation_name
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`;

export const MYSQL_PRIMARY_KEY_QUERY = `SELECT COLUMN_NAME AS column_name
  FROM information_schema.KEY_COLUMN_USAGE
  WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY'
  ORDER BY ORDINAL_POSITION`;

export const MYSQL_ENGINE_QUERY = `SELECT ENGINE AS engine FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`;

/** Throws `IdempotencyStoreSchemaError` describing every difference from the expected shape. */
export function assertMysqlTableShape(
  where: string,
  columns: MysqlColumnRow[],
  primaryKey: string[],
  engine: string | null,
  migrations = 'createIdempotencyMigrations()',
): void {
  if (columns.length === 0) {
    throw new IdempotencyStoreSchemaError(
      `table ${where} does not exist; run the nest-idempotency migrations (${migrations}) or pass { ensureSchema: true } in development`,
    );
  }
  const actual = new Map(columns.map((c) => [c.column_name, c]));
  const problems: string[] = [];
  for (const [column, expected] of Object.entries(MYSQL_EXPECTED_COLUMNS)) {
    const found = actual.get(column);
    if (found === undefined) {
      problems.push(`column "${column}" is missing (expected ${expected.type})`);
    } else if (found.column_type.toLowerCase() !== expected.type) {
      problems.push(`column "${column}" is ${found.column_type}, expected ${expected.type}`);
    } else if (expected.collation && !expected.collation.test(found.collation_name ?? '')) {
      problems.push(
        `column "${column}" compares as ${found.collation_name}, expected ${expected.collationName}`,
      );
    }
  }
  if (primaryKey.length !== 1 || primaryKey[0] !== 'id') {
    problems.push(`primary key is (${primaryKey.join(', ') || 'none'}), expected (id)`);
  }
  if (engine !== null && engine.toLowerCase() !== 'innodb') {
    problems.push(`engine is ${engine}, expected InnoDB`);
  }
  if (problems.length > 0) {
    const beforeStrict = STRICT_MODE_COLUMNS.every(([column]) => !actual.has(column));
    // Only columns of later migrations are missing: the first of those names its migration.
    const later = [...STEPS_COLUMNS, ...CONTINUATION_COLUMNS].filter(([c]) => !actual.has(c));
    const onlyLater = !beforeStrict && problems.length === later.length;
    const beforeSteps = onlyLater && !actual.has('steps');
    const beforeContinuations =
      onlyLater && !beforeSteps && CONTINUATION_COLUMNS.every(([c]) => !actual.has(c));
    throw new IdempotencyStoreSchemaError(
      `table ${where} has the wrong shape: ${problems.join('; ')}` +
        (beforeStrict
          ? PREDATES_STRICT_MODE
          : beforeSteps
            ? PREDATES_STEPS
            : beforeContinuations
              ? PREDATES_CONTINUATIONS
              : ''),
    );
  }
}
