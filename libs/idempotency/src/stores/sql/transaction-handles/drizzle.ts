import { optionalPeer } from '../../../core/optional-peer';
import type { SqlTransaction } from '../dialect';
import { notInTransaction } from './not-in-transaction';

interface DrizzleDatabase {
  execute(query: unknown): Promise<unknown>;
}

interface DrizzleModule {
  sql: {
    raw(text: string): unknown;
    param(value: unknown): unknown;
    join(chunks: unknown[]): unknown;
  };
}

/** `$1`, `$2`… in a PostgreSQL statement: where Drizzle's own parameters go. */
const PLACEHOLDER = /\$(\d+)/;

/**
 * A Drizzle transaction on PostgreSQL (`db.transaction(async (tx) => …)`):
 * `tx.execute` of the statement rebuilt with Drizzle's `sql` (its parameters
 * numbered again by Drizzle). node-postgres hands back a pg result, postgres.js
 * the rows themselves.
 */
export function drizzleTransaction(tx: unknown): SqlTransaction | undefined {
  const db = tx as Partial<DrizzleDatabase> & { select?: unknown; transaction?: unknown };
  if (
    typeof db.execute !== 'function' ||
    typeof db.select !== 'function' ||
    typeof db.transaction !== 'function'
  ) {
    return undefined;
  }
  if (typeof (tx as { rollback?: unknown }).rollback !== 'function') {
    throw notInTransaction('a Drizzle database outside a transaction (db.transaction(tx => …))');
  }
  const { sql } = optionalPeer<DrizzleModule>('drizzle-orm');
  return async (text, values) => {
    const chunks = text
      .split(PLACEHOLDER)
      .map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[Number(part) - 1])));
    const done = (await (db as DrizzleDatabase).execute(sql.join(chunks))) as
      unknown[] | { rows: unknown[]; rowCount?: number | null };
    if (Array.isArray(done)) return { rows: done, affected: done.length };
    return { rows: done.rows, affected: done.rowCount ?? done.rows.length };
  };
}
