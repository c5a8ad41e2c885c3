import {
  IdempotencyCompletionError,
  IdempotencyError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from '../../../core/errors';
import type { Refusal } from '../../../core/refusal';

/**
 * A refusal as the core's typed error, for a provider method's caller (a
 * `CommandBus.execute`, a job runner): the error the look raised where there
 * is one, else the one the refusal's code stands for.
 */
export function refusalError(where: string, refusal: Refusal, raised?: Error): Error {
  if (raised) return raised;
  switch (refusal.code) {
    case 'idempotency-in-flight':
      return new IdempotencyInFlightError(refusal.retryAfterMs, refusal.scope, refusal.keyDigest);
    case 'idempotency-store-unavailable':
      return new IdempotencyStoreUnavailableError(
        refusal.detail ?? 'the idempotency store is unavailable; retry later',
        refusal.retryAfterMs,
      );
    case 'idempotency-key-missing':
      return new IdempotencyKeyError(`${where}: the call has no idempotency key`);
    case 'idempotency-key-reused':
      return new IdempotencyFingerprintMismatchError(where, refusal.keyDigest);
    case 'idempotency-key-invalid':
    case 'idempotency-body-too-large':
    case 'idempotency-body-unreadable':
      return new IdempotencyKeyError(refusal.detail);
    case 'idempotency-outcome-unknown':
      return refusal.error ?? new IdempotencyError(refusal.detail ?? `${where}: outcome unknown`);
    case 'idempotency-result-not-storable':
      return new IdempotencyPayloadError(
        refusal.detail ??
          `${where}: the call ran, but its result could not be recorded for replay; it is not run again`,
      );
    case 'idempotency-completion-failed':
      return new IdempotencyCompletionError(refusal.detail, where, '');
    case 'idempotency-resumption-refused':
      return refusal.error;
  }
}
