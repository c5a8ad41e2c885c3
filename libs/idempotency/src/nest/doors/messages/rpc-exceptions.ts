import { IdempotencyInFlightError, IdempotencyOutcomeUnknownError } from '../../../core/errors';
import { microservices } from './microservices';

/** A refusal as a message handler's caller (and Nest's RPC exception handling) sees it. */
export interface IdempotencyRpcError extends Error {
  readonly code: string;
}

export interface RpcExceptions {
  /** The holder still runs: retriable (Kafka redelivers), and `instanceof IdempotencyInFlightError`. */
  inFlight(
    retryAfterMs: number,
    scope: string,
    keyDigest: string,
  ): IdempotencyRpcError & { retryAfterMs: number };
  /** The store could not answer: retriable. */
  unavailable(
    retryAfterMs: number,
    message: string,
  ): IdempotencyRpcError & { retryAfterMs: number };
  /** Can never succeed as sent (bad key, reused key): not retriable. */
  rejected(code: string, message: string): IdempotencyRpcError;
  /**
   * Strict mode: the record is AMBIGUOUS. Not retriable (an `RpcException`,
   * so Kafka answers a request with it instead of redelivering), and
   * `instanceof IdempotencyOutcomeUnknownError`.
   */
  outcomeUnknown(error: IdempotencyOutcomeUnknownError): IdempotencyRpcError & {
    scope: string;
    keyDigest: string;
    since: Date;
  };
}

let classes: RpcExceptions | undefined;

/**
 * The exception classes extend `@nestjs/microservices`' own
 * (`KafkaRetriableException`, `RpcException`), so they are made the first time
 * a message handler needs one rather than when the library loads.
 */
export function rpcExceptions(): RpcExceptions {
  if (classes) return classes;
  const { KafkaRetriableException, RpcException } = microservices.get();

  class IdempotencyInFlightRpcException extends KafkaRetriableException {
    readonly status = 'in-flight';
    readonly code = 'idempotency-in-flight';

    constructor(
      readonly retryAfterMs: number,
      readonly scope: string,
      readonly keyDigest: string,
    ) {
      const message = `Idempotency key ${keyDigest} is still in flight; retry after ${retryAfterMs} ms`;
      super(message);
      // Own and enumerable, so transports that serialize the error carry it.
      Object.defineProperty(this, 'message', { value: message, enumerable: true, writable: true });
      this.name = 'IdempotencyInFlightException';
      IdempotencyInFlightError.brand(this);
    }
  }

  class IdempotencyStoreUnavailableRpcException extends KafkaRetriableException {
    readonly status = 'unavailable';
    readonly code = 'idempotency-store-unavailable';

    constructor(
      readonly retryAfterMs: number,
      message: string,
    ) {
      super(message);
      Object.defineProperty(this, 'message', { value: message, enumerable: true, writable: true });
      this.name = 'IdempotencyStoreUnavailableException';
    }
  }

  class IdempotencyRpcException extends RpcException {
    constructor(
      readonly code: string,
      message: string,
    ) {
      super({ status: 'error', code, message });
      this.name = 'IdempotencyRpcException';
    }
  }

  class IdempotencyOutcomeUnknownRpcException extends RpcException {
    readonly code = 'idempotency-outcome-unknown';
    readonly scope: string;
    readonly keyDigest: string;
    readonly since: Date;

    constructor(unknown: IdempotencyOutcomeUnknownError) {
      super({ status: 'error', code: 'idempotency-outcome-unknown', message: unknown.message });
      this.scope = unknown.scope;
      this.keyDigest = unknown.keyDigest;
      this.since = unknown.since;
      this.name = 'IdempotencyOutcomeUnknownException';
      IdempotencyOutcomeUnknownError.brand(this);
    }
  }

  classes = {
    inFlight: (retryAfterMs, scope, keyDigest) =>
      new IdempotencyInFlightRpcException(retryAfterMs, scope, keyDigest),
    unavailable: (retryAfterMs, message) =>
      new IdempotencyStoreUnavailableRpcException(retryAfterMs, message),
    rejected: (code, message) => new IdempotencyRpcException(code, message),
    outcomeUnknown: (unknown) => new IdempotencyOutcomeUnknownRpcException(unknown),
  };
  return classes;
}
