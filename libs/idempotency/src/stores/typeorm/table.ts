import { createHash } from 'node:crypto';

/** Where the records live. Names are quoted, so any identifier PostgreSQL accepts works. */
export interface TableName {
  schema: string;
  table: string;
}

export const DEFAULT_TABLE: TableName = { schema: 'public', table: 'idempotency_records' };

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export function qualified(name: TableName): string {
  return `${quoteIdent(name.schema)}.${quoteIdent(name.table)}`;
}

/** NOTIFY channel for one table: short, fixed-length, and a valid identifier. */
export function channelFor(name: TableName): string {
  return `idem_${createHash('sha256').update(`${name.schema}.${name.table}`).digest('hex').slice(0, 24)}`;
}

/**
 * The primary key: SHA-256 of (scope, key). Keys and scopes of any length are
 * stored verbatim in their own columns, while the index stays 32 bytes wide
 * (a B-tree cannot index text values over ~2.7 kB).
 */
export function recordIdOf(scope: string, key: string): Buffer {
  return createHash('sha256')
    .update(JSON.stringify([scope, key]))
    .digest();
}
