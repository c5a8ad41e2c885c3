import { IdempotencyStoreSchemaError } from '../../../core/errors';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  type ReceiptChainHead,
  type ReceiptInput,
  type StoredReceipt,
} from '../../../core/receipts';
import {
  type DialectReceipts,
  RECEIPT_COLUMNS,
  missingReceiptTables,
  RECEIPTS_MIGRATION,
  receiptHeadsTableOf,
  receiptOfRow,
  type ReceiptRow,
  receiptsTableOf,
} from '../receipt-tables';
import { qualified, type TableName } from '../table';
import type { StoreResult } from './query';

/** The receipts tables beside the records table `name`, idempotent (in `schemaSql` and the migration). */
export function receiptsTableSql(name: TableName): string[] {
  const receipts = qualified(receiptsTableOf(name));
  const heads = qualified(receiptHeadsTableOf(name));
  return [
    `CREATE TABLE IF NOT EXISTS ${receipts} (
  chain smallint NOT NULL,
  seq bigint NOT NULL,
  scope_digest text NOT NULL,
  key_digest text NOT NULL,
  outcome text NOT NULL,
  result_digest text,
  at_ms bigint NOT NULL,
  prev_hash text NOT NULL,
  hash text NOT NULL,
  PRIMARY KEY (chain, seq)
)`,
    `CREATE TABLE IF NOT EXISTS ${heads} (
  chain smallint PRIMARY KEY,
  seq bigint NOT NULL,
  at_ms bigint NOT NULL,
  prev_hash text NOT NULL,
  hash text NOT NULL
)`,
    `INSERT INTO ${heads} (chain, seq, at_ms, prev_hash, hash)
SELECT g, 0, 0, '${GENESIS_HASH}', '${GENESIS_HASH}' FROM generate_series(0, ${RECEIPT_CHAINS - 1}) g
ON CONFLICT (chain) DO NOTHING`,
  ];
}

type Query = <T>(
  operation: string,
  text: string,
  values: unknown[],
  logged: () => unknown[],
) => Promise<StoreResult<T>>;

/**
 * Receipts on PostgreSQL, in one statement per append: the UPDATE of the
 * chain's head row (its row lock orders the chain's appends) computes the
 * new hash in SQL over `receiptText`'s fields, with the database's clock,
 * and the INSERT of the receipt takes what it returned. Appends to other
 * chains lock other rows.
 */
export class PgReceipts implements DialectReceipts {
  /** The append's text: the dialect prepares it with its hot statements. */
  readonly appendSql: string;
  private readonly readSql: string;
  private readonly headSql: string;

  constructor(
    private readonly name: TableName,
    private readonly query: Query,
  ) {
    const receipts = qualified(receiptsTableOf(name));
    const heads = qualified(receiptHeadsTableOf(name));
    this.appendSql = `WITH now AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms
), head AS (
  UPDATE ${heads} h
  SET seq = h.seq + 1, at_ms = now.ms, prev_hash = h.hash,
      hash = encode(sha256(convert_to(
        h.chain || '|' || (h.seq + 1) || '|' || $2::text || '|' || $3::text || '|' || $4::text
        || '|' || coalesce($5::text, '') || '|' || now.ms || '|' || h.hash, 'UTF8')), 'hex')
  FROM now
  WHERE h.chain = $1
  RETURNING h.chain, h.seq, h.at_ms, h.prev_hash, h.hash
)
INSERT INTO ${receipts} (${RECEIPT_COLUMNS})
SELECT chain, seq, $2, $3, $4, $5, at_ms, prev_hash, hash FROM head
RETURNING ${RECEIPT_COLUMNS}`;
    this.readSql = `SELECT ${RECEIPT_COLUMNS} FROM ${receipts} WHERE chain = $1 ORDER BY seq OFFSET $2 LIMIT $3`;
    this.headSql = `SELECT seq, hash FROM ${heads} WHERE chain = $1`;
  }

  async check(ensureSchema: boolean): Promise<void> {
    if (ensureSchema) {
      await this.query('ensureSchema', receiptsTableSql(this.name).join(';\n'), [], () => []);
    }
    const wanted = [receiptsTableOf(this.name).table, receiptHeadsTableOf(this.name).table];
    const { rows } = await this.query<{ table_name: string }>(
      'schema check',
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name = ANY($2)`,
      [this.name.schema, wanted],
      () => [this.name.schema, wanted],
    );
    const missing = wanted.filter((table) => !rows.some((row) => row.table_name === table));
    if (missing.length > 0) {
      throw new IdempotencyStoreSchemaError(
        missingReceiptTables(missing.map((t) => `${this.name.schema}.${t}`)),
      );
    }
  }

  async append(receipt: ReceiptInput): Promise<StoredReceipt> {
    const values = [
      receipt.chain,
      receipt.scopeDigest,
      receipt.keyDigest,
      receipt.outcome,
      receipt.resultDigest,
    ];
    const { rows } = await this.query<ReceiptRow>('receipt', this.appendSql, values, () => values);
    if (rows.length !== 1) {
      throw new IdempotencyStoreSchemaError(
        `receipt chain ${receipt.chain} has no head row in ${this.name.schema}.${receiptHeadsTableOf(this.name).table}: run the migration ${RECEIPTS_MIGRATION} again`,
      );
    }
    return receiptOfRow(rows[0]);
  }

  async read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]> {
    const values = [chain, offset, limit];
    const { rows } = await this.query<ReceiptRow>(
      'receipts read',
      this.readSql,
      values,
      () => values,
    );
    return rows.map(receiptOfRow);
  }

  async head(chain: number): Promise<ReceiptChainHead> {
    const { rows } = await this.query<{ seq: string; hash: string }>(
      'receipts head',
      this.headSql,
      [chain],
      () => [chain],
    );
    return rows.length === 0
      ? { seq: 0, hash: GENESIS_HASH }
      : { seq: Number(rows[0].seq), hash: rows[0].hash };
  }
}
