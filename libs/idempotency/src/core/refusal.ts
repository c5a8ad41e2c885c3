import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyError,
  IdempotencyOutcomeUnknownError,
  IdempotencyResumptionRefusedError,
  IdempotencyStoreUnavailableError,
} from './errors';

/**
 * Why a call was not answered with its work's result, in words every door
 * renders its own way (an HTTP problem document, a GraphQL error, an RPC
 * exception). The codes are the stable, documented ones.
 *
 * `detail` is set where the lifecycle knows more than the code says (a
 * transaction that did not commit); a door without it uses its own words.
 */
export type Refusal =
  | { code: 'idempotency-key-missing' }
  | { code: 'idempotency-key-invalid'; detail: string }
  /** HTTP only: the body is larger than `http.maxBodyBytes`. */
  | { code: 'idempotency-body-too-large'; detail: string }
  /** HTTP only: the body was not parsed before the check, so it cannot be compared. */
  | { code: 'idempotency-body-unreadable'; detail: string }
  | { code: 'idempotency-key-reused'; keyDigest: string }
  | { code: 'idempotency-in-flight'; retryAfterMs: number; scope: string; keyDigest: string }
  /** No `retryAfterMs`: strict mode keeps the key, and a retry cannot help until it is resolved. */
  | { code: 'idempotency-store-unavailable'; retryAfterMs?: number; detail?: string }
  | {
      code: 'idempotency-outcome-unknown';
      /** The refusal of an AMBIGUOUS record found by the look; absent where this call's own commit made it so. */
      error?: IdempotencyOutcomeUnknownError;
      detail?: string;
    }
  | { code: 'idempotency-result-not-storable'; detail?: string }
  | { code: 'idempotency-completion-failed'; detail: string }
  /** A resumption was not admitted (`error.reason` says why); nothing ran. */
  | { code: 'idempotency-resumption-refused'; error: IdempotencyResumptionRefusedError };

export type RefusalCode = Refusal['code'];

/**
 * The refusal an error from the look (`IdempotencyEngine.begin`) stands for,
 * or undefined for an error that is not a refusal (a bug, a store's own
 * failure), which the caller rethrows.
 */
export function refusalOf(error: unknown): Refusal | undefined {
  if (error instanceof IdempotencyResumptionRefusedError)
    return { code: 'idempotency-resumption-refused', error };
  if (error instanceof IdempotencyOutcomeUnknownError)
    return { code: 'idempotency-outcome-unknown', error };
  if (error instanceof IdempotencyInFlightError) {
    return {
      code: 'idempotency-in-flight',
      retryAfterMs: error.retryAfterMs,
      scope: error.scope,
      keyDigest: error.keyDigest,
    };
  }
  if (error instanceof IdempotencyFingerprintMismatchError)
    return { code: 'idempotency-key-reused', keyDigest: error.keyDigest };
  if (error instanceof IdempotencyKeyError)
    return { code: 'idempotency-key-invalid', detail: error.message };
  if (error instanceof IdempotencyStoreUnavailableError) {
    return {
      code: 'idempotency-store-unavailable',
      retryAfterMs: error.retryAfterMs,
    };
  }
  return undefined;
}
