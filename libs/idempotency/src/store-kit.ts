/**
 * `nest-idempotency/store-kit`: what a store author uses to implement the
 * store SPI (`IdempotencyStore` in `nest-idempotency/core`) the way the
 * built-in stores do: the decision on a record found, the wait for a record to
 * change, the waiters of one process, the payload and key encodings. The
 * conformance kit that checks a store is `nest-idempotency/testing`.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';

// What a record found means to a caller, and when it may be taken or purged.
export {
  becomesAmbiguous,
  decide,
  fingerprintsConflict,
  isPurgeable,
  isStealable,
} from './core/decide';
export type { Decision, ObservedRecord } from './core/decide';

// Waiting inside the store for a record to change.
export { waitForRecord } from './core/wait-loop';
export type { Observation, WaitForRecordOptions } from './core/wait-loop';
export { WaiterRegistry, WaitTicket } from './core/waiters';

// Stored payloads.
export {
  assertPayloadSize,
  decodeHttpResponse,
  describePayload,
  encodeHttpResponse,
  encodeNotStorable,
  isHttpResponse,
  notStorableReason,
} from './core/payload';
export type { HttpResponseRecord, PayloadDescription } from './core/payload';

// Keys and scopes as stored.
export {
  assertValidKey,
  keyFromBytes,
  recordLocator,
  scopeOfStored,
  storedScope,
} from './core/key';

// The checks every built-in store makes of its arguments, and the byte probe of init().
export {
  checkAcquireRequest,
  checkLease,
  checkListFilter,
  checkPayload,
  checkPurgeOptions,
  checkRecordId,
  checkResolution,
  checkResumeRequest,
  checkSuspension,
  describeInput,
} from './core/store-input';
export { PROBE_BYTES, PROBE_SCOPE, PROBE_TTL_MS, probeMismatch } from './core/byte-probe';

// Receipts: the hash every store links its chains with, and the check of an append's input.
export { receiptHash, receiptText } from './core/receipts';
export { checkReceipt } from './core/receipt-input';
