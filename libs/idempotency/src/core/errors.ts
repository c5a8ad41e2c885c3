/**
 * Every error the library throws on purpose extends `IdempotencyError`, so a
 * caller can tell "the idempotency layer said no" from "the action failed".
 */
export class IdempotencyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
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
export class IdempotencyFingerprintMismatchException extends IdempotencyError {
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
 * IdempotencyInFlightException` is true for those as well, so user code can
 * catch one type whatever the transport.
 */
export class IdempotencyInFlightException extends IdempotencyError {
  readonly [IN_FLIGHT_BRAND] = true;

  constructor(
    readonly retryAfterMs: number,
    readonly scope: string,
    readonly keyDigest: string,
  ) {
    super(`Idempotency key ${keyDigest} is still in flight; retry after ${retryAfterMs} ms`);
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== IdempotencyInFlightException) {
      return Function.prototype[Symbol.hasInstance].call(this, value);
    }
    return typeof value === 'object' && value !== null && IN_FLIGHT_BRAND in value;
  }

  /** Marks an adapter's own error class so it passes `instanceof IdempotencyInFlightException`. */
  static brand<T extends object>(target: T): T {
    Object.defineProperty(target, IN_FLIGHT_BRAND, { value: true, enumerable: false });
    return target;
  }
}
