import { IdempotencyInFlightError } from '../../../core/errors';
import { websockets } from './websockets';

/**
 * What a gateway's client receives for a refusal: the object Nest's
 * `BaseWsExceptionFilter` sends as the `exception` event (socket.io) or as
 * `{ event: 'exception', data }` (the `ws` adapter).
 */
export interface IdempotencyWsError {
  status: 'error';
  code: string;
  message: string;
  /** In flight, store unavailable: when a retry may succeed. */
  retryAfterMs?: number;
}

type WsExceptionFactory = (error: IdempotencyWsError, inFlight?: InFlightFields) => Error;

interface InFlightFields {
  scope: string;
  keyDigest: string;
}

let factory: WsExceptionFactory | undefined;

/**
 * A refusal as a `WsException` (so the gateway's exception filter renders it
 * like its own errors); an in-flight one also passes
 * `instanceof IdempotencyInFlightError`. The class extends the application's
 * `@nestjs/websockets`, so it is made the first time it is needed.
 */
export function wsException(error: IdempotencyWsError, inFlight?: InFlightFields): Error {
  if (!factory) {
    const { WsException } = websockets.get();

    class IdempotencyWsException extends WsException {
      readonly code: string;
      readonly retryAfterMs?: number;

      constructor(body: IdempotencyWsError, fields?: InFlightFields) {
        super(body);
        this.name = 'IdempotencyWsException';
        this.code = body.code;
        if (body.retryAfterMs !== undefined) this.retryAfterMs = body.retryAfterMs;
        if (fields) {
          Object.assign(this, fields);
          IdempotencyInFlightError.brand(this);
        }
      }
    }

    factory = (body, fields) => new IdempotencyWsException(body, fields);
  }
  return factory(error, inFlight);
}
