import { RECEIPT_CHAINS, RECEIPT_OUTCOMES, type ReceiptInput } from './receipts';
import { describeInput } from './store-input';

const HEX = /^[0-9a-f]+$/;

function refuse(where: string, argument: string, expected: string, value: unknown): never {
  throw new TypeError(`${where}: "${argument}" must be ${expected}, got ${describeInput(value)}`);
}

function checkHex(where: string, argument: string, value: unknown, length: number): void {
  if (typeof value !== 'string' || value.length !== length || !HEX.test(value)) {
    refuse(where, argument, `${length} lowercase hex characters`, value);
  }
}

/**
 * A receipt to append, checked at a store's boundary as ./store-input.ts
 * checks the SPI's other inputs: each field is a digest, a chain number or
 * an outcome, so whatever a store writes into its hash text is one of them.
 */
export function checkReceipt(receipt: ReceiptInput, where: string): void {
  if (receipt === null || typeof receipt !== 'object')
    refuse(where, 'receipt', 'an object', receipt);
  const { chain, scopeDigest, keyDigest, outcome, resultDigest } = receipt;
  if (!Number.isInteger(chain) || chain < 0 || chain >= RECEIPT_CHAINS) {
    refuse(where, 'receipt.chain', `a whole number from 0 to ${RECEIPT_CHAINS - 1}`, chain);
  }
  checkHex(where, 'receipt.scopeDigest', scopeDigest, 16);
  checkHex(where, 'receipt.keyDigest', keyDigest, 12);
  if (!RECEIPT_OUTCOMES.includes(outcome)) {
    refuse(where, 'receipt.outcome', RECEIPT_OUTCOMES.join(', '), outcome);
  }
  if (resultDigest !== null) checkHex(where, 'receipt.resultDigest', resultDigest, 64);
}
