import { checkReceipt } from '../../core/receipt-input';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  receiptHash,
  type ReceiptChainHead,
  type ReceiptInput,
  type ReceiptSupport,
  type StoredReceipt,
} from '../../core/receipts';

/**
 * Receipts in process memory: per chain an array and its head. An append
 * is synchronous between its awaits, so it is atomic; its time is the
 * store's clock (`now`).
 */
export class MemoryReceipts implements ReceiptSupport {
  private readonly chains: StoredReceipt[][] = Array.from({ length: RECEIPT_CHAINS }, () => []);
  private readonly heads: ReceiptChainHead[] = Array.from({ length: RECEIPT_CHAINS }, () => ({
    seq: 0,
    hash: GENESIS_HASH,
  }));

  constructor(private readonly now: () => number) {}

  async check(): Promise<void> {}

  async append(receipt: ReceiptInput): Promise<StoredReceipt> {
    checkReceipt(receipt, 'receipts.append');
    const head = this.heads[receipt.chain];
    const linked = {
      chain: receipt.chain,
      seq: head.seq + 1,
      scopeDigest: receipt.scopeDigest,
      keyDigest: receipt.keyDigest,
      outcome: receipt.outcome,
      resultDigest: receipt.resultDigest,
      atMs: Math.floor(this.now()),
      prevHash: head.hash,
    };
    const stored: StoredReceipt = { ...linked, hash: receiptHash(linked) };
    this.chains[receipt.chain].push(stored);
    this.heads[receipt.chain] = { seq: stored.seq, hash: stored.hash };
    return { ...stored };
  }

  async read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]> {
    return (this.chains[chain] ?? []).slice(offset, offset + limit).map((r) => ({ ...r }));
  }

  async head(chain: number): Promise<ReceiptChainHead> {
    return { ...(this.heads[chain] ?? { seq: 0, hash: GENESIS_HASH }) };
  }
}
