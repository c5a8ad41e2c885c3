import { brandErrorClass, isBrandedInstance } from './error-brand';
import type { AmbiguityReason } from './store';

/**
 * Every error the library throws on purpose extends `IdempotencyError`, so a
 * caller can tell "the idempotency layer said no" from "the action failed".
 */
export class IdempotencyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** True for this class's errors from either build of the package (see error-brand.ts). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isBrandedInstance(this, value);
  }
}

/** An option or decorator value is invalid. Thrown at bootstrap, never per request. */
export class IdempotencyConfigError extends IdempotencyError {}

/** The key (or scope) supplied for one call is unusable: empty, too long, not a string. */
export class IdempotencyKeyError extends IdempotencyError {}

/** The value to be stored cannot be serialized to JSON or is larger than the store accepts. */
export class IdempotencyPayloadError extends IdempotencyError {}

/** The record is no longer held under the presented lease: it was stolen, completed or released. */
export class IdempotencyLeaseLostError extends IdempotencyError {}

/** The store could not be reached within its timeout. Safe to retry later. */
export class IdempotencyStoreUnavailableError extends IdempotencyError {
  constructor(
    message: string,
    readonly retryAfterMs = 1000,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The store exists but cannot be used as configured (missing table, wrong shape). */
export class IdempotencyStoreSchemaError extends IdempotencyError {}

/**
 * The action ran, but its result could not be recorded after retrying. The
 * record is left IN_PROGRESS (never deleted: the work happened), so its lease
 * lapses and a later duplicate may run the action again.
 */
export class IdempotencyCompletionError extends IdempotencyError {
  constructor(
    message: string,
    readonly scope: string,
    readonly keyDigest: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The key was first used with a different request fingerprint (another body, route or method). */
export class IdempotencyFingerprintMismatchError extends IdempotencyError {
  constructor(
    readonly scope: string,
    readonly keyDigest: string,
  ) {
    super(`Idempotency key ${keyDigest} was first used with a different request`);
  }
}

const IN_FLIGHT_BRAND = Symbol.for('nest-idempotency.in-flight');

/**
 * Another caller still holds the key after this caller's wait ran out.
 *
 * Adapters may throw a transport-specific error (for instance a Nest
 * `RpcException` subclass) that carries the same brand; `instanceof
 * IdempotencyInFlightError` is true for those as well, so user code can
 * catch one type whatever the transport.
 */
export class IdempotencyInFlightError extends IdempotencyError {
  readonly [IN_FLIGHT_BRAND] = true;

  constructor(
    readonly retryAfterMs: number,
    readonly scope: string,
    readonly keyDigest: string,
  ) {
    super(`Idempotency key ${keyDigest} is still in flight; retry after ${retryAfterMs} ms`);
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== IdempotencyInFlightError) return isBrandedInstance(this, value);
    return typeof value === 'object' && value !== null && IN_FLIGHT_BRAND in value;
  }

  /** Marks an adapter's own error class so it passes `instanceof IdempotencyInFlightError`. */
  static brand<T extends object>(target: T): T {
    Object.defineProperty(target, IN_FLIGHT_BRAND, { value: true, enumerable: false });
    return target;
  }
}

const OUTCOME_UNKNOWN_BRAND = Symbol.for('nest-idempotency.outcome-unknown');

/**
 * Strict mode: the record is AMBIGUOUS. An earlier attempt may have run the
 * action, and nobody has said whether it did, so this attempt is refused
 * rather than run a second time. Retrying changes nothing until the record is
 * resolved (`nest-idempotency resolve`, or a `reconcile` hook).
 *
 * As with `IdempotencyInFlightError`, the message adapter throws a
 * transport-specific error carrying the same brand: `instanceof
 * IdempotencyOutcomeUnknownError` is true for it as well.
 */
export class IdempotencyOutcomeUnknownError extends IdempotencyError {
  readonly [OUTCOME_UNKNOWN_BRAND] = true;

  constructor(
    readonly scope: string,
    readonly keyDigest: string,
    /** When the record became AMBIGUOUS, by the store's clock. */
    readonly since: Date,
    readonly reason: AmbiguityReason,
    /** `step-unknown`: the recorded step that began and recorded nothing. */
    readonly step?: string,
  ) {
    super(
      `the outcome of an earlier attempt with idempotency key ${keyDigest} is unknown (${reason}${step === undefined ? '' : ` in step ${JSON.stringify(step)}`}); it is not run again until the record is resolved`,
    );
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== IdempotencyOutcomeUnknownError) return isBrandedInstance(this, value);
    return typeof value === 'object' && value !== null && OUTCOME_UNKNOWN_BRAND in value;
  }

  /** Marks an adapter's own error class so it passes `instanceof IdempotencyOutcomeUnknownError`. */
  static brand<T extends object>(target: T): T {
    Object.defineProperty(target, OUTCOME_UNKNOWN_BRAND, { value: true, enumerable: false });
    return target;
  }
}

/**
 * A resumption (`engine.resume`, `@Idempotent({ resumes })`) was not
 * admitted, and nothing ran: the token is not one this library made
 * (`invalid`), names no suspended record of the scope (`unknown`), was
 * resumed already (`consumed`), or its hold lapsed first (`lapsed`).
 */
export class IdempotencyResumptionRefusedError extends IdempotencyError {
  constructor(
    readonly scope: string,
    readonly reason: 'invalid' | 'unknown' | 'consumed' | 'lapsed',
  ) {
    super(`${scope}: the continuation ${RESUMPTION_TEXT[reason]}`);
  }
}

const RESUMPTION_TEXT = {
  invalid:
    'token is malformed (expected the Idempotency-Continuation value the suspension answered)',
  unknown: 'names no suspended record of this scope',
  consumed: 'was resumed already; it is admitted once',
  lapsed: 'hold lapsed before the resumption; the record goes on without it',
} as const;

/**
 * Strict mode: throw this (or an error whose `cause` chain holds one) from a
 * handler that failed before it had any effect, so its record is released and
 * a retry runs, instead of becoming AMBIGUOUS. Anything else a strict-mode
 * handler throws once its body was entered makes the record AMBIGUOUS, unless
 * the `notExecuted` option says otherwise. Wrap it as the `cause` of the error
 * the caller should see (an `HttpException`, an `RpcException`). It is the
 * handler's error, not the library's, so it does not extend `IdempotencyError`.
 *
 *   if (!(await this.ledger.reserve(order))) throw new IdempotencyNotExecutedError('no funds', { cause });
 */
export class IdempotencyNotExecutedError extends Error {
  constructor(message = 'the action did not run', options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** True for this class's errors from either build of the package (see error-brand.ts). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isBrandedInstance(this, value);
  }

  /** True when `error`, or an error in its `cause` chain, is an `IdempotencyNotExecutedError`. */
  static isIn(error: unknown): boolean {
    for (let e = error, depth = 0; e instanceof Error && depth < 10; depth++) {
      if (e instanceof IdempotencyNotExecutedError) return true;
      e = (e as { cause?: unknown }).cause;
    }
    return false;
  }
}

// `instanceof` across the package's two builds, should a process load both.
for (const [errorClass, name] of [
  [IdempotencyError, 'IdempotencyError'],
  [IdempotencyConfigError, 'IdempotencyConfigError'],
  [IdempotencyKeyError, 'IdempotencyKeyError'],
  [IdempotencyPayloadError, 'IdempotencyPayloadError'],
  [IdempotencyLeaseLostError, 'IdempotencyLeaseLostError'],
  [IdempotencyStoreUnavailableError, 'IdempotencyStoreUnavailableError'],
  [IdempotencyStoreSchemaError, 'IdempotencyStoreSchemaError'],
  [IdempotencyCompletionError, 'IdempotencyCompletionError'],
  [IdempotencyFingerprintMismatchError, 'IdempotencyFingerprintMismatchError'],
  [IdempotencyInFlightError, 'IdempotencyInFlightError'],
  [IdempotencyOutcomeUnknownError, 'IdempotencyOutcomeUnknownError'],
  [IdempotencyNotExecutedError, 'IdempotencyNotExecutedError'],
  [IdempotencyResumptionRefusedError, 'IdempotencyResumptionRefusedError'],
] as const) {
  brandErrorClass(errorClass, name);
}

// Deprecated names, kept for one minor version (see the CHANGELOG). The
// `…Exception` suffix is Nest's for errors a transport renders; the core's
// errors are framework-free and end in `Error`. Each alias is the same class,
// so `instanceof` and `catch` clauses written against either name agree.

/** @deprecated Use `IdempotencyFingerprintMismatchError`; this alias goes in the next minor version. */
export const IdempotencyFingerprintMismatchException = IdempotencyFingerprintMismatchError;
/** @deprecated Use `IdempotencyFingerprintMismatchError`; this alias goes in the next minor version. */
export type IdempotencyFingerprintMismatchException = IdempotencyFingerprintMismatchError;
/** @deprecated Use `IdempotencyInFlightError`; this alias goes in the next minor version. */
export const IdempotencyInFlightException = IdempotencyInFlightError;
/** @deprecated Use `IdempotencyInFlightError`; this alias goes in the next minor version. */
export type IdempotencyInFlightException = IdempotencyInFlightError;
/** @deprecated Use `IdempotencyOutcomeUnknownError`; this alias goes in the next minor version. */
export const IdempotencyOutcomeUnknownException = IdempotencyOutcomeUnknownError;
/** @deprecated Use `IdempotencyOutcomeUnknownError`; this alias goes in the next minor version. */
export type IdempotencyOutcomeUnknownException = IdempotencyOutcomeUnknownError;
