import {
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from '../../../core/errors';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  receiptHash,
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
import type { MysqlConnector, MysqlPoolConnection } from './query';
import { mysqlQualified, type MysqlTableName } from './sql';
import { isMysqlUnavailable } from './unavailable';
import { storeError } from '../unavailable-error';

const ASCII = 'CHARACTER SET ascii COLLATE ascii_bin';

/** The receipts tables beside the records table `name` (in `mysqlCurrentTableSql` and the migration). */
export function mysqlReceiptsTableSql(name: MysqlTableName): string[] {
  const receipts = mysqlQualified(
    receiptsTableOf({ schema: name.schema ?? '', table: name.table }),
  );
  const heads = mysqlQualified(
    receiptHeadsTableOf({ schema: name.schema ?? '', table: name.table }),
  );
  const seeds = Array.from(
    { length: RECEIPT_CHAINS },
    (_, chain) => `(${chain}, 0, 0, '${GENESIS_HASH}', '${GENESIS_HASH}')`,
  ).join(', ');
  return [
    `CREATE TABLE IF NOT EXISTS ${receipts} (
      chain SMALLINT NOT NULL,
      seq BIGINT NOT NULL,
      scope_digest VARCHAR(16) ${ASCII} NOT NULL,
      key_digest VARCHAR(64) ${ASCII} NOT NULL,
      outcome VARCHAR(24) ${ASCII} NOT NULL,
      result_digest CHAR(64) ${ASCII} NULL,
      at_ms BIGINT NOT NULL,
      prev_hash CHAR(64) ${ASCII} NOT NULL,
      hash CHAR(64) ${ASCII} NOT NULL,
      PRIMARY KEY (chain, seq)
    ) ENGINE=InnoDB`,
    `CREATE TABLE IF NOT EXISTS ${heads} (
      chain SMALLINT NOT NULL PRIMARY KEY,
      seq BIGINT NOT NULL,
      at_ms BIGINT NOT NULL,
      prev_hash CHAR(64) ${ASCII} NOT NULL,
      hash CHAR(64) ${ASCII} NOT NULL
    ) ENGINE=InnoDB`,
    `INSERT IGNORE INTO ${heads} (chain, seq, at_ms, prev_hash, hash) VALUES ${seeds}`,
  ];
}

interface HeadRow {
  seq: number | string;
  hash: string;
  now_ms: number | string;
}

type Run = <T>(sql: string, values: unknown[]) => Promise<T>;

/**
 * Receipts on MySQL and MariaDB: one short transaction per append on one
 * pooled connection: the chain's head row is locked (`FOR UPDATE`) and read
 * with the database's clock, the receipt's hash is computed here
 * (`receiptHash`), the receipt is inserted and the head moved, and the
 * transaction commits. The head's row lock orders one chain's appends;
 * appends to other chains lock other rows.
 */
export class MysqlReceipts implements DialectReceipts {
  private readonly receipts: string;
  private readonly heads: string;
  private readonly where: string;

  constructor(
    private readonly name: MysqlTableName & { schema: string },
    private readonly connection: MysqlPoolConnection,
    private readonly product: string,
    private readonly timeoutMs: number,
  ) {
    this.receipts = mysqlQualified({ schema: name.schema, table: `${name.table}_receipts` });
    this.heads = mysqlQualified({ schema: name.schema, table: `${name.table}_receipt_heads` });
    this.where = name.schema;
  }

  async check(ensureSchema: boolean): Promise<void> {
    await this.session('schema check', async (run) => {
      if (ensureSchema) {
        for (const sql of mysqlReceiptsTableSql(this.name)) await run(sql, []);
      }
      const wanted = [`${this.name.table}_receipts`, `${this.name.table}_receipt_heads`];
      const rows = await run<Array<{ table_name: string }>>(
        'SELECT TABLE_NAME AS table_name FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN (?, ?)',
        [this.where, ...wanted],
      );
      const missing = wanted.filter((table) => !rows.some((row) => row.table_name === table));
      if (missing.length > 0) {
        throw new IdempotencyStoreSchemaError(
          missingReceiptTables(missing.map((t) => `${this.where}.${t}`)),
        );
      }
    });
  }

  append(receipt: ReceiptInput): Promise<StoredReceipt> {
    return this.session('receipt', async (run) => {
      await run('START TRANSACTION', []);
      try {
        const [head] = await run<HeadRow[]>(
          `SELECT seq, hash, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS now_ms FROM ${this.heads} WHERE chain = ? FOR UPDATE`,
          [receipt.chain],
        );
        if (!head) {
          throw new IdempotencyStoreSchemaError(
            `receipt chain ${receipt.chain} has no head row in ${this.where}.${this.name.table}_receipt_heads: run the migration ${RECEIPTS_MIGRATION} again`,
          );
        }
        const linked = {
          ...receipt,
          seq: Number(head.seq) + 1,
          atMs: Number(head.now_ms),
          prevHash: head.hash,
        };
        const stored: StoredReceipt = { ...linked, hash: receiptHash(linked) };
        await run(
          `INSERT INTO ${this.receipts} (${RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          [
            stored.chain,
            stored.seq,
            stored.scopeDigest,
            stored.keyDigest,
            stored.outcome,
            stored.resultDigest,
            stored.atMs,
            stored.prevHash,
            stored.hash,
          ],
        );
        await run(
          `UPDATE ${this.heads} SET seq = ?, at_ms = ?, prev_hash = ?, hash = ? WHERE chain = ?`,
          [stored.seq, stored.atMs, stored.prevHash, stored.hash, stored.chain],
        );
        await run('COMMIT', []);
        return stored;
      } catch (error) {
        await run('ROLLBACK', []).catch(() => undefined);
        throw error;
      }
    });
  }

  read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]> {
    return this.session('receipts read', async (run) => {
      const rows = await run<ReceiptRow[]>(
        `SELECT ${RECEIPT_COLUMNS} FROM ${this.receipts} WHERE chain = ? ORDER BY seq LIMIT ? OFFSET ?`,
        [chain, limit, offset],
      );
      return rows.map(receiptOfRow);
    });
  }

  head(chain: number): Promise<ReceiptChainHead> {
    return this.session('receipts head', async (run) => {
      const [row] = await run<Array<{ seq: string | number; hash: string }>>(
        `SELECT seq, hash FROM ${this.heads} WHERE chain = ?`,
        [chain],
      );
      return row ? { seq: Number(row.seq), hash: row.hash } : { seq: 0, hash: GENESIS_HASH };
    });
  }

  /**
   * `work` on one pooled connection, bounded by the store's operation
   * timeout: past it the connection is destroyed (the server rolls back what
   * it had not committed) and the call fails as unavailable.
   */
  private async session<T>(operation: string, work: (run: Run) => Promise<T>): Promise<T> {
    const connector: MysqlConnector | undefined = this.connection.connector();
    if (!connector) {
      throw new IdempotencyStoreUnavailableError(`${operation}: ${this.connection.unready}`);
    }
    const connection = await new Promise<Parameters<Parameters<MysqlConnector>[0]>[1]>(
      (resolve, reject) => connector((error, taken) => (error ? reject(error) : resolve(taken))),
    ).catch((error: unknown) => {
      throw storeError(error, this.product, operation, isMysqlUnavailable);
    });
    if (!connection) throw new IdempotencyStoreUnavailableError(`${operation}: no connection`);
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const run: Run = <R>(sql: string, values: unknown[]) =>
      new Promise<R>((resolve, reject) => {
        connection.query(sql, values, (error, rows) =>
          error ? reject(error) : resolve(rows as R),
        );
      });
    try {
      return await Promise.race([
        work(run),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            timedOut = true;
            reject(
              new IdempotencyStoreUnavailableError(
                `${this.product} did not answer ${operation} within ${this.timeoutMs} ms`,
              ),
            );
          }, this.timeoutMs);
        }),
      ]);
    } catch (error) {
      throw storeError(error, this.product, operation, isMysqlUnavailable);
    } finally {
      clearTimeout(timer);
      if (timedOut) connection.destroy();
      else connection.release();
    }
  }
}
