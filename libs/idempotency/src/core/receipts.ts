import { hash } from 'node:crypto';

/**
 * Receipts (`receipts: true`): every record that reaches a terminal state
 * (completed, released after a failure, resolved) appends one receipt to a
 * hash chain kept by the store. A receipt names its record by digests only
 * (never a key, a tenant or a stored body), carries the store's time, and the
 * hash of the receipt before it in its chain, so that `nest-idempotency
 * receipts verify` can tell an altered, removed or reordered receipt.
 *
 * There are `RECEIPT_CHAINS` chains; a record's chain is picked by its
 * locator, so appends for different records rarely wait on the same chain.
 */

/** How many chains a store keeps (fixed: the migrations make one head per chain). */
export const RECEIPT_CHAINS = 16;

/** The `prevHash` of a chain's first receipt. */
export const GENESIS_HASH = '0'.repeat(64);

/**
 * What ended the record: `completed` (with a result, or a not-storable
 * marker), `released` (the action failed and the record was deleted), or a
 * resolution of an AMBIGUOUS record (strict mode).
 */
export type ReceiptOutcome =
  'completed' | 'released' | 'resolved-completed' | 'resolved-not-executed';

export const RECEIPT_OUTCOMES: readonly ReceiptOutcome[] = [
  'completed',
  'released',
  'resolved-completed',
  'resolved-not-executed',
];

/** What the engine hands a store to append. */
export interface ReceiptInput {
  /** 0 ≤ chain < RECEIPT_CHAINS (`receiptChain` of the record's locator). */
  chain: number;
  /** 16 hex: SHA-256 of the handler's scope (without a tenant). */
  scopeDigest: string;
  /** 12 hex: the key digest's hash, as `keyDigest` shows it (tenant included). */
  keyDigest: string;
  outcome: ReceiptOutcome;
  /** SHA-256 (hex) of the stored payload's bytes; null when nothing was stored. */
  resultDigest: string | null;
}

/** A receipt as the store keeps it: its place in its chain, the store's time, and the links. */
export interface StoredReceipt extends ReceiptInput {
  /** 1 for a chain's first receipt, then one more per receipt. */
  seq: number;
  /** The store's clock when it appended it, in ms since the epoch. */
  atMs: number;
  prevHash: string;
  hash: string;
}

/** Where a chain ends, as the store's head of that chain says: `seq` 0 and `GENESIS_HASH` when empty. */
export interface ReceiptChainHead {
  seq: number;
  hash: string;
}

/**
 * What a store that keeps receipts offers besides the base SPI. `append`
 * links the receipt to its chain's head and moves the head, with the store's
 * time, in one atomic operation; the others never write.
 */
export interface ReceiptSupport {
  /**
   * Checks that the store has what receipts need (the SQL stores: the
   * receipts tables), throwing `IdempotencyStoreSchemaError` naming the
   * migration when it does not. Called at bootstrap when receipts are on.
   */
  check(): Promise<void>;
  append(receipt: ReceiptInput): Promise<StoredReceipt>;
  /**
   * Receipts of `chain` in stored order (SQL: by seq; Redis: list order),
   * skipping the first `offset`, at most `limit`. As stored: nothing is
   * checked or left out, so that verify sees what an operator changed.
   */
  read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]>;
  head(chain: number): Promise<ReceiptChainHead>;
}

/** The chain of a record, from its locator (`recordLocator`, hex). */
export function receiptChain(locator: string): number {
  return Number.parseInt(locator.slice(0, 8), 16) % RECEIPT_CHAINS;
}

/** 16 hex of SHA-256 over the handler's scope. */
export function scopeDigestOf(scope: string): string {
  return hash('sha256', scope).slice(0, 16);
}

/** SHA-256 (hex) of a stored payload's bytes. */
export function resultDigestOf(payload: Buffer): string {
  return hash('sha256', payload);
}

/**
 * The text a receipt's hash is taken over, written the same way by the SQL
 * stores (in SQL) and here: the fields joined by `|`, a missing result
 * digest as nothing. Every field is decimal digits, hex or a fixed word, so
 * the text names one receipt.
 */
export function receiptText(receipt: Omit<StoredReceipt, 'hash'>): string {
  return [
    receipt.chain,
    receipt.seq,
    receipt.scopeDigest,
    receipt.keyDigest,
    receipt.outcome,
    receipt.resultDigest ?? '',
    receipt.atMs,
    receipt.prevHash,
  ].join('|');
}

/** SHA-256 (hex) of `receiptText`. */
export function receiptHash(receipt: Omit<StoredReceipt, 'hash'>): string {
  return hash('sha256', receiptText(receipt));
}

/** What can be wrong at a place in a chain. */
export type ReceiptProblem = 'altered' | 'removed' | 'reordered';

export interface ReceiptFinding {
  chain: number;
  /** The seq the receipt at this place should have had. */
  position: number;
  problem: ReceiptProblem;
}

export interface ChainReport {
  chain: number;
  receipts: number;
  /** The first bad receipt of the chain; later ones are not judged (their links hang on it). */
  finding?: ReceiptFinding;
}

/**
 * Walks one chain from its start, in pages, and names its first bad
 * receipt: `removed` (a seq is missing, or the head counts more receipts
 * than there are), `reordered` (a receipt links to another receipt of the
 * chain than the one before it), `altered` (its fields do not give its hash,
 * or its link names no receipt of the chain). Never writes.
 */
export async function verifyChain(
  receipts: ReceiptSupport,
  chain: number,
  pageSize = 1000,
): Promise<ChainReport> {
  const rows: StoredReceipt[] = [];
  for (;;) {
    const page = await receipts.read(chain, rows.length, pageSize);
    rows.push(...page);
    if (page.length < pageSize) break;
  }
  const head = await receipts.head(chain);
  const hashes = new Set(rows.map((row) => row.hash));
  const found = (position: number, problem: ReceiptProblem): ChainReport => ({
    chain,
    receipts: rows.length,
    finding: { chain, position, problem },
  });
  let prevHash = GENESIS_HASH;
  for (let index = 0; index < rows.length; index++) {
    const row = rows[index];
    const position = index + 1;
    if (row.seq !== position || row.prevHash !== prevHash) {
      // Linked to a receipt that is there, elsewhere in the chain: moved.
      if (row.prevHash !== prevHash && hashes.has(row.prevHash) && row.prevHash !== row.hash) {
        return found(position, 'reordered');
      }
      if (row.seq > position) return found(position, 'removed');
      return found(position, 'altered');
    }
    if (row.chain !== chain || receiptHash(row) !== row.hash) return found(position, 'altered');
    prevHash = row.hash;
  }
  if (head.seq > rows.length) return found(rows.length + 1, 'removed');
  if (head.seq === rows.length && head.hash !== prevHash) return found(rows.length, 'altered');
  return { chain, receipts: rows.length };
}
