import { createHash } from 'node:crypto';
import { recordLocator } from '../../core/key';

/** Where the records live. Names are quoted, so any identifier PostgreSQL accepts works. */
export interface TableName {
  schema: string;
  table: string;
}

export const DEFAULT_TABLE: TableName = { schema: 'public', table: 'idempotency_records' };

/** The migration that adds strict mode's state and columns (./migration.ts), named by the schema checks. */
export const STRICT_MODE_MIGRATION = 'AddIdempotencyAmbiguousState1764633600000';

/** Ends the schema check's message for a table the first two migrations made (written out whole: docs/troubleshooting.md quotes it). */
export const PREDATES_STRICT_MODE =
  '; it predates strict mode: run the migration AddIdempotencyAmbiguousState1764633600000 (createIdempotencyMigrations() includes it)';

/** The migration that adds recorded steps' column (./migration.ts), named by the schema checks. */
export const STEPS_MIGRATION = 'AddIdempotencySteps1764806400000';

/** Ends the schema check's message for a table from before recorded steps. */
export const PREDATES_STEPS =
  '; it predates recorded steps: run the migration AddIdempotencySteps1764806400000 (createIdempotencyMigrations() includes it)';

/** The migration that adds continuations' columns (./migration.ts), named by the schema checks. */
export const CONTINUATIONS_MIGRATION = 'AddIdempotencyContinuations1764892800000';

/** Ends the schema check's message for a table from before continuations. */
export const PREDATES_CONTINUATIONS =
  '; it predates continuations: run the migration AddIdempotencyContinuations1764892800000 (createIdempotencyMigrations() includes it)';

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
  return Buffer.from(recordIdHexOf(scope, key), 'hex');
}

/** `recordIdOf` in hex, as waiters and notifications name a record: the record's locator. */
export const recordIdHexOf = recordLocator;
