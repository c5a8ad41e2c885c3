import { describeError } from './error-text';
import type { IdempotencyEvent } from './events';
import type { IdempotencyLogger } from './logger';
import { type ReceiptOutcome, receiptChain, resultDigestOf, scopeDigestOf } from './receipts';
import { recordLocator } from './key';
import type { IdempotencyStore, StoredPayload } from './store';

/** The record a receipt is for: its handler scope, its name in logs, and its chain. */
export interface ReceiptSubject {
  scope: string;
  /** `scope/#<12 hex>`, as `keyDigest` makes it. */
  keyDigest: string;
  chain: number;
}

/** The chain of the record `key` under its stored scope (the tenant included). */
export function chainOfRecord(storedScope: string, key: string): number {
  return receiptChain(recordLocator(storedScope, key));
}

/**
 * Appends the receipt of a record that reached a terminal state. Never
 * throws: a failed append is logged (by digest) and reported as a
 * `receipt-failed` event, and the caller's request goes on as it would have.
 */
export async function appendReceipt(
  sink: {
    store: IdempotencyStore;
    logger: IdempotencyLogger;
    emit: (event: () => IdempotencyEvent) => void;
  },
  subject: ReceiptSubject,
  outcome: ReceiptOutcome,
  payload: StoredPayload | null,
): Promise<void> {
  const { store, logger, emit } = sink;
  const { scope, keyDigest, chain } = subject;
  try {
    const receipts = store.receipts;
    if (!receipts) throw new Error('the store keeps no receipts (store.receipts)');
    await receipts.append({
      chain,
      scopeDigest: scopeDigestOf(scope),
      keyDigest: keyDigest.slice(keyDigest.lastIndexOf('/#') + 2),
      outcome,
      resultDigest: payload === null ? null : resultDigestOf(payload),
    });
    emit(() => ({ type: 'receipt-appended', scope, keyDigest, outcome, chain }));
  } catch (error) {
    logger.error(
      `the ${outcome} receipt of ${keyDigest} could not be appended to chain ${chain}: ${describeError(error)}`,
    );
    emit(() => ({
      type: 'receipt-failed',
      scope,
      keyDigest,
      outcome,
      error: describeError(error),
    }));
  }
}
