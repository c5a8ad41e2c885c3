import { IdempotencyStoreSchemaError } from '../../../core/errors';
import { qualified, quoteIdent, TableName } from '../table';

/**
 * The records table and how it got its shape. Each step is idempotent, so the
 * migrations and `ensureSchema` run the same SQL:
 *
 * 1. (0.1) the table, payload as jsonb;
 * 2. (0.2) payload as bytea, holding the encoded bytes a replay hands back
 *    unchanged (0.1's jsonb kept as its text, which the payload codec reads),
 *    and `watched`, set by the first waiter so that only watched records notify.
 */
export function createTableSql(name: TableName): string[] {
  const table = qualified(name);
  return [
    `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(name.schema)}`,
    `CREATE TABLE IF NOT EXISTS ${table} (
      id bytea PRIMARY KEY,
      scope text NOT NULL,
      "key" text NOT NULL,
      state text NOT NULL CHECK (state IN ('IN_PROGRESS', 'COMPLETE')),
      lease_id uuid,
      lease_expires_at timestamptz,
      expires_at timestamptz NOT NULL,
      fingerprint text,
      payload jsonb,
      created_at timestamptz NOT NULL,
      completed_at timestamptz
    )`,
    `CREATE INDEX IF NOT EXISTS ${quoteIdent(`${name.table}_expires_at_idx`)} ON ${table} (expires_at)`,
  ];
}

/** Step 2. Rewrites the table (ACCESS EXCLUSIVE while it runs); drain 0.1 instances first. */
export function upgradeTableSql(name: TableName): string[] {
  const table = qualified(name);
  const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;
  return [
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS watched boolean NOT NULL DEFAULT false`,
    `DO $$ BEGIN
      IF (SELECT data_type FROM information_schema.columns
          WHERE table_schema = ${literal(name.schema)} AND table_name = ${literal(name.table)}
            AND column_name = 'payload') = 'jsonb' THEN
        ALTER TABLE ${table} ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8');
      END IF;
    END $$`,
  ];
}

/** Every step, in order: a fresh table, or an older one brought up to date. */
export function schemaSql(name: TableName): string[] {
  return [...createTableSql(name), ...upgradeTableSql(name)];
}

export function dropTableSql(name: TableName): string[] {
  return [`DROP TABLE IF EXISTS ${qualified(name)}`];
}

/** Column name → the `information_schema.columns.data_type` the store expects. */
export const EXPECTED_COLUMNS: Record<string, string> = {
  id: 'bytea',
  scope: 'text',
  key: 'text',
  state: 'text',
  lease_id: 'uuid',
  lease_expires_at: 'timestamp with time zone',
  expires_at: 'timestamp with time zone',
  fingerprint: 'text',
  payload: 'bytea',
  watched: 'boolean',
  created_at: 'timestamp with time zone',
  completed_at: 'timestamp with time zone',
};

export interface ColumnRow {
  column_name: string;
  data_type: string;
}

export const COLUMNS_QUERY = `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`;

export const PRIMARY_KEY_QUERY = `
  SELECT a.attname AS column_name
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
  WHERE i.indisprimary AND n.nspname = $1 AND c.relname = $2`;

/** Throws `IdempotencyStoreSchemaError` describing every difference from the expected shape. */
export function assertTableShape(
  name: TableName,
  columns: ColumnRow[],
  primaryKey: string[],
): void {
  const where = `${name.schema}.${name.table}`;
  if (columns.length === 0) {
    throw new IdempotencyStoreSchemaError(
      `table ${where} does not exist; run the nest-idempotency migrations (createIdempotencyMigrations()) or pass { ensureSchema: true } in development`,
    );
  }
  const actual = new Map(columns.map((c) => [c.column_name, c.data_type]));
  const problems: string[] = [];
  for (const [column, type] of Object.entries(EXPECTED_COLUMNS)) {
    const found = actual.get(column);
    if (found === undefined) problems.push(`column "${column}" is missing (expected ${type})`);
    else if (found !== type) problems.push(`column "${column}" is ${found}, expected ${type}`);
  }
  if (primaryKey.length !== 1 || primaryKey[0] !== 'id') {
    problems.push(`primary key is (${primaryKey.join(', ') || 'none'}), expected (id)`);
  }
  if (problems.length > 0) {
    const outdated = actual.get('payload') === 'jsonb' || !actual.has('watched');
    throw new IdempotencyStoreSchemaError(
      `table ${where} has the wrong shape: ${problems.join('; ')}` +
        (outdated
          ? '; it was made by nest-idempotency 0.1: run the upgrade migration (createIdempotencyMigrations() includes it)'
          : ''),
    );
  }
}
