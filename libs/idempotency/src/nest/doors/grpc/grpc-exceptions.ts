import { IdempotencyInFlightError, IdempotencyOutcomeUnknownError } from '../../../core/errors';
import { microservices } from '../messages/microservices';
import type { RpcExceptions } from '../messages/rpc-exceptions';
import { GrpcMetadata, trailersLike } from './grpc-metadata';
import {
  GRPC_CODE_TRAILER,
  GRPC_RETRY_AFTER_TRAILER,
  GRPC_STATUS,
  GRPC_STATUS_OF_REFUSAL,
} from './grpc-status';

/** What the gRPC server hands grpc-js for a failed call: its status, details and trailing metadata. */
interface GrpcStatusError {
  code: number;
  message: string;
  details: string;
  metadata?: GrpcMetadata;
}

type GrpcExceptionClass = new (
  metadata: GrpcMetadata | undefined,
  code: string,
  message: string,
  retryAfterMs?: number,
) => Error & { readonly code: string; readonly retryAfterMs?: number };

let exceptionClass: GrpcExceptionClass | undefined;

/** Made on first use: it extends `@nestjs/microservices`' `RpcException`, an optional peer. */
function grpcExceptionClass(): GrpcExceptionClass {
  if (exceptionClass) return exceptionClass;
  const { RpcException } = microservices.get();

  class IdempotencyGrpcException extends RpcException {
    readonly grpcStatus: number;

    constructor(
      private readonly callMetadata: GrpcMetadata | undefined,
      readonly code: string,
      message: string,
      readonly retryAfterMs?: number,
    ) {
      super(message);
      this.grpcStatus = GRPC_STATUS_OF_REFUSAL[code] ?? GRPC_STATUS.INTERNAL;
      this.name = 'IdempotencyGrpcException';
    }

    override getError(): GrpcStatusError {
      const trailers = trailersLike(this.callMetadata);
      trailers?.set(GRPC_CODE_TRAILER, this.code);
      if (this.retryAfterMs !== undefined) {
        trailers?.set(GRPC_RETRY_AFTER_TRAILER, String(this.retryAfterMs));
      }
      return {
        code: this.grpcStatus,
        message: this.message,
        details: this.message,
        metadata: trailers,
      };
    }
  }
  exceptionClass = IdempotencyGrpcException;
  return exceptionClass;
}

/**
 * Refusals as gRPC statuses (docs/grpc.md): an `RpcException` whose error is
 * the status object Nest's gRPC server passes to grpc-js, with the refusal's
 * code and any retry delay in the trailing metadata. `metadata` is the call's
 * own, whose class makes the trailers.
 */
export function grpcExceptions(metadata: GrpcMetadata | undefined): RpcExceptions {
  const Exception = grpcExceptionClass();
  return {
    inFlight: (retryAfterMs, scope, keyDigest) => {
      const exception = new Exception(
        metadata,
        'idempotency-in-flight',
        `Idempotency key ${keyDigest} is still in flight; retry after ${retryAfterMs} ms`,
        retryAfterMs,
      );
      IdempotencyInFlightError.brand(exception);
      return Object.assign(exception, { retryAfterMs, scope, keyDigest });
    },
    unavailable: (retryAfterMs, message) =>
      Object.assign(
        new Exception(metadata, 'idempotency-store-unavailable', message, retryAfterMs),
        { retryAfterMs },
      ),
    rejected: (code, message) => new Exception(metadata, code, message),
    outcomeUnknown: (unknown: IdempotencyOutcomeUnknownError) => {
      const exception = new Exception(metadata, 'idempotency-outcome-unknown', unknown.message);
      IdempotencyOutcomeUnknownError.brand(exception);
      return Object.assign(exception, {
        scope: unknown.scope,
        keyDigest: unknown.keyDigest,
        since: unknown.since,
      });
    },
  };
}
