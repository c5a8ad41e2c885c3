/**
 * The framework-free surface, by group. Each name here is public (a change is
 * a semver event, and test/docs/public-surface.e2e-spec.ts shows it as a
 * diff); whatever is not listed is internal. What only a store author needs
 * is in `nest-idempotency/store-kit` (../store-kit.ts).
 */

// The engine and its policies.
export { IdempotencyEngine } from './engine';
export type {
  AnswerOf,
  ExecuteOutcome,
  ExecuteRequest,
  IdempotencyEngineOptions,
  IdempotentAction,
} from './engine';
export { IdempotencyContext } from './context';
export type { IdempotencyAttempt } from './context';
export type { SuspendedAnswer, SuspendOptions } from './continuation';
export type { DerivedKeyOptions } from './derived-key';
export type { CallOptions } from './look';
export { BUILT_IN_DEFAULTS } from './policy';
export type {
  ExecutionPolicy,
  PolicyOptions,
  ReconcileAnswer,
  ReconcileHook,
  ReconcileQuestion,
} from './policy';
export { Execution } from './execution';
export type { CompletionResult, CompletionRetryOptions } from './execution';
export { MAX_TTL_MS, parseDuration } from './duration';
export type { Duration, DurationKind } from './duration';
export { DEFAULT_MAX_KEY_LENGTH, keyDigest, storedKeyDigest } from './key';
export { DEFAULT_MAX_PAYLOAD_BYTES, decodeValue, encodeValue } from './payload';
export type { IdempotencyLogger } from './logger';

// Errors.
export {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyError,
  IdempotencyLeaseLostError,
  IdempotencyNotExecutedError,
  IdempotencyOutcomeUnknownError,
  IdempotencyPayloadError,
  IdempotencyResumptionRefusedError,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from './errors';
/** @deprecated since 0.3: the `…Error` names above; these aliases go in the next minor version. */
export {
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyOutcomeUnknownException,
} from './errors';

// Events.
export type {
  IdempotencyEvent,
  IdempotencyEventListener,
  ObservedOutcome,
  ReleaseReason,
} from './events';

// The store SPI.
export { DEFAULT_MAX_WAITERS, DEFAULT_PURGE_BATCH, IdempotencyStore } from './store';
export type {
  AcquireRequest,
  AcquireResult,
  AmbiguityReason,
  AmbiguousRecord,
  ContinuationSupport,
  IdempotencyRecordView,
  Lease,
  ListFilter,
  RecordId,
  RecordedStep,
  RecordState,
  ReplayedRecord,
  Resolution,
  ResolveResult,
  ResumeRequest,
  ResumeResult,
  StepSupport,
  StoredPayload,
  StrictModeSupport,
  SuspendedRecord,
  Suspension,
  TransactionRunner,
  TransactionalCompletion,
} from './store';

// Receipts (`receipts: true`): the SPI capability, and the chain walk `receipts verify` runs.
export { GENESIS_HASH, RECEIPT_CHAINS, verifyChain } from './receipts';
export type {
  ChainReport,
  ReceiptChainHead,
  ReceiptFinding,
  ReceiptInput,
  ReceiptOutcome,
  ReceiptProblem,
  ReceiptSupport,
  StoredReceipt,
} from './receipts';

/**
 * @deprecated since 0.3: import the store author's toolbox from
 * `nest-idempotency/store-kit`; these names leave `nest-idempotency/core` and
 * the root in the next minor version.
 */
export {
  becomesAmbiguous,
  decide,
  fingerprintsConflict,
  isPurgeable,
  isStealable,
  waitForRecord,
  WaiterRegistry,
  WaitTicket,
  assertPayloadSize,
  decodeHttpResponse,
  describePayload,
  encodeHttpResponse,
  encodeNotStorable,
  isHttpResponse,
  notStorableReason,
  assertValidKey,
  keyFromBytes,
  scopeOfStored,
  storedScope,
} from '../store-kit';
export type {
  Decision,
  ObservedRecord,
  Observation,
  WaitForRecordOptions,
  HttpResponseRecord,
  PayloadDescription,
} from '../store-kit';
