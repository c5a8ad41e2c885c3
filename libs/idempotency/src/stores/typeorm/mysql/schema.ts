import { IdempotencyStoreSchemaError } from '../../../core/errors';
import { DEFAULT_TABLE } from '../table';
import { MysqlTableName, mysqlQualified, quoteMysqlIdent } from './sql';

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
  return [
    `CREATE TABLE IF NOT EXISTS ${mysqlQualified(name)} (
      id BINARY(32) NOT NULL,
      scope MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      \`key\` MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      state VARCHAR(11) CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (state IN ('IN_PROGRESS', 'COMPLETE')),
      lease_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
      lease_expires_at DATETIME(6) NULL,
      expires_at DATETIME(6) NOT NULL,
      fingerprint TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
      payload LONGBLOB NULL,
      created_at DATETIME(6) NOT NULL,
      completed_at DATETIME(6) NULL,
      PRIMARY KEY (id),
      KEY expires_at_idx (expires_at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
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
  return mysqlCreateTableSql({ schema: name.schema, table: name.table ?? DEFAULT_TABLE.table });
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
): void {
  if (columns.length === 0) {
    throw new IdempotencyStoreSchemaError(
      `table ${where} does not exist; run the nest-idempotency migrations (createIdempotencyMigrations()) or pass { ensureSchema: true } in development`,
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
    throw new IdempotencyStoreSchemaError(
      `table ${where} has the wrong shape: ${problems.join('; ')}`,
    );
  }
}
