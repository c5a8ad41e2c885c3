import type { ReceiptChainHead, ReceiptInput, StoredReceipt } from '../../core/receipts';
import type { TableName } from './table';

/** The migration that adds the receipts tables (./migration.ts), named by the schema checks. */
export const RECEIPTS_MIGRATION = 'AddIdempotencyReceipts1764979200000';

/**
 * The schema check's message for missing receipts tables, `names` qualified
 * (written out whole: docs/troubleshooting.md quotes it).
 */
export function missingReceiptTables(names: string[]): string {
  return `receipts are on, but ${names.join(' and ')} ${names.length > 1 ? 'do' : 'does'} not exist: run the migration AddIdempotencyReceipts1764979200000 (createIdempotencyMigrations() includes it; so do the SQL scripts and ensureSchema)`;
}

/** The receipts of the records table `name`: `<table>_receipts`, beside it. */
export function receiptsTableOf(name: TableName): TableName {
  return { schema: name.schema, table: `${name.table}_receipts` };
}

/** The head of each chain (its last seq and hash): `<table>_receipt_heads`. */
export function receiptHeadsTableOf(name: TableName): TableName {
  return { schema: name.schema, table: `${name.table}_receipt_heads` };
}

/** What a SQL dialect does for receipts (./postgres/receipts.ts, ./mysql/receipts.ts). */
export interface DialectReceipts {
  /** Checks (with `ensureSchema` first creates) the receipts tables; `IdempotencyStoreSchemaError` naming the migration when missing. */
  check(ensureSchema: boolean): Promise<void>;
  append(receipt: ReceiptInput): Promise<StoredReceipt>;
  read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]>;
  head(chain: number): Promise<ReceiptChainHead>;
}

/** A receipts row as both dialects select it. */
export interface ReceiptRow {
  chain: number | string;
  seq: number | string;
  scope_digest: string;
  key_digest: string;
  outcome: StoredReceipt['outcome'];
  result_digest: string | null;
  at_ms: number | string;
  prev_hash: string;
  hash: string;
}

export function receiptOfRow(row: ReceiptRow): StoredReceipt {
  return {
    chain: Number(row.chain),
    seq: Number(row.seq),
    scopeDigest: row.scope_digest,
    keyDigest: row.key_digest,
    outcome: row.outcome,
    resultDigest: row.result_digest,
    atMs: Number(row.at_ms),
    prevHash: row.prev_hash,
    hash: row.hash,
  };
}

export const RECEIPT_COLUMNS =
  'chain, seq, scope_digest, key_digest, outcome, result_digest, at_ms, prev_hash, hash';
