import { KafkaRetriableException, RpcException } from '@nestjs/microservices';
import { IdempotencyInFlightException } from '../../core/errors';

/**
 * The in-flight answer for message handlers. A `KafkaRetriableException`
 * (an `RpcException`), so it passes Nest's RPC exception filter with its
 * identity and makes Kafka redeliver, for `@MessagePattern` too; and
 * `instanceof IdempotencyInFlightException` holds for it.
 */
export class IdempotencyInFlightRpcException extends KafkaRetriableException {
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
    IdempotencyInFlightException.brand(this);
  }
}

/** The store could not answer; retriable, so the broker redelivers later. */
export class IdempotencyStoreUnavailableRpcException extends KafkaRetriableException {
  readonly status = 'unavailable';
  readonly code = 'idempotency-store-unavailable';

  constructor(
    readonly retryAfterMs: number,
    message: string,
  ) {
    super(message);
    Object.defineProperty(this, 'message', { value: message, enumerable: true, writable: true });
  }
}

/** A message that can never succeed as sent (bad key, fingerprint mismatch): not retriable. */
export class IdempotencyRpcException extends RpcException {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super({ status: 'error', code, message });
  }
}
