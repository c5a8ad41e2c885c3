/**
 * The gRPC status each refusal goes out with (codes from the gRPC spec,
 * written here so the library needs no gRPC package to name them). The
 * reasons are in docs/grpc.md's table; a code not listed is INTERNAL.
 */
export const GRPC_STATUS = {
  INVALID_ARGUMENT: 3,
  ALREADY_EXISTS: 6,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

export const GRPC_STATUS_OF_REFUSAL: Readonly<Record<string, number>> = {
  'idempotency-in-flight': GRPC_STATUS.ABORTED,
  'idempotency-store-unavailable': GRPC_STATUS.UNAVAILABLE,
  'idempotency-key-missing': GRPC_STATUS.INVALID_ARGUMENT,
  'idempotency-key-invalid': GRPC_STATUS.INVALID_ARGUMENT,
  'idempotency-key-reused': GRPC_STATUS.ALREADY_EXISTS,
  'idempotency-outcome-unknown': GRPC_STATUS.FAILED_PRECONDITION,
  'idempotency-result-not-storable': GRPC_STATUS.FAILED_PRECONDITION,
  'idempotency-replayed-error': GRPC_STATUS.FAILED_PRECONDITION,
  'idempotency-completion-failed': GRPC_STATUS.INTERNAL,
};

/** Trailing metadata: the refusal's code, and the delay before a retry where one applies. */
export const GRPC_CODE_TRAILER = 'idempotency-code';
export const GRPC_RETRY_AFTER_TRAILER = 'retry-after-ms';
