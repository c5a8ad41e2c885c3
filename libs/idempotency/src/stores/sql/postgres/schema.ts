import { IdempotencyStoreSchemaError } from '../../../core/errors';
import {
  qualified,
  quoteIdent,
  PREDATES_CONTINUATIONS,
  PREDATES_STEPS,
  PREDATES_STRICT_MODE,
  TableName,
} from '../table';
import { receiptsTableSql } from './receipts';

/**
 * The records table and how it got its shape. Each step is idempotent, so the
 * migrations and `ensureSchema` run the same SQL:
 *
 * 1. (0.1) the table, payload as jsonb;
 * 2. (0.2) payload as bytea, holding the encoded bytes a replay hands back
 *    unchanged (0.1's jsonb kept as its text, which the payload codec reads),
 *    and `watched`, set by the first waiter so that only watched records notify;
 * 3. (0.2, strict mode) the AMBIGUOUS state and its columns (`strictModeTableSql`);
 * 4. recorded steps' column (`stepsTableSql`);
 * 5. continuations' columns (`continuationsTableSql`).
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

/**
 * Step 3, strict mode: the state may be AMBIGUOUS, with since when and why
 * (`ambiguous_since`, `ambiguous_reason`), and a resolution records who and
 * when (`resolved_by`, `resolved_at`). Nullable columns without a default:
 * adding them only changes the catalog, rewriting nothing. The state CHECK is
 * replaced by one that also allows AMBIGUOUS, added NOT VALID: every existing
 * row already passed the stricter old one, so nothing needs scanning. The
 * ALTERs hold ACCESS EXCLUSIVE for a moment; instances of the same release
 * before this step keep working on the upgraded table.
 */
export function strictModeTableSql(name: TableName): string[] {
  const table = qualified(name);
  const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;
  const check = `${name.table}_state_check`;
  return [
    `ALTER TABLE ${table}
      ADD COLUMN IF NOT EXISTS ambiguous_since timestamptz,
      ADD COLUMN IF NOT EXISTS ambiguous_reason text,
      ADD COLUMN IF NOT EXISTS resolved_by text,
      ADD COLUMN IF NOT EXISTS resolved_at timestamptz`,
    // The old CHECK's name is PostgreSQL's choice (<table>_state_check, shortened for a long
    // name): find every CHECK on the state column that does not allow AMBIGUOUS yet.
    `DO $$
    DECLARE
      relation oid := to_regclass(${literal(table)});
      old record;
      replaced boolean := false;
    BEGIN
      FOR old IN
        SELECT c.conname FROM pg_constraint c
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
        WHERE c.conrelid = relation AND c.contype = 'c' AND a.attname = 'state'
          AND pg_get_constraintdef(c.oid) NOT LIKE '%AMBIGUOUS%'
      LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', relation::regclass, old.conname);
        replaced := true;
      END LOOP;
      IF replaced THEN
        EXECUTE format(
          'ALTER TABLE %s ADD CONSTRAINT %I CHECK (state IN (''IN_PROGRESS'', ''COMPLETE'', ''AMBIGUOUS'')) NOT VALID',
          relation::regclass, left(${literal(check)}, 63));
      END IF;
    END $$`,
  ];
}

/**
 * Step 4, recorded steps: `steps` (jsonb, nullable, no default: a catalog
 * change only), one entry per step name of an IN_PROGRESS or AMBIGUOUS
 * record, its value base64 or null while begun.
 */
export function stepsTableSql(name: TableName): string[] {
  return [`ALTER TABLE ${qualified(name)} ADD COLUMN IF NOT EXISTS steps jsonb`];
}

/**
 * Step 5, continuations (`ctx.suspend`): the continuation id (kept after its
 * resumption, so a second one is told `consumed`), and while the record is
 * suspended the answer its duplicates get and the state its resumption gets.
 * Nullable, no default: a catalog change only.
 */
export function continuationsTableSql(name: TableName): string[] {
  return [
    `ALTER TABLE ${qualified(name)}
      ADD COLUMN IF NOT EXISTS continuation varchar(64),
      ADD COLUMN IF NOT EXISTS suspended_answer bytea,
      ADD COLUMN IF NOT EXISTS suspended_state bytea`,
  ];
}

/** Every step, in order: a fresh table, or an older one brought up to date. */
export function schemaSql(name: TableName): string[] {
  return [
    ...createTableSql(name),
    ...upgradeTableSql(name),
    ...strictModeTableSql(name),
    ...stepsTableSql(name),
    ...continuationsTableSql(name),
    ...receiptsTableSql(name),
  ];
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
  ambiguous_since: 'timestamp with time zone',
  ambiguous_reason: 'text',
  resolved_by: 'text',
  resolved_at: 'timestamp with time zone',
  steps: 'jsonb',
  continuation: 'character varying',
  suspended_answer: 'bytea',
  suspended_state: 'bytea',
};

/** The columns step 5 adds: a table missing only these predates continuations. */
const CONTINUATION_COLUMNS = ['continuation', 'suspended_answer', 'suspended_state'];

/** The columns step 3 adds: a table missing only these predates strict mode. */
export const STRICT_MODE_COLUMNS = [
  'ambiguous_since',
  'ambiguous_reason',
  'resolved_by',
  'resolved_at',
];

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
  migrations = 'createIdempotencyMigrations()',
): void {
  const where = `${name.schema}.${name.table}`;
  if (columns.length === 0) {
    throw new IdempotencyStoreSchemaError(
      `table ${where} does not exist; run the nest-idempotency migrations (${migrations}) or pass { ensureSchema: true } in development`,
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
    const beforeStrict = !outdated && STRICT_MODE_COLUMNS.every((c) => !actual.has(c));
    // Only columns of later steps are missing: the first of those steps names its migration.
    const later = ['steps', ...CONTINUATION_COLUMNS].filter((c) => !actual.has(c));
    const onlyLater = !outdated && !beforeStrict && problems.length === later.length;
    const beforeSteps = onlyLater && !actual.has('steps');
    const beforeContinuations =
      onlyLater && !beforeSteps && CONTINUATION_COLUMNS.every((c) => !actual.has(c));
    throw new IdempotencyStoreSchemaError(
      `table ${where} has the wrong shape: ${problems.join('; ')}` +
        (outdated
          ? `; it was made by nest-idempotency 0.1: run the upgrade migration (${migrations} includes it)`
          : beforeStrict
            ? PREDATES_STRICT_MODE
            : beforeSteps
              ? PREDATES_STEPS
              : beforeContinuations
                ? PREDATES_CONTINUATIONS
                : ''),
    );
  }
}
